package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"

	"github.com/flexps/flexps/checkpoint"
	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/datastore/synth"
	"github.com/flexps/flexps/engine"
	"github.com/flexps/flexps/internal/logging"
	"github.com/flexps/flexps/status"
	"github.com/flexps/flexps/tasks"
	"github.com/spf13/cobra"
)

func runCmd(g *globals) *cobra.Command {
	var (
		config, cpuprofile, memprofile, metricsOut, resume string
		slaves, slots                                      int
		mon                                                clusterFlags
	)
	c := &cobra.Command{
		Use:   "run JOB.toml | run --resume DIR|FILE",
		Short: "Train in local mode (embedded NATS, master and slaves in-process)",
		Args:  args(func(n int) bool { return n <= 1 }, "exactly one job file, or --resume DIR"),
		RunE: func(cmd *cobra.Command, a []string) error {
			if (len(a) == 1) == (resume != "") {
				return usageError{"want exactly one job file, or --resume DIR without one: " + cmd.UseLine()}
			}
			if slaves < 0 || slots < 0 {
				return usageError{fmt.Sprintf("--slaves and --slots must be >= 1 (0: the job's [local] values), got --slaves %d --slots %d", slaves, slots)}
			}
			if err := atMost("slaves", slaves, engine.MaxLocalSlaves); err != nil {
				return err
			}
			if err := atMost("slots", slots, engine.MaxSlots); err != nil {
				return err
			}
			if err := checkResumeDir(cmd.Context(), resume); err != nil {
				return err
			}
			// Another process writing checkpoints into the dir is named
			// now, not once the cluster started (its master takes the
			// dir's lock for the task).
			if err := checkpoint.CheckFree(resumeDir(resume)); err != nil {
				return err
			}
			ctx := cmd.Context()
			stop, err := startCPUProfile(cpuprofile)
			if err != nil {
				return err
			}
			defer stop()
			if memprofile != "" {
				// A path that cannot be written fails now, not after the
				// first epoch.
				if err := writeHeapProfile(memprofile); err != nil {
					return err
				}
			}
			cf := clusterFlags{config: config, httpListen: mon.httpListen, metricsListen: mon.metricsListen}
			cfg, err := cf.load()
			if err != nil {
				return err
			}
			log, err := g.logger(cfg)
			if err != nil {
				return err
			}
			jf, task := &tasks.JobFile{}, (*tasks.MultiStageTask)(nil)
			if resume == "" {
				if jf, task, err = tasks.LoadJob(a[0]); err != nil {
					return err
				}
				if err := checkpoint.CheckFree(task.Checkpoint.Dir); err != nil {
					return err
				}
				if err := ensureInputs(cmd.Context(), jf, log); err != nil {
					return err
				}
				if err := checkOutput(cmd.Context(), a[0], task); err != nil {
					return err
				}
				if err := checkFormats(cmd.Context(), a[0], task); err != nil {
					return err
				}
			}
			mw, err := openMetricsOut(metricsOut)
			if err != nil {
				return err
			}
			jobSlaves, jobSlots := jf.Local.Size()
			opt := engine.LocalOptions{Slaves: jobSlaves, Slots: jobSlots, Config: *cfg, Log: log}
			if opt.Slots == 0 {
				// The cluster config's slots per slave, when the job
				// names none (it was ignored: run used 2).
				opt.Slots = cfg.Slave.Slots
			}
			if slaves > 0 {
				opt.Slaves = slaves
			}
			if slots > 0 {
				opt.Slots = slots
			}
			// With checkpoints the first Ctrl-C must not take the cluster
			// down: the task stops at its next checkpoint first.
			ckDir := resumeDir(resume)
			if task != nil {
				ckDir = task.Checkpoint.Dir
			}
			clusterCtx := ctx
			if ckDir != "" {
				clusterCtx = context.WithoutCancel(ctx)
			}
			local, err := engine.StartLocal(clusterCtx, opt)
			if err != nil {
				return errors.Join(err, mw.Close())
			}
			defer local.Close()
			p := newPrinter(os.Stdout, os.Stderr, logging.IsTerminal(os.Stderr))
			p.ShareTerminal = logging.IsTerminal(os.Stdout)
			p.Logs = &g.logs
			p.Metrics = mw
			id := engine.NewTaskID()
			onEvent := p.Event
			var heapErr error
			if memprofile != "" {
				// At the end of every epoch, while the slaves hold their
				// tables and parsed-data caches: the last one written is the
				// live heap of the last epoch.
				onEvent = func(ev status.Event) {
					p.Event(ev)
					if ev.Kind == "epoch" {
						heapErr = writeHeapProfile(memprofile)
					}
				}
			}
			var st status.Task
			if resume != "" {
				st, err = local.ResumeAndWait(ctx, resume, id, func(w string) { fmt.Fprintln(os.Stderr, "flexps run: warning: "+w) }, onEvent)
			} else {
				task.ID = id
				st, err = local.SubmitAndWait(ctx, task, onEvent)
				if st.ID == "" {
					// Refused: an hdfs:// input its generate table does
					// not write (local files only) is missing.
					err = hinted(err, generateHint(jf, err))
				}
			}
			err = errors.Join(err, heapErr)
			if ctx.Err() != nil && ckDir != "" {
				rc := resumeCommand(ckDir, opt.Slaves, opt.Slots, config)
				err = finalCheckpoint(local.Client, id, p, rc)
				return errors.Join(err, mw.Close())
			}
			if st.ID != "" {
				p.Summary(st)
			}
			return errors.Join(err, mw.Close())
		},
	}
	fs := c.Flags()
	fs.StringVar(&config, "config", "", "cluster TOML for engine settings (optional)")
	fs.IntVar(&slaves, "slaves", 0, "slaves to start (default: the job's [local] slaves, else 2)")
	fs.IntVar(&slots, "slots", 0, "worker slots per slave (default: the job's [local] slots, else the --config file's [slave] slots, else 2)")
	fs.StringVar(&cpuprofile, "cpuprofile", "", "write a CPU profile of the run to this file")
	fs.StringVar(&memprofile, "memprofile", "", "write a heap profile (live objects at the end of each epoch, the last one kept) to this file")
	fs.StringVar(&metricsOut, "metrics-out", "", "append one JSON object per epoch and per finished stage to this file (JSON lines; see flexps plot)")
	fs.StringVar(&resume, "resume", "", "resume the task of the newest valid checkpoint in this directory (the job's [checkpoint] dir), or of one checkpoint file in it (DIR/ckpt-NNNNNN.flexps), instead of running a job file")
	mon.registerMonitor(fs, true)
	return c
}

