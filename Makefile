# Shutter's entry points. `make test` and `make demo` are the two a newcomer needs; the README
# explains the rest.
SHELL := /usr/bin/env bash
comma := ,
GO ?= go
BIN := bin
CMDS := $(notdir $(wildcard cmd/*))

# The one version source: every binary's --version, the images' tags and labels and the chart's
# appVersion come from here (override with `make VERSION=v1.2.3 ...`).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
VERSION_PKG := github.com/shutter-csi/shutter/pkg/version
LDFLAGS := -X $(VERSION_PKG).Version=$(VERSION) -X $(VERSION_PKG).Commit=$(COMMIT)
# The chart's version: VERSION without its "v" when it starts with a semantic version, otherwise
# 0.0.0-g<VERSION> (a commit without a tag); the chart's appVersion is VERSION, the images' tag.
CHART_VERSION ?= $(shell echo '$(VERSION)' | sed -E 's/^v([0-9]+\.[0-9]+\.[0-9]+)/\1/; t; s/^/0.0.0-g/')
# Every file time and image creation time: the commit's time, so a commit's images are reproducible.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)

.PHONY: all build plugin install-plugin images chart generate verify test test-unit fuzz crash chaos soak bench bench-e2e bench-scale cluster-up cluster-down test-nodes tools tools-node clean manifests demo conformance

all: build

## build: the binaries into bin/, stamped with VERSION and COMMIT (see --version)
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/ $(addprefix ./cmd/,$(CMDS))

## images: one OCI image index (linux/amd64 + linux/arm64) per component, built without a container
## engine, as OCI layout tars in bin/images/<component>.tar named <registry>/<component>:$(VERSION)
## for `ctr -n k8s.io images import` or `kind load image-archive`. PUSH=<registry/prefix> also pushes
## them (docker config credentials) and prints each digest; IMAGE_REGISTRY (the names in the tars,
## default the chart's global.imageRegistry), PLATFORMS, CA_CERTS (a PEM bundle to put into the API
## clients' images; none by default) and ONLY (components) change what is built
images:
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(GO) run ./hack/images -version="$(VERSION)" -commit="$(COMMIT)" \
		-ldflags="$(LDFLAGS)" -out=$(BIN)/images $(if $(IMAGE_REGISTRY),-registry=$(IMAGE_REGISTRY)) \
		$(if $(PLATFORMS),-platforms=$(PLATFORMS)) $(if $(CA_CERTS),-ca-certificates=$(CA_CERTS)) \
		$(if $(ONLY),-only=$(ONLY)) $(if $(PUSH),-push=$(PUSH))

## chart: lint deploy/helm/shutter and package it into bin/shutter-$(CHART_VERSION).tgz with appVersion
## $(VERSION), the tag `make images` gives the images
chart:
	helm="$$(hack/build-tools.sh helm | tail -1)/helm" && \
		"$$helm" lint deploy/helm/shutter && \
		"$$helm" package deploy/helm/shutter --version "$(CHART_VERSION)" --app-version "$(VERSION)" --destination $(BIN)

## plugin: build the kubectl plugin bin/kubectl-shutter (`make build` builds it too; a kubectl
## plugin is a local binary, no image). install-plugin copies it into PLUGIN_DIR (default
## ~/.local/bin), which must be on the PATH for `kubectl shutter` to find it
PLUGIN_DIR ?= $(HOME)/.local/bin
plugin:
	$(GO) build -o $(BIN)/ ./cmd/kubectl-shutter

install-plugin: plugin
	install -D -m 0755 $(BIN)/kubectl-shutter $(PLUGIN_DIR)/kubectl-shutter

## generate: regenerate deepcopy, clientset, listers, informers and CRDs from client/apis, and
## copy the CRDs into the Helm chart
generate:
	hack/update-codegen.sh
	hack/update-chart-crds.sh

## manifests: render deploy/manifests (plain YAML for clusters without Helm) from the chart
manifests:
	deploy/render-manifests.sh

## verify: gofmt, go vet, and generated code up to date
verify:
	hack/verify.sh

## test: every test, against a local control plane started and stopped by the script
test:
	hack/test.sh

## fuzz: the hostpath driver's record-log fuzz tests for FUZZTIME each (default 10m; `make test`
## runs them for 20s each)
fuzz:
	hack/fuzz.sh $(FUZZTIME)

## crash: SIGKILL the hostpath driver KILLS times (default 200; `make test` does 30) at random
## points of create, delete and restore; SEED=n repeats a run's choices
crash:
	$(GO) test -count=1 -run '^TestCrashLoop$$' -v -timeout 60m ./pkg/hostpath/ -args -crash-kills=$(or $(KILLS),200) $(if $(SEED),-crash-seed=$(SEED))

## chaos: a seeded schedule of faults (kills, a stopped leader, kube-apiserver and etcd restarts,
## API 429/500/latency, CSI delays/timeouts/errors/drops, driver disk full) during a steady
## snapshot workload, then convergence and invariant checks (N=500 DURATION=10m SEED=1; FAULTS
## injections per kind, default one per 50 s; JSON=path for the report)
chaos:
	$(GO) run ./test/chaos -mode=chaos -n=$(or $(N),500) -duration=$(or $(DURATION),10m) -seed=$(or $(SEED),1) \
		$(if $(FAULTS),-faults=$(FAULTS)) $(if $(JSON),-json=$(JSON)) $(CHAOS_FLAGS)

## soak: steady churn of snapshots (RATE=5 per second) for DURATION (default 1h), with a slope
## test of the components' memory, goroutines, descriptors and workqueue depth
soak:
	$(GO) run ./test/chaos -mode=soak -duration=$(or $(DURATION),1h) -rate=$(or $(RATE),5) \
		$(if $(JSON),-json=$(JSON)) $(CHAOS_FLAGS)

## test-unit: the tests that need no control plane
test-unit:
	$(GO) test -short -count=1 ./... ./client/...
	cd test/monitoring && GOWORK=off $(GO) test -short -count=1 ./...

## demo: snapshot, restore and verify data with the chart's RBAC on a local control plane
demo:
	hack/demo.sh

## bench: Go benchmarks (speed and memory targets live here, not in timed tests); the hostpath
## driver's compare snapshot, restore and bursts with `tar czf` of the same data (about 90 s)
bench:
	$(GO) test -run '^$$' -bench . -benchtime=1x -benchmem -count=1 -timeout 30m $(BENCH_FLAGS) ./...

## bench-e2e: end-to-end snapshot benchmark on a local control plane: N snapshots at once to
## readyToUse and back to gone, with requests per snapshot by component, CPU and RSS (N=200 RUNS=1;
## SCALE=1 for N=5000 and a controller restart; QPS=100 BURST=200 for both components)
bench-e2e:
	$(GO) run ./test/bench/e2e $(if $(N),-n=$(N)) $(if $(RUNS),-runs=$(RUNS)) $(if $(QPS),-qps=$(QPS)) \
		$(if $(BURST),-burst=$(BURST)) $(if $(SCALE),-scale) $(BENCH_E2E_FLAGS)

## bench-scale: N snapshots (default 50000) of N/100 claims in waves on a local control plane, kept,
## with each wave's latency, throughput, API-server CPU, RSS and etcd size as N grows; then both
## components restarted with all N present and everything deleted in waves; upstream v8.6.0 at
## N=5000 and 500 at once on both sides, at equal QPS flags, in the same run. A JSON and a PNG plot
## (docs/scale.md); N=5000 for a quick look
bench-scale:
	$(GO) run ./test/bench/e2e -waves -n=$(or $(N),50000) $(if $(QPS),-qps=$(QPS)) $(if $(BURST),-burst=$(BURST)) $(BENCH_SCALE_FLAGS)

## tools: build (or find cached) etcd, kube-apiserver, kube-controller-manager, kubectl and helm
tools:
	hack/build-tools.sh

## tools-node: build (or find cached) the local node's binaries: kubelet, kube-scheduler, containerd,
## ctr, the runc shim, runc, the CNI loopback plugin and csi-provisioner
tools-node:
	hack/build-tools.sh node

## cluster-up / cluster-down: a local control plane for development (prints the KUBECONFIG). As
## root it runs the local node too, with this checkout's images (built for the machine's platform
## only) imported, and prints the `helm install` of the chart on it; NODE=0 leaves the node out.
## NODES=3: three nodes in namespaces of their own, for the chart's distributed mode; it stays in
## the foreground until Ctrl-C or `make cluster-down` (docs/multi-node.md)
NODE ?= $(if $(filter 0,$(shell id -u)),1,0)
NODES ?= 1
NODE_PLATFORM ?= linux/$(shell $(GO) env GOARCH)
IMAGE_COMPONENTS := snapshot-controller csi-snapshotter hostpath-driver snapshot-conversion-webhook
cluster-up:
ifeq ($(NODE),1)
	$(MAKE) images PLATFORMS=$(NODE_PLATFORM)
	$(GO) run ./hack/cluster up -node -nodes $(NODES) -images $(subst $(eval) ,$(comma),$(patsubst %,$(BIN)/images/%.tar,$(IMAGE_COMPONENTS)))
else
	$(GO) run ./hack/cluster up
endif

cluster-down:
	$(GO) run ./hack/cluster down

## test-nodes: the tests of several local nodes and the chart's distributed mode alone (root, node
## tools built; about 2 minutes; `make test` runs them too, after the other packages)
test-nodes:
	SHUTTER_TEST_NODES=1 $(GO) test -count=1 -timeout 45m -v ./test/nodes/

## conformance: Kubernetes' External Storage end-to-end suites (SUITES="snapshottable ...") against the
## bundled hostpath driver on the local node, offline, as root; prints the report folder (JUnit).
## See docs/conformance.md
conformance:
	hack/conformance.sh

clean:
	rm -rf $(BIN)
