package protocol

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestNames(t *testing.T) {
	uid := types.UID("6b1c9a3e-27d4-4f0e-9c8a-1f2e3d4c5b6a")
	tests := []struct{ name, got, want string }{
		{"content", ContentName(uid), "snapcontent-6b1c9a3e-27d4-4f0e-9c8a-1f2e3d4c5b6a"},
		{"group content", GroupContentName(uid), "groupsnapcontent-6b1c9a3e-27d4-4f0e-9c8a-1f2e3d4c5b6a"},
		{"backend full", BackendName("snapshot", uid, -1), "snapshot-6b1c9a3e-27d4-4f0e-9c8a-1f2e3d4c5b6a"},
		{"backend truncated", BackendName("snap", uid, 8), "snap-6b1c9a3e"},
		{"backend truncated past dash", BackendName("snap", uid, 10), "snap-6b1c9a3e27"},
		{"backend longer than uid", BackendName("snap", uid, 99), "snap-6b1c9a3e27d44f0e9c8a1f2e3d4c5b6a"},
		// The hashes were computed apart from this code: printf '%s' 'g-uidvol-1' | sha256sum
		{"member snapshot", MemberSnapshotName("g-uid", "vol-1"), "snapshot-8e1696174946109934ad031c15e4b1140cb485236334676222365e0eecb54f2b"},
		{"member content", MemberContentName("g-uid", "vol-1"), "snapcontent-8e1696174946109934ad031c15e4b1140cb485236334676222365e0eecb54f2b"},
		// printf '%s' '6b1c9a3e-27d4-4f0e-9c8a-1f2e3d4c5b6avol-7' | sha256sum
		{"member snapshot of a uid", MemberSnapshotName(uid, "vol-7"), "snapshot-e7e34b7da483036671e16a0a72eded889207ef6f3ab20d0b430b5a6d0fce7981"},
		{"member content of a uid", MemberContentName(uid, "vol-7"), "snapcontent-e7e34b7da483036671e16a0a72eded889207ef6f3ab20d0b430b5a6d0fce7981"},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, tc.got, tc.want)
		}
	}
	if MemberSnapshotName("g", "v1") == MemberSnapshotName("g", "v2") {
		t.Error("members of one group share a name")
	}
}

func TestDriverParameters(t *testing.T) {
	got := DriverParameters(map[string]string{
		"tier": "fast", ParamSnapshotterSecretName: "s", ParamSnapshotterSecretNamespace: "ns", "csi.storage.k8s.io": "kept",
	})
	if len(got) != 2 || got["tier"] != "fast" || got["csi.storage.k8s.io"] != "kept" {
		t.Errorf("got %v", got)
	}
}

func TestResolveSecret(t *testing.T) {
	values := TemplateValues{ContentName: "snapcontent-1", SnapshotName: "db", SnapshotNamespace: "prod"}
	tests := []struct {
		name    string
		params  map[string]string
		want    string // namespace/name, "" for none
		wantErr string
	}{
		{name: "none", params: map[string]string{"tier": "fast"}},
		{name: "literal", params: map[string]string{ParamSnapshotterSecretName: "s", ParamSnapshotterSecretNamespace: "kube-system"}, want: "kube-system/s"},
		{name: "templates", params: map[string]string{
			ParamSnapshotterSecretName:      "${volumesnapshot.name}-${volumesnapshotcontent.name}",
			ParamSnapshotterSecretNamespace: "${volumesnapshot.namespace}"}, want: "prod/db-snapcontent-1"},
		{name: "name without namespace", params: map[string]string{ParamSnapshotterSecretName: "s"}, wantErr: "must be given together"},
		{name: "namespace may not use the snapshot name", params: map[string]string{
			ParamSnapshotterSecretName: "s", ParamSnapshotterSecretNamespace: "${volumesnapshot.name}"}, wantErr: "is not allowed here"},
		{name: "unknown template", params: map[string]string{
			ParamSnapshotterSecretName: "${pvc.name}", ParamSnapshotterSecretNamespace: "ns"}, wantErr: "${pvc.name} is not allowed"},
		{name: "unterminated", params: map[string]string{
			ParamSnapshotterSecretName: "${volumesnapshot.name", ParamSnapshotterSecretNamespace: "ns"}, wantErr: "unterminated"},
		{name: "invalid result", params: map[string]string{
			ParamSnapshotterSecretName: "Bad_Name", ParamSnapshotterSecretNamespace: "ns"}, wantErr: "not a valid secret name"},
		{name: "empty namespace", params: map[string]string{
			ParamSnapshotterSecretName: "s", ParamSnapshotterSecretNamespace: ""}, wantErr: "not a valid namespace"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ref, err := ResolveSecret(tc.params, SnapshotterSecret, values)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, %v; want error %q", ref, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if ref != nil {
				got = ref.String()
			}
			if got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}
