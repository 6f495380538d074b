# Shutter's entry points. `make test` and `make demo` are the two a newcomer needs; the README
# explains the rest.
SHELL := /usr/bin/env bash
GO ?= go
BIN := bin
CMDS := $(notdir $(wildcard cmd/*))

.PHONY: all build generate verify test test-unit fuzz crash chaos soak bench bench-e2e cluster-up cluster-down tools clean manifests demo

all: build

build:
	$(GO) build -o $(BIN)/ $(addprefix ./cmd/,$(CMDS))

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
