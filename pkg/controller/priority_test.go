package controller

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// takeAll hands out every waiting key in the order workers would get them.
func takeAll(q *Queue[string]) []string {
	var got []string
	for q.Len() > 0 {
		key, _ := q.queue.Get()
		q.queue.Done(key)
		got = append(got, key)
	}
	return got
}

func TestUrgentKeysFirst(t *testing.T) {
	urgent := map[string]bool{}
	q := NewUrgentFirstQueue[string]("urgent", Options{}, func(context.Context, string) error { return nil },
		func(key string) bool { return urgent[key] || strings.HasPrefix(key, "done-") })
	defer q.ShutDown()
	for _, key := range []string{"new-1", "done-1", "new-2", "new-3", "done-2"} {
		q.Add(key)
	}
	urgent["new-3"] = true // became nearly done while waiting: added again, it moves up
	q.Add("new-3")
	q.Add("new-1") // added again without a change: keeps its place
	want := []string{"done-1", "done-2", "new-3", "new-1", "new-2"}
	if got := takeAll(q); !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
}

func TestPromotedKeyIsHandedOutOnce(t *testing.T) {
	urgent := map[string]bool{}
	q := NewUrgentFirstQueue[string]("promoted", Options{}, func(context.Context, string) error { return nil },
		func(key string) bool { return urgent[key] })
	defer q.ShutDown()
	q.Add("a")
	q.Add("b")
	urgent["b"] = true
	q.Add("b") // promoted; its old place in the other list is now stale
	key, _ := q.queue.Get()
	if key != "b" {
		t.Fatalf("first key %q, want b", key)
	}
	urgent["b"] = false
	q.queue.Done(key)
	q.Add("b") // back as an ordinary key, behind a
	if got := takeAll(q); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("order %v, want [a b]", got)
	}
	if q.Len() != 0 {
		t.Errorf("%d keys left", q.Len())
	}
}

// TestPromotedAgain: a key with a stale copy still waiting can be promoted again in its next wait.
func TestPromotedAgain(t *testing.T) {
	urgent := map[string]bool{}
	q := NewUrgentFirstQueue[string]("again", Options{}, func(context.Context, string) error { return nil },
		func(key string) bool { return urgent[key] })
	defer q.ShutDown()
	for _, key := range []string{"a", "b", "c"} {
		q.Add(key)
	}
	urgent["c"] = true
	q.Add("c") // promoted; a stale copy stays behind b
	key, _ := q.queue.Get()
	q.queue.Done(key)
	urgent["c"] = false
	q.Add("c") // waits as an ordinary key
	urgent["c"] = true
	q.Add("c") // promoted again
	if got := takeAll(q); !slices.Equal(got, []string{"c", "a", "b"}) {
		t.Errorf("order %v, want [c a b]", got)
	}
}
