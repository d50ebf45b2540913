package checkpoint

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func TestParseName(t *testing.T) {
	cases := []struct {
		in   string
		seq  int
		want bool
	}{
		{"ckpt-000001.flexps", 1, true},
		{"/a/b/ckpt-000042.flexps", 42, true},
		{"hdfs://nn:9000/ck/ckpt-1234567.flexps", 1234567, true},
		{"ckpt-000000.flexps", 0, false},
		{"ckpt-.flexps", 0, false},
		{"ckpt-12a.flexps", 0, false},
		{"ckpt--12.flexps", 0, false},
		{".ckpt-000003.flexps.tmp123", 0, false},
		{"ckpt-000003.flexps.tmp", 0, false},
		{"model.flexps", 0, false},
		{"ckpt-99999999999999999999999.flexps", 0, false},
	}
	for _, c := range cases {
		seq, ok := ParseName(c.in)
		if ok != c.want || seq != c.seq {
			t.Errorf("ParseName(%q) = %d, %v; want %d, %v", c.in, seq, ok, c.seq, c.want)
		}
	}
	if seq, ok := ParseName(Name(7)); !ok || seq != 7 {
		t.Fatalf("Name(7) = %q parses as %d, %v", Name(7), seq, ok)
	}
}

func TestNewestStaleNextSeq(t *testing.T) {
	paths := []string{"d/ckpt-000002.flexps", "d/notes.txt", "d/ckpt-000010.flexps", "d/.ckpt-000011.flexps.tmp9", "d/ckpt-000003.flexps", "d/ckpt-000010.flexps"}
	got := Newest(paths)
	want := []Entry{{"d/ckpt-000010.flexps", 10}, {"d/ckpt-000003.flexps", 3}, {"d/ckpt-000002.flexps", 2}}
	if !slices.Equal(got, want) {
		t.Fatalf("Newest = %v, want %v", got, want)
	}
	if s := Stale(paths, 2); !slices.Equal(s, want[2:]) {
		t.Fatalf("Stale(2) = %v", s)
	}
	if s := Stale(paths, 5); s != nil {
		t.Fatalf("Stale(5) = %v", s)
	}
	if s := Stale(paths, 0); !slices.Equal(s, want[1:]) {
		t.Fatalf("Stale(0) keeps the newest: %v", s)
	}
	if n := NextSeq(paths); n != 11 {
		t.Fatalf("NextSeq = %d", n)
	}
	if n := NextSeq(nil); n != 1 {
		t.Fatalf("NextSeq(nil) = %d", n)
	}
}

func TestPickTable(t *testing.T) {
	entries := []Entry{{"c3", 3}, {"c2", 2}, {"c1", 1}}
	bad := errors.New("checksum mismatch")
	cases := []struct {
		name    string
		invalid map[string]bool
		chosen  int
		skipped []string
	}{
		{"newest valid", nil, 0, nil},
		{"newest torn", map[string]bool{"c3": true}, 1, []string{"c3"}},
		{"two torn", map[string]bool{"c3": true, "c2": true}, 2, []string{"c3", "c2"}},
		{"all torn", map[string]bool{"c3": true, "c2": true, "c1": true}, -1, []string{"c3", "c2", "c1"}},
		{"older torn only", map[string]bool{"c1": true}, 0, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var loaded []string
			i, skipped := Pick(entries, func(e Entry) error {
				loaded = append(loaded, e.Path)
				if tc.invalid[e.Path] {
					return bad
				}
				return nil
			})
			var names []string
			for _, s := range skipped {
				names = append(names, s.Path)
				if !errors.Is(s.Err, bad) {
					t.Fatalf("skipped %s without its error", s.Path)
				}
			}
			if i != tc.chosen || !slices.Equal(names, tc.skipped) {
				t.Fatalf("Pick = %d, skipped %v; want %d, %v", i, names, tc.chosen, tc.skipped)
			}
			if tc.chosen >= 0 && len(loaded) != tc.chosen+1 {
				t.Fatalf("loaded %v: files older than the chosen one were read", loaded)
			}
		})
	}
}

