{{/* The hostpath driver's pod template, for the StatefulSet (hostpath.mode single) and the
DaemonSet (distributed). Pass the root context. */}}
{{- define "shutter.hostpath.podTemplate" -}}
{{- $h := .Values.hostpath }}
{{- $distributed := eq $h.mode "distributed" }}
{{- $socketDir := printf "%s/plugins/%s" $h.kubeletDir $h.driverName -}}
metadata:
  labels:
    {{- include "shutter.selectorLabels" (dict "root" . "component" "hostpath") | nindent 4 }}
  {{- with $h.podAnnotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  serviceAccountName: {{ include "shutter.hostpath.serviceAccount" . }}
  # Only the sidecars call the API server; the privileged driver gets no token.
  automountServiceAccountToken: false
  {{- include "shutter.podNetwork" . | nindent 2 }}
  {{- if and $h.driver.privileged $h.driver.groupSnapshotQuiesce.enabled }}
  # Only for quiescing (--group-snapshot-quiesce): the node's PID namespace lets the driver
  # tell its own processes from those of the pods it freezes.
  hostPID: true
  {{- end }}
  {{- with .Values.global.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  containers:
    - name: hostpath-driver
      image: {{ include "shutter.image" (dict "root" . "image" $h.driver.image) }}
      imagePullPolicy: {{ $h.driver.image.pullPolicy }}
      args:
        - --v={{ $h.driver.logLevel }}
        - --endpoint=unix:///csi/csi.sock
        - --nodeid=$(NODE_NAME)
        - --drivername={{ $h.driverName }}
        - --datadir={{ $h.dataDir }}
        - --capacity={{ int64 $h.driver.capacity }}
        - --max-volumes-per-node={{ int64 $h.driver.maxVolumesPerNode }}
        {{- with $h.driver.quarantineMaxAge }}
        - --quarantine-max-age={{ . }}
        {{- end }}
        - --http-endpoint={{ include "shutter.listenEndpoint" (dict "root" . "port" $h.driver.httpPort) }}
        - --fsync={{ $h.driver.fsync }}
        - --volume-backing={{ ternary $h.driver.volumeBacking "folder" $h.driver.privileged }}
        - --group-snapshot-quiesce={{ and $h.driver.privileged $h.driver.groupSnapshotQuiesce.enabled }}
        - --group-snapshot-quiesce-timeout={{ $h.driver.groupSnapshotQuiesce.timeout }}
        - --enable-snapshot-metadata={{ include "shutter.hostpath.snapshotMetadata" . | default "false" }}
        - --snapshot-metadata-block-type={{ $h.snapshotMetadata.blockType }}
        {{- if $distributed }}
        # Volumes carry this node's topology segment; restores of another node's snapshot are
        # sent back to the scheduler.
        - --enable-topology
        {{- end }}
        {{- if and $h.driver.privileged $h.driver.groupSnapshotQuiesce.enabled }}
        - --cgroup-root=/host/sys/fs/cgroup
        {{- end }}
        {{- with $h.sidecarsRunAs }}
        - --socket-group={{ int64 . }}
        {{- end }}
        {{- if not $h.registrar.enabled }}
        # The driver registers with the kubelet itself through the plugin registry folder.
        - --kubelet-registration-path={{ $socketDir }}/csi.sock
        - --registration-socket=/registration/{{ $h.driverName }}-reg.sock
        {{- end }}
        {{- range $h.driver.extraArgs }}
        - {{ . | quote }}
        {{- end }}
      env:
        - name: NODE_NAME
          valueFrom:
            fieldRef:
              fieldPath: spec.nodeName
        {{- if not .Values.global.listenAddress }}
        # The metrics server listens on the pod's own IP, where Prometheus scrapes it.
        - name: POD_IP
          valueFrom:
            fieldRef:
              fieldPath: status.podIP
        {{- end }}
      ports:
        - {name: driver-metrics, containerPort: {{ $h.driver.httpPort }}, protocol: TCP}
      securityContext:
        {{- if $h.driver.privileged }}
        privileged: true
        {{- else }}
        {{- include "shutter.socketContainer" . | nindent 8 }}
        {{- end }}
      {{- with $h.driver.resources }}
      resources:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      volumeMounts:
        - {name: socket-dir, mountPath: /csi}
        - {name: data-dir, mountPath: {{ $h.dataDir }}}
        {{- if not $h.registrar.enabled }}
        - {name: registration-dir, mountPath: /registration}
        {{- end }}
        {{- if $h.driver.privileged }}
        - {name: mountpoint-dir, mountPath: {{ $h.kubeletDir }}/pods, mountPropagation: Bidirectional}
        - {name: plugins-dir, mountPath: {{ $h.kubeletDir }}/plugins, mountPropagation: Bidirectional}
        {{- end }}
        {{- if and $h.driver.privileged $h.driver.groupSnapshotQuiesce.enabled }}
        # The node's cgroup tree, where the pods' cgroups are frozen.
        - {name: cgroup-root, mountPath: /host/sys/fs/cgroup}
        {{- end }}
    - name: csi-snapshotter
      image: {{ include "shutter.image" (dict "root" . "image" $h.snapshotter.image) }}
      imagePullPolicy: {{ $h.snapshotter.image.pullPolicy }}
      args:
        - --v={{ $h.snapshotter.logLevel }}
        - --csi-address=/csi/csi.sock
        - --timeout={{ $h.snapshotter.timeout }}
        - --worker-threads={{ $h.snapshotter.workerThreads }}
        - --extra-create-metadata={{ $h.snapshotter.extraCreateMetadata }}
        - --http-endpoint={{ include "shutter.listenEndpoint" (dict "root" . "port" $h.snapshotter.httpPort) }}
        {{- if $distributed }}
        # Only the contents labelled managed-by this node (NODE_NAME).
        - --node-deployment
        {{- end }}
        {{- if include "shutter.hostpath.snapshotterLease" . }}
        - --leader-election
        - --leader-election-namespace={{ include "shutter.hostpath.namespace" . }}
        {{- end }}
        {{- range $h.snapshotter.extraArgs }}
        - {{ . | quote }}
        {{- end }}
      {{- with include "shutter.containerEnv" (dict "root" . "podIP" true "nodeName" $distributed) | trim }}
      env:
        {{- . | nindent 8 }}
      {{- end }}
      ports:
        - {name: snapshotter, containerPort: {{ $h.snapshotter.httpPort }}, protocol: TCP}
      livenessProbe:
        httpGet: {path: /healthz, port: snapshotter}
        periodSeconds: 20
      securityContext:
        {{- include "shutter.sidecarContainer" . | nindent 8 }}
      {{- with $h.snapshotter.resources }}
      resources:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      volumeMounts:
        - {name: socket-dir, mountPath: /csi}
        {{- include "shutter.apiTokenMount" . | nindent 8 }}
    {{- with $h.snapshotMetadata }}
    {{- if include "shutter.hostpath.snapshotMetadata" $ }}
    - name: csi-snapshot-metadata
      image: {{ include "shutter.image" (dict "root" $ "image" .image) }}
      imagePullPolicy: {{ .image.pullPolicy }}
      args:
        - --v={{ .logLevel }}
        - --csi-address=/csi/csi.sock
        - --port={{ .port }}
        - --listen-address={{ $.Values.global.listenAddress | default "$(POD_IP)" }}
        - --tls-cert=/tls/tls.crt
        - --tls-key=/tls/tls.key
        - --max-streaming-duration-min={{ .maxStreamingDurationMin }}
        - --http-endpoint={{ include "shutter.listenEndpoint" (dict "root" $ "port" .httpPort) }}
        {{- range .extraArgs }}
        - {{ . | quote }}
        {{- end }}
      {{- with include "shutter.containerEnv" (dict "root" $ "podIP" true) | trim }}
      env:
        {{- . | nindent 8 }}
      {{- end }}
      ports:
        - {name: snapshot-meta, containerPort: {{ .port }}, protocol: TCP}
        - {name: metadata-http, containerPort: {{ .httpPort }}, protocol: TCP}
      readinessProbe:
        httpGet: {path: /healthz, port: metadata-http}
      livenessProbe:
        httpGet: {path: /healthz, port: metadata-http}
        periodSeconds: 20
      securityContext:
        {{- include "shutter.sidecarContainer" $ | nindent 8 }}
      {{- with .resources }}
      resources:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      volumeMounts:
        - {name: socket-dir, mountPath: /csi}
        - {name: snapshot-metadata-tls, mountPath: /tls, readOnly: true}
        {{- include "shutter.apiTokenMount" $ | nindent 8 }}
    {{- end }}
    {{- end }}
    {{- if $h.provisioner.enabled }}
    - name: csi-provisioner
      image: {{ include "shutter.image" (dict "root" . "image" $h.provisioner.image) }}
      imagePullPolicy: {{ $h.provisioner.image.pullPolicy }}
      args:
        - --csi-address=/csi/csi.sock
        - --feature-gates=Topology=true
        - --node-deployment={{ $distributed }}
        {{- if $distributed }}
        # Only the claims the scheduler put on this node, on this node's topology; one
        # CSIStorageCapacity per node, owned by this pod (NAMESPACE, POD_NAME).
        - --strict-topology
        - --enable-capacity
        - --capacity-ownerref-level=0
        {{- end }}
        - --extra-create-metadata=true
        {{- range $h.provisioner.extraArgs }}
        - {{ . | quote }}
        {{- end }}
      {{- with include "shutter.containerEnv" (dict "root" . "nodeName" $distributed "podName" $distributed) | trim }}
      env:
        {{- . | nindent 8 }}
      {{- end }}
      securityContext:
        {{- include "shutter.sidecarContainer" . | nindent 8 }}
      {{- with $h.provisioner.resources }}
      resources:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      volumeMounts:
        - {name: socket-dir, mountPath: /csi}
        {{- include "shutter.apiTokenMount" . | nindent 8 }}
    {{- end }}
    {{- if $h.registrar.enabled }}
    - name: node-driver-registrar
      image: {{ include "shutter.image" (dict "root" . "image" $h.registrar.image) }}
      imagePullPolicy: {{ $h.registrar.image.pullPolicy }}
      args:
        - --csi-address=/csi/csi.sock
        - --kubelet-registration-path={{ $socketDir }}/csi.sock
      # Root, but nothing else: it creates its socket in the kubelet's root-owned
      # plugins_registry folder.
      securityContext:
        {{- include "shutter.socketContainer" . | nindent 8 }}
      {{- with $h.registrar.resources }}
      resources:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      volumeMounts:
        - {name: socket-dir, mountPath: /csi}
        - {name: registration-dir, mountPath: /registration}
    {{- end }}
  volumes:
    {{- include "shutter.apiTokenVolume" . | nindent 4 }}
    - name: socket-dir
      hostPath: {path: {{ $socketDir }}, type: DirectoryOrCreate}
    {{- if include "shutter.hostpath.snapshotMetadata" . }}
    - name: snapshot-metadata-tls
      secret:
        secretName: {{ include "shutter.snapshotMetadata.secret" . }}
    {{- end }}
    - name: data-dir
      hostPath: {path: {{ $h.dataDir }}, type: DirectoryOrCreate}
    - name: mountpoint-dir
      hostPath: {path: {{ $h.kubeletDir }}/pods, type: DirectoryOrCreate}
    - name: plugins-dir
      hostPath: {path: {{ $h.kubeletDir }}/plugins, type: Directory}
    - name: registration-dir
      hostPath: {path: {{ $h.kubeletDir }}/plugins_registry, type: Directory}
    {{- if and $h.driver.privileged $h.driver.groupSnapshotQuiesce.enabled }}
    - name: cgroup-root
      hostPath: {path: /sys/fs/cgroup, type: Directory}
    {{- end }}
  {{- with $h.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $h.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $h.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}
