package kvstore_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/kvstore/transport"
	"github.com/rs/zerolog"
)

// A table a slave cannot hold is an error naming it, never a crash: sizes
// come from user files, and "size = -5" in TOML wraps to nearly 2^64.
func TestHugeTablesRefused(t *testing.T) {
	s, err := kvstore.NewServer(transport.NewMem(), "s0", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, tc := range []struct {
		name string
		spec kvstore.TableSpec
		want string
	}{
		{"negative size wrapped", kvstore.TableSpec{Name: "neg", Size: 1<<64 - 5}, "out of range"},
		{"dense 1e14 keys", kvstore.TableSpec{Name: "big", Size: 1e14}, "memory"},
		{"dense 2^62 x 65535", kvstore.TableSpec{Name: "wide", Size: 1 << 62, Width: 65535}, "memory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.CreateTables("t", "s0", []kvstore.Placement{{Spec: tc.spec, Hosts: []string{"s0"}}})
			if !errors.Is(err, kvstore.ErrBadSpec) || !strings.Contains(err.Error(), tc.spec.Name) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrBadSpec naming %q and %q", err, tc.spec.Name, tc.want)
			}
			if _, err := kvstore.NewLocalTable(tc.spec, kvstore.ChunkLocks, 1); !errors.Is(err, kvstore.ErrBadSpec) {
				t.Fatalf("local table: %v", err)
			}
		})
	}
	// A sparse table of any size holds only the keys written.
	if err := s.CreateTables("t", "s0", []kvstore.Placement{{Spec: kvstore.TableSpec{Name: "sp", Size: 1 << 62, Storage: kvstore.Sparse}, Hosts: []string{"s0"}}}); err != nil {
		t.Fatal(err)
	}
}
