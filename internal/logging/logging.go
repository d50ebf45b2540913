// Package logging builds the zerolog logger every flexps command uses:
// human console output on a terminal, JSON otherwise, at a chosen level.
package logging

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/term"
)

// New returns a logger writing to w. format is auto (console on a
// terminal, else JSON), console or json; level is trace, debug, info,
// warn or error.
func New(w io.Writer, level, format string) (zerolog.Logger, error) {
	if level == "" {
		level = "info"
	}
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || level == "" {
		return zerolog.Nop(), fmt.Errorf("log level %q: want trace, debug, info, warn or error", level)
	}
	switch format {
	case "", "auto":
		if IsTerminal(w) {
			w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
		}
	case "console":
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly, NoColor: !IsTerminal(w)}
	case "json":
	default:
		return zerolog.Nop(), fmt.Errorf("log format %q: want auto, console or json", format)
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
}

// IsTerminal reports whether w is a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
