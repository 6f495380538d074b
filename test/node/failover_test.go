package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/shutter-csi/shutter/test/cluster"
)

const (
	chartNamespace   = "shutter-system"
	controllerLease  = "snapshot-controller-leader"
	controllerDeploy = "deployment/shutter-snapshot-controller"
	controllerPods   = "app.kubernetes.io/component=snapshot-controller"
)

// killLeader finds the snapshot-controller pod that holds the Lease, kills its container with
// SIGKILL (no Lease handed back) while the node is cordoned, so that neither a restarted
// container nor a replacement pod can compete, and removes the pod. It checks that the other
// replica, running since before, takes the Lease once it expires and that a VolumeSnapshot of
// the claim "data" taken afterwards becomes ready; then it uncordons the node and waits for two
// replicas.
func killLeader(t *testing.T, k kube, n *node) {
	t.Helper()
	pods := strings.Fields(k.run("", "kubectl", "-n", chartNamespace, "get", "pods", "-l", controllerPods,
		"--field-selector=status.phase=Running", "-o", "jsonpath={.items[*].metadata.name}"))
	if len(pods) != 2 {
		t.Fatalf("controller pods Running: %q, want 2", pods)
	}
	holder, leader := leaseHolder(t, k, pods, "")
	var other string
	for _, p := range pods {
		if p != leader {
			other = p
		}
	}
	t.Logf("leader %s (%s), standby %s", leader, holder, other)

	k.run("", "kubectl", "cordon", cluster.NodeName)
	id := k.run("", "kubectl", "-n", chartNamespace, "get", "pod", leader, "-o", "jsonpath={.status.containerStatuses[0].containerID}")
	killed := time.Now()
	if err := n.c.KillContainer(k.ctx, k.bin, strings.TrimPrefix(id, "containerd://")); err != nil {
		t.Fatal(err)
	}
	k.run("", "kubectl", "-n", chartNamespace, "delete", "pod", leader, "--grace-period=0", "--force", "--wait=false")

	newHolder, newLeader := leaseHolder(t, k, []string{other}, holder)
	t.Logf("the Lease went from %s to %s (%s) %s after the kill", holder, newHolder, newLeader, time.Since(killed).Round(100*time.Millisecond))
	k.run(snapshotYAML("after-failover"), "kubectl", "apply", "-f", "-")
	k.run("", "kubectl", "wait", "volumesnapshot/after-failover", "--for=jsonpath={.status.readyToUse}=true", "--timeout=3m")
	k.run("", "kubectl", "uncordon", cluster.NodeName)
	k.run("", "kubectl", "-n", chartNamespace, "rollout", "status", controllerDeploy, "--timeout=3m")
}

// leaseHolder waits until the controller Lease is held by an identity other than not, which
// one of pods announced ("Became leader" in its log), and returns the identity and the pod.
func leaseHolder(t *testing.T, k kube, pods []string, not string) (holder, pod string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(k.ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		holder = strings.TrimSpace(k.run("", "kubectl", "-n", chartNamespace, "get", "lease", controllerLease,
			"-o", "jsonpath={.spec.holderIdentity}"))
		if holder == "" || holder == not {
			return false, nil
		}
		for _, p := range pods {
			if becameLeader(k.run("", "kubectl", "-n", chartNamespace, "logs", p), holder) {
				pod = p
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no pod of %q holds the Lease %s (holder %q, not %q): %v", pods, controllerLease, holder, not, err)
	}
	return holder, pod
}

// becameLeader tells whether a controller's log says it took the Lease as identity.
func becameLeader(log, identity string) bool {
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, `"Became leader"`) && strings.Contains(line, fmt.Sprintf("identity=%q", identity)) {
			return true
		}
	}
	return false
}