// checkListen fails early, with the address and the setting to change, when
// the embedded NATS server's address is taken: the server itself would
// only log the bind error and the master would wait for a bus that never
// comes up.
func checkListen(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("embedded NATS cannot listen on %s: address already in use (another flexps master or NATS server?); "+
				"choose another address with --listen or [nats] listen in the cluster TOML, or use a running NATS server with --nats URL", addr)
		}
		return fmt.Errorf("embedded NATS cannot listen on %s: %w (set --listen or [nats] listen)", addr, err)
	}
	return l.Close()
}

// slaveHint is the command that starts a slave of a master started with
// the cluster TOML config ("" for none) on the bus at url. The TOML carries
// what --nats alone does not: the cluster name and the bus's credentials
// (without them the hinted slave was refused, or joined no master).
func slaveHint(config, url string) string {
	if config == "" {
		return "flexps slave --nats " + url
	}
	return "flexps slave --config " + config + " --nats " + url
}

func masterCmd(g *globals) *cobra.Command {
	var (
		cf     clusterFlags
		listen string
	)
	c := &cobra.Command{
		Use:   "master",
		Short: "Start a cluster master (embeds a NATS server unless --nats or [nats] url is set)",
		Args:  args(func(n int) bool { return n == 0 }, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			cfg, err := cf.load()
			if err != nil {
				return err
			}
			if listen != "" {
				cfg.NATS.Listen = listen
			}
			log, err := g.logger(cfg)
			if err != nil {
				return err
			}
			if cfg.NATS.URL == "" {
				addr := cfg.NATS.Listen
				if addr == "" {
					addr = engine.DefaultListen
				}
				if err := checkListen(addr); err != nil {
					return err
				}
			}
			n, err := engine.StartMaster(ctx, *cfg, log)
			if err != nil {
				return err
			}
			defer n.Close()
			log.Info().Str("nats", n.URL).Msg("master ready; slaves connect with: " + slaveHint(cf.config, n.URL))
			<-ctx.Done()
			log.Info().Msg("master shutting down")
			return nil
		},
	}
	cf.register(c.Flags(), "external NATS URL instead of the embedded server")
	cf.registerMonitor(c.Flags(), true)
	c.Flags().StringVar(&listen, "listen", "", "embedded NATS listen address (default: [nats] listen, else "+engine.DefaultListen+")")
	return c
}

