package controller

import "k8s.io/client-go/util/workqueue"

// twoClassFIFO is the workqueue's store of waiting keys when a queue has an Urgent test: keys
// for which it holds are handed out first, each class in arrival order. A snapshot whose
// content already exists is nearly done; finishing it before taking the first steps of the
// hundreds created after it halves the typical wait in a burst without slowing the burst.
//
// The workqueue calls these methods under its own lock and keeps at most one copy of a key
// waiting, so a key is in exactly one of the lists, or in both once promoted (the stale copy
// in low is skipped).
type twoClassFIFO[K comparable] struct {
	urgent    func(K) bool
	high, low []K
	promoted  map[K]struct{}
}

var _ workqueue.Queue[string] = &twoClassFIFO[string]{}

func newTwoClassFIFO[K comparable](urgent func(K) bool) *twoClassFIFO[K] {
	return &twoClassFIFO[K]{urgent: urgent, promoted: map[K]struct{}{}}
}

// Push adds a key that is not waiting yet.
func (q *twoClassFIFO[K]) Push(key K) {
	if q.urgent(key) {
		q.high = append(q.high, key)
	} else {
		q.low = append(q.low, key)
	}
}

// Touch is called when a waiting key is added again: it may have become urgent meanwhile.
func (q *twoClassFIFO[K]) Touch(key K) {
	if _, done := q.promoted[key]; done || !q.urgent(key) || q.waitsHigh(key) {
		return
	}
	q.promoted[key] = struct{}{}
	q.high = append(q.high, key)
}

// waitsHigh tells whether key is already in the urgent list. The list is short: it holds the
// keys whose work is nearly done.
func (q *twoClassFIFO[K]) waitsHigh(key K) bool {
	for _, k := range q.high {
		if k == key {
			return true
		}
	}
	return false
}

func (q *twoClassFIFO[K]) Len() int { return len(q.high) + len(q.low) - len(q.promoted) }

// Pop hands out the oldest urgent key, else the oldest other one that was not promoted.
func (q *twoClassFIFO[K]) Pop() K {
	if len(q.high) > 0 {
		return pop(&q.high)
	}
	for {
		key := pop(&q.low)
		if _, stale := q.promoted[key]; !stale {
			return key
		}
		delete(q.promoted, key)
	}
}

func pop[K any](list *[]K) K {
	var zero K
	key := (*list)[0]
	(*list)[0] = zero // let the key's memory go
	*list = (*list)[1:]
	return key
}
