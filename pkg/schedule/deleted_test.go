package schedule

import (
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// A prune whose snapshot is gone already (the lister had not seen an earlier prune) must not be
// counted again: TestEveryMinute counted 1,433 prunes of 1,432 snapshots under load.
func TestDeletedCountsOnlyRealDeletions(t *testing.T) {
	gr := schema.GroupResource{Group: "snapshot.storage.k8s.io", Resource: "volumesnapshots"}
	other := errors.New("connection refused")
	tests := []struct {
		name     string
		err      error
		wantDone bool
		wantErr  error
	}{
		{name: "deleted", err: nil, wantDone: true},
		{name: "gone already", err: apierrors.NewNotFound(gr, "a"), wantDone: false},
		{name: "another object now", err: apierrors.NewConflict(gr, "a", other), wantDone: false},
		{name: "failed", err: other, wantDone: false, wantErr: other},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			done, err := deleted(tc.err)
			if done != tc.wantDone || !errors.Is(err, tc.wantErr) && err != tc.wantErr {
				t.Fatalf("deleted(%v) = %t, %v; want %t, %v", tc.err, done, err, tc.wantDone, tc.wantErr)
			}
		})
	}
}
