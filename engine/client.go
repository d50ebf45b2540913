package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flexps/flexps/internal/bus"
	"github.com/flexps/flexps/internal/proto"
	"github.com/flexps/flexps/status"
	"github.com/flexps/flexps/tasks"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
)

// ErrTaskFailed is wrapped when a task ends failed or cancelled (the same
// sentinel as status.ErrTaskFailed).
var ErrTaskFailed = status.ErrTaskFailed

// ErrNoMaster is wrapped when no master answers.
var ErrNoMaster = errors.New("no master answered")

// ErrNoTask is wrapped when the master does not know the task asked for
// (a master restarted since lost it, or an ended task was dropped).
var ErrNoTask = errors.New("the master does not know the task")

// noTaskError is the master's answer for a task it does not know.
type noTaskError string

func (e noTaskError) Error() string        { return string(e) }
func (e noTaskError) Is(target error) bool { return target == ErrNoTask }

// ctlError is the error of a refused cancel: one wrapping ErrNoTask for a
// task the master does not know (it was a bare error, unlike Status's and
// Follow's).
func ctlError(rep proto.CtlReply) error {
	if rep.Unknown {
		return noTaskError(rep.Error)
	}
	return errors.New(rep.Error)
}

// Client submits tasks to a master and follows them.
type Client struct {
	nc      *nats.Conn
	subj    bus.Subjects
	cluster string
	owned   bool
	// Timeout bounds each request to the master (0: the default, 30s; a
	// submission lists the task's inputs, which may take a while on HDFS).
	Timeout time.Duration
	// BusLost is how long a follower waits for a bus it lost (the master
	// embeds it: killed, it takes the bus along), or for a master to
	// answer on a bus that is up, before it says the master is gone
	// (0: the default, 10s; a master restarted within it is followed on).
	BusLost time.Duration
	// ExternalBusLost is BusLost for a master on an external NATS server
	// (its status answer says so), which it and its tasks outlive
	// (0: the default, 5m).
	ExternalBusLost time.Duration
	external        atomic.Bool // the last status answer named an external bus
}

// Defaults of the Client's durations, also for one set to 0: a Timeout of
// 0 failed every request at once with "no master answered".
const (
	defaultTimeout         = 30 * time.Second
	defaultBusLost         = 10 * time.Second
	defaultExternalBusLost = 5 * time.Minute
)

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// closedErr says, of a call on a closed connection, who closed it: it was
// NATS's bare "nats: connection closed".
func (c *Client) closedErr(err error) error {
	if !errors.Is(err, nats.ErrConnectionClosed) {
		return err
	}
	if c.owned {
		return fmt.Errorf("engine: the client was closed (Client.Close): %w", err)
	}
	return fmt.Errorf("engine: the client's connection was closed (Local.Close, or its owner's): %w", err)
}

// url names the bus for messages, also while disconnected.
func (c *Client) url() string {
	if c.nc.Opts.InProcessServer != nil {
		// Its options' URL is NATS's default, 127.0.0.1:4222, where
		// another cluster may well run.
		return "the in-process bus"
	}
	if u := c.nc.ConnectedUrlRedacted(); u != "" {
		return u
	}
	if c.nc.Opts.Url != "" {
		return c.nc.Opts.Url
	}
	if len(c.nc.Opts.Servers) > 0 {
		return strings.Join(c.nc.Opts.Servers, ",")
	}
	return "the in-process bus"
}

// NewClient talks to the master of cluster over nc.
func NewClient(nc *nats.Conn, cluster string) *Client {
	if cluster == "" {
		cluster = "default" // as bus.For reads it
	}
	return &Client{nc: nc, subj: bus.For(cluster), cluster: cluster, Timeout: defaultTimeout, BusLost: defaultBusLost, ExternalBusLost: defaultExternalBusLost}
}

// Close closes the connection if the client opened it.
func (c *Client) Close() {
	if c.owned {
		c.nc.Close()
	}
}

// ErrDenied is wrapped when the bus refuses a request for lack of
// permission (a read-only key submitting, for example).
var ErrDenied = errors.New("permission denied")

func (c *Client) request(ctx context.Context, subject string, req, rep any) error {
	data, err := json.Marshal(req)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, orDefault(c.Timeout, defaultTimeout))
	defer cancel()
	msg, err := c.nc.RequestWithContext(ctx, subject, data)
	if err != nil {
		// A request the bus refused (a reader's key submitting) only
		// times out; the server's reason arrives as the connection's
		// last asynchronous error.
		if last := c.nc.LastError(); last != nil && errors.Is(last, nats.ErrPermissionViolation) && strings.Contains(last.Error(), subject) {
			return fmt.Errorf("%w: this client's credentials may not use %s: %v", ErrDenied, subject, last)
		}
		if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("%w for cluster %q on %s: %v", ErrNoMaster, c.cluster, c.url(), err)
		}
		return c.closedErr(err)
	}
	return json.Unmarshal(msg.Data, rep)
}

