// Package mountinfo reads the mount table of a process, /proc/<pid>/mountinfo (proc(5)).
package mountinfo

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Self is the mount table of the reading process.
const Self = "/proc/self/mountinfo"

// Entry is one line of a mountinfo file, its paths unescaped.
type Entry struct {
	// Dev is the filesystem's device as "major:minor".
	Dev string
	// Root is the directory of the filesystem mounted here, relative to the filesystem's own root:
	// "/" for a whole filesystem, the source directory (or file) for a bind mount.
	Root string
	// MountPoint is where it is mounted, relative to the reader's root.
	MountPoint string
	// FSType, Source and SuperOptions follow the "-" separator.
	FSType       string
	Source       string
	SuperOptions string
}

// Read parses the mountinfo file at path.
func Read(path string) ([]Entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Parse(f)
}

// Parse reads mountinfo lines; a line without the "-" separator after the optional fields is an
// error.
func Parse(r io.Reader) ([]Entry, error) {
	var out []Entry
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root point options [optional...] - type source superoptions
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
		e := Entry{
			Dev: fields[2], Root: unescape(fields[3]), MountPoint: unescape(fields[4]),
			FSType: fields[sep+1], Source: unescape(fields[sep+2]),
		}
		if len(fields) > sep+3 {
			e.SuperOptions = fields[sep+3]
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// unescape undoes the octal escapes (\040 for a space, \134 for a backslash) of mountinfo paths.
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