func slaveCmd(g *globals) *cobra.Command {
	var (
		cf                  clusterFlags
		masterURL, id, host string
		cpuprofile          string
		slots, procs        int
	)
	c := &cobra.Command{
		Use:   "slave",
		Short: "Start a slave that joins the master over NATS",
		Args:  args(func(n int) bool { return n == 0 }, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			// A negative one was ignored (the slave joined with the
			// config's); a large one was reported as the config's key.
			for _, f := range []struct {
				name string
				v    int
			}{{"slots", slots}, {"procs", procs}} {
				if f.v < 0 {
					return usageError{fmt.Sprintf("--%s %d: want 1 to %d (0 or unset: [slave] %s)", f.name, f.v, engine.MaxSlots, f.name)}
				}
				if err := atMost(f.name, f.v, engine.MaxSlots); err != nil {
					return err
				}
			}
			switch {
			case cf.nats == "":
				cf.nats = masterURL
			case masterURL != "" && masterURL != cf.nats:
				// Two names of one setting: the slave joined --nats's bus
				// without a word about --master's.
				return usageError{fmt.Sprintf("--master %s and --nats %s name two buses: --master is another name of --nats; give one", masterURL, cf.nats)}
			}
			cfg, err := cf.load()
			if err != nil {
				return err
			}
			if cfg.NATS.URL == "" {
				cfg.NATS.URL = "nats://" + engine.DefaultListen
				if cfg.NATS.Listen != "" {
					cfg.NATS.URL = "nats://" + cfg.NATS.Listen
				}
			}
			if slots > 0 {
				cfg.Slave.Slots = slots
			}
			if id != "" {
				cfg.Slave.ID = id
			}
			if host != "" {
				cfg.Slave.Host = host
			}
			log, err := g.logger(cfg)
			if err != nil {
				return err
			}
			if procs > 0 {
				cfg.Slave.Procs = procs
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			gmp, from := setSlaveProcs(os.Getenv, cfg.Slave.Procs, cfg.Slave.Slots)
			log.Info().Int("gomaxprocs", gmp).Str("from", from).Msg("slave runs Go code on this many cores")
			stop, err := startCPUProfile(cpuprofile)
			if err != nil {
				return err
			}
			defer stop()
			n, err := engine.StartSlave(ctx, *cfg, log)
			if err != nil {
				return err
			}
			defer n.Close()
			<-ctx.Done()
			log.Info().Msg("slave shutting down")
			return nil
		},
	}
	fs := c.Flags()
	cf.register(fs, "NATS URL of the cluster's bus (default: [nats] url, else nats://"+engine.DefaultListen+")")
	cf.registerMonitor(fs, false)
	fs.StringVar(&masterURL, "master", "", "same as --nats: the bus the master listens on")
	fs.IntVar(&slots, "slots", 0, "worker slots (default: [slave] slots, else 2)")
	fs.IntVar(&procs, "procs", 0, "cores (GOMAXPROCS) the slave runs Go code on (default: [slave] procs, else its slots, at most the CPUs; the GOMAXPROCS environment variable wins)")
	fs.StringVar(&id, "id", "", "slave id (default: [slave] id, else host-pid)")
	fs.StringVar(&host, "host", "", "host name for data locality (default: [slave] host, else the OS host name)")
	fs.StringVar(&cpuprofile, "cpuprofile", "", "write a CPU profile of the slave's whole life to this file (written when it stops)")
	return c
}

// dial connects a client from --config / --nats.
func (cf *clusterFlags) dial() (*engine.Client, error) {
	cfg, err := cf.load()
	if err != nil {
		return nil, err
	}
	if cfg.NATS.URL == "" && cfg.NATS.Listen != "" {
		cfg.NATS.URL = "nats://" + cfg.NATS.Listen
	}
	return engine.Dial(*cfg)
}

const clientNATSHelp = "NATS URL of the cluster (default: [nats] url, else nats://" + engine.DefaultListen + ")"

func submitCmd(g *globals) *cobra.Command {
	var (
		cf                 clusterFlags
		detach             bool
		metricsOut, resume string
	)
	c := &cobra.Command{
		Use:   "submit JOB.toml... | submit --resume DIR|FILE",
		Short: "Submit tasks to a running master and follow them",
		Args:  args(func(n int) bool { return true }, "one or more job files"),
		RunE: func(cmd *cobra.Command, a []string) error {
			if (len(a) > 0) == (resume != "") {
				return usageError{"want one or more job files, or --resume DIR without any: " + cmd.UseLine()}
			}
			if detach && metricsOut != "" {
				// It was ignored: no file was written.
				return usageError{"--metrics-out records the epochs of the tasks submit follows, and --detach follows none: drop one of them"}
			}
			ctx := cmd.Context()
			c, err := cf.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			if resume != "" && detach {
				id, err := c.Resume(ctx, resume, "", func(w string) { fmt.Fprintln(os.Stderr, "flexps submit: warning: "+w) })
				if err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), id)
				return nil
			}
			if resume != "" {
				return submitResume(ctx, c, g, resume, metricsOut)
			}
			var jobs []*tasks.MultiStageTask
			var files []*tasks.JobFile
			for _, path := range a {
				jf, t, err := tasks.LoadJob(path)
				if err != nil {
					return err
				}
				if err := checkOutput(cmd.Context(), path, t); err != nil {
					return err
				}
				if err := checkFormats(cmd.Context(), path, t); err != nil {
					return err
				}
				jobs, files = append(jobs, t), append(files, jf)
			}
			if detach {
				// As when following: a job the master refuses is named,
				// and the jobs after it are submitted all the same (the
				// first refusal ended submit, naming no file, and the
				// later jobs were never sent).
				failed := 0
				for i, t := range jobs {
					id, err := c.Submit(ctx, t)
					if err != nil {
						if ctx.Err() != nil {
							return err
						}
						failed++
						fmt.Fprintf(cmd.ErrOrStderr(), "flexps submit: %s: %v%s\n", a[i], err, generateHint(files[i], err))
						continue
					}
					fmt.Fprintln(cmd.OutOrStdout(), id)
				}
				if failed > 0 {
					return fmt.Errorf("%d of %d tasks were not submitted", failed, len(jobs))
				}
				return nil
			}
			mw, err := openMetricsOut(metricsOut)
			if err != nil {
				return err
			}
			p := newPrinter(os.Stdout, os.Stderr, logging.IsTerminal(os.Stderr))
			p.ShareTerminal = logging.IsTerminal(os.Stdout)
			p.Logs = &g.logs
			p.Metrics = mw
			p.EndSummaries = len(jobs) > 1
			p.SharedTable = len(jobs) > 1
			// In order: the master's policy sees the tasks in the
			// order of the command line (sequential runs them so).
			results, errs := c.SubmitAllAndWait(ctx, jobs, p.Event)
			if ctx.Err() != nil {
				var ids []string
				for i, t := range jobs {
					if interrupted(ctx, errs[i]) {
						ids = append(ids, t.ID)
					} else if results[i].ID != "" {
						p.Summary(results[i])
					}
				}
				return errors.Join(cancelFollowed(c, p, ids), mw.Close())
			}
			failed := 0
			for i := range jobs {
				if results[i].ID != "" {
					p.Summary(results[i])
				}
				if errs[i] != nil {
					failed++
					if results[i].ID == "" {
						fmt.Fprintf(os.Stderr, "flexps submit: %s: %v%s\n", a[i], errs[i], generateHint(files[i], errs[i]))
					}
				}
			}
			if err := mw.Close(); err != nil {
				return err
			}
			if failed > 0 {
				return fmt.Errorf("%d of %d tasks did not succeed", failed, len(jobs))
			}
			return nil
		},
	}
	cf.register(c.Flags(), clientNATSHelp)
	c.Flags().BoolVar(&detach, "detach", false, "submit and print the task ids without following")
	c.Flags().StringVar(&resume, "resume", "", "resume the task of the newest valid checkpoint in this directory (as the master sees it: local to it, or hdfs://), or of one checkpoint file in it (DIR/ckpt-NNNNNN.flexps)")
	c.Flags().StringVar(&metricsOut, "metrics-out", "", "append one JSON object per epoch and per finished stage to this file (JSON lines; see flexps plot)")
	return c
}