// Property: against a sequential model (the highest sequence number
// whose file is valid), Newest+Pick choose exactly that file and skip
// exactly the newer ones.
func TestPickNewestValidProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		seqs := rapid.SliceOfNDistinct(rapid.IntRange(1, 50), 0, 12, rapid.ID[int]).Draw(t, "seqs")
		valid := map[int]bool{}
		var paths []string
		for _, s := range seqs {
			valid[s] = rapid.Bool().Draw(t, fmt.Sprint("valid", s))
			paths = append(paths, "dir/"+Name(s))
		}
		paths = append(paths, rapid.SliceOf(rapid.SampledFrom([]string{"dir/x", "dir/.ckpt-000001.flexps.tmp1", "dir/ckpt-.flexps"})).Draw(t, "junk")...)
		paths = rapid.Permutation(paths).Draw(t, "order")
		entries := Newest(paths)
		i, skipped := Pick(entries, func(e Entry) error {
			if !valid[e.Seq] {
				return errors.New("invalid")
			}
			return nil
		})
		best := 0
		for s, ok := range valid {
			if ok && s > best {
				best = s
			}
		}
		if best == 0 {
			if i != -1 || len(skipped) != len(seqs) {
				t.Fatalf("no valid file: chose %d, skipped %d of %d", i, len(skipped), len(seqs))
			}
			return
		}
		if i < 0 || entries[i].Seq != best {
			t.Fatalf("chose %v, want seq %d", i, best)
		}
		for _, s := range skipped {
			if s.Seq <= best || valid[s.Seq] {
				t.Fatalf("skipped %v, the newest valid is %d", s.Entry, best)
			}
		}
		newer := 0
		for _, s := range seqs {
			if s > best {
				newer++
			}
		}
		if len(skipped) != newer {
			t.Fatalf("skipped %d files, %d are newer than %d", len(skipped), newer, best)
		}
	})
}

func TestScheduleDue(t *testing.T) {
	cases := []struct {
		s      Schedule
		epochs int
		since  time.Duration
		want   bool
	}{
		{Schedule{Epochs: 2}, 1, time.Hour, false},
		{Schedule{Epochs: 2}, 2, 0, true},
		{Schedule{Epochs: 1}, 1, 0, true},
		{Schedule{Period: time.Minute}, 1, 59 * time.Second, false},
		{Schedule{Period: time.Minute}, 1, time.Minute, true},
		{Schedule{Period: time.Minute}, 0, time.Hour, false}, // nothing new to save
		{Schedule{}, 10, time.Hour, false},
	}
	for _, c := range cases {
		if got := c.s.Due(c.epochs, c.since); got != c.want {
			t.Errorf("%+v.Due(%d, %v) = %v, want %v", c.s, c.epochs, c.since, got, c.want)
		}
	}
}

func TestFileDir(t *testing.T) {
	for _, tc := range []struct {
		path, dir string
		ok        bool
	}{
		{"out/lr.ckpt/ckpt-000003.flexps", "out/lr.ckpt", true},
		{"/ck/ckpt-000001.flexps", "/ck", true},
		{"ckpt-000001.flexps", ".", true},
		{"hdfs://127.0.0.1:9000/ck/lr/ckpt-000012.flexps", "hdfs://127.0.0.1:9000/ck/lr", true},
		{"out/lr.ckpt", "", false},
		{"out/lr.ckpt/", "", false},
		{"hdfs://127.0.0.1:9000/ck/lr", "", false},
		{"out/ckpt-00000x.flexps", "", false},
		{"out/.ckpt-000001.flexps.tmp-1", "", false},
	} {
		dir, ok := FileDir(tc.path)
		if dir != tc.dir || ok != tc.ok {
			t.Errorf("FileDir(%q) = %q, %v; want %q, %v", tc.path, dir, ok, tc.dir, tc.ok)
		}
	}
}
