package syncset

import (
	"slices"
	"sync"
	"testing"
)

func TestSet(t *testing.T) {
	var s Set[string]
	if s.Has("a") || len(s.Keys()) != 0 {
		t.Fatal("the zero set is not empty")
	}
	s.Remove("a")
	s.Add("a")
	s.Add("b")
	s.Add("a")
	s.Remove("b")
	if !s.Has("a") || s.Has("b") {
		t.Fatalf("Has(a), Has(b) = %t, %t; want true, false", s.Has("a"), s.Has("b"))
	}
	if keys := s.Keys(); !slices.Equal(keys, []string{"a"}) {
		t.Fatalf("Keys = %v, want [a]", keys)
	}
}

// TestSetConcurrent fails under -race if the set is not safe for
// concurrent use.
func TestSetConcurrent(t *testing.T) {
	var s Set[int]
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			s.Add(i)
			_ = s.Has(i)
			_ = s.Keys()
		})
	}
	wg.Wait()
	if keys := s.Keys(); len(keys) != 8 {
		t.Fatalf("Keys = %v, want 8 keys", keys)
	}
}
