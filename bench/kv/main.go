// Command kv measures the flexps KV-store data plane against baselines run
// in the same process: local Get/Add (the worker's own slave hosts the
// shard, so keys are served from memory) against a plain Store, and remote
// Get/Add and GetChunk/AddChunk (the worker hosts no shard; two shard
// servers, each on its own NATS connection, as two slave processes would
// have) against raw NATS request-reply carrying messages of exactly the
// sizes the kvstore sends, in the same pattern: every read's requests
// outstanding at once, Adds acknowledged asynchronously with a window of 64.
// The remote rows run over each transport of -transports (default: the
// bus, NATS, and the direct TCP data plane, interleaved in the same
// measurement); a tcp row's ratio is to the same row over NATS.
//
//	go run ./bench/kv [-duration 2s] [-json] [-only regexp] [-transports nats,tcp]
//
// Nothing here asserts a timing: each row prints a ratio to its baseline
// and, where the project set one, the target.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"os"
	"regexp"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/flexps/flexps/internal/bus"
	"github.com/flexps/flexps/kvstore"
	"github.com/nats-io/nats.go"
)

// Targets the project set (see bench/README.md).
const (
	sparseAddTarget = 20e6 // local sparse Add, width 1, keys/s on one core
	remoteRawTarget = 0.5  // remote chunk traffic / raw NATS at the same payload
)

type options struct {
	duration   time.Duration
	jsonOut    bool
	only       *regexp.Regexp
	sparseKeys int
	batches    []int
	widths     []int
	chunks     []int
	window     int
	rounds     int
	transports []string
	procs      bool
	cpuprofile string // the shard processes of -procs write theirs to <this>.<transport>-<host>
}

