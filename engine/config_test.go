package engine

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMembershipConfig(t *testing.T) {
	for _, tc := range []struct {
		name    string
		toml    string
		hb, ft  time.Duration
		wantErr string
	}{
		{"defaults", "", 0, 0, ""},
		{"membership section", "[membership]\nheartbeat_interval = \"100ms\"\nfailure_timeout = \"400ms\"\n", 100 * time.Millisecond, 400 * time.Millisecond, ""},
		{"older master keys", "[master]\nheartbeat = \"200ms\"\ndead_after = \"2s\"\n", 200 * time.Millisecond, 2 * time.Second, ""},
		{"both names of one knob", "[master]\nheartbeat = \"200ms\"\n[membership]\nheartbeat_interval = \"100ms\"\n", 0, 0, "line 4: membership.heartbeat_interval and master.heartbeat are the same setting"},
		{"timeout shorter than two beats", "[membership]\nheartbeat_interval = \"300ms\"\nfailure_timeout = \"500ms\"\n", 0, 0, "line 3: membership.failure_timeout"},
		{"timeout shorter than two default beats", "[membership]\nfailure_timeout = \"500ms\"\n", 0, 0, "at least twice"},
		{"older timeout shorter than two beats", "[master]\npolicy = \"greedy\"\ndead_after = \"100ms\"\n", 0, 0, "line 3: master.dead_after: 100ms must be at least twice the heartbeat interval (300ms)"},
		// It panicked the master: "non-positive interval for NewTicker".
		{"heartbeat of a nanosecond", "[membership]\nheartbeat_interval = \"1ns\"\n", 0, 0, "line 2: membership.heartbeat_interval: 1ns is below the least heartbeat interval, 1ms"},
		{"older heartbeat of a nanosecond", "[master]\nheartbeat = \"3ns\"\n", 0, 0, "line 2: master.heartbeat: 3ns is below"},
		{"heartbeat of a millisecond", "[membership]\nheartbeat_interval = \"1ms\"\n", time.Millisecond, 0, ""},
		{"unknown key", "[membership]\ntimeout = \"1s\"\n", 0, 0, "timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := loadTestCluster(t, tc.toml, tc.wantErr)
			if c == nil {
				return
			}
			if c.Heartbeat() != tc.hb || c.FailureTimeout() != tc.ft {
				t.Fatalf("heartbeat %v timeout %v, want %v %v", c.Heartbeat(), c.FailureTimeout(), tc.hb, tc.ft)
			}
		})
	}
}

// [slave] slots and procs: in range or an error naming the file and the setting.
func TestSlaveSectConfig(t *testing.T) {
	for _, tc := range []struct {
		name, toml, wantErr string
		procs               int
	}{
		{"defaults", "", "", 0},
		{"procs", "[slave]\nslots = 4\nprocs = 2\n", "", 2},
		{"negative procs", "[slave]\nprocs = -1\n", "slave.procs", 0},
		{"too many procs", "[slave]\nprocs = 5000\n", "slave.procs", 0},
		{"procs as a string", "[slave]\nprocs = \"2\"\n", "procs", 0},
		{"too many slots", "[slave]\nslots = 5000\n", "line 2: slave.slots", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := loadTestCluster(t, tc.toml, tc.wantErr)
			if c == nil {
				return
			}
			if c.Slave.Procs != tc.procs {
				t.Fatalf("procs %d, want %d", c.Slave.Procs, tc.procs)
			}
		})
	}
}

// loadTestCluster loads a cluster config file holding text. With wantErr it
// checks the load fails naming the file and containing wantErr, and
// returns nil.
func loadTestCluster(t *testing.T, text, wantErr string) *ClusterConfig {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cluster.toml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := LoadClusterConfig(path)
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) || !strings.Contains(err.Error(), path) {
			t.Fatalf("error %v, want one naming %s and containing %q", err, path, wantErr)
		}
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Numbers the TOML types let through but no setting can mean are errors
// naming the setting, not silent defaults or odd behaviour.
func TestOutOfRangeClusterNumbers(t *testing.T) {
	for _, tc := range []struct{ name, toml, wantErr string }{
		{"fine", "[master]\naging = 2.5\nkeep_tasks = 10\ndefault_replicas = 3\n[data]\nread_producers = 4\n", ""},
		{"negative aging", "[master]\naging = -1.0\n", "line 2: master.aging"},
		{"NaN aging", "[master]\naging = nan\n", "master.aging"},
		{"negative keep_tasks", "[master]\nkeep_tasks = -1\n", "line 2: master.keep_tasks"},
		{"negative default_replicas", "[master]\ndefault_replicas = -2\n", "master.default_replicas"},
		{"too many default_replicas", "[master]\ndefault_replicas = 9\n", "master.default_replicas"},
		{"negative read_producers", "[data]\nread_producers = -1\n", "line 2: data.read_producers"},
		{"negative kv_window", "[slave]\nkv_window = -3\n", "slave.kv_window"},
		{"size past int64", "[data]\ncache = \"99999999999GiB\"\n", "too large"},
		{"largest size", "[data]\ncache = \"8589934591GiB\"\n", ""},
		{"relative allowed path", "[data]\nblock_size = \"1MiB\"\nallowed_paths = [\"/srv\", \"relative/dir\"]\n", `line 3: data.allowed_paths: "relative/dir" must be an absolute directory`},
		{"relative file URL allowed path", "[data]\nallowed_paths = [\"file://data\"]\n", `line 2: data.allowed_paths: "file://data"`},
		{"hdfs allowed path", "[data]\nallowed_paths = [\"hdfs://nn:8020/data\"]\n", ""},
		{"kv listen any port", "[kv]\nlisten = \"0.0.0.0:0\"\nadvertise = \"node1:7400\"\n", ""},
		{"kv listen port past 65535", "[kv]\nlisten = \"127.0.0.1:99999\"\n", `line 2: kv.listen: "127.0.0.1:99999": port "99999", want 0 to 65535`},
		{"kv listen port not a number", "[kv]\nlisten = \"127.0.0.1:x\"\n", `kv.listen: "127.0.0.1:x": port "x"`},
		{"kv advertise port 0", "[kv]\nadvertise = \"node1:0\"\n", `line 2: kv.advertise: "node1:0": port "0", want 1 to 65535`},
		{"hdfs namenodes", "[hdfs]\nnamenodes = [\"nn1:8020\", \"nn2:8020\"]\nhttp = \"nn1:9870\"\n", ""},
		{"hdfs namenode without a port", "[hdfs]\nuser = \"u\"\nnamenodes = [\"nn1:8020\", \"nn2\"]\n", `line 3: hdfs.namenodes: "nn2" is not host:port (the namenode's RPC address`},
		{"hdfs namenode empty", "[hdfs]\nnamenodes = [\"\"]\n", `line 2: hdfs.namenodes: "" is not host:port`},
		{"hdfs http without a port", "[hdfs]\nhttp = \"nn1\"\n", `line 2: hdfs.http: "nn1" is not host:port (the namenode's HTTP (WebHDFS) address`},
	} {
		t.Run(tc.name, func(t *testing.T) { loadTestCluster(t, tc.toml, tc.wantErr) })
	}
}
