package rnic

// WorkerTurns returns how many turns the device's workers have taken, so
// that a benchmark can report how often they wake.
func (d *Device) WorkerTurns() uint64 {
	var n uint64
	for _, w := range d.workers {
		n += w.turns.Load()
	}
	return n
}
