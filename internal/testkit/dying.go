package testkit

import "errors"

// Table is what Dying wraps: a table's reads and writes of Width values
// per key.
type Table interface {
	Get(keys []uint64, out []float64) error
	Add(keys []uint64, deltas []float64) error
}

// ErrDied is what a Dying table returns once its slave "died".
var ErrDied = errors.New("testkit: the slave died")

// Dying is T on a slave that dies after *Left more keys are added (a
// budget the tables of one worker share, to cut a sequence of writes
// after any number of them): the Add during which the budget runs out
// applies the keys it has room for (a message that got through, one that
// did not) and fails, as does every later call.
type Dying struct {
	T     Table
	Width int
	Left  *int
}

func (d Dying) Get(keys []uint64, out []float64) error {
	if *d.Left < 0 {
		return ErrDied
	}
	return d.T.Get(keys, out)
}

func (d Dying) Add(keys []uint64, deltas []float64) error {
	if *d.Left < 0 {
		return ErrDied
	}
	n := min(len(keys), *d.Left)
	*d.Left -= len(keys)
	if err := d.T.Add(keys[:n], deltas[:n*d.Width]); err != nil {
		return err
	}
	if n < len(keys) {
		*d.Left = -1
		return ErrDied
	}
	return nil
}

// Flush fails once the slave died.
func (d Dying) Flush() error {
	if *d.Left < 0 {
		return ErrDied
	}
	return nil
}
