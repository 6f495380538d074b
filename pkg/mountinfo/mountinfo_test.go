package mountinfo

import (
	"slices"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	table := `30 1 8:1 / / rw,relatime shared:1 - xfs /dev/sda1 rw,attr2
41 30 0:35 / /sys/fs/cgroup rw,nosuid,nodev shared:9 - cgroup2 cgroup2 rw,nsdelegate
77 30 8:1 /srv/data\040dir /mnt/with\040space\134slash rw - xfs /dev/sda1 rw
78 30 0:50 / /run/x rw - tmpfs tmpfs
`
	got, err := Parse(strings.NewReader(table))
	if err != nil {
		t.Fatal(err)
	}
	// dev | root | mount point | type | source | super options
	want := []string{
		"8:1|/|/|xfs|/dev/sda1|rw,attr2",
		"0:35|/|/sys/fs/cgroup|cgroup2|cgroup2|rw,nsdelegate",
		`8:1|/srv/data dir|/mnt/with space\slash|xfs|/dev/sda1|rw`,
		"0:50|/|/run/x|tmpfs|tmpfs|",
	}
	var lines []string
	for _, e := range got {
		lines = append(lines, strings.Join([]string{e.Dev, e.Root, e.MountPoint, e.FSType, e.Source, e.SuperOptions}, "|"))
	}
	if !slices.Equal(lines, want) {
		t.Fatalf("parsed\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	for _, bad := range []string{
		"30 1 8:1 / / rw shared:1 xfs /dev/sda1 rw\n", // no separator
		"30 1 8:1 / / rw - xfs\n",                     // no source
	} {
		if _, err := Parse(strings.NewReader(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestUnescapeKeepsWhatIsNoEscape(t *testing.T) {
	for in, want := range map[string]string{`a\04`: `a\04`, `a\x41`: `a\x41`, `\101b`: "Ab", `plain`: "plain"} {
		if got := unescape(in); got != want {
			t.Errorf("unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestReadSelf: the reading process's own table has a root mount.
func TestReadSelf(t *testing.T) {
	entries, err := Read(Self)
	if err != nil {
		t.Skipf("no %s: %v", Self, err)
	}
	if !slices.ContainsFunc(entries, func(e Entry) bool { return e.MountPoint == "/" }) {
		t.Errorf("no mount at / in %+v", entries)
	}
}