func statusCmd(g *globals) *cobra.Command {
	var (
		cf     clusterFlags
		limit  int
		before string
	)
	c := &cobra.Command{
		Use:   "status [TASK]",
		Short: "List tasks and slaves of a running master",
		Args:  args(func(n int) bool { return n <= 1 }, "at most one task id"),
		RunE: func(cmd *cobra.Command, a []string) error {
			if limit < 0 {
				return usageError{fmt.Sprintf("--limit must be >= 0, got %d", limit)}
			}
			c, err := cf.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			var rep status.Cluster
			if len(a) == 1 {
				rep, err = c.Status(cmd.Context(), a[0])
			} else {
				rep, err = c.StatusPage(cmd.Context(), limit, before)
			}
			if err != nil {
				return err
			}
			printStatus(cmd.OutOrStdout(), rep)
			printOmitted(cmd.OutOrStdout(), rep, limit)
			return nil
		},
	}
	c.Flags().IntVar(&limit, "limit", 0, "show at most this many tasks, the newest (0: as many as fit one answer)")
	c.Flags().StringVar(&before, "before", "", "show tasks submitted before this task id (the next page)")
	cf.register(c.Flags(), clientNATSHelp)
	return c
}

func cancelCmd(g *globals) *cobra.Command {
	var cf clusterFlags
	c := &cobra.Command{
		Use:   "cancel TASK",
		Short: "Stop a task",
		Args:  args(func(n int) bool { return n == 1 }, "one task id"),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := cf.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			// A task that ended is not stopped by a cancel: say so (the
			// master answers such a cancel as any other, and it printed
			// nothing and exited 0, as if it had stopped the task).
			rep, err := c.Status(cmd.Context(), a[0])
			if err != nil {
				return err
			}
			if len(rep.Tasks) == 1 && rep.Tasks[0].Ended() {
				t := rep.Tasks[0]
				return fmt.Errorf("task %s (%s) already ended: %s; nothing to cancel", t.ID, t.Name, t.State)
			}
			if err := c.Cancel(cmd.Context(), a[0]); err != nil {
				return err
			}
			// Said, not silent: a cancel that worked printed nothing.
			name := ""
			if len(rep.Tasks) == 1 {
				name = " (" + rep.Tasks[0].Name + ")"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "task %s%s cancelled\n", a[0], name)
			return nil
		},
	}
	cf.register(c.Flags(), clientNATSHelp)
	return c
}

