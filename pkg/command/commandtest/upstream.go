package commandtest

import (
	"testing"

	"github.com/shutter-csi/shutter/pkg/command"
)

// The flags of the upstream images (kubernetes-csi/external-snapshotter v8.7.0 and v8.6.0, whose
// flag sets are equal), each with a value in the syntax deployments use. Read from upstream's
// cmd/*/main.go, csi-lib-utils v0.25.0 standardflags (RegisterCommonFlags, AddAutomaxprocs) and
// k8s.io/component-base v0.37 logs/api/v1 (AddGoFlags).
var (
	// LoggingFlags are component-base's logging flags, which both binaries register.
	LoggingFlags = [][]string{
		{"--logging-format=text"}, {"--logging-format", "json"}, {"--log-flush-frequency=5s"},
		{"-v=5"}, {"--v", "2"}, {"--vmodule=controller*=4"},
		{"--log-text-split-stream=false"}, {"--log-text-info-buffer-size=0"},
		{"--log-json-split-stream=false"}, {"--log-json-info-buffer-size=0"},
	}
	// ControllerFlags are the rest of the snapshot-controller's.
	ControllerFlags = [][]string{
		{"--kubeconfig=/etc/kubernetes/kubeconfig"}, {"--resync-period=15m"}, {"--worker-threads=10"},
		{"--leader-election"}, {"--leader-election=true"}, {"--leader-election-namespace=kube-system"},
		{"--leader-election-lease-duration=137s"}, {"--leader-election-renew-deadline=107s"},
		{"--leader-election-retry-period=26s"}, {"--kube-api-qps=25.0"}, {"--kube-api-burst=50"},
		{"--http-endpoint=:8080"}, {"--metrics-path=/metrics"}, {"--retry-interval-start=1s"},
		{"--retry-interval-max=2m30s"}, {"--enable-distributed-snapshotting"},
		{"--prevent-volume-mode-conversion=true"}, {"--retry-crd-interval-max=30s"},
		{"--feature-gates=CSIVolumeGroupSnapshot=true"}, {"--feature-gates=ReleaseLeaderElectionOnExit=true"},
		{"--feature-gates=NativeHistograms=false,AllBeta=false,APIResponseCompression=true"},
		{"--automaxprocs"}, {"--automaxprocs=false"}, {"-version"},
	}
	// SnapshotterFlags are the rest of the csi-snapshotter's.
	SnapshotterFlags = [][]string{
		{"--csi-address=/csi/csi.sock"}, {"--csi-address=unix:///csi/csi.sock"}, {"-csi-address", "$(ADDRESS)"},
		{"--kubeconfig=/etc/kubernetes/kubeconfig"}, {"--resync-period=15m"}, {"--worker-threads=10"},
		{"--timeout=300s"}, {"--snapshot-name-prefix=snapshot"}, {"--snapshot-name-uuid-length=8"},
		{"--groupsnapshot-name-prefix=groupsnapshot"}, {"--groupsnapshot-name-uuid-length=-1"},
		{"--extra-create-metadata"}, {"--extra-create-metadata=true"}, {"--retry-interval-start=1s"},
		{"--retry-interval-max=5m"}, {"--node-deployment=false"},
		{"--leader-election"}, {"--leader-election-namespace=$(NAMESPACE)"}, {"--leader-election-lease-duration=137s"},
		{"--leader-election-renew-deadline=107s"}, {"--leader-election-retry-period=26s"},
		{"--leader-election-labels=app:csi,tier:storage"}, {"--kube-api-qps=20"}, {"--kube-api-burst=100"},
		{"--http-endpoint=:8080"}, {"--metrics-address=:22014"}, {"--metrics-path=/metrics"},
		{"--feature-gates=CSIVolumeGroupSnapshot=true"}, {"--feature-gates=ReleaseLeaderElectionOnExit=true"},
		{"--automaxprocs"}, {"-version"},
	}
	// RemovedFlags are flags upstream removed that deployments still pass: accepted, each with
	// one warning.
	RemovedFlags = [][]string{
		{"--enable-volume-group-snapshots=true"}, {"--logtostderr"}, {"--logtostderr=true"}, {"--alsologtostderr=false"},
		{"--log-dir=/tmp"}, {"--log_dir=/tmp"}, {"--log-file=/dev/null"}, {"--log_file_max_size=1800"},
		{"--one-output"}, {"--skip-headers"}, {"--skip_log_headers=true"}, {"--stderrthreshold=INFO"},
		{"--add-dir-header"}, {"--log-backtrace-at=main.go:1"}, {"--connection-timeout=15s"}, {"--snapshotter=x"},
		{"--leader-election-type=leases"},
	}
)

// AcceptsAll parses each command line alone with parse and fails the test for one refused.
func AcceptsAll[O any](t *testing.T, parse command.ParseFunc[O], env map[string]string, lines ...[][]string) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	for _, list := range lines {
		for _, args := range list {
			if _, _, err := parse(args); err != nil {
				t.Errorf("%q refused: %v", args, err)
			}
		}
	}
}
