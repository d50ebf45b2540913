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
//	flexps plot metrics.jsonl -o curve.png     draw the curves a --metrics-out file recorded
//
// The command line is built with cobra: flags may come before or after the
// arguments, "flexps help CMD" and "CMD --help" print a command's flags,
// "flexps completion bash|zsh|fish" prints a shell completion script.
// Exit codes: 0 ok, 1 the task or command failed, 2 usage error, 130
// interrupted (SIGINT/SIGTERM).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"

	"github.com/flexps/flexps/engine"
	_ "github.com/flexps/flexps/examples/kge"
	_ "github.com/flexps/flexps/examples/kmeans"
	_ "github.com/flexps/flexps/examples/lr"
	_ "github.com/flexps/flexps/examples/mf"
	_ "github.com/flexps/flexps/examples/mfblock"
	_ "github.com/flexps/flexps/examples/svrg"
	"github.com/flexps/flexps/internal/logging"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Exit codes.
const (
	exitOK          = 0
	exitFailed      = 1
	exitUsage       = 2
	exitInterrupted = 130
)

// usageError is a mistake in the command line: exit code 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func main() {
	tuneGC(os.Getenv) // see gcdefault.go
	os.Exit(run(os.Args[1:], os.Stderr))
}

// version is the module version and VCS commit the binary was built from
// ("go install ...@v1.2.3" records the version; a checkout build records
// the commit when built with VCS stamping).
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if rev != "" {
		v += " commit " + rev + dirty
	}
	return v + " " + bi.GoVersion
}

// globals are the flags every command has, and where logs go.
type globals struct {
	logLevel, logFormat string
	logs                logSink
}

// logSink is the logger's output on a terminal: stderr, or, while progress
// bars are drawn there, the bars' container, which prints each log line
// above the bars instead of gluing it onto one.
type logSink struct {
	mu    sync.Mutex
	above func([]byte) error // nil: straight to stderr
}

func (l *logSink) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.above != nil && l.above(p) == nil {
		return len(p), nil
	}
	return os.Stderr.Write(p)
}

// divert sends log lines to above until it is called with nil.
func (l *logSink) divert(above func([]byte) error) {
	l.mu.Lock()
	l.above = above
	l.mu.Unlock()
}

func (g *globals) logger(cfg *engine.ClusterConfig) (zerolog.Logger, error) {
	level, format := g.logLevel, g.logFormat
	if cfg != nil {
		if level == "" {
			level = cfg.Log.Level
		}
		if format == "" {
			format = cfg.Log.Format
		}
	}
	var l zerolog.Logger
	var err error
	if (format == "" || format == "auto") && logging.IsTerminal(os.Stderr) {
		l, err = logging.New(&g.logs, level, "console")
	} else {
		l, err = logging.New(os.Stderr, level, format)
	}
	if err != nil {
		return l, usageError{err.Error()}
	}
	return l, nil
}

// newRoot builds the command tree.
func newRoot(ctx context.Context, stdout, stderr io.Writer) *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "flexps",
		Short: "Train machine-learning models on a FlexPS-style parameter server",
		Long: `flexps trains machine-learning models on a FlexPS-style parameter server.
"flexps run JOB.toml" trains on an in-process cluster; "flexps master",
"flexps slave" and "flexps submit" run a cluster over several processes or machines.

Exit codes: 0 ok, 1 the task or command failed, 2 usage error, 130 interrupted.`,
		Version:       version(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetContext(ctx)
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "", "log level: debug, info, warn, error (default: the config's, else info)")
	root.PersistentFlags().StringVar(&g.logFormat, "log-format", "", "log format: auto, console, json (default: the config's, else auto)")
	// Every command takes the global flags, so every command checks them,
	// also those that log nothing (gen, eval, plot, status, ...): a
	// misspelled level is a usage error, not silently ignored.
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		if g.logLevel == "" && g.logFormat == "" {
			return nil
		}
		if _, err := logging.New(io.Discard, g.logLevel, g.logFormat); err != nil {
			return usageError{err.Error()}
		}
		return nil
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError{err.Error() + " (\"" + c.CommandPath() + " --help\" lists the flags)"}
	})
	root.AddCommand(runCmd(g), masterCmd(g), slaveCmd(g), submitCmd(g), statusCmd(g), cancelCmd(g),
		genCmd(g), evalCmd(g), plotCmd(g))
	strictBuiltins(root)
	return root
}