func genCmd(g *globals) *cobra.Command {
	var (
		spec synth.Spec
		out  string
	)
	c := &cobra.Command{
		Use:       "gen libsvm|ratings --out FILE",
		Short:     "Write the project's seeded synthetic data",
		ValidArgs: []string{"libsvm", "ratings"},
		Args:      args(func(n int) bool { return n == 1 }, "a kind, libsvm or ratings"),
		RunE: func(cmd *cobra.Command, a []string) error {
			if a[0] != "libsvm" && a[0] != "ratings" {
				return usageError{fmt.Sprintf("unknown kind %q: want libsvm or ratings", a[0])}
			}
			if out == "" {
				return usageError{"--out is required"}
			}
			spec.Kind = a[0]
			// The other kind's flags count when given: Check refuses them.
			other := map[string]*int{"users": &spec.Users, "items": &spec.Items, "rank": &spec.Rank}
			if spec.Kind == "ratings" {
				other = map[string]*int{"dim": &spec.Dim, "nnz": &spec.NNZ}
				if !cmd.Flags().Changed("zipf") {
					spec.Zipf = 0
				}
			}
			for name, v := range other {
				if !cmd.Flags().Changed(name) {
					*v = 0
				}
			}
			if key, err := spec.Check(); err != nil {
				return usageError{fmt.Sprintf("--%s: %v", strings.ReplaceAll(key, "_", "-"), strings.TrimPrefix(err.Error(), key+": "))}
			}
			if err := synth.GenerateContext(cmd.Context(), out, spec); err != nil {
				if errors.Is(err, synth.ErrSameFile) {
					// Found before anything is written: the arguments are wrong.
					return usageError{fmt.Sprintf("--test-out: %v", err)}
				}
				return err
			}
			if spec.TestPath != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s and %s (held out)\n", out, spec.TestPath)
			} else {
				fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s\n", out)
			}
			return nil
		},
	}
	fs := c.Flags()
	fs.StringVar(&out, "out", "", "output file (required)")
	fs.IntVar(&spec.Rows, "rows", 100000, "rows (ratings: ratings)")
	fs.IntVar(&spec.Dim, "dim", 100000, "libsvm: feature dimensions")
	fs.IntVar(&spec.NNZ, "nnz", 20, "libsvm: non-zeros per row")
	fs.Float64Var(&spec.Zipf, "zipf", 1.1, "libsvm: Zipf exponent of feature ids (> 1; 0 = uniform)")
	fs.Float64Var(&spec.Noise, "noise", 0.02, "libsvm: label flip probability; ratings: noise std-dev")
	fs.Int64Var(&spec.Seed, "seed", 1, "random seed")
	fs.StringVar(&spec.TestPath, "test-out", "", "also write a held-out file here")
	fs.IntVar(&spec.TestRows, "test-rows", 0, "rows of the held-out file (default rows/5)")
	fs.IntVar(&spec.Users, "users", 1000, "ratings: users")
	fs.IntVar(&spec.Items, "items", 1000, "ratings: items")
	fs.IntVar(&spec.Rank, "rank", 8, "ratings: rank of the hidden factors")
	return c
}

