package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shutter-csi/shutter/test/stack"
)

// term is one controller's leadership, from the Lease's acquireTime.
type term struct {
	Replica  string    `json:"replica"`
	Acquired time.Time `json:"acquired"`
}

// leases records who held the controllers' Lease and since when, polling it.
type leases struct {
	mu    sync.Mutex
	terms []term
	seen  map[string]bool
}

func (e *env) watchLeases(ctx context.Context) *leases {
	l := &leases{seen: map[string]bool{}}
	go func() {
		for ctx.Err() == nil {
			l.poll(ctx, e)
			_ = pause(ctx, 200*time.Millisecond)
		}
	}()
	return l
}

func (l *leases) poll(ctx context.Context, e *env) {
	lease, err := e.kube.CoordinationV1().Leases("shutter-system").Get(ctx, stack.ControllerLease, metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" || lease.Spec.AcquireTime == nil {
		return
	}
	id := *lease.Spec.HolderIdentity
	key := id + "@" + lease.Spec.AcquireTime.String()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen[key] {
		return
	}
	replica := ""
	for _, p := range e.stack.Controllers {
		if pid := p.Pid(); pid != 0 && strings.HasSuffix(id, "_"+strconv.Itoa(pid)) {
			replica = p.Name
		}
	}
	if replica == "" {
		return // its process is gone already; try again on the next poll only if it is not
	}
	l.seen[key] = true
	l.terms = append(l.terms, term{Replica: replica, Acquired: lease.Spec.AcquireTime.Time})
}

// history returns the terms in order of acquisition.
func (l *leases) history() []term {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := append([]term(nil), l.terms...)
	sort.Slice(out, func(i, j int) bool { return out[i].Acquired.Before(out[j].Acquired) })
	return out
}

// auditEntry is the part of an audit event the deposed-leader check reads.
type auditEntry struct {
	Stage     string    `json:"stage"`
	Verb      string    `json:"verb"`
	UserAgent string    `json:"userAgent"`
	Received  time.Time `json:"requestReceivedTimestamp"`
	ObjectRef *struct {
		Resource  string `json:"resource"`
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

var writeVerbs = map[string]bool{"create": true, "update": true, "patch": true, "delete": true, "deletecollection": true}

// deposedWrites reads the audit log for writes by a controller replica received after another
// replica acquired the Lease and before this one acquired it again. Writes the API server
// refused (a conflict on a stale resourceVersion) are counted apart: they changed nothing. So
// are late ones: the replica's fence found its Lease fresh before the other replica acquired it
// (the time is in the User-Agent, see leaseCheckedOf), and the write arrived only afterwards,
// because the process was frozen between the check and the send. What the fence can refuse is
// a write decided after that, and those are the violations.
// reviews are the resources whose create only asks the API server a question and stores nothing: a
// standby replica checks its RBAC with them at start, before it campaigns.
var reviews = map[string]bool{"selfsubjectaccessreviews": true, "selfsubjectrulesreviews": true,
	"subjectaccessreviews": true, "localsubjectaccessreviews": true, "tokenreviews": true, "selfsubjectreviews": true}

func deposedWrites(path string, terms []term) (accepted, refused, late []string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var a auditEntry
		if json.Unmarshal(sc.Bytes(), &a) != nil || a.Stage != "ResponseComplete" || !writeVerbs[a.Verb] || a.ObjectRef == nil {
			continue
		}
		replica := componentOf(a.UserAgent)
		if !strings.HasPrefix(replica, "snapshot-controller") || a.ObjectRef.Resource == "leases" || reviews[a.ObjectRef.Resource] {
			continue
		}
		holder := holderAt(terms, a.Received)
		if holder == "" || holder == replica {
			continue
		}
		line := fmt.Sprintf("%s %s %s %s/%s at %s (leader %s)", replica, a.Verb, a.ObjectRef.Resource,
			a.ObjectRef.Namespace, a.ObjectRef.Name, a.Received.Format("15:04:05.000000"), holder)
		checked := leaseCheckedOf(a.UserAgent)
		switch {
		case a.ResponseStatus != nil && a.ResponseStatus.Code >= 300:
			refused = append(refused, line+fmt.Sprintf(" -> %d", a.ResponseStatus.Code))
		case !checked.IsZero() && holderAt(terms, checked) == replica:
			late = append(late, line+" checked "+checked.Format("15:04:05.000000"))
		default:
			accepted = append(accepted, line)
		}
	}
	return accepted, refused, late, sc.Err()
}

// holderAt is the replica whose term had begun last at t.
func holderAt(terms []term, t time.Time) string {
	holder := ""
	for _, tm := range terms {
		if tm.Acquired.After(t) {
			break
		}
		holder = tm.Replica
	}
	return holder
}
