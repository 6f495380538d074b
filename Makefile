# Shutter's entry points. `make test` and `make demo` are the two a newcomer needs; the README
# explains the rest.
SHELL := /usr/bin/env bash
GO ?= go
BIN := bin
CMDS := $(notdir $(wildcard cmd/*))

.PHONY: all build plugin install-plugin generate verify test test-unit bench bench-e2e cluster-up cluster-down tools clean manifests demo

all: build

build:
	$(GO) build -o $(BIN)/ $(addprefix ./cmd/,$(CMDS))

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

## tools: build (or find cached) etcd, kube-apiserver, kube-controller-manager, kubectl and helm
tools:
	hack/build-tools.sh

## cluster-up / cluster-down: a local control plane for development (prints the KUBECONFIG)
cluster-up:
	$(GO) run ./hack/cluster up

cluster-down:
	$(GO) run ./hack/cluster down

clean:
	rm -rf $(BIN)
