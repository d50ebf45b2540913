package engine

import (
	"io"

	"github.com/flexps/flexps/internal/logging"
	"github.com/rs/zerolog"
)

// NewLogger returns the logger flexps commands use, writing to w: format
// "auto" (console on a terminal, JSON otherwise), "console" or "json";
// level trace, debug, info, warn or error.
func NewLogger(w io.Writer, level, format string) (zerolog.Logger, error) {
	return logging.New(w, level, format)
}
