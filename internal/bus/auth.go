package bus

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// A Role is what a connection may do on the bus. The master's embedded
// server knows one nkey per role and gives each the NATS permissions of
// its role, so an anonymous client is refused and a client holding a
// submitter key cannot read the data plane, forge task events or send
// control messages to slaves.
type Role string

const (
	RoleMaster    Role = "master"    // everything of the cluster
	RoleSlave     Role = "slave"     // join, heartbeats, leave, worker events, membership, the slaves' control and data plane
	RoleSubmitter Role = "submitter" // submit, status, cancel; task events and membership
	RoleReader    Role = "reader"    // status, task events and membership only
)

// Roles lists every role, in the order their keys are generated.
var Roles = []Role{RoleMaster, RoleSlave, RoleSubmitter, RoleReader}

// StateDirEnv overrides where a host keeps its clusters' credentials.
const StateDirEnv = "FLEXPS_STATE_DIR"

// StateDir is where the credentials of cluster live on this host:
// $FLEXPS_STATE_DIR/<cluster>, else $XDG_STATE_HOME/flexps/<cluster>, else
// ~/.local/state/flexps/<cluster>.
func StateDir(cluster string) (string, error) {
	if cluster == "" {
		cluster = "default"
	}
	if d := os.Getenv(StateDirEnv); d != "" {
		return filepath.Join(d, cluster), nil
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "flexps", cluster), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("bus: no state directory for credentials (set %s): %w", StateDirEnv, err)
	}
	return filepath.Join(home, ".local", "state", "flexps", cluster), nil
}

// KeyFile is the path of role's nkey seed in dir.
func KeyFile(dir string, r Role) string { return filepath.Join(dir, string(r)+".nk") }

// Keys are the public nkeys of every role, as the server needs them.
type Keys map[Role]string

// EnsureKeys loads the role keys in dir, generating the missing ones
// (seed files 0600 in a 0700 directory). created lists the files it wrote.
// Concurrent callers (several masters of one cluster on a host) end up
// with the same keys: a seed is published with a hard link, which fails
// when another process published first, and then that one is loaded.
func EnsureKeys(dir string) (keys Keys, created []string, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("bus: credentials directory %s: %w", dir, err)
	}
	if err := checkPrivate(dir, true); err != nil {
		return nil, nil, err
	}
	keys = Keys{}
	for _, r := range Roles {
		path := KeyFile(dir, r)
		kp, err := loadSeed(path)
		if errors.Is(err, fs.ErrNotExist) {
			if err := writeSeed(path); err != nil {
				return nil, nil, err
			}
			created = append(created, path)
			kp, err = loadSeed(path)
		}
		if err != nil {
			return nil, nil, err
		}
		pub, err := kp.PublicKey()
		if err != nil {
			return nil, nil, fmt.Errorf("bus: %s: %w", path, err)
		}
		keys[r] = pub
	}
	return keys, created, nil
}

func writeSeed(path string) error {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return fmt.Errorf("bus: generating a key: %w", err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return fmt.Errorf("bus: generating a key: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".seed*")
	if err != nil {
		return fmt.Errorf("bus: writing %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("bus: writing %s: %w", path, err)
	}
	if _, err := f.Write(append(seed, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("bus: writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("bus: writing %s: %w", path, err)
	}
	if err := os.Link(tmp, path); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("bus: writing %s: %w", path, err)
	}
	return nil
}

// loadSeed reads a seed file, refusing one that others may read.
func loadSeed(path string) (nkeys.KeyPair, error) {
	if err := checkPrivate(path, false); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("bus: key file %s: %w", path, err)
	}
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(b))))
	if err != nil {
		return nil, fmt.Errorf("bus: key file %s: not an nkey seed: %w", path, err)
	}
	return kp, nil
}

// checkPrivate refuses credentials that other users can read, as ssh does.
func checkPrivate(path string, dir bool) error {
	fi, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return fmt.Errorf("bus: %s: %w", path, err)
	}
	if fi.IsDir() != dir {
		return fmt.Errorf("bus: %s: not a %s", path, map[bool]string{true: "directory", false: "regular file"}[dir])
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("bus: %s is accessible by other users (mode %v); run chmod %s %s", path, fi.Mode().Perm(), map[bool]string{true: "700", false: "600"}[dir], path)
	}
	return nil
}

// InboxPrefix is the reply-inbox prefix of role's connections: each role
// may subscribe only to its own inboxes, so no role reads the replies to
// another's requests. Submitters and readers share one ("client"), so a
// client configured with either key works without saying which it holds.
func InboxPrefix(r Role) string {
	if r == RoleReader || r == RoleSubmitter {
		return "_INBOX.client"
	}
	return "_INBOX." + string(r)
}

// Permissions are role's rights on cluster's subjects. Every role
// subscribes only to its own inboxes; a role may publish into the inboxes
// of the roles whose requests it answers (slaves answer the master and
// each other), so a submitter can neither read nor forge another
// connection's replies, and no role but the master publishes task events.
func Permissions(r Role, s Subjects) *server.Permissions {
	p := s.Prefix
	inbox := func(roles ...Role) []string {
		var out []string
		seen := map[string]bool{}
		for _, r := range roles {
			if p := InboxPrefix(r) + ".>"; !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
		return out
	}
	allow := func(pub, sub []string) *server.Permissions {
		return &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: pub},
			Subscribe: &server.SubjectPermission{Allow: sub},
		}
	}
	switch r {
	case RoleMaster:
		return allow(append([]string{p + ".>"}, inbox(Roles...)...), append([]string{p + ".>"}, inbox(r)...))
	case RoleSlave:
		pub := []string{s.Join(), s.Heartbeat(), s.Leave(), s.Event(), s.Block(), s.Barrier(), p + ".slave.>"}
		return allow(append(pub, inbox(RoleMaster, RoleSlave)...), append([]string{p + ".slave.>", s.MasterAlive(), s.Membership()}, inbox(r)...))
	case RoleSubmitter:
		return allow([]string{s.Submit(), s.Status(), s.Cancel()}, append([]string{p + ".task.*.events", s.Membership()}, inbox(r)...))
	case RoleReader:
		return allow([]string{s.Status()}, append([]string{p + ".task.*.events", s.Membership()}, inbox(r)...))
	}
	// An unknown role may do nothing (an empty allow list would allow all).
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Deny: []string{">"}},
		Subscribe: &server.SubjectPermission{Deny: []string{">"}},
	}
}

// NkeyUsers are the server's users for keys on cluster's subjects.
func NkeyUsers(keys Keys, s Subjects) []*server.NkeyUser {
	users := make([]*server.NkeyUser, 0, len(keys))
	for _, r := range Roles {
		if pub, ok := keys[r]; ok {
			users = append(users, &server.NkeyUser{Nkey: pub, Permissions: Permissions(r, s)})
		}
	}
	return users
}
