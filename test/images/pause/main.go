// Command pause is the first process of every pod sandbox on the local node: it holds the pod's
// namespaces, reaps the orphaned children that the kernel hands to it as the namespace's first
// process, and exits when it is asked to stop (SIGTERM or SIGINT). It is built into the node's
// sandbox image, because nothing can be pulled there.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	// The line tells that the handlers are in place (the test waits for it before it signals).
	os.Stderr.WriteString("pause: waiting for SIGTERM or SIGINT\n")
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		reap()
	}
}

// reap collects every child that has exited; SIGCHLD signals may coalesce, so it loops until
// none is left.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}
