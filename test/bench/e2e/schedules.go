package main

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	schedulev1alpha1 "github.com/shutter-csi/shutter/client/apis/snapshotschedule/v1alpha1"
)

// scheduleResult compares the wave taken with the SnapshotSchedules present with the wave before.
type scheduleResult struct {
	Count  int   `json:"count"`
	Before *wave `json:"before"`
	With   *wave `json:"with"`
}

// yearly is the schedules' cron: none comes due during the benchmark, so the wave measures what
// their presence costs each user snapshot, not the snapshots they would take.
const yearly = "0 0 1 1 *"

// scheduleWave creates the schedules (selecting every claim of the namespace), waits until the
// controller is done with them, takes one more wave and deletes the schedules again. It returns
// the comparison and the wave's snapshot names.
func (b *bench) scheduleWave(ctx context.Context, before *wave, index int) (*scheduleResult, []string, error) {
	count := b.opts.sc.schedules
	client := b.snaps.ScheduleV1alpha1().SnapshotSchedules(namespace)
	b.progress("create %d SnapshotSchedules", count)
	err := parallel(ctx, count, 16, func(ctx context.Context, i int) error {
		_, err := client.Create(ctx, &schedulev1alpha1.SnapshotSchedule{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: fmt.Sprintf("schedule-%04d", i)},
			Spec:       schedulev1alpha1.SnapshotScheduleSpec{Schedule: yearly},
		}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	if err := b.waitQuiet(ctx, compController, 3*time.Second); err != nil {
		return nil, nil, err
	}
	size := b.opts.sc.wave
	names, claims := make([]string, size), make([]string, size)
	for i := range names {
		names[i], claims[i] = fmt.Sprintf("s%05d-%05d", index, i), claimName(i)
	}
	p, err := b.createPhase(ctx, names, claims)
	if err != nil {
		return nil, nil, err
	}
	with := b.waveOf(p, index, before.Snapshots+size, true)
	b.progressWave("shutter with schedules", with)
	err = client.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	return &scheduleResult{Count: count, Before: before, With: with}, names, err
}
