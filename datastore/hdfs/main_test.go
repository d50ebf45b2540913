package hdfs

import (
	"os"
	"testing"

	"github.com/flexps/flexps/internal/hdfstest"
	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind, then stops the
// MiniHDFS the tests share (if they started it).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		hdfstest.StopShared()
		os.Exit(code)
	}))
}
