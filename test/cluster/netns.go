package cluster

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// The network of a cluster of several nodes. Every node runs in a network namespace of its own
// (kubelet, containerd, and so every hostNetwork pod of the node), joined by a veth pair to a
// bridge in one more namespace the cluster creates; nothing is added to the host's namespace, so
// the host's interfaces, addresses and routes stay as they are, and a namespace without a
// default route cannot send anything off the machine. The control plane stays on the host's
// loopback; two kinds of forwarders, both loopback to a namespace of ours, join them:
//
//   - in each node's namespace, 127.0.0.1:<API server port> leads to the API server on the
//     host's 127.0.0.1 (kubelet's kubeconfig and the pods' KUBERNETES_SERVICE_HOST/PORT are
//     then the same as on the single node);
//   - on the host, <node address>:<kubelet port> leads to that node's kubelet, so kube-apiserver
//     reaches kubelets (logs, exec) on loopback. A node's address is a loopback address of its
//     own (127.0.0.11, .12, ...; see nodeAddress), which is its name too: kubelet takes the
//     address of a node named by one.
//
// Every namespace is named shutter-<hash of the state folder>-<role>, so a later start or stop
// finds and removes those of a run that crashed.

// bridgeSubnet is the nodes' network inside the bridge namespace: node i has bridgeSubnet.(10+i).
const bridgeSubnet = "10.213.0"

// netnsPrefix is the common start of the names of the namespaces of state folder dir.
func netnsPrefix(dir string) string {
	sum := sha256.Sum256([]byte(dir))
	return fmt.Sprintf("shutter-%x-", sum[:4])
}

// netnsPath is where `ip netns` keeps a named namespace.
func netnsPath(name string) string { return filepath.Join("/run/netns", name) }

// nodeAddress is node i's (1-based) address and name: a loopback address, which every
// namespace's lo answers, distinct per node so that the host can forward to each.
func nodeAddress(i int) string { return fmt.Sprintf("127.0.0.%d", 10+i) }

// ipCmd runs the ip tool.
func ipCmd(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// setupNetwork removes what a crashed run of state folder dir left (removeNetwork), then makes
// the network anew (createNetwork).
func setupNetwork(ctx context.Context, dir string, nodes int) ([]string, error) {
	if err := removeNetwork(dir); err != nil {
		return nil, fmt.Errorf("remove an earlier network: %w", err)
	}
	names, err := createNetwork(ctx, dir, nodes)
	if err != nil {
		return nil, errors.Join(err, removeNetwork(dir))
	}
	return names, nil
}

// createNetwork makes the bridge namespace and one namespace per node, each with lo up and a
// veth pair to the bridge carrying bridgeSubnet.(10+i)/24; it returns the nodes' namespace names.
func createNetwork(ctx context.Context, dir string, nodes int) ([]string, error) {
	prefix := netnsPrefix(dir)
	bridge := prefix + "br"
	steps := [][]string{
		{"netns", "add", bridge},
		{"-n", bridge, "link", "set", "lo", "up"},
		{"-n", bridge, "link", "add", "br0", "type", "bridge"},
		{"-n", bridge, "link", "set", "br0", "up"},
	}
	var names []string
	for i := 1; i <= nodes; i++ {
		ns := fmt.Sprintf("%sn%d", prefix, i)
		veth := fmt.Sprintf("vn%d", i)
		names = append(names, ns)
		steps = append(steps,
			[]string{"netns", "add", ns},
			[]string{"-n", ns, "link", "set", "lo", "up"},
			[]string{"-n", bridge, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
			[]string{"-n", bridge, "link", "set", veth, "master", "br0", "up"},
			[]string{"-n", ns, "addr", "add", fmt.Sprintf("%s.%d/24", bridgeSubnet, 10+i), "dev", "eth0"},
			[]string{"-n", ns, "link", "set", "eth0", "up"},
		)
	}
	for _, s := range steps {
		if err := ipCmd(ctx, s...); err != nil {
			return nil, err
		}
	}
	return names, nil
}

// removeNetwork deletes every namespace of state folder dir (the veth pairs and the bridge go
// with them). Processes still inside keep theirs alive until they end; cleanNode ends them.
func removeNetwork(dir string) error {
	entries, err := os.ReadDir("/run/netns")
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	var errs []error
	left := 0
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), netnsPrefix(dir)) {
			errs = append(errs, ipCmd(context.Background(), "netns", "del", e.Name()))
		} else {
			left++
		}
	}
	err = errors.Join(errs...)
	if left == 0 && err == nil {
		err = removeNetnsDir()
	}
	return err
}

// removeNetnsDir undoes what `ip netns add` does to the host the first time: it makes
// /run/netns a mount of itself, which stays after the last namespace goes. Called once no
// namespace is left there (anyone's).
func removeNetnsDir() error {
	if err := unmountAll("/run/netns"); err != nil {
		return err
	}
	if err := os.Remove("/run/netns"); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.ENOTEMPTY) {
		return err
	}
	return nil
}

// inNetns runs f on an OS thread switched into the namespace at path. The thread goes back to
// the original namespace afterwards, or, if that fails, is never reused (it stays locked and
// ends with its goroutine). Sockets f creates stay in the namespace.
func inNetns(path string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		target, err := os.Open(path)
		if err != nil {
			errc <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("enter %s: %w", path, err)
			return
		}
		err = f()
		if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// DialIn dials addr over TCP from inside the network namespace netns ("" for the host's).
func DialIn(ctx context.Context, netns, addr string) (net.Conn, error) {
	if netns == "" {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	var conn net.Conn
	err := inNetns(netnsPath(netns), func() error {
		var d net.Dialer
		var err error
		conn, err = d.DialContext(ctx, "tcp", addr)
		return err
	})
	return conn, err
}

// listenIn listens on addr over TCP inside the network namespace netns ("" for the host's).
func listenIn(netns, addr string) (net.Listener, error) {
	if netns == "" {
		return net.Listen("tcp", addr)
	}
	var l net.Listener
	err := inNetns(netnsPath(netns), func() error {
		var err error
		l, err = net.Listen("tcp", addr)
		return err
	})
	return l, err
}

// forwarder copies the connections accepted on one side to a dial on the other, until closed.
type forwarder struct {
	listeners []net.Listener
	wg        sync.WaitGroup
}

// forward accepts on addr in namespace fromNS and connects each connection to the same addr
// (to when set) in namespace toNS.
func (f *forwarder) forward(fromNS, addr, toNS, to string) error {
	l, err := listenIn(fromNS, addr)
	if err != nil {
		return fmt.Errorf("forward %s from %q: %w", addr, fromNS, err)
	}
	if to == "" {
		to = addr
	}
	f.listeners = append(f.listeners, l)
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go splice(conn, toNS, to)
		}
	}()
	return nil
}

// splice connects conn to addr in namespace netns and copies both ways until either ends.
func splice(conn net.Conn, netns, addr string) {
	defer conn.Close()
	peer, err := DialIn(context.Background(), netns, addr)
	if err != nil {
		return
	}
	defer peer.Close()
	done := make(chan struct{}, 2)
	copyHalf := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tcp, ok := dst.(*net.TCPConn); ok {
			_ = tcp.CloseWrite()
		}
		done <- struct{}{}
	}
	go copyHalf(peer, conn)
	go copyHalf(conn, peer)
	<-done
	<-done
}

// close stops accepting; connections in flight end with their peers.
func (f *forwarder) close() {
	for _, l := range f.listeners {
		_ = l.Close()
	}
	f.listeners = nil
	f.wg.Wait()
}
