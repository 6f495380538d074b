//go:build linux

package hostpath

import (
	"bufio"
	"fmt"
	"io"
	"os"
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
