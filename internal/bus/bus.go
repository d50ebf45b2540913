// Package bus wires flexps to NATS: it starts the embedded server (in-process
// for local mode, on a loopback TCP port for a cluster master), connects
// clients with the cluster's options, and names every subject so that no
// other package builds subject strings by hand. All subjects of one cluster
// share the prefix "flexps.<cluster>.", so several clusters can share a bus.
package bus

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// Options describe how to reach the bus.
type Options struct {
	// URL of an external NATS server or cluster (comma-separated). Empty
	// means the embedded server.
	URL string
	// Name of the client connection, shown by NATS monitoring.
	Name string
	// User/Password or Token authenticate the connection; CredsFile names a
	// NATS credentials file. TLS is used when the URL says tls:// or CAFile
	// is set.
	User, Password, Token, CredsFile string
	// NkeyFile names an nkey seed file (the credentials a master
	// generates for each role, see EnsureKeys).
	NkeyFile string
	// InboxPrefix replaces "_INBOX" for reply subjects: each role may only
	// subscribe to its own (see InboxPrefix).
	InboxPrefix               string
	CAFile, CertFile, KeyFile string
	// ConnectTimeout bounds each connection attempt (default 5s).
	ConnectTimeout time.Duration
	// RetryFor keeps retrying the first connection for this long (a slave
	// started before its master); 0 tries once.
	RetryFor time.Duration
	// Log, when set, receives the connection's life after it is up: the
	// bus lost (with the cause), reconnected (with the server), closed,
	// and asynchronous errors such as permission violations.
	Log *zerolog.Logger
}

// ErrUnreachable is wrapped when no NATS server answers.
var ErrUnreachable = errors.New("NATS server unreachable")

// Embedded is a NATS server running inside this process.
type Embedded struct {
	srv *server.Server
}

// EmbeddedOptions configure the embedded server.
type EmbeddedOptions struct {
	// Listen is "host:port" for a TCP listener; empty means in-process
	// only (no port at all); port 0 is any free port (URL names it).
	// Host must be a loopback address unless the caller knows better.
	Listen string
	// User/Password or Token, if set, are required from every client.
	User, Password, Token string
	// Nkeys, if set, are the only identities the server accepts, each with
	// its role's permissions (see NkeyUsers). Exclusive with User/Token.
	Nkeys []*server.NkeyUser
	// TLS: the server's certificate and key; with ClientCAFile, clients
	// must present a certificate signed by that CA. In-process connections
	// never use TLS.
	CertFile, KeyFile, ClientCAFile string
	// MaxPayload overrides the server's max_payload (default 1 MiB).
	MaxPayload int32
}

// Secured reports whether the server requires some authentication.
func (o EmbeddedOptions) Secured() bool {
	return o.User != "" || o.Token != "" || len(o.Nkeys) > 0
}

// StartEmbedded starts a NATS server in this process and waits until it
// accepts connections.
func StartEmbedded(o EmbeddedOptions) (*Embedded, error) {
	opts := &server.Options{
		ServerName: "flexps-embedded",
		NoLog:      true,
		NoSigs:     true,
		MaxPayload: o.MaxPayload,
		// A parameter server pushes bursts of large messages; give slow
		// consumers room instead of cutting them off.
		MaxPending:    256 << 20,
		WriteDeadline: 30 * time.Second,
		Username:      o.User,
		Password:      o.Password,
		Authorization: o.Token,
		Nkeys:         o.Nkeys,
	}
	if len(o.Nkeys) > 0 && (o.User != "" || o.Token != "") {
		return nil, errors.New("bus: embedded server: nkeys and user/token authentication are exclusive")
	}
	if o.CertFile != "" || o.KeyFile != "" {
		if o.CertFile == "" || o.KeyFile == "" {
			return nil, errors.New("bus: embedded server TLS needs both a certificate and a key file")
		}
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: o.CertFile, KeyFile: o.KeyFile, CaFile: o.ClientCAFile, Verify: o.ClientCAFile != ""})
		if err != nil {
			return nil, fmt.Errorf("bus: embedded server TLS: %w", err)
		}
		opts.TLSConfig, opts.TLS, opts.TLSVerify = tc, true, o.ClientCAFile != ""
		opts.TLSTimeout = 5
	} else if o.ClientCAFile != "" {
		return nil, errors.New("bus: client certificates need the server's own certificate and key")
	}
	if o.Listen == "" {
		opts.DontListen = true
	} else {
		host, port, err := net.SplitHostPort(o.Listen)
		if err != nil {
			return nil, fmt.Errorf("bus: listen address %q: %w", o.Listen, err)
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return nil, fmt.Errorf("bus: listen address %q: bad port", o.Listen)
		}
		if p == 0 {
			// Port 0 is any free port, as for every other listen address
			// of flexps; NATS reads 0 as its default, 4222.
			p = server.RANDOM_PORT
		}
		opts.Host, opts.Port = host, p
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("bus: embedded NATS server: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("bus: embedded NATS server on %q did not become ready", o.Listen)
	}
	return &Embedded{srv: srv}, nil
}

