package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"sync"

	"github.com/flexps/flexps/datastore/synth"
	"github.com/flexps/flexps/engine"
	"github.com/flexps/flexps/internal/logging"
	"github.com/flexps/flexps/status"
	"github.com/flexps/flexps/tasks"
)

func cmdRun(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var lf logFlags
	lf.register(fs)
	config := fs.String("config", "", "cluster TOML for engine settings (optional)")
	slaves := fs.Int("slaves", 0, "slaves to start (default: the job's [local] slaves, else 2)")
	slots := fs.Int("slots", 0, "worker slots per slave (default: the job's [local] slots, else 2)")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if fs.NArg() != 1 {
		return usageError{"want exactly one job file: flexps run JOB.toml"}
	}
	cfg, err := clusterConfig(*config, "")
	if err != nil {
		return err
	}
	log, err := lf.logger(cfg)
	if err != nil {
		return usageError{err.Error()}
	}
	jf, task, err := tasks.LoadJob(fs.Arg(0))
	if err != nil {
		return err
	}
	if err := ensureInputs(jf, log); err != nil {
		return err
	}
	opt := engine.LocalOptions{Slaves: jf.Local.Slaves, Slots: jf.Local.Slots, Config: *cfg, Log: log}
	if *slaves > 0 {
		opt.Slaves = *slaves
	}
	if *slots > 0 {
		opt.Slots = *slots
	}
	local, err := engine.StartLocal(ctx, opt)
	if err != nil {
		return err
	}
	defer local.Close()
	p := newPrinter(os.Stdout, os.Stderr, logging.IsTerminal(os.Stderr))
	st, err := local.SubmitAndWait(ctx, task, p.Event)
	if st.ID != "" {
		p.Summary(st)
	}
	return err
}

func cmdMaster(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("master", flag.ContinueOnError)
	var lf logFlags
	lf.register(fs)
	config := fs.String("config", "", "cluster TOML")
	listen := fs.String("listen", "", "embedded NATS listen address (default: [nats] listen, else "+engine.DefaultListen+")")
	natsURL := fs.String("nats", "", "external NATS URL instead of the embedded server")
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg, err := clusterConfig(*config, *natsURL)
	if err != nil {
		return err
	}
	if *listen != "" {
		cfg.NATS.Listen = *listen
	}
	log, err := lf.logger(cfg)
	if err != nil {
		return usageError{err.Error()}
	}
	n, err := engine.StartMaster(ctx, *cfg, log)
	if err != nil {
		return err
	}
	defer n.Close()
	log.Info().Str("nats", n.URL).Msg("master ready; slaves connect with: flexps slave --nats " + n.URL)
	<-ctx.Done()
	log.Info().Msg("master shutting down")
	return nil
}

func cmdSlave(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("slave", flag.ContinueOnError)
	var lf logFlags
	lf.register(fs)
	config := fs.String("config", "", "cluster TOML")
	natsURL := fs.String("nats", "", "NATS URL of the cluster's bus (default: [nats] url, else nats://"+engine.DefaultListen+")")
	masterURL := fs.String("master", "", "same as --nats: the bus the master listens on")
	slots := fs.Int("slots", 0, "worker slots (default: [slave] slots, else 2)")
	id := fs.String("id", "", "slave id (default: [slave] id, else host-pid)")
	host := fs.String("host", "", "host name for data locality (default: [slave] host, else the OS host name)")
	if err := parse(fs, args); err != nil {
		return err
	}
	url := *natsURL
	if url == "" {
		url = *masterURL
	}
	cfg, err := clusterConfig(*config, url)
	if err != nil {
		return err
	}
	if cfg.NATS.URL == "" {
		cfg.NATS.URL = "nats://" + engine.DefaultListen
		if cfg.NATS.Listen != "" {
			cfg.NATS.URL = "nats://" + cfg.NATS.Listen
		}
	}
	if *slots > 0 {
		cfg.Slave.Slots = *slots
	}
	if *id != "" {
		cfg.Slave.ID = *id
	}
	if *host != "" {
		cfg.Slave.Host = *host
	}
	log, err := lf.logger(cfg)
	if err != nil {
		return usageError{err.Error()}
	}
	n, err := engine.StartSlave(ctx, *cfg, log)
	if err != nil {
		return err
	}
	defer n.Close()
	<-ctx.Done()
	log.Info().Msg("slave shutting down")
	return nil
}

// dial connects a client from --config / --nats.
func dial(fs *flag.FlagSet, args []string) (*engine.Client, *flag.FlagSet, error) {
	config := fs.String("config", "", "cluster TOML")
	natsURL := fs.String("nats", "", "NATS URL of the cluster (default: [nats] url, else nats://"+engine.DefaultListen+")")
	if err := parse(fs, args); err != nil {
		return nil, nil, err
	}
	cfg, err := clusterConfig(*config, *natsURL)
	if err != nil {
		return nil, nil, err
	}
	if cfg.NATS.URL == "" && cfg.NATS.Listen != "" {
		cfg.NATS.URL = "nats://" + cfg.NATS.Listen
	}
	c, err := engine.Dial(*cfg)
	return c, fs, err
}

