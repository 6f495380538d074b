package cluster

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// hostNetwork is what the host's namespace shows of its links, addresses and routes.
func hostNetwork(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, args := range [][]string{{"-o", "link"}, {"-o", "addr"}, {"route"}, {"-6", "route"}} {
		out, err := exec.Command("ip", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("ip %v: %v\n%s", args, err, out)
		}
		b.Write(out)
	}
	return b.String()
}

// echoServer accepts on l and answers every line with name and the line.
func echoServer(l net.Listener, name string) {
	for {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer conn.Close()
			line, _ := bufio.NewReader(conn).ReadString('\n')
			fmt.Fprintf(conn, "%s %s", name, line)
		}()
	}
}

// ask dials addr from namespace netns and returns the answer to one line.
func ask(t *testing.T, netns, addr string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := DialIn(ctx, netns, addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, "ping\n"); err != nil {
		return "", err
	}
	out, err := io.ReadAll(conn)
	return string(out), err
}

// TestNetwork (root): the namespaces of a two-node network reach each other over the bridge; a
// node's namespace reaches the host's loopback only through a forwarder, and the host reaches
// a node's own loopback address only through one; a second setup replaces what the first left
// (a crashed run); removing it leaves no namespace, and the host's links, addresses and routes
// are as before throughout.
func TestNetwork(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no ip tool")
	}
	before := hostNetwork(t)
	dir := t.TempDir()
	ctx := context.Background()
	if _, err := setupNetwork(ctx, dir, 2); err != nil {
		t.Fatal(err)
	}
	names, err := setupNetwork(ctx, dir, 2) // over the leftovers of the first
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = removeNetwork(dir) })

	// Node 2 serves on its bridge address and on its own loopback address.
	for _, addr := range []string{bridgeSubnet + ".12:7001", nodeAddress(2) + ":7002"} {
		l, err := listenIn(names[1], addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go echoServer(l, "n2")
	}
	host, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Close() })
	go echoServer(host, "host")
	hostAddr := host.Addr().String()

	if got, err := ask(t, names[0], bridgeSubnet+".12:7001"); err != nil || got != "n2 ping\n" {
		t.Errorf("node 1 to node 2 over the bridge: %q, %v", got, err)
	}
	if _, err := ask(t, names[0], hostAddr); err == nil {
		t.Errorf("node 1 reached the host's %s without a forwarder", hostAddr)
	}
	if _, err := ask(t, "", nodeAddress(2)+":7002"); err == nil {
		t.Error("the host reached node 2's own address without a forwarder")
	}
	var f forwarder
	t.Cleanup(f.close)
	if err := f.forward(names[0], hostAddr, "", ""); err != nil {
		t.Fatal(err)
	}
	if err := f.forward("", nodeAddress(2)+":7002", names[1], ""); err != nil {
		t.Fatal(err)
	}
	if got, err := ask(t, names[0], hostAddr); err != nil || got != "host ping\n" {
		t.Errorf("node 1 to the host's loopback through the forwarder: %q, %v", got, err)
	}
	if got, err := ask(t, "", nodeAddress(2)+":7002"); err != nil || got != "n2 ping\n" {
		t.Errorf("host to node 2's address through the forwarder: %q, %v", got, err)
	}
	if after := hostNetwork(t); after != before {
		t.Errorf("the host's network changed:\nbefore\n%s\nafter\n%s", before, after)
	}

	f.close()
	if err := removeNetwork(dir); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), netnsPrefix(dir)) {
			t.Errorf("namespace %s left", e.Name())
		}
	}
	if others, _ := os.ReadDir("/run/netns"); len(others) == 0 {
		if points, _ := mountsUnder("/run/netns"); len(points) > 0 {
			t.Errorf("/run/netns still mounted: %v", points)
		}
	}
	if after := hostNetwork(t); after != before {
		t.Errorf("the host's network changed after removal:\nbefore\n%s\nafter\n%s", before, after)
	}
}