func evalCmd(g *globals) *cobra.Command {
	var model, data string
	var o tasks.EvalOptions
	var indexBase, labelColumn int
	var header bool
	c := &cobra.Command{
		Use:   "eval --model FILE --data FILE",
		Short: "Score a saved model on a data file",
		Long: `Score a saved model on a data file.

The data is read as the task read its training input (format, LIBSVM
index_base, CSV label column, delimiter and header, recorded in the model);
the flags override that. The recorded header applies only to the job's
inputs read with header = true: another file is read from its first line
unless --header is given.`,
		Args: args(func(n int) bool { return n == 0 }, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if model == "" || data == "" {
				return usageError{"--model and --data are required"}
			}
			fs := cmd.Flags()
			if fs.Changed("index-base") {
				if indexBase != 0 && indexBase != 1 {
					return usageError{fmt.Sprintf("--index-base %d: want 0 or 1", indexBase)}
				}
				o.IndexBase = &indexBase
			}
			if fs.Changed("label-column") {
				if labelColumn < -1 {
					return usageError{fmt.Sprintf("--label-column %d: want -1 (no label) or a column index", labelColumn)}
				}
				o.LabelColumn = &labelColumn
			}
			if o.Kind != "" && !slices.Contains(tasks.EvaluatorKinds(), o.Kind) {
				return usageError{fmt.Sprintf("--kind %q: want one of %s", o.Kind, strings.Join(tasks.EvaluatorKinds(), ", "))}
			}
			if o.Format != "" && !slices.Contains(datastore.FormatNames(), datastore.CanonicalFormat(o.Format)) {
				return usageError{fmt.Sprintf("--format %q: want one of %s", o.Format, strings.Join(datastore.FormatNames(), ", "))}
			}
			if fs.Changed("header") {
				o.Header = &header
			}
			if fs.Changed("delimiter") && len(o.Delimiter) != 1 {
				// The reader keeps one byte: "tab" would split on 't'.
				return usageError{fmt.Sprintf("--delimiter %q: want one character (a tab: --delimiter $'\\t')", o.Delimiter)}
			}
			res, err := tasks.EvaluateWith(cmd.Context(), model, data, o)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), res)
			return nil
		},
	}
	fs := c.Flags()
	fs.StringVar(&model, "model", "", "model file written by a task (required)")
	fs.StringVar(&data, "data", "", "data file, directory or glob (required)")
	fs.StringVar(&o.Format, "format", "", "data format (default: the training input's, else the model kind's)")
	fs.StringVar(&o.Kind, "kind", "", "refuse a model of another kind; score a model that records none as this kind (lr, kmeans, mf, kge)")
	fs.IntVar(&indexBase, "index-base", 0, "libsvm: feature ids start at 1 or 0 (default: the training input's)")
	fs.IntVar(&labelColumn, "label-column", 0, "csv: label column, -1 for none (default: the training input's)")
	fs.StringVar(&o.Delimiter, "delimiter", "", "csv: field separator (default: the training input's)")
	fs.BoolVar(&header, "header", false, "csv, ratings: files start with a header line (default: as the job read this file, else no)")
	return c
}

