package lr_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The tests start slaves, a master and a bus in-process: all must be gone
// when the tests end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