func main() {
	var o options
	var only, batches, widths, chunks, cpuprofile, transports string
	flag.DurationVar(&o.duration, "duration", 2*time.Second, "how long each measurement runs (after a short warm-up)")
	flag.BoolVar(&o.jsonOut, "json", false, "write one JSON line per measurement to stdout (the table goes to stderr)")
	flag.StringVar(&only, "only", "", "run only rows whose \"op storage width\" matches this regexp, e.g. 'remote' or 'sparse'")
	flag.IntVar(&o.sparseKeys, "sparse-keys", 1<<20, "distinct keys the sparse-table benchmarks draw from")
	flag.StringVar(&batches, "batches", "100,1000", "keys per Get/Add call")
	flag.StringVar(&widths, "widths", "1,16,64", "value widths of the dense float32 tables")
	flag.StringVar(&chunks, "chunks", "1,8", "chunks (of 1024 keys) per GetChunk/AddChunk call")
	flag.IntVar(&o.rounds, "rounds", 3, "each row alternates its subject and baseline this many times and keeps the best of each")
	flag.IntVar(&o.window, "window", 64, "the KV client's Add window (acks in flight); the raw NATS Add baseline uses the same")
	flag.StringVar(&transports, "transports", "nats,tcp", "transports of the remote rows: nats (through the bus), tcp (the direct data plane), tls (the direct data plane with TLS)")
	flag.BoolVar(&o.procs, "procs", false, "remote rows only, with each shard server in a process of its own (the worker's client stays here), all over loopback TCP")
	shards := flag.Int("shards", 2, "shard servers s0, s1, ... the remote tables are spread over (the local ones live on s0)")
	serveAs := flag.String("serve", "", "internal: run as the shard server transport:host of a -procs run")
	natsURL := flag.String("nats", "", "internal: the bus of a -procs run")
	flag.StringVar(&cpuprofile, "cpuprofile", "", "write a CPU profile of the whole run to this file (read it with go tool pprof -top)")
	flag.Parse()
	o.cpuprofile = cpuprofile
	var err error
	if cpuprofile != "" {
		f, err := os.Create(cpuprofile)
		if err != nil {
			fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	o.rounds = max(o.rounds, 1)
	if o.only, err = regexp.Compile(only); err != nil {
		fatal(fmt.Errorf("-only: %w", err))
	}
	if o.batches, err = ints(batches); err == nil {
		if o.widths, err = ints(widths); err == nil {
			o.chunks, err = ints(chunks)
		}
	}
	if err != nil {
		fatal(err)
	}
	for _, t := range strings.Split(transports, ",") {
		t = strings.TrimSpace(t)
		if t != "nats" && t != "tcp" && t != "tls" {
			fatal(fmt.Errorf("-transports: %q is not nats, tcp or tls", t))
		}
		o.transports = append(o.transports, t)
	}
	if *shards < 1 {
		fatal(fmt.Errorf("-shards: at least 1"))
	}
	hosts = nil
	for i := range *shards {
		hosts = append(hosts, fmt.Sprintf("s%d", i))
	}
	if *serveAs != "" {
		if err := serveShard(*serveAs, *natsURL, o.widths); err != nil {
			fatal(err)
		}
		return
	}
	if err := run(o); err != nil {
		pprof.StopCPUProfile()
		fatal(err)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "bench/kv:", err)
	os.Exit(1)
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		var n int
		if _, err := fmt.Sscanf(strings.TrimSpace(f), "%d", &n); err != nil || n <= 0 {
			return nil, fmt.Errorf("bad list %q: want positive integers separated by commas", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// row is one measurement.
type row struct {
	Op        string  `json:"op"`
	Transport string  `json:"transport,omitempty"` // remote rows: nats or tcp
	Storage   string  `json:"storage"`
	Width     int     `json:"width"`
	Batch     int     `json:"batch"` // keys per call
	KeysPerS  float64 `json:"keys_per_s"`
	MBPerS    float64 `json:"mb_per_s"` // value bytes (keys x width x 4) per second, 1 MB = 1e6 bytes
	CallsPerS float64 `json:"calls_per_s"`
	WireBytes float64 `json:"wire_bytes_per_call,omitempty"` // NATS payload bytes per call, requests + replies
	RawMBPerS float64 `json:"raw_nats_mb_per_s,omitempty"`   // raw NATS at the same message sizes, same units as mb_per_s
	Baseline  string  `json:"baseline,omitempty"`            // what ratio compares against
	Ratio     float64 `json:"ratio,omitempty"`
	Target    float64 `json:"target,omitempty"` // the ratio the project aims for
}

// nbatch precomputed batches are cycled through so key generation stays
// out of the timed loops.
const (
	nbatch   = 64
	poolKeys = 64000
)

const valueBytes = 4 // every table here stores float32

func run(o options) error {
	var eo bus.EmbeddedOptions
	if o.procs {
		eo.Listen = "127.0.0.1:0" // the shard processes connect over TCP
	}
	srv, err := bus.StartEmbedded(eo)
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	var conns []*nats.Conn
	defer func() {
		for _, nc := range conns {
			nc.Close()
		}
	}()
	connect := func(name string) (*nats.Conn, error) {
		var nc *nats.Conn
		var err error
		if o.procs {
			nc, err = bus.Connect(bus.Options{URL: srv.URL(), Name: name})
		} else {
			nc, err = srv.Connect(bus.Options{Name: name})
		}
		if err == nil {
			conns = append(conns, nc)
		}
		return nc, err
	}

	local, remote, placements := tableSpecs(o.widths)
	// One cluster per transport, each with its own servers (and shards),
	// as separate slave processes would have: every endpoint on its own
	// NATS connection (and, for tcp, its own listener). With -procs the
	// servers are child processes and only the worker is here.
	planes := map[string]*plane{}
	for _, tr := range append([]string{"nats"}, o.transports...) {
		if planes[tr] != nil {
			continue
		}
		if o.procs {
			stop, err := spawnShards(tr, srv.URL(), o)
			if err != nil {
				return err
			}
			defer stop()
		}
		p, err := startPlane(tr, connect, hosts, placements, o.window, !o.procs)
		if err != nil {
			return err
		}
		defer p.close()
		planes[tr] = p
	}
	servers, serverConns := planes["nats"].servers, planes["nats"].serverConns
	remoteConn := planes["nats"].clientConn

	rep := newReporter(o.jsonOut)
	rep.header(o, runtime.GOMAXPROCS(0))
	rng := rand.New(rand.NewPCG(1, 2))
	want := func(op string, spec kvstore.TableSpec) bool {
		return o.only.MatchString(fmt.Sprintf("%s %s %d", op, storageOf(spec), spec.Width))
	}

	// Local: the client's own slave hosts the only shard.
	if o.procs {
		local = nil // the shard servers are elsewhere
	}
	var localClient *kvstore.Client
	if len(local) > 0 {
		localClient, err = kvstore.NewClient(kvstore.ClientConfig{Transport: planes["nats"].serverTrs[0], Task: "bench", Hosts: hosts,
			Consistency: kvstore.Consistency{Kind: kvstore.ASP}, Timeout: 30 * time.Second, Window: o.window, Self: hosts[0], Server: servers[0]})
		if err != nil {
			return err
		}
		defer localClient.Close()
	}
	for _, spec := range local {
		spec = spec.WithDefaults()
		tc, err := localClient.Table(kvstore.Placement{Spec: spec, Hosts: hosts[:1]})
		if err != nil {
			return err
		}
		if err := prefill(tc, localClient.Flush); err != nil {
			return err
		}
		// The sparse Adds also go straight into a Store of their own (no
		// client) that sees the same keys in the same order as the table.
		var st kvstore.Store
		if spec.Storage == kvstore.Sparse {
			dir, err := kvstore.NewDirectory(spec, 1)
			if err != nil {
				return err
			}
			st = kvstore.NewStore(spec, dir, 0)
		}
		for _, b := range o.batches {
			keys := keyBatches(rng, spec, b, o.sparseKeys)
			vals := make([]float64, b*spec.Width)
			fill(vals)
			// Hold every key before measuring: Gets of absent keys would flatter.
			if st != nil {
				for _, k := range keys {
					st.Add(k, vals[:len(k)])
					if err := tc.Add(k, vals[:len(k)]); err != nil {
						return err
					}
				}
			}
			if want("local get", spec) {
				r := rates(o, kvLoop("local get", spec, keys, func(k []uint64) error { return tc.Get(k, vals) }, nil))
				rep.add(kvRow("local get", spec, b, r[0]))
			}
			if want("local add", spec) {
				r := kvRow("local add", spec, b, rates(o, kvLoop("local add", spec, keys, func(k []uint64) error { return tc.Add(k, vals) }, nil))[0])
				if spec.Storage == kvstore.Sparse {
					r.Baseline, r.Ratio, r.Target = "20M keys/s target", r.KeysPerS/sparseAddTarget, 1
				}
				rep.add(r)
			}
			if st != nil && want("store add", spec) {
				r := kvRow("store add", spec, b, rates(o, kvLoop("store add", spec, keys, func(k []uint64) error { st.Add(k, vals); return nil }, nil))[0])
				r.Baseline, r.Ratio, r.Target = "20M keys/s target", r.KeysPerS/sparseAddTarget, 1
				rep.add(r)
			}
		}
	}

	// Remote: keys spread over both servers; the client hosts none.
	raw, err := newRawNATS(remoteConn, serverConns, len(hosts), o.window)
	if err != nil {
		return err
	}
	defer raw.close()
	maxPayload := int(remoteConn.MaxPayload())
	for _, spec := range remote {
		spec = spec.WithDefaults()
		if !slices.ContainsFunc([]string{"remote get", "remote get32", "remote add", "remote add32", "remote getchunk", "remote addchunk"},
			func(op string) bool { return want(op, spec) }) {
			continue // no row of this table runs: no keys drawn for it
		}
		p := kvstore.Placement{Spec: spec, Hosts: hosts}
		var tcs []*kvstore.TableClient // one per transport, in o.transports order
		var flushes, clocks []func() error
		for _, tr := range o.transports {
			cl := planes[tr].client
			tc, err := cl.Table(p)
			if err != nil {
				return err
			}
			if err := prefill(tc, cl.Flush); err != nil {
				return err
			}
			tcs, flushes, clocks = append(tcs, tc), append(flushes, cl.Flush), append(clocks, cl.Clock)
		}
		// Each Add call is one iteration (then Clock): a client holds and
		// merges the second and later Adds of an iteration, which would
		// measure merging, not sending.
		iterAdd := func(i int, add func([]uint64) error) func([]uint64) error {
			return func(k []uint64) error {
				if err := add(k); err != nil {
					return err
				}
				return clocks[i]()
			}
		}
		tc := tcs[0]
		dir, err := kvstore.NewDirectory(spec, len(hosts))
		if err != nil {
			return err
		}
		msgs := messager{task: "bench", spec: spec, dir: dir, maxKeys: kvstore.MaxKeysPerMessage(maxPayload, spec.Width, spec.DType)}
		for _, b := range o.batches {
			keys := keyBatches(rng, spec, b, o.sparseKeys)
			vals := make([]float64, b*spec.Width)
			fill(vals)
			if want("remote get", spec) {
				calls := msgs.calls(keys, msgs.keyedGet)
				remoteRows(rep, o, "remote get", spec, b, calls, raw.loop(calls, false), 0, func(i int) loop {
					return kvLoop("remote get", spec, keys, func(k []uint64) error { return tcs[i].Get(k, vals) }, nil)
				})
			}
			if want("remote get32", spec) {
				// The same reads into float32 values (GetFloat32), as
				// ps-lite's KVWorker<float> pulls them.
				vals32 := make([]float32, len(vals))
				calls := msgs.calls(keys, msgs.keyedGet)
				remoteRows(rep, o, "remote get32", spec, b, calls, raw.loop(calls, false), 0, func(i int) loop {
					return kvLoop("remote get32", spec, keys, func(k []uint64) error { return tcs[i].GetFloat32(k, vals32[:len(k)*spec.Width]) }, nil)
				})
			}
			if want("remote add", spec) {
				calls := msgs.calls(keys, msgs.keyedAdd)
				remoteRows(rep, o, "remote add", spec, b, calls, raw.loop(calls, true), 0, func(i int) loop {
					return kvLoop("remote add", spec, keys, iterAdd(i, func(k []uint64) error { return tcs[i].Add(k, vals) }), flushes[i])
				})
			}
			if want("remote add32", spec) {
				// The same Adds with float32 deltas (AddFloat32), as
				// ps-lite's KVWorker<float> pushes them.
				vals32 := make([]float32, len(vals))
				for i, v := range vals {
					vals32[i] = float32(v)
				}
				calls := msgs.calls(keys, msgs.keyedAdd)
				remoteRows(rep, o, "remote add32", spec, b, calls, raw.loop(calls, true), 0, func(i int) loop {
					return kvLoop("remote add32", spec, keys, iterAdd(i, func(k []uint64) error { return tcs[i].AddFloat32(k, vals32[:len(k)*spec.Width]) }), flushes[i])
				})
			}
		}
		if spec.Storage == kvstore.Sparse {
			continue // hash-partitioned chunks split into one message per key: not a chunk workload
		}
		nchunks := (spec.Size + spec.ChunkSize - 1) / spec.ChunkSize
		for _, c := range o.chunks {
			ids := chunkBatches(rng, nchunks, c)
			n, err := tc.ChunkValues(ids[0])
			if err != nil {
				return err
			}
			vals := make([]float64, n)
			fill(vals)
			b := n / spec.Width
			if want("remote getchunk", spec) {
				calls := msgs.calls(ids, msgs.chunkGet)
				remoteRows(rep, o, "remote getchunk", spec, b, calls, raw.loop(calls, false), remoteRawTarget, func(i int) loop {
					return kvLoop("remote getchunk", spec, ids, func(ch []uint64) error { return tcs[i].GetChunk(ch, vals) }, nil)
				})
			}
			if want("remote addchunk", spec) {
				calls := msgs.calls(ids, msgs.chunkAdd)
				remoteRows(rep, o, "remote addchunk", spec, b, calls, raw.loop(calls, true), remoteRawTarget, func(i int) loop {
					return kvLoop("remote addchunk", spec, ids, iterAdd(i, func(ch []uint64) error { return tcs[i].AddChunk(ch, vals) }), flushes[i])
				})
			}
		}
	}
	rep.footer()
	return nil
}

// prefill writes every key of a dense table once before it is measured:
// a fresh dense shard is zeroed memory the OS has not mapped yet, and reads
// of never-written pages all hit one shared zero page, which would flatter
// Gets that run before any Add.
func prefill(tc *kvstore.TableClient, flush func() error) error {
	spec := tc.Spec()
	if spec.Storage != kvstore.Dense {
		return nil
	}
	const step = 1 << 14
	buf := make([]float64, step*spec.Width)
	fill(buf)
	for first := uint64(0); first < spec.Size; first += step {
		n := int(min(step, spec.Size-first))
		if err := tc.AddRange(first, n, buf[:n*spec.Width]); err != nil {
			return fmt.Errorf("prefill %s: %w", spec.Name, err)
		}
	}
	return flush()
}

func storageOf(spec kvstore.TableSpec) string {
	if spec.Storage == kvstore.Sparse {
		return "sparse"
	}
	return "dense"
}

func (r row) withTarget(t float64) row { r.Target = t; return r }

// keyBatches draws batches of n distinct keys, each sorted (as a worker's
// deduplicated batch would be after grouping): at least nbatch of them and
// poolKeys keys in all, so every batch size touches about as much of the
// table (and of the caches). Sparse tables draw from [0, sparseKeys)
// spread over the key space.
func keyBatches(rng *rand.Rand, spec kvstore.TableSpec, n, sparseKeys int) [][]uint64 {
	universe := spec.Size
	if spec.Storage == kvstore.Sparse {
		universe = uint64(sparseKeys)
	}
	n = min(n, int(universe))
	out := make([][]uint64, max(nbatch, poolKeys/n))
	if spec.Storage != kvstore.Sparse {
		// Dense keys: a bitmap of the drawn ones, read back in order (a
		// map and a sort took a minute for 64 batches of 1M keys).
		seen := make([]uint64, (universe+63)/64)
		for i := range out {
			clear(seen)
			for drawn := 0; drawn < n; {
				k := rng.Uint64N(universe)
				if bit := uint64(1) << (k % 64); seen[k/64]&bit == 0 {
					seen[k/64] |= bit
					drawn++
				}
			}
			ks := make([]uint64, 0, n)
			for w, set := range seen {
				for ; set != 0; set &= set - 1 {
					ks = append(ks, uint64(w)*64+uint64(bits.TrailingZeros64(set)))
				}
			}
			out[i] = ks
		}
		return out
	}
	seen := map[uint64]bool{}
	for i := range out {
		clear(seen)
		ks := make([]uint64, 0, n)
		for len(ks) < n {
			k := rng.Uint64N(universe)
			if spec.Storage == kvstore.Sparse {
				k *= 0x9e3779b9 // spread ids over the 2^40 key space
				k %= spec.Size
			}
			if !seen[k] {
				seen[k] = true
				ks = append(ks, k)
			}
		}
		slices.Sort(ks)
		out[i] = ks
	}
	return out
}

// chunkBatches draws nbatch lists of c distinct chunk ids (unsorted, so
// chunks rarely merge into one span).
func chunkBatches(rng *rand.Rand, nchunks uint64, c int) [][]uint64 {
	c = min(c, int(nchunks))
	out := make([][]uint64, nbatch)
	for i := range out {
		perm := rng.Perm(int(nchunks))[:c]
		for _, p := range perm {
			out[i] = append(out[i], uint64(p))
		}
	}
	return out
}

func fill(v []float64) {
	for i := range v {
		v[i] = float64(i%13) * 0.001
	}
}

// loop runs a benchmark for about d and returns calls per second.
type loop func(d time.Duration) float64

// kvLoop calls op on the batches in turn. flush (may be nil) runs before
// the clock stops, so asynchronous Adds count only once acknowledged.
func kvLoop(op string, spec kvstore.TableSpec, batches [][]uint64, call func([]uint64) error, flush func() error) loop {
	n := 0
	return func(d time.Duration) float64 {
		start := time.Now()
		calls := 0
		for time.Since(start) < d {
			for i := 0; i < 16; i++ {
				if err := call(batches[n%len(batches)]); err != nil {
					fatal(fmt.Errorf("%s %s: %w", op, spec.Name, err))
				}
				n++
				calls++
			}
		}
		if flush != nil {
			if err := flush(); err != nil {
				fatal(fmt.Errorf("%s %s: flush: %w", op, spec.Name, err))
			}
		}
		return float64(calls) / time.Since(start).Seconds()
	}
}

// rates warms each loop up, then runs the loops in turn o.rounds times for
// o.duration/o.rounds each and returns each loop's best rate. Interleaving
// keeps a baseline and its subject under the same machine load; the best
// of several short runs is the least disturbed one.
func rates(o options, loops ...loop) []float64 {
	for _, l := range loops {
		l(warmup(o.duration))
	}
	best := make([]float64, len(loops))
	for range o.rounds {
		for i, l := range loops {
			best[i] = max(best[i], l(o.duration/time.Duration(o.rounds)))
		}
	}
	return best
}

// kvRow is a row for cps calls per second of batch keys each.
func kvRow(op string, spec kvstore.TableSpec, batch int, cps float64) row {
	keys := cps * float64(batch)
	return row{Op: op, Storage: storageOf(spec), Width: spec.Width, Batch: batch, CallsPerS: cps, KeysPerS: keys,
		MBPerS: keys * float64(spec.Width*valueBytes) / 1e6}
}

func warmup(d time.Duration) time.Duration {
	return min(max(d/10, 50*time.Millisecond), 300*time.Millisecond)
}

// reporter prints rows as an aligned table (stdout, or stderr with -json)
// and, with -json, one JSON line per row on stdout.
type reporter struct {
	json bool
	out  *os.File
	enc  *json.Encoder
}

func newReporter(jsonOut bool) *reporter {
	r := &reporter{json: jsonOut, out: os.Stdout}
	if jsonOut {
		r.out, r.enc = os.Stderr, json.NewEncoder(os.Stdout)
	}
	return r
}

const rowFormat = "%-16s %-4s %-6s %5s %6s %12s %10s %12s %7s  %s\n"

func (r *reporter) header(o options, procs int) {
	where := "in this process"
	if o.procs {
		where = "in processes of their own"
	}
	fmt.Fprintf(r.out, "# flexps kv bench: %s per row, GOMAXPROCS=%d, %d shard servers %s on embedded NATS (remote rows via %s), float32 values, sparse keys from %d ids\n",
		o.duration, procs, len(hosts), where, strings.Join(o.transports, " and "), o.sparseKeys)
	fmt.Fprintf(r.out, rowFormat, "op", "via", "table", "width", "batch", "keys/s", "MB/s", "raw NATS MB/s", "ratio", "ratio is")
}

func (r *reporter) add(x row) {
	raw, ratio := "", ""
	if x.RawMBPerS > 0 {
		raw = fmt.Sprintf("%.1f", x.RawMBPerS)
	}
	if x.Ratio > 0 {
		ratio = fmt.Sprintf("%.2f", x.Ratio)
	}
	note := x.Baseline
	if x.Target > 0 {
		mark := "ok"
		if x.Ratio < x.Target {
			mark = "BELOW"
		}
		note = fmt.Sprintf("%s (target >= %.2g: %s)", note, x.Target, mark)
	}
	fmt.Fprintf(r.out, rowFormat, x.Op, x.Transport, x.Storage, fmt.Sprint(x.Width), fmt.Sprint(x.Batch), human(x.KeysPerS),
		fmt.Sprintf("%.1f", x.MBPerS), raw, ratio, note)
	if r.enc != nil {
		r.enc.Encode(x)
	}
}

func (r *reporter) footer() {
	fmt.Fprintln(r.out, "# MB/s counts value bytes (keys x width x 4); raw NATS MB/s is the same payload carried by plain request-reply messages of the kvstore's sizes")
	fmt.Fprintln(r.out, "# via: the remote rows' transport; a tcp row's ratio is to the same calls over nats, measured in the same interleaved rounds")
}

func human(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}
