package hostpath

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// fakeProc builds a procfs tree for the scan: per process its mount
// namespace link, mountinfo, stat, cgroup file and optional cwd and fds.
type fakeProc struct {
	t   *testing.T
	dir string
}

// fakeProcess describes one process of a fakeProc.
type fakeProcess struct {
	ns     string // "" leaves ns/mnt out, as for a process we may not inspect
	ppid   int
	flags  uint64
	mounts []string
	cgroup string
	cwd    string
	fds    []string
}

func newFakeProc(t *testing.T, self int) *fakeProc {
	p := &fakeProc{t: t, dir: t.TempDir()}
	if err := os.Symlink(strconv.Itoa(self), filepath.Join(p.dir, "self")); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *fakeProc) add(pid int, fp fakeProcess) {
	dir := filepath.Join(p.dir, strconv.Itoa(pid))
	for _, d := range []string{"ns", "fd"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			p.t.Fatal(err)
		}
	}
	links := [][2]string{{"/", "root"}}
	if fp.ns != "" {
		links = append(links, [2]string{"mnt:[" + fp.ns + "]", "ns/mnt"})
	}
	if fp.cwd != "" {
		links = append(links, [2]string{fp.cwd, "cwd"})
	}
	for i, fd := range fp.fds {
		links = append(links, [2]string{fd, filepath.Join("fd", strconv.Itoa(i))})
	}
	for _, l := range links {
		if err := os.Symlink(l[0], filepath.Join(dir, l[1])); err != nil {
			p.t.Fatal(err)
		}
	}
	mountinfo := ""
	for i, m := range fp.mounts {
		mountinfo += fmt.Sprintf("%d 1 %s - %s\n", i+10, m, "ext4 /dev/vda rw")
	}
	cgroup := "0::" + fp.cgroup + "\n"
	if fp.cgroup == "" {
		cgroup = "0::/\n"
	}
	stat := fmt.Sprintf("%d (a (b) c) S %d 0 0 0 0 %d 0 0 0 0 0 0 0 0 20 0 1 0 %d 0 0\n", pid, fp.ppid, fp.flags, 1000+pid)
	for name, content := range map[string]string{"mountinfo": mountinfo, "cgroup": cgroup, "stat": stat} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			p.t.Fatal(err)
		}
	}
}

// mount is a mountinfo line's fields from the device to the options.
func mount(dev, root, point string) string { return fmt.Sprintf("%s %s %s rw", dev, root, point) }

