package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shutter-csi/shutter/pkg/protocol"
)

// settleTimeout bounds the wait for a phase's trailing writes.
const settleTimeout = 2 * time.Minute

// settle waits until a phase's trailing writes are done, and returns when they were: after
// creating, until no claim holds the snapshot-source finalizer (the protocol's last write of a
// create, which may come after readiness, where the phase ends); then, after any phase, until
// every workqueue of the controllers and the sidecar has finished each key it was given
// (workqueue_adds_total equals the count of workqueue_work_duration_seconds), so that no sync that
// could still write is queued or under way. Both are positive signals that the components are
// done; the deletion's last writes (finalizers off) are what its phase already waits for.
func (b *bench) settle(ctx context.Context, afterCreate bool) (time.Time, error) {
	if afterCreate {
		err := b.waitFor(ctx, "claims released", settleTimeout, func() (bool, string) {
			held, err := b.claimsHeld(ctx)
			if err != nil {
				return false, err.Error()
			}
			return held == 0, fmt.Sprintf("%d claims still hold %s", held, protocol.PVCAsSourceFinalizer)
		})
		if err != nil {
			return time.Time{}, err
		}
	}
	err := b.waitFor(ctx, "queues idle", settleTimeout, func() (bool, string) {
		busy, err := b.busyQueues(ctx)
		if err != nil {
			return false, err.Error()
		}
		return len(busy) == 0, fmt.Sprintf("keys not finished: %v", busy)
	})
	return time.Now(), err
}

// claimsHeld counts the benchmark's claims that still hold the snapshot-source finalizer.
func (b *bench) claimsHeld(ctx context.Context) (int, error) {
	claims, err := b.kube.CoreV1().PersistentVolumeClaims(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	held := 0
	for _, c := range claims.Items {
		if slices.Contains(c.Finalizers, protocol.PVCAsSourceFinalizer) {
			held++
		}
	}
	return held, nil
}

// busyQueues returns, by "process/queue", the keys each queue of the controllers and the sidecar
// was given and has not finished.
func (b *bench) busyQueues(ctx context.Context) (map[string]float64, error) {
	busy := map[string]float64{}
	for _, p := range append(slices.Clone(b.stack.Controllers), b.stack.Snapshotter) {
		added, done, err := queueCounts(ctx, "http://"+b.stack.Endpoints[p.Name]+"/metrics")
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.Name, err)
		}
		for queue, n := range added {
			if n != done[queue] {
				busy[p.Name+"/"+queue] = n - done[queue]
			}
		}
	}
	return busy, nil
}

// queueCounts reads, by queue name, client-go's workqueue_adds_total (keys given to the queue;
// a key added again while it waits is not counted twice) and the count of
// workqueue_work_duration_seconds (keys finished) from a component's metrics.
func queueCounts(ctx context.Context, url string) (added, done map[string]float64, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, nil, err
	}
	added, done = map[string]float64{}, map[string]float64{}
	name := func(labels []*dto.LabelPair) string {
		for _, l := range labels {
			if l.GetName() == "name" {
				return l.GetValue()
			}
		}
		return ""
	}
	for _, m := range families["workqueue_adds_total"].GetMetric() {
		added[name(m.GetLabel())] = m.GetCounter().GetValue()
	}
	for _, m := range families["workqueue_work_duration_seconds"].GetMetric() {
		done[name(m.GetLabel())] = float64(m.GetHistogram().GetSampleCount())
	}
	return added, done, nil
}