// strictBuiltins makes cobra's own help and completion commands refuse what
// they cannot do with a usage error (exit 2). Cobra's completion command is
// not runnable, so a shell it has no script for (or none) printed its help
// on stdout and exited 0, and "source <(flexps completion tcsh)" sourced
// that; its help command printed "Unknown help topic" and exited 0.
func strictBuiltins(root *cobra.Command) {
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		switch c.Name() {
		case "completion":
			// Args (cobra.NoArgs) now applies: "completion tcsh" is an
			// unknown command, which runIO reports as a usage error.
			c.RunE = func(c *cobra.Command, _ []string) error {
				return usageError{"want a shell: " + c.CommandPath() + " bash|zsh|fish|powershell"}
			}
		case "help":
			c.Run = nil
			c.RunE = func(c *cobra.Command, a []string) error {
				cmd, _, err := c.Root().Find(a)
				if cmd == nil || err != nil {
					return usageError{fmt.Sprintf("no command %q (\"flexps help\" lists the commands)", strings.Join(a, " "))}
				}
				cmd.InitDefaultHelpFlag()
				cmd.InitDefaultVersionFlag()
				return cmd.Help()
			}
		}
	}
}

// args checks the positional arguments; a mismatch is a usage error.
func args(n func(int) bool, want string) cobra.PositionalArgs {
	return func(c *cobra.Command, a []string) error {
		if !n(len(a)) {
			return usageError{"want " + want + ": " + c.UseLine()}
		}
		return nil
	}
}

func run(argv []string, stderr io.Writer) int {
	return runIO(argv, os.Stdout, stderr)
}

// runIO runs the command line with help, version and completion output
// going to stdout (task tables keep going to os.Stdout).
func runIO(argv []string, stdout, stderr io.Writer) int {
	// The first Ctrl-C (or SIGTERM) stops the task cleanly; a second one
	// ends the process at once. Both are read from one buffered channel, so
	// a second signal that comes before the first was handled is not lost.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	finished := make(chan struct{})
	defer close(finished)
	go watchSignals(sigs, finished, cancel, func() {
		fmt.Fprintln(stderr, "flexps: interrupted again: exiting at once")
		os.Exit(exitInterrupted)
	})
	root := newRoot(ctx, stdout, stderr)
	root.SetArgs(argv)
	if len(argv) == 0 {
		root.SetOut(stderr)
		root.Help()
		return exitUsage
	}
	c, err := root.ExecuteC()
	if err == nil {
		return exitOK
	}
	name := c.CommandPath()
	var ue usageError
	switch {
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitUsage
	case strings.HasPrefix(err.Error(), "unknown command"), strings.HasPrefix(err.Error(), "unknown flag"),
		strings.HasPrefix(err.Error(), "invalid argument"):
		fmt.Fprintf(stderr, "%s: %v (\"flexps help\" lists the commands)\n", name, err)
		return exitUsage
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		fmt.Fprintf(stderr, "%s: interrupted\n", name)
		return exitInterrupted
	}
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
	return exitFailed
}

// watchSignals cancels the command at the first signal on sigs and calls
// exit at the second, until finished is closed.
func watchSignals(sigs <-chan os.Signal, finished <-chan struct{}, cancel, exit func()) {
	select {
	case <-sigs:
		cancel()
	case <-finished:
		return
	}
	select {
	case <-sigs:
		exit()
	case <-finished:
	}
}

// clusterFlags are --config and --nats, shared by the cluster commands.
type clusterFlags struct {
	config, nats string
	// The process's HTTP endpoints (empty: as the cluster TOML says).
	httpListen, metricsListen string
}

// registerMonitor adds --metrics-listen, and --http when the process
// serves the status page (a master, or run).
func (cf *clusterFlags) registerMonitor(fs *pflag.FlagSet, page bool) {
	if page {
		fs.StringVar(&cf.httpListen, "http", "", "serve the status page (and /metrics, /api/status) on this address, e.g. 127.0.0.1:8080 ([http] listen)")
	}
	fs.StringVar(&cf.metricsListen, "metrics-listen", "", "serve Prometheus /metrics on this address, e.g. 127.0.0.1:9100 ([metrics] listen)")
}

func (cf *clusterFlags) register(fs *pflag.FlagSet, natsHelp string) {
	fs.StringVar(&cf.config, "config", "", "cluster TOML")
	fs.StringVar(&cf.nats, "nats", "", natsHelp)
}

// load reads --config (optional) and applies --nats.
func (cf *clusterFlags) load() (*engine.ClusterConfig, error) {
	cfg := &engine.ClusterConfig{}
	if cf.config != "" {
		c, err := engine.LoadClusterConfig(cf.config)
		if err != nil {
			return nil, err
		}
		cfg = c
	}
	if cf.nats != "" {
		cfg.NATS.URL = cf.nats
	}
	if cf.httpListen != "" {
		cfg.HTTP = engine.ListenSect{Listen: cf.httpListen, Flag: "--http"}
	}
	if cf.metricsListen != "" {
		cfg.Metrics = engine.ListenSect{Listen: cf.metricsListen, Flag: "--metrics-listen"}
	}
	return cfg, nil
}
