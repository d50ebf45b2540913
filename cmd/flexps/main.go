// Command flexps trains machine-learning models on a FlexPS-style parameter
// server. One binary plays every role:
//
//	flexps run job.toml                        local mode: embedded NATS, master and slaves in one process
//	flexps master --config cluster.toml        a cluster master (embeds a NATS server unless [nats] url is set)
//	flexps slave --config cluster.toml         a slave joining the master over NATS
//	flexps submit job.toml [job.toml ...]      send tasks to a running master and follow them
//	flexps status [task-id]                    list tasks and slaves
//	flexps cancel task-id                      stop a task
//	flexps gen libsvm|ratings --out FILE       write the project's seeded synthetic data
//	flexps eval --model FILE --data FILE       score a saved model
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/flexps/flexps/engine"
	_ "github.com/flexps/flexps/examples/kge"
	_ "github.com/flexps/flexps/examples/kmeans"
	_ "github.com/flexps/flexps/examples/lr"
	_ "github.com/flexps/flexps/examples/mf"
	_ "github.com/flexps/flexps/examples/svrg"
	"github.com/flexps/flexps/internal/logging"
	"github.com/rs/zerolog"
)

// usageError is a mistake in the command line: exit code 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

var commands = map[string]func(ctx context.Context, args []string) error{
	"run":    cmdRun,
	"master": cmdMaster,
	"slave":  cmdSlave,
	"submit": cmdSubmit,
	"status": cmdStatus,
	"cancel": cmdCancel,
	"gen":    cmdGen,
	"eval":   cmdEval,
}

const usage = `usage: flexps <command> [flags] [args]

commands:
  run JOB.toml             train in local mode (embedded NATS, master and slaves in-process)
  master --config FILE     start a cluster master
  slave --config FILE      start a slave (--nats URL to reach the master's bus)
  submit JOB.toml...       submit tasks to a running master and follow them
  status [TASK]            list tasks and slaves of a running master
  cancel TASK              stop a task
  gen libsvm|ratings       write seeded synthetic data
  eval                     score a saved model on a data file

"flexps <command> -h" lists a command's flags.`

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(stderr, usage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "flexps: unknown command %q (\"flexps help\" lists the commands)\n", args[0])
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := cmd(ctx, args[1:])
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "flexps %s: %v\n", args[0], err)
		return 2
	}
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		fmt.Fprintf(stderr, "flexps %s: interrupted\n", args[0])
		return 130
	}
	fmt.Fprintf(stderr, "flexps %s: %v\n", args[0], err)
	return 1
}

// common flags.
type logFlags struct {
	level, format string
}

func (l *logFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.level, "log-level", "", "log level: debug, info, warn, error (default: the config's, else info)")
	fs.StringVar(&l.format, "log-format", "", "log format: auto, console, json (default: the config's, else auto)")
}

func (l *logFlags) logger(cfg *engine.ClusterConfig) (zerolog.Logger, error) {
	level, format := l.level, l.format
	if cfg != nil {
		if level == "" {
			level = cfg.Log.Level
		}
		if format == "" {
			format = cfg.Log.Format
		}
	}
	return logging.New(os.Stderr, level, format)
}

func parse(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(os.Stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err.Error()}
	}
	return nil
}

// clusterConfig loads --config (optional) and applies flag overrides.
func clusterConfig(path, natsURL string) (*engine.ClusterConfig, error) {
	cfg := &engine.ClusterConfig{}
	if path != "" {
		c, err := engine.LoadClusterConfig(path)
		if err != nil {
			return nil, err
		}
		cfg = c
	}
	if natsURL != "" {
		cfg.NATS.URL = natsURL
	}
	return cfg, nil
}
