package checkpoint

import "time"

// Schedule decides when a checkpoint is due: every Epochs epochs, or once
// Period has passed since the last one (exactly one is > 0). It is a pure
// function of what the caller counted, so the master's driver stays the
// only place with a clock.
type Schedule struct {
	Epochs int
	Period time.Duration
}

// Due reports whether a checkpoint is due at a consistent point (an epoch
// boundary or the end of a stage), given the epochs finished and the time
// passed since the last checkpoint (or since the task started).
func (s Schedule) Due(epochsSince int, sinceLast time.Duration) bool {
	switch {
	case s.Epochs > 0:
		return epochsSince >= s.Epochs
	case s.Period > 0:
		return epochsSince > 0 && sinceLast >= s.Period
	}
	return false
}
