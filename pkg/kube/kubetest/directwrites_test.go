package kubetest

import (
	"slices"
	"testing"
)

func TestDirectWrites(t *testing.T) {
	got, err := DirectWrites("testdata/bypass")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"bypass.go:17: c.CoreV1().PersistentVolumeClaims(\"ns\").Delete",
		"bypass.go:18: c.CoreV1().PersistentVolumeClaims(\"ns\").Patch",
		"bypass.go:21: client.UpdateStatus",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
	if got, err := DirectWrites("testdata/bypass", "bypass.go"); err != nil || len(got) > 0 {
		t.Errorf("allowed file: got %q, %v", got, err)
	}
}
