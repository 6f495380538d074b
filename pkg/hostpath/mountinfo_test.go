//go:build linux

package hostpath

import (
	"slices"
	"strings"
	"testing"
)

func TestParseMountInfo(t *testing.T) {
	in := `22 1 253:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
36 22 0:33 / /sys/fs/cgroup/freezer rw,nosuid master:12 shared:3 - cgroup cgroup rw,freezer
612 580 253:0 /var/lib/csi/volumes/vol-1 /var/lib/kubelet/pods/p/volumes/my\040data rw,relatime - ext4 /dev/vda rw
613 580 253:0 /var/lib/csi/volumes/vol-2//deleted /mnt rw - ext4 /dev/vda rw
`
	got, err := parseMountInfo(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []mountEntry{
		{Dev: "253:0", Root: "/", MountPoint: "/", FSType: "ext4", Source: "/dev/vda", SuperOptions: "rw"},
		{Dev: "0:33", Root: "/", MountPoint: "/sys/fs/cgroup/freezer", FSType: "cgroup", Source: "cgroup", SuperOptions: "rw,freezer"},
		{Dev: "253:0", Root: "/var/lib/csi/volumes/vol-1", MountPoint: "/var/lib/kubelet/pods/p/volumes/my data", FSType: "ext4", Source: "/dev/vda", SuperOptions: "rw"},
		{Dev: "253:0", Root: "/var/lib/csi/volumes/vol-2//deleted", MountPoint: "/mnt", FSType: "ext4", Source: "/dev/vda", SuperOptions: "rw"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("parsed\n%v\nwant\n%v", got, want)
	}
	if _, err := parseMountInfo(strings.NewReader("22 1 253:0 / / rw shared:1 ext4 /dev/vda rw\n")); err == nil {
		t.Fatal("a line without the - separator parsed")
	}
}
