package datastore

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

func TestCache(t *testing.T) {
	dir := libsvmDir(t, 2, 400)
	ctx := context.Background()
	type epoch struct {
		opened bool
		cached bool
	}
	tests := []struct {
		name   string
		budget int64
		want   []epoch
		log    string
	}{
		{"fits", 1 << 30, []epoch{{true, false}, {false, true}, {false, true}}, "fit in the cache budget"},
		{"too big", 10_000, []epoch{{true, false}, {true, false}, {true, false}}, "do not fit"},
		{"disabled", 0, []epoch{{true, false}, {true, false}}, "disabled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			c := NewCache(tt.budget, zerolog.New(&logs))
			var first []uint64
			for e, want := range tt.want {
				opened := false
				p, err := c.Pass(ctx, func(ctx context.Context) (Pass, error) {
					opened = true
					return NewAsyncReader(ctx, asyncConfig(t, dir, 0)), nil
				})
				if err != nil {
					t.Fatal(err)
				}
				ids := drain(t, p)
				if e == 0 {
					first = ids
				} else if !equalIDs(ids, first) {
					t.Fatalf("epoch %d read different data", e)
				}
				if st := p.Stats(); st.FromCache != !want.opened || st.Records != 800 {
					t.Fatalf("epoch %d stats %+v", e, st)
				}
				p.Close()
				if opened != want.opened || c.Cached() != (tt.budget >= 1<<30) {
					t.Fatalf("epoch %d: opened %v cached %v", e, opened, c.Cached())
				}
			}
			if strings.Count(logs.String(), "\n") != 1 || !strings.Contains(logs.String(), tt.log) {
				t.Fatalf("logs %q", logs.String())
			}
		})
	}
}

func equalIDs(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestCacheAbandonedPass(t *testing.T) {
	dir := libsvmDir(t, 1, 400)
	ctx := context.Background()
	c := NewCache(1<<30, zerolog.Nop())
	opens := 0
	open := func(ctx context.Context) (Pass, error) {
		opens++
		return NewAsyncReader(ctx, asyncConfig(t, dir, 0)), nil
	}
	p, _ := c.Pass(ctx, open)
	if _, err := p.Next(ctx); err != nil {
		t.Fatal(err)
	}
	p.Close() // abandoned: nothing kept
	if c.Cached() {
		t.Fatal("partial pass cached")
	}
	p, _ = c.Pass(ctx, open)
	drain(t, p)
	p.Close()
	p, _ = c.Pass(ctx, open)
	if ids := drain(t, p); len(ids) != 400 || opens != 2 {
		t.Fatalf("replay %d records, %d opens", len(ids), opens)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := p.Next(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("replay Next on cancelled ctx: %v", err)
	}
	boom := errors.New("boom")
	c2 := NewCache(1<<30, zerolog.Nop())
	if _, err := c2.Pass(ctx, func(context.Context) (Pass, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("open error: %v", err)
	}
	p, err := c2.Pass(ctx, open) // a failed open does not block recording
	if err != nil {
		t.Fatal(err)
	}
	drain(t, p)
	p.Close()
	if !c2.Cached() {
		t.Fatal("not cached after a full pass")
	}
	if _, err := p.Next(ctx); err != io.EOF && !errors.Is(err, ErrClosed) {
		t.Fatalf("Next after close: %v", err)
	}
}