// URL is the client URL of the server's TCP listener ("" if in-process only).
func (e *Embedded) URL() string {
	if e.srv.Addr() == nil {
		return ""
	}
	return e.srv.ClientURL()
}

// Connect opens an in-process connection to the embedded server. TLS
// settings in o are ignored: in-process connections need none.
func (e *Embedded) Connect(o Options) (*nats.Conn, error) {
	o.CAFile, o.CertFile, o.KeyFile = "", "", ""
	opts, err := natsOptions(o)
	if err != nil {
		return nil, err
	}
	opts = append(opts, nats.InProcessServer(e.srv))
	nc, err := nats.Connect("", opts...)
	if err != nil {
		return nil, fmt.Errorf("bus: in-process connection: %w", err)
	}
	return nc, nil
}

// Shutdown stops the server and waits for it.
func (e *Embedded) Shutdown() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
}

// Connect opens a connection to o.URL.
func Connect(o Options) (*nats.Conn, error) { return ConnectContext(context.Background(), o) }

// ConnectContext is Connect whose wait for an unreachable server (up to
// o.RetryFor) ends when ctx does, with ctx's error: a slave started before
// its bus stops waiting at Ctrl-C.
func ConnectContext(ctx context.Context, o Options) (*nats.Conn, error) {
	if o.URL == "" {
		return nil, errors.New("bus: no NATS URL given")
	}
	for _, u := range strings.Split(o.URL, ",") {
		if _, err := url.Parse(strings.TrimSpace(u)); err != nil {
			return nil, fmt.Errorf("bus: bad NATS URL %q: %w", u, err)
		}
	}
	opts, err := natsOptions(o)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(o.RetryFor)
	nc, err := nats.Connect(o.URL, opts...)
	for err != nil && time.Now().Before(deadline) && (errors.Is(err, nats.ErrNoServers) || isDialError(err)) {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("bus: stopped waiting for %s: %w", o.URL, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
		nc, err = nats.Connect(o.URL, opts...)
	}
	if err != nil {
		if errors.Is(err, nats.ErrNoServers) || isDialError(err) {
			return nil, fmt.Errorf("bus: %w at %s: %v", ErrUnreachable, o.URL, err)
		}
		// A key offered to a server that takes none is refused credentials too.
		if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrNkeysNotSupported) || strings.Contains(strings.ToLower(err.Error()), "authorization") {
			return nil, fmt.Errorf("bus: %w: %s refused the connection: %w", ErrUnauthorized, o.URL, err)
		}
		return nil, fmt.Errorf("bus: connecting to %s: %w", o.URL, err)
	}
	return nc, nil
}

// ErrUnauthorized is wrapped when the server refuses the credentials (or
// their absence).
var ErrUnauthorized = errors.New("NATS server refused the credentials")

func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op)
}

func natsOptions(o Options) ([]nats.Option, error) {
	timeout := o.ConnectTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	opts := []nats.Option{
		nats.Name(o.Name),
		nats.Timeout(timeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(200 * time.Millisecond),
		// Large buffers: the data plane publishes bursts of Adds.
		nats.ReconnectBufSize(64 << 20),
		nats.NoCallbacksAfterClientClose(),
	}
	if o.User != "" {
		opts = append(opts, nats.UserInfo(o.User, o.Password))
	}
	if o.Token != "" {
		opts = append(opts, nats.Token(o.Token))
	}
	if o.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(o.CredsFile))
	}
	if o.CAFile != "" {
		opts = append(opts, nats.RootCAs(o.CAFile))
	}
	if o.CertFile != "" {
		opts = append(opts, nats.ClientCert(o.CertFile, o.KeyFile))
	}
	if o.NkeyFile != "" {
		if _, err := loadSeed(o.NkeyFile); err != nil {
			return nil, err
		}
		opt, err := nats.NkeyOptionFromSeed(o.NkeyFile)
		if err != nil {
			return nil, fmt.Errorf("bus: key file %s: %w", o.NkeyFile, err)
		}
		opts = append(opts, opt)
	}
	if o.InboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(o.InboxPrefix))
	}
	if l := o.Log; l != nil {
		opts = append(opts,
			nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
				ev := l.Warn().Str("conn", o.Name)
				if err != nil {
					ev = ev.Err(err)
				}
				ev.Msg("bus: connection to NATS lost; reconnecting (work that needs the bus waits or fails)")
			}),
			nats.ReconnectHandler(func(nc *nats.Conn) {
				l.Info().Str("conn", o.Name).Str("server", nc.ConnectedUrlRedacted()).Msg("bus: reconnected to NATS")
			}),
			nats.ErrorHandler(func(nc *nats.Conn, sub *nats.Subscription, err error) {
				ev := l.Error().Str("conn", o.Name).Err(err)
				if sub != nil {
					ev = ev.Str("subject", sub.Subject)
				}
				ev.Msg("bus: asynchronous NATS error")
			}))
	}
	return opts, nil
}