func TestScanFindsUsers(t *testing.T) {
	data := t.TempDir()
	volA, volB := filepath.Join(data, "vol-a"), filepath.Join(data, "vol-b")
	outside := filepath.Join(data, "vol-ab")
	for _, d := range []string{filepath.Join(volA, "sub"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{volB, filepath.Join(volA, "sub", "file"), filepath.Join(outside, "file")} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	realA, _ := filepath.EvalSymlinks(volA)
	realB, _ := filepath.EvalSymlinks(volB)
	realOut, _ := filepath.EvalSymlinks(outside)
	root := mount("8:1", "/", "/")

	p := newFakeProc(t, 100)
	p.add(1, fakeProcess{ns: "host", mounts: []string{root, mount("8:1", realA, "/kubelet/pods/x")}})
	p.add(50, fakeProcess{ns: "wrapper", ppid: 1, mounts: []string{root, mount("8:1", realA, "/a")}})
	p.add(100, fakeProcess{ns: "driver", ppid: 50, mounts: []string{root, mount("8:1", realA, "/staging/a")}})
	p.add(101, fakeProcess{ns: "driver", ppid: 1, mounts: []string{root, mount("8:1", realA, "/staging")}})
	p.add(102, fakeProcess{ns: "host", ppid: 1, cwd: realA})
	p.add(200, fakeProcess{ns: "pod", ppid: 1, mounts: []string{mount("0:90", "/", "/"), mount("8:1", realA, "/data")}})
	// It shares 200's namespace, whose mounts are not read again.
	p.add(201, fakeProcess{ns: "pod", ppid: 200})
	p.add(300, fakeProcess{ns: "sub", ppid: 1, mounts: []string{mount("8:1", filepath.Join(realA, "sub"), "/data")}})
	p.add(301, fakeProcess{ns: "block", ppid: 1, mounts: []string{mount("8:1", realB, "/dev/xvda")}})
	// Node agents that mount the kubelet's folder get copies of the
	// publish and staging mounts by propagation.
	p.add(350, fakeProcess{ns: "agent", ppid: 1, mounts: []string{mount("0:91", "/", "/"), mount("8:1", realA, "/kubelet/pods/x")}})
	p.add(351, fakeProcess{ns: "agent2", ppid: 1, mounts: []string{mount("0:92", "/", "/"), mount("8:1", realA, "/host/staging/a")}})
	p.add(400, fakeProcess{ns: "above", ppid: 1, mounts: []string{mount("8:1", data, "/all")}})
	p.add(500, fakeProcess{ns: "otherdev", ppid: 1, mounts: []string{mount("8:2", realA, "/data")}})
	p.add(600, fakeProcess{ns: "sibling", ppid: 1, mounts: []string{mount("8:1", realOut, "/data")}})
	// Processes whose namespace mounts a folder above the volumes (a
	// privileged pod with the node's root) are users only if they have a
	// file inside one.
	reach := []string{mount("0:90", "/", "/"), mount("8:1", data, "/host")}
	p.add(700, fakeProcess{ns: "cwd", ppid: 1, mounts: reach, cwd: filepath.Join(realA, "sub")})
	p.add(701, fakeProcess{ns: "cwd", ppid: 1, mounts: reach, cwd: realA})
	p.add(702, fakeProcess{ns: "unreachable", ppid: 1, mounts: []string{mount("0:90", "/", "/")}, cwd: realA})
	p.add(800, fakeProcess{ns: "fd", ppid: 1, mounts: reach, fds: []string{"/dev/null", filepath.Join(realA, "sub", "file")}})
	p.add(801, fakeProcess{ns: "fdblock", ppid: 1, mounts: reach, fds: []string{realB}})
	p.add(900, fakeProcess{ns: "fdout", ppid: 1, mounts: reach, fds: []string{filepath.Join(realOut, "file")}, cwd: realOut})
	p.add(901, fakeProcess{ns: "fdout", ppid: 1, mounts: reach, cwd: filepath.Join(realA, "sub")})
	p.add(902, fakeProcess{ppid: 1, mounts: []string{mount("8:1", realA, "/data")}})

	for _, tc := range []struct {
		name  string
		files bool
		want  []int
	}{
		{name: "mounts", want: []int{200, 201, 300, 301}},
		{name: "mounts and files", files: true, want: []int{200, 201, 300, 301, 700, 701, 800, 801, 901}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			users, err := procScan{proc: p.dir, files: tc.files}.users([]string{volA, volB})
			if err != nil {
				t.Fatal(err)
			}
			var got []int
			for _, u := range users {
				got = append(got, u.PID)
				if u.Start != uint64(1000+u.PID) || u.State != 'S' || u.Cgroup2 != "/" {
					t.Errorf("user %+v: wrong details", u)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("users = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestScanFindsHostNamespace(t *testing.T) {
	vol := t.TempDir()
	real, _ := filepath.EvalSymlinks(vol)
	root, bind := mount("8:1", "/", "/"), mount("8:1", real, "/data")
	for _, tc := range []struct {
		name      string
		kthreadd  fakeProcess
		wantUsers []int
		wantErr   bool
	}{
		{name: "from kthreadd", kthreadd: fakeProcess{ns: "host", flags: pfKthread}, wantUsers: []int{4}},
		{name: "PID 2 is no kernel thread", kthreadd: fakeProcess{ns: "host", ppid: 1}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newFakeProc(t, 100)
			p.add(1, fakeProcess{mounts: []string{root}}) // namespace not readable
			p.add(2, tc.kthreadd)
			p.add(3, fakeProcess{ns: "host", ppid: 1, mounts: []string{root, bind}})
			p.add(4, fakeProcess{ns: "pod", ppid: 1, mounts: []string{bind}})
			p.add(100, fakeProcess{ns: "driver", ppid: 1, mounts: []string{root}})
			users, err := procScan{proc: p.dir}.users([]string{vol})
			if tc.wantErr {
				if err == nil {
					t.Fatalf("users = %v, want an error: the host's namespace is unknown", users)
				}
				return
			}
			if err != nil || len(users) != len(tc.wantUsers) || users[0].PID != tc.wantUsers[0] {
				t.Fatalf("users = %v, %v; want %v", users, err, tc.wantUsers)
			}
		})
	}
}

func TestCgroupPlanner(t *testing.T) {
	cg := t.TempDir()
	procs := map[string]string{
		"/":                 "1 100 7",
		"/drv":              "100",
		"/pods":             "",
		"/pods/c1":          "200 201",
		"/pods/c2":          "300 301",
		"/pods/c3":          "400",
		"/pods/c3/child":    "401",
		"/pods/c4":          "500",
		"/pods/c4/child":    "501",
		"/pods/c5":          "600",
		"/system/drv-child": "",
	}
	for path, pids := range procs {
		if err := os.MkdirAll(filepath.Join(cg, path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cg, path, "cgroup.procs"), []byte(pids), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := newFakeProc(t, 100)
	p.add(100, fakeProcess{ns: "driver", cgroup: "/drv", mounts: []string{mount("8:1", "/", "/"), mount("0:30", "/", cg)}})
	p.add(1, fakeProcess{ns: "host", cgroup: "/"})
	// The mount's file system type is cgroup2: rewrite the fake line.
	mi := filepath.Join(p.dir, "100", "mountinfo")
	b, _ := os.ReadFile(mi)
	b = []byte(string(b[:len(b)-len("ext4 /dev/vda rw\n")]) + "cgroup2 cgroup2 rw\n")
	if err := os.WriteFile(mi, b, 0o644); err != nil {
		t.Fatal(err)
	}
	users := []process{
		{PID: 200, Cgroup2: "/pods/c1"}, {PID: 201, Cgroup2: "/pods/c1"}, // the whole cgroup: freeze it
		{PID: 300, Cgroup2: "/pods/c2"},                                        // 301 is no user: signal
		{PID: 400, Cgroup2: "/pods/c3"}, {PID: 401, Cgroup2: "/pods/c3/child"}, // a subtree of users
		{PID: 500, Cgroup2: "/pods/c4"}, // 501 below is no user
		{PID: 7, Cgroup2: "/"},          // the root is never frozen
		{PID: 101, Cgroup2: "/drv"},     // nor the driver's cgroup
		{PID: 102, Cgroup2: "/pods/c5/../../drv"},
		{PID: 103, Cgroup2: "/../pods/c5"}, // outside the driver's cgroup namespace
	}
	var got []string
	for _, tg := range newCgroupPlanner(p.dir).plan(users) {
		r := tg.record()
		got = append(got, fmt.Sprintf("%s %s%d", r.Kind, r.Dir, r.PID))
	}
	want := []string{
		"cgroup2 " + filepath.Join(cg, "pods/c1") + "0",
		"process 300",
		"cgroup2 " + filepath.Join(cg, "pods/c3") + "0",
		"cgroup2 " + filepath.Join(cg, "pods/c3/child") + "0",
		"process 500",
		"process 7",
		"process 101",
		"process 102",
		"process 103",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("plan =\n%v\nwant\n%v", got, want)
	}
}
