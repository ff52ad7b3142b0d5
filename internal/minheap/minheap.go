// Package minheap is a binary min-heap kept in a slice. It is generic
// rather than container/heap, whose Push and Pop box every element in an
// interface: here filing an element allocates nothing beyond the slice's
// growth, which the device's timers and the fabric's event queue rely on.
// The least element is h[0].
package minheap

// Push adds x to the heap h ordered by less.
func Push[S ~[]T, T any](h *S, x T, less func(a, b *T) bool) {
	*h = append(*h, x)
	s := *h
	for i := len(s) - 1; i > 0; {
		parent := (i - 1) / 2
		if !less(&s[i], &s[parent]) {
			break
		}
		s[parent], s[i] = s[i], s[parent]
		i = parent
	}
}

// Pop removes and returns the least element of the non-empty heap h
// ordered by less. The slot it leaves is zeroed, so that the slice holds
// no pointer to it.
func Pop[S ~[]T, T any](h *S, less func(a, b *T) bool) T {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	var zero T
	s[last] = zero
	s = s[:last]
	for i := 0; ; {
		least, l, r := i, 2*i+1, 2*i+2
		if l < len(s) && less(&s[l], &s[least]) {
			least = l
		}
		if r < len(s) && less(&s[r], &s[least]) {
			least = r
		}
		if least == i {
			break
		}
		s[i], s[least] = s[least], s[i]
		i = least
	}
	*h = s
	return top
}
