package app

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/shutter-csi/shutter/pkg/protocol"
)

// After names Leases, in the elector's namespace, that replicas of an older release of this
// component hold instead of the elector's own. Once this replica leads it waits until none of
// them is live (held by another identity and renewed within its duration) before it runs, so an
// older replica still at work during a rolling update never works beside it. It returns e.
func (e *Elector) After(leases ...string) *Elector {
	e.predecessors = append(e.predecessors, leases...)
	return e
}

// awaitPredecessors returns once no predecessor Lease in ns is live, or when ctx ends (false).
func (e *Elector) awaitPredecessors(ctx context.Context, cs kubernetes.Interface, ns, id string) bool {
	logger := klog.FromContext(ctx)
	for _, name := range e.predecessors {
		logged := false
		err := wait.PollUntilContextCancel(ctx, e.opts.RetryPeriod, true, func(ctx context.Context) (bool, error) {
			lease, err := cs.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				return true, nil
			case err != nil:
				logger.V(2).Info("Cannot read an older release's Lease; trying again", "lease", klog.KRef(ns, name), "err", err)
				return false, nil
			}
			st := protocol.ReadLease(lease, time.Now())
			if !st.Live || st.Holder == id {
				return true, nil
			}
			if !logged {
				logger.Info("Waiting for a replica of an older release to hand back its Lease", "lease", klog.KRef(ns, name), "holder", st.Holder)
				logged = true
			}
			return false, nil
		})
		if err != nil {
			return false
		}
	}
	return true
}
