package hostpath

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// mountEntry is one line of /proc/<pid>/mountinfo.
type mountEntry struct {
	// Dev is the filesystem's device as "major:minor".
	Dev string
	// Root is the directory of the filesystem mounted here, relative to
	// the filesystem's own root: "/" for a whole filesystem, the source
	// directory (or file) for a bind mount.
	Root string
	// MountPoint is where it is mounted, relative to the reader's root.
	MountPoint string
	// FSType, Source and SuperOptions follow the "-" separator.
	FSType       string
	Source       string
	SuperOptions string
}

// parseMountInfo reads mountinfo lines (proc(5)); paths are unescaped.
func parseMountInfo(r io.Reader) ([]mountEntry, error) {
	var out []mountEntry
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := -1
		for i := 6; i < len(fields); i++ {
			if fields[i] == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || len(fields) < sep+3 {
			return nil, fmt.Errorf("malformed mountinfo line %q", sc.Text())
		}
		e := mountEntry{
			Dev: fields[2], Root: unescapeMountPath(fields[3]), MountPoint: unescapeMountPath(fields[4]),
			FSType: fields[sep+1], Source: unescapeMountPath(fields[sep+2]),
		}
		if len(fields) > sep+3 {
			e.SuperOptions = fields[sep+3]
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// readMountInfo parses the mountinfo file at path.
func readMountInfo(path string) ([]mountEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseMountInfo(f)
}

// fsLocation names a file by its filesystem and its path inside that
// filesystem, which is how every mount namespace sees it in mountinfo.
type fsLocation struct {
	Dev  string
	Path string
}

// locate finds which mount serves path (absolute, symlinks resolved) in
// mounts, the mountinfo of the namespace path is resolved in: the last
// entry with the longest mount point that contains path, since a later
// mount on the same point hides the earlier one.
func locate(mounts []mountEntry, path string) (fsLocation, error) {
	best := -1
	for i, m := range mounts {
		if !pathWithin(path, m.MountPoint) {
			continue
		}
		if best < 0 || len(m.MountPoint) >= len(mounts[best].MountPoint) {
			best = i
		}
	}
	if best < 0 {
		return fsLocation{}, fmt.Errorf("no mount holds %s", path)
	}
	m := mounts[best]
	rel, err := filepath.Rel(m.MountPoint, path)
	if err != nil {
		return fsLocation{}, err
	}
	return fsLocation{Dev: m.Dev, Path: filepath.Join(m.Root, rel)}, nil
}

// mountsOf reports whether a mount in mounts shows loc or something inside
// it, that is, whether loc's data can be reached through that mount without
// reaching anything outside loc. That is what a bind mount of a published
// volume looks like in a workload's mount namespace. Mounts of a directory
// above loc are not counted: every namespace that sees the whole
// filesystem has those. Nor are mounts at one of the published mount
// points, or at a path ending in one: those are copies of the driver's
// staging and publish mounts that mount propagation put into the
// namespace of a node agent that mounts the kubelet's folder (at the same
// path, or below a folder such as /host).
func mountsOf(mounts []mountEntry, loc fsLocation, published []string) bool {
	for _, m := range mounts {
		if m.Dev == loc.Dev && pathWithin(strings.TrimSuffix(m.Root, "//deleted"), loc.Path) && !mirrors(m.MountPoint, published) {
			return true
		}
	}
	return false
}

// mirrors reports whether mount point p is one of published or ends in one.
func mirrors(p string, published []string) bool {
	for _, q := range published {
		if p == q || strings.HasSuffix(p, q) && q != "/" {
			return true
		}
	}
	return false
}

// reaches reports whether a mount in mounts shows loc's filesystem at
// loc or above it, so that loc's files can be reached through it by path.
func reaches(mounts []mountEntry, loc fsLocation) bool {
	for _, m := range mounts {
		if m.Dev == loc.Dev && pathWithin(loc.Path, m.Root) {
			return true
		}
	}
	return false
}

// pathWithin reports whether path is dir or lies below it; both are clean
// absolute paths.
func pathWithin(path, dir string) bool {
	if dir == "/" {
		return strings.HasPrefix(path, "/")
	}
	return path == dir || strings.HasPrefix(path, dir+"/")
}
