// Package groups counts the joins of a link's multicast groups and
// publishes the set of groups joined to the link's receive path, which
// reads it without a lock: the part of link.Multicaster that the links
// which take a group's frames themselves (tap, xdp) share.
package groups

import (
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
)

// ErrNotMember is returned by Leave for a group not joined.
var ErrNotMember = errors.New("not a member")

// Set is a link's multicast groups. Its zero value is empty.
type Set struct {
	mu     sync.Mutex
	joins  map[netip.Addr]int
	joined atomic.Pointer[map[netip.Addr]struct{}]
}

// Join counts a join of g. At the first it publishes g and calls join,
// which does what the network must learn of it; join's error undoes both.
// join runs under the set's lock, as Each's and Leave's functions do.
func (s *Set) Join(g netip.Addr, join func() error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.joins[g] > 0 {
		s.joins[g]++
		return nil
	}
	if s.joins == nil {
		s.joins = make(map[netip.Addr]int)
	}
	s.joins[g] = 1
	s.publish()
	if err := join(); err != nil {
		delete(s.joins, g)
		s.publish()
		return err
	}
	return nil
}

// Leave ends a join of g. At the last it takes g out and calls leave,
// and returns its error; a group not joined is ErrNotMember.
func (s *Set) Leave(g netip.Addr, leave func() error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.joins[g] {
	case 0:
		return ErrNotMember
	case 1:
		delete(s.joins, g)
		s.publish()
		return leave()
	}
	s.joins[g]--
	return nil
}

// Has reports whether g is joined, without a lock.
func (s *Set) Has(g netip.Addr) bool {
	set := s.joined.Load()
	if set == nil {
		return false
	}
	_, ok := (*set)[g]
	return ok
}

// Each calls fn for each group joined, under the set's lock.
func (s *Set) Each(fn func(g netip.Addr)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for g := range s.joins {
		fn(g)
	}
}

// publish sets what Has reads to the groups joined. s.mu must be held.
func (s *Set) publish() {
	set := make(map[netip.Addr]struct{}, len(s.joins))
	for g := range s.joins {
		set[g] = struct{}{}
	}
	s.joined.Store(&set)
}