// errNilTask is the answer to a nil task: it panicked in Normalize.
var errNilTask = errors.New("engine: the task is nil (build it with tasks.NewTask or tasks.LoadJob)")

// Submit validates the task against this process's registry and sends it.
func (c *Client) Submit(ctx context.Context, t *tasks.MultiStageTask) (string, error) {
	if t == nil {
		return "", errNilTask
	}
	t.Normalize()
	if err := t.Validate(); err != nil {
		return "", err
	}
	if t.ID == "" {
		t.ID = "t" + nuid.Next()[10:]
	}
	var rep proto.SubmitReply
	if err := c.request(ctx, c.subj.Submit(), proto.SubmitRequest{Task: *t}, &rep); err != nil {
		if errors.Is(err, nats.ErrMaxPayload) {
			// The spec travels whole, in one message (so do the slaves'
			// start requests): the bare NATS error named neither.
			return "", fmt.Errorf("task %q: its %d stages do not fit one bus message (max_payload, %d bytes): lower repeat, or split the task: %w",
				t.Name, len(t.Stages), c.nc.MaxPayload(), err)
		}
		return "", err
	}
	c.external.Store(rep.ExternalBus)
	if rep.Error != "" {
		return "", errors.New(rep.Error)
	}
	return rep.ID, nil
}

// ResumeAndWait resumes the task of the newest valid checkpoint in dir (a
// directory the master can read: local to it, or hdfs://), or of the one
// checkpoint file dir names (DIR/ckpt-NNNNNN.flexps), and follows it
// to its end, like SubmitAndWait, as task id ("": a new one). warn (may be nil) hears, before the
// task starts, each newer checkpoint file that was skipped as torn or
// corrupt.
func (c *Client) ResumeAndWait(ctx context.Context, dir, id string, warn func(string), fn func(status.Event)) (status.Task, error) {
	if id == "" {
		id = NewTaskID()
	}
	f, err := c.follow(id)
	if err != nil {
		return status.Task{}, err
	}
	defer f.Unsubscribe()
	id, err = c.Resume(ctx, dir, id, warn)
	if err != nil {
		return status.Task{}, err
	}
	return c.wait(ctx, id, f, fn, false)
}

// Resume resumes the task of the newest valid checkpoint in dir (or of
// the checkpoint file dir names, as for ResumeAndWait) as task id ("": the master picks one) and returns its id without following it;
// warn as for ResumeAndWait.
func (c *Client) Resume(ctx context.Context, dir, id string, warn func(string)) (string, error) {
	var rep proto.SubmitReply
	if err := c.request(ctx, c.subj.Submit(), proto.SubmitRequest{Task: tasks.MultiStageTask{ID: id}, Resume: dir}, &rep); err != nil {
		return "", err
	}
	c.external.Store(rep.ExternalBus)
	if warn != nil {
		for _, w := range rep.Warnings {
			warn(w)
		}
	}
	if rep.Error != "" {
		return "", fmt.Errorf("resume %s: %s", dir, rep.Error)
	}
	return rep.ID, nil
}

// NewTaskID returns a fresh task id.
func NewTaskID() string { return "t" + nuid.Next()[10:] }

// StopAtCheckpoint asks the master to stop a task at its next consistent
// point (an epoch or stage end) after writing a checkpoint there; a task
// without [checkpoint] stops at once, as with Cancel.
func (c *Client) StopAtCheckpoint(ctx context.Context, id string) error {
	var rep proto.CtlReply
	if err := c.request(ctx, c.subj.Cancel(), proto.CancelRequest{ID: id, Checkpoint: true}, &rep); err != nil {
		return err
	}
	if !rep.OK {
		return ctlError(rep)
	}
	return nil
}

// Status asks the master for one task ("" for all) and the slaves.
func (c *Client) Status(ctx context.Context, id string) (status.Cluster, error) {
	var rep proto.StatusReply
	if err := c.request(ctx, c.subj.Status(), proto.StatusRequest{ID: id}, &rep); err != nil {
		return rep.Cluster, err
	}
	c.external.Store(rep.Cluster.ExternalBus)
	if rep.Unknown {
		return rep.Cluster, noTaskError(rep.Error)
	}
	if rep.Error != "" {
		return rep.Cluster, errors.New(rep.Error)
	}
	return rep.Cluster, nil
}