// writeHeapProfile writes the live heap, after a collection, to path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("memprofile: %w", err)
	}
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return fmt.Errorf("memprofile %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("memprofile %s: %w", path, err)
	}
	return nil
}

// checkResumeDir refuses a local --resume directory that does not exist
// (a typo), or that holds no checkpoint file, before a cluster starts:
// flexps run started one, then said there was nothing to resume. A
// checkpoint file (DIR/ckpt-NNNNNN.flexps) must exist. An hdfs:// one is
// checked when read.
func checkResumeDir(ctx context.Context, dir string) error {
	if dir == "" || strings.Contains(dir, "://") {
		return nil
	}
	_, file := checkpoint.FileDir(dir)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist) && file:
		return fmt.Errorf("--resume %s: no such checkpoint file", dir)
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("--resume %s: no such directory (give the job's [checkpoint] dir)", dir)
	case err != nil:
		return fmt.Errorf("--resume %s: %w", dir, err)
	case file && fi.Mode().IsRegular():
		return nil
	case !fi.IsDir():
		return fmt.Errorf("--resume %s: neither a directory nor a checkpoint file (give the job's [checkpoint] dir, or a ckpt-NNNNNN.flexps file in it)", dir)
	}
	paths, err := checkpoint.List(ctx, datastore.NewSources(), dir)
	if err != nil {
		return fmt.Errorf("--resume %s: %w", dir, err)
	}
	if len(checkpoint.Newest(paths)) == 0 {
		return fmt.Errorf("--resume %s: nothing to resume: the directory holds no checkpoint (ckpt-NNNNNN.flexps files, which a task writes when its job has a [checkpoint] table)", dir)
	}
	return nil
}

// resumeDir is the checkpoint directory of a --resume value: the value, or
// the directory of the checkpoint file it names.
func resumeDir(resume string) string {
	if d, ok := checkpoint.FileDir(resume); ok {
		return d
	}
	return resume
}

// startCPUProfile starts a CPU profile to path ("" profiles nothing) and
// returns what stops it and closes the file.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile %s: %w", path, err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "flexps: cpu profile %s: %v\n", path, err)
		}
	}, nil
}

// atMost refuses a count flag above most, naming the flag.
func atMost(flag string, v, most int) error {
	if v > most {
		return usageError{fmt.Sprintf("--%s %d: at most %d", flag, v, most)}
	}
	return nil
}
