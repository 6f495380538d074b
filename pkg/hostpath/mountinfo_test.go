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

func TestLocate(t *testing.T) {
	host := []mountEntry{
		{Dev: "253:0", Root: "/", MountPoint: "/"},
		{Dev: "0:50", Root: "/", MountPoint: "/var/lib"},
		{Dev: "253:1", Root: "/", MountPoint: "/var/lib"}, // mounted over the tmpfs
	}
	// The driver in a container: the data folder is a bind mount of a
	// folder of the node's root filesystem.
	container := []mountEntry{
		{Dev: "0:80", Root: "/", MountPoint: "/"},
		{Dev: "253:0", Root: "/var/lib/csi-hostpath-data", MountPoint: "/csi-data-dir"},
	}
	for _, tc := range []struct {
		name   string
		mounts []mountEntry
		path   string
		want   fsLocation
	}{
		{name: "root filesystem", mounts: host, path: "/srv/data/volumes/v", want: fsLocation{Dev: "253:0", Path: "/srv/data/volumes/v"}},
		{name: "longest mount point, the later of two", mounts: host, path: "/var/lib/data/volumes/v", want: fsLocation{Dev: "253:1", Path: "/data/volumes/v"}},
		{name: "mount point prefix is not a parent", mounts: host, path: "/var/library/v", want: fsLocation{Dev: "253:0", Path: "/var/library/v"}},
		{name: "bind mounted data folder", mounts: container, path: "/csi-data-dir/volumes/v", want: fsLocation{Dev: "253:0", Path: "/var/lib/csi-hostpath-data/volumes/v"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := locate(tc.mounts, tc.path)
			if err != nil || got != tc.want {
				t.Fatalf("locate = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestMountsOf(t *testing.T) {
	vol := fsLocation{Dev: "253:0", Path: "/data/volumes/vol-a"}
	published := []string{"/var/lib/kubelet/pods/p/volumes/kubernetes.io~csi/pv/mount"}
	for _, tc := range []struct {
		name  string
		mount mountEntry
		want  bool
	}{
		{name: "the volume", mount: mountEntry{Dev: "253:0", Root: "/data/volumes/vol-a", MountPoint: "/data"}, want: true},
		{name: "a folder inside", mount: mountEntry{Dev: "253:0", Root: "/data/volumes/vol-a/sub/dir", MountPoint: "/data"}, want: true},
		{name: "the volume, deleted", mount: mountEntry{Dev: "253:0", Root: "/data/volumes/vol-a//deleted", MountPoint: "/data"}, want: true},
		{name: "a folder above", mount: mountEntry{Dev: "253:0", Root: "/data/volumes", MountPoint: "/data"}},
		{name: "the whole filesystem", mount: mountEntry{Dev: "253:0", Root: "/", MountPoint: "/host"}},
		{name: "a sibling sharing the prefix", mount: mountEntry{Dev: "253:0", Root: "/data/volumes/vol-ab", MountPoint: "/data"}},
		{name: "the same path on another device", mount: mountEntry{Dev: "253:1", Root: "/data/volumes/vol-a", MountPoint: "/data"}},
		{name: "a propagated copy of the publish mount", mount: mountEntry{Dev: "253:0", Root: "/data/volumes/vol-a", MountPoint: published[0]}},
		{name: "a propagated copy below /host", mount: mountEntry{Dev: "253:0", Root: "/data/volumes/vol-a", MountPoint: "/host" + published[0]}},
		{name: "a mount point that only ends like one", mount: mountEntry{Dev: "253:0", Root: "/data/volumes/vol-a", MountPoint: published[0][:len(published[0])-5] + "xmount"}, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mounts := []mountEntry{{Dev: "0:80", Root: "/", MountPoint: "/"}, tc.mount}
			if got := mountsOf(mounts, vol, published); got != tc.want {
				t.Fatalf("mountsOf = %v, want %v", got, tc.want)
			}
		})
	}
}