// StatusPage lists at most limit tasks (0: all that fit one message)
// submitted before task before ("": the newest), with the slaves; the
// result's Omitted counts the older tasks left out (ask again with before
// = the oldest task of this page). A before the master does not know
// (never submitted, or pruned since) is an error.
func (c *Client) StatusPage(ctx context.Context, limit int, before string) (status.Cluster, error) {
	var rep proto.StatusReply
	if err := c.request(ctx, c.subj.Status(), proto.StatusRequest{Limit: limit, Before: before}, &rep); err != nil {
		return rep.Cluster, err
	}
	c.external.Store(rep.Cluster.ExternalBus)
	if rep.Error != "" {
		return rep.Cluster, errors.New(rep.Error)
	}
	return rep.Cluster, nil
}

// Cancel stops a task.
func (c *Client) Cancel(ctx context.Context, id string) error {
	var rep proto.CtlReply
	if err := c.request(ctx, c.subj.Cancel(), proto.CancelRequest{ID: id}, &rep); err != nil {
		return err
	}
	if !rep.OK {
		return ctlError(rep)
	}
	return nil
}

// SubmitAndWait submits t and follows it to its end; fn (may be nil) sees
// every event. A failed task returns its status and an error wrapping
// ErrTaskFailed with the master's reason. ctx bounds the following, not
// the task: when ctx ends first, SubmitAndWait returns ctx's error and
// the task goes on on the cluster (t.ID names it for Cancel, Follow or
// StopAtCheckpoint; `flexps submit` cancels it on Ctrl-C). A task
// submitted without an ID gets one here, in t.ID; to submit the same
// task again, set t.ID to "" first (an ID is refused a second time).
func (c *Client) SubmitAndWait(ctx context.Context, t *tasks.MultiStageTask, fn func(status.Event)) (status.Task, error) {
	if t == nil {
		return status.Task{}, errNilTask
	}
	t.Normalize()
	if err := t.Validate(); err != nil {
		return status.Task{}, err
	}
	if t.ID == "" {
		t.ID = "t" + nuid.Next()[10:]
	}
	// Subscribe before submitting so no event is missed.
	f, err := c.follow(t.ID)
	if err != nil {
		return status.Task{}, err
	}
	defer f.Unsubscribe()
	id, err := c.Submit(ctx, t)
	if err != nil {
		return status.Task{}, err
	}
	return c.wait(ctx, id, f, fn, false)
}

// SubmitAllAndWait submits ts in order, each once the master has accepted
// the one before, so a master whose policy follows submission order
// (sequential, and prioritized among equal priorities) runs them in the
// order given; then it follows them all to their ends at once. Results and
// errors are per task, as SubmitAndWait returns them; a task the master
// refused does not stop the later ones. A task not yet sent when ctx ends
// is not sent (its error is ctx's and its ID is left as it was).
func (c *Client) SubmitAllAndWait(ctx context.Context, ts []*tasks.MultiStageTask, fn func(status.Event)) ([]status.Task, []error) {
	results := make([]status.Task, len(ts))
	errs := make([]error, len(ts))
	var wg sync.WaitGroup
	for i, t := range ts {
		if err := ctx.Err(); err != nil {
			errs[i] = err
			continue
		}
		if t == nil {
			errs[i] = errNilTask
			continue
		}
		t.Normalize()
		if err := t.Validate(); err != nil {
			errs[i] = err
			continue
		}
		if t.ID == "" {
			t.ID = NewTaskID()
		}
		// Subscribe before submitting so no event is missed.
		f, err := c.follow(t.ID)
		if err != nil {
			errs[i] = err
			continue
		}
		id, err := c.Submit(ctx, t)
		if err != nil {
			f.Unsubscribe()
			errs[i] = err
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer f.Unsubscribe()
			results[i], errs[i] = c.wait(ctx, id, f, fn, false)
		}()
	}
	wg.Wait()
	return results, errs
}

// Follow follows a submitted task to its end; a task that ended already
// returns at once.
func (c *Client) Follow(ctx context.Context, id string, fn func(status.Event)) (status.Task, error) {
	f, err := c.follow(id)
	if err != nil {
		return status.Task{}, err
	}
	defer f.Unsubscribe()
	return c.wait(ctx, id, f, fn, true)
}

func (c *Client) follow(id string) (*nats.Subscription, error) {
	sub, err := c.nc.SubscribeSync(c.subj.TaskEvents(id))
	if err != nil {
		return nil, c.closedErr(err)
	}
	sub.SetPendingLimits(-1, -1)
	return sub, c.nc.Flush()
}