func cmdSubmit(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("submit", flag.ContinueOnError)
	detach := fs.Bool("detach", false, "submit and return without following")
	c, fs, err := dial(fs, args)
	if err != nil {
		return err
	}
	defer c.Close()
	if fs.NArg() == 0 {
		return usageError{"want one or more job files: flexps submit JOB.toml..."}
	}
	var jobs []*tasks.MultiStageTask
	for _, path := range fs.Args() {
		_, t, err := tasks.LoadJob(path)
		if err != nil {
			return err
		}
		jobs = append(jobs, t)
	}
	if *detach {
		for _, t := range jobs {
			id, err := c.Submit(ctx, t)
			if err != nil {
				return err
			}
			fmt.Println(id)
		}
		return nil
	}
	p := newPrinter(os.Stdout, os.Stderr, logging.IsTerminal(os.Stderr) && len(jobs) == 1)
	var wg sync.WaitGroup
	errs := make([]error, len(jobs))
	results := make([]status.Task, len(jobs))
	for i, t := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = c.SubmitAndWait(ctx, t, p.Event)
		}()
	}
	wg.Wait()
	failed := 0
	for i := range jobs {
		if results[i].ID != "" {
			p.Summary(results[i])
		}
		if errs[i] != nil {
			failed++
			if results[i].ID == "" {
				fmt.Fprintf(os.Stderr, "flexps submit: %s: %v\n", fs.Arg(i), errs[i])
			}
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d tasks did not succeed", failed, len(jobs))
	}
	return nil
}

func cmdStatus(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	c, fs, err := dial(fs, args)
	if err != nil {
		return err
	}
	defer c.Close()
	rep, err := c.Status(ctx, fs.Arg(0))
	if err != nil {
		return err
	}
	printStatus(os.Stdout, rep)
	return nil
}

func cmdCancel(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("cancel", flag.ContinueOnError)
	c, fs, err := dial(fs, args)
	if err != nil {
		return err
	}
	defer c.Close()
	if fs.NArg() != 1 {
		return usageError{"want one task id"}
	}
	return c.Cancel(ctx, fs.Arg(0))
}

func cmdGen(ctx context.Context, args []string) error {
	if len(args) == 0 || (args[0] != "libsvm" && args[0] != "ratings") {
		return usageError{"want a kind: flexps gen libsvm|ratings --out FILE [flags]"}
	}
	fs := flag.NewFlagSet("gen "+args[0], flag.ContinueOnError)
	var g synth.Spec
	g.Kind = args[0]
	out := fs.String("out", "", "output file (required)")
	fs.IntVar(&g.Rows, "rows", 100000, "rows (ratings: ratings)")
	fs.IntVar(&g.Dim, "dim", 100000, "libsvm: feature dimensions")
	fs.IntVar(&g.NNZ, "nnz", 20, "libsvm: non-zeros per row")
	fs.Float64Var(&g.Zipf, "zipf", 1.1, "libsvm: Zipf exponent of feature ids (> 1; 0 = uniform)")
	fs.Float64Var(&g.Noise, "noise", 0.02, "libsvm: label flip probability; ratings: noise std-dev")
	fs.Int64Var(&g.Seed, "seed", 1, "random seed")
	fs.StringVar(&g.TestPath, "test-out", "", "also write a held-out file here")
	fs.IntVar(&g.TestRows, "test-rows", 0, "rows of the held-out file (default rows/5)")
	fs.IntVar(&g.Users, "users", 1000, "ratings: users")
	fs.IntVar(&g.Items, "items", 1000, "ratings: items")
	fs.IntVar(&g.Rank, "rank", 8, "ratings: rank of the hidden factors")
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	if *out == "" {
		return usageError{"--out is required"}
	}
	if err := synth.Generate(*out, g); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "wrote %s\n", *out)
	return nil
}

func cmdEval(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("eval", flag.ContinueOnError)
	model := fs.String("model", "", "model file written by a task (required)")
	data := fs.String("data", "", "data file, directory or glob (required)")
	format := fs.String("format", "", "data format (default: the model kind's)")
	kind := fs.String("kind", "", "refuse a model of another kind (lr, kmeans, mf)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *model == "" || *data == "" {
		return usageError{"--model and --data are required"}
	}
	res, err := tasks.Evaluate(ctx, *model, *data, *format, *kind)
	if err != nil {
		return err
	}
	fmt.Println(res)
	return nil
}
