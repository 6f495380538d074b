// Package syncset holds Set, a set of keys that is safe for concurrent use.
package syncset

import (
	"maps"
	"slices"
	"sync"
)

// Set is a set of keys that is safe for concurrent use. The zero value is an
// empty set.
type Set[K comparable] struct {
	mu sync.Mutex
	m  map[K]struct{}
}

// Add adds k to the set.
func (s *Set[K]) Add(k K) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[K]struct{}{}
	}
	s.m[k] = struct{}{}
}

// Remove removes k from the set, if it is there.
func (s *Set[K]) Remove(k K) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, k)
}

// Has reports whether k is in the set.
func (s *Set[K]) Has(k K) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[k]
	return ok
}

// Keys returns the keys in the set, in no particular order.
func (s *Set[K]) Keys() []K {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Keys(s.m))
}