func (c *Client) wait(ctx context.Context, id string, sub *nats.Subscription, fn func(status.Event), pollFirst bool) (status.Task, error) {
	end := func(s status.Task) (status.Task, error) { return s, s.Err() }
	// Events can be missed (a master restarted, a slow subscriber, a task
	// that ended before the subscription): poll the status now and then,
	// and at once when pollFirst, so the wait always ends.
	lastPoll := time.Now()
	if pollFirst {
		lastPoll = time.Time{}
	}
	var down time.Time   // since when the bus is unreachable
	var silent time.Time // since when no master answers on a bus that is up
	for {
		if !c.nc.IsConnected() && !c.nc.IsClosed() {
			// A status request would only wait out Timeout in the
			// reconnect buffer.
			if down.IsZero() {
				down = time.Now()
			}
			if c.external.Load() {
				if time.Since(down) >= orDefault(c.ExternalBusLost, defaultExternalBusLost) {
					return status.Task{}, fmt.Errorf("following task %s: %w: the external NATS server of cluster %q at %s has been unreachable for %v; "+
						"the master and its slaves wait for it, and the task goes on when it is back (flexps status %s)",
						id, ErrNoMaster, c.cluster, c.url(), time.Since(down).Round(time.Second), id)
				}
			} else if time.Since(down) >= orDefault(c.BusLost, defaultBusLost) {
				return status.Task{}, fmt.Errorf("following task %s: %w: the bus of cluster %q at %s has been unreachable for %v; "+
					"a master that embeds it died with it, and the task with the master (a task with a [checkpoint] dir is resumed under its id by a master restarted on the same state_dir: flexps status %s)",
					id, ErrNoMaster, c.cluster, c.url(), time.Since(down).Round(time.Second), id)
			}
		} else {
			down = time.Time{}
			if time.Since(lastPoll) >= 2*time.Second {
				lastPoll = time.Now()
				rep, err := c.Status(ctx, id)
				if err != nil && errors.Is(err, ErrNoMaster) {
					// A master restarting (its subscriptions not yet
					// made) is given BusLost, on any bus.
					if silent.IsZero() {
						silent = time.Now()
					}
					if time.Since(silent) >= orDefault(c.BusLost, defaultBusLost) {
						return status.Task{}, fmt.Errorf("following task %s: %w (for %v)", id, err, time.Since(silent).Round(time.Second))
					}
				} else {
					silent = time.Time{}
				}
				if errors.Is(err, ErrNoTask) {
					// No event of it will come (it polled for ever).
					return status.Task{}, fmt.Errorf("following task %s: %w (%v): a master restarted since loses the tasks without a [checkpoint] dir "+
						"(and logs those with one it could not resume), and ended tasks are dropped after [master] keep_tasks", id, ErrNoTask, err)
				}
				if err == nil && len(rep.Tasks) == 1 && rep.Tasks[0].Ended() {
					if fn != nil {
						kind := status.EventFailed
						if rep.Tasks[0].State == status.Done {
							kind = status.EventDone
						}
						fn(status.Event{Kind: kind, Status: rep.Tasks[0]})
					}
					return end(rep.Tasks[0])
				}
			}
		}
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		msg, err := sub.NextMsgWithContext(wctx)
		cancel()
		if ctx.Err() != nil {
			return status.Task{}, ctx.Err()
		}
		if err == nil {
			var ev status.Event
			if json.Unmarshal(msg.Data, &ev) == nil {
				if fn != nil {
					fn(ev)
				}
				if (ev.Kind == status.EventDone || ev.Kind == status.EventFailed) && ev.Status.Ended() {
					return end(ev.Status)
				}
			}
		}
	}
}

// Membership is a membership view as the master broadcasts it: the
// master's instance and the epoch with its live members. It is named here
// so that a program outside this module can write WatchMembership's
// callback (its definition lives in an internal package).
type Membership = proto.Membership

// WatchMembership calls fn with every membership view the master
// broadcasts (at each change of the epoch, and again every second), in
// order, until stop is called. fn runs on the bus's delivery goroutine.
func (c *Client) WatchMembership(fn func(Membership)) (stop func(), err error) {
	sub, err := c.nc.Subscribe(c.subj.Membership(), func(msg *nats.Msg) {
		var v proto.Membership
		if err := json.Unmarshal(msg.Data, &v); err != nil {
			return // not from a master of this version; nothing to act on
		}
		fn(v)
	})
	if err != nil {
		return nil, fmt.Errorf("watch membership: %w", c.closedErr(err))
	}
	if err := c.nc.Flush(); err != nil {
		sub.Unsubscribe()
		return nil, fmt.Errorf("watch membership: %w", err)
	}
	return func() { sub.Unsubscribe() }, nil
}
