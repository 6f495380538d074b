{{/* The release's base name for every object, at most 63 characters. */}}
{{- define "shutter.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels every object carries; pass a dict with "root" and "component". */}}
{{- define "shutter.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: shutter
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
{{ include "shutter.selectorLabels" . }}
{{- end -}}

{{/* Labels that select a component's pods. */}}
{{- define "shutter.selectorLabels" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Name of the snapshot-controller's objects. */}}
{{- define "shutter.controller.name" -}}
{{- printf "%s-snapshot-controller" (include "shutter.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "shutter.controller.serviceAccount" -}}
{{- default (include "shutter.controller.name" .) .Values.snapshotController.serviceAccount.name -}}
{{- end -}}

{{/* Name of the hostpath driver's objects. */}}
{{- define "shutter.hostpath.name" -}}
{{- printf "%s-hostpath" (include "shutter.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The namespace of the hostpath driver's pod and ServiceAccount: hostpath.namespace, which the
chart creates (hostpath-namespace.yaml), or the release namespace. */}}
{{- define "shutter.hostpath.namespace" -}}
{{- default .Release.Namespace .Values.hostpath.namespace -}}
{{- end -}}

{{/* The csi-snapshotter's leader election Lease (pkg/protocol SidecarLeaseName, the reference
sidecar's name too) and the one Shutter's sidecars held before v0.2 (LegacySidecarLeaseName), which
the sidecar reads to wait for an older replica. */}}
{{- define "shutter.hostpath.leaseName" -}}
{{- $name := regexReplaceAll "[^a-zA-Z0-9-]" (printf "external-snapshotter-leader-%s" .Values.hostpath.driverName) "-" -}}
{{- if hasSuffix "-" $name }}{{ $name }}X{{ else }}{{ $name }}{{ end -}}
{{- end -}}
{{- define "shutter.hostpath.legacyLeaseName" -}}
{{- printf "shutter-snapshotter-%s" (regexReplaceAll "[^a-z0-9.-]" (lower .Values.hostpath.driverName) "-" | trimAll "-.") -}}
{{- end -}}

{{- define "shutter.hostpath.serviceAccount" -}}
{{- default (include "shutter.hostpath.name" .) .Values.hostpath.serviceAccount.name -}}
{{- end -}}

{{/* An image reference; pass a dict with "root" and "image". Shutter's own images (a repository
without a registry) get global.imageRegistry and, without a tag, global.imageTag or appVersion. */}}
{{- define "shutter.image" -}}
{{- $repo := .image.repository -}}
{{- if not (contains "/" $repo) -}}
{{- $repo = printf "%s/%s" .root.Values.global.imageRegistry $repo -}}
{{- end -}}
{{- $tag := .image.tag | default .root.Values.global.imageTag | default .root.Chart.AppVersion -}}
{{- printf "%s:%s" $repo $tag -}}
{{- end -}}

{{/* The restricted container security context (Pod Security Standard "restricted"). */}}
{{- define "shutter.restrictedContainer" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Hardened like the restricted profile, but run as root: sidecars that share the driver's
root-owned socket must be able to open it (Shutter's csi-snapshotter image runs as 65532 by
default, for drivers whose socket it may open as that user). */}}
{{- define "shutter.socketContainer" -}}
runAsUser: 0
runAsGroup: 0
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The csi-snapshotter and csi-provisioner sidecars: restricted, as the non-root user and group
hostpath.sidecarsRunAs, to which the driver gives its socket (--socket-group); with
sidecarsRunAs null they run as root, like the registrar. */}}
{{- define "shutter.sidecarContainer" -}}
{{- with .Values.hostpath.sidecarsRunAs -}}
runAsNonRoot: true
runAsUser: {{ int64 . }}
runAsGroup: {{ int64 . }}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- else }}
{{ include "shutter.socketContainer" . }}
{{- end }}
{{- end -}}

{{/* Container env that points Kubernetes clients at global.kubernetesServiceHost/Port, for nodes
without kube-proxy; nothing when unset. Pass the root context. */}}
{{- define "shutter.apiServerEnv" -}}
{{- with .Values.global.kubernetesServiceHost }}
- name: KUBERNETES_SERVICE_HOST
  value: {{ . | quote }}
{{- end }}
{{- with .Values.global.kubernetesServicePort }}
- name: KUBERNETES_SERVICE_PORT
  value: {{ . | toString | quote }}
{{- end }}
{{- end -}}

{{/* Pod spec fields for global.hostNetwork. Pass the root context. */}}
{{- define "shutter.podNetwork" -}}
{{- if .Values.global.hostNetwork }}
hostNetwork: true
dnsPolicy: ClusterFirstWithHostNet
{{- end }}
{{- end -}}

{{/* Container env: POD_IP when podIP is true and global.listenAddress is empty (the address the
container's HTTP server listens on, see shutter.listenEndpoint), then shutter.apiServerEnv.
Pass (dict "root" $ "podIP" bool). */}}
{{- define "shutter.containerEnv" -}}
{{- if and .podIP (not .root.Values.global.listenAddress) }}
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
{{- end }}
{{- include "shutter.apiServerEnv" .root }}
{{- end -}}

{{/* host:port an HTTP server of the chart listens on: global.listenAddress, or else the pod's own
IP, where the kubelet probes it and Prometheus scrapes it; never every address of a node (with
hostNetwork) or of the pod. The container needs shutter.containerEnv with podIP.
Pass (dict "root" $ "port" port). */}}
{{- define "shutter.listenEndpoint" -}}
{{- if .root.Values.global.listenAddress }}{{ .root.Values.global.listenAddress }}:{{ .port }}{{ else }}[$(POD_IP)]:{{ .port }}{{ end }}
{{- end -}}

{{/* The ServiceAccount token, CA and namespace, as the kubelet would mount them, for the
containers that call the API server only: every pod sets automountServiceAccountToken: false, so
that a container that needs no token (the privileged driver, the registrar, a test's wget) has
none to lose. */}}
{{- define "shutter.apiTokenVolume" -}}
- name: kube-api-access
  projected:
    defaultMode: 0444
    sources:
      - serviceAccountToken:
          path: token
          expirationSeconds: 3607
      - configMap:
          name: kube-root-ca.crt
          items:
            - key: ca.crt
              path: ca.crt
      - downwardAPI:
          items:
            - path: namespace
              fieldRef:
                fieldPath: metadata.namespace
{{- end -}}

{{- define "shutter.apiTokenMount" -}}
- name: kube-api-access
  mountPath: /var/run/secrets/kubernetes.io/serviceaccount
  readOnly: true
{{- end -}}

{{/* The snapshot-metadata sidecar's Service, RBAC and certificate names. */}}
{{- define "shutter.snapshotMetadata.name" -}}
{{- printf "%s-snapshot-metadata" (include "shutter.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The Secret holding the sidecar's tls.crt, tls.key and ca.crt. */}}
{{- define "shutter.snapshotMetadata.secret" -}}
{{- .Values.hostpath.snapshotMetadata.tls.secretName | default (printf "%s-tls" (include "shutter.snapshotMetadata.name" .)) }}
{{- end }}

{{/* The audience callers' tokens must carry. */}}
{{- define "shutter.snapshotMetadata.audience" -}}
{{- .Values.hostpath.snapshotMetadata.audience | default (printf "%s-snapshot-metadata" .Values.hostpath.driverName) }}
{{- end }}
