package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/flexps/flexps/internal/bus"
	"github.com/flexps/flexps/internal/proto"
	"github.com/flexps/flexps/tasks"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
)

// ErrTaskFailed is wrapped when a task ends failed or cancelled.
var ErrTaskFailed = errors.New("task failed")

// ErrNoMaster is wrapped when no master answers.
var ErrNoMaster = errors.New("no master answered")

// Client submits tasks to a master and follows them.
type Client struct {
	nc      *nats.Conn
	subj    bus.Subjects
	cluster string
	owned   bool
	// Timeout bounds each request to the master (default 30s; a
	// submission lists the task's inputs, which may take a while on HDFS).
	Timeout time.Duration
}

// NewClient talks to the master of cluster over nc.
func NewClient(nc *nats.Conn, cluster string) *Client {
	return &Client{nc: nc, subj: bus.For(cluster), cluster: cluster, Timeout: 30 * time.Second}
}

// Close closes the connection if the client opened it.
func (c *Client) Close() {
	if c.owned {
		c.nc.Close()
	}
}

func (c *Client) request(ctx context.Context, subject string, req, rep any) error {
	data, err := json.Marshal(req)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	msg, err := c.nc.RequestWithContext(ctx, subject, data)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("%w for cluster %q on %s: %v", ErrNoMaster, c.cluster, c.nc.ConnectedUrlRedacted(), err)
		}
		return err
	}
	return json.Unmarshal(msg.Data, rep)
}

// Submit validates the task against this process's registry and sends it.
func (c *Client) Submit(ctx context.Context, t *tasks.MultiStageTask) (string, error) {
	t.Normalize()
	if err := t.Validate(); err != nil {
		return "", err
	}
	if t.ID == "" {
		t.ID = "t" + nuid.Next()[10:]
	}
	var rep proto.SubmitReply
	if err := c.request(ctx, c.subj.Submit(), proto.SubmitRequest{Task: *t}, &rep); err != nil {
		return "", err
	}
	if rep.Error != "" {
		return "", errors.New(rep.Error)
	}
	return rep.ID, nil
}

// Status asks the master for one task ("" for all) and the slaves.
func (c *Client) Status(ctx context.Context, id string) (proto.StatusReply, error) {
	var rep proto.StatusReply
	if err := c.request(ctx, c.subj.Status(), proto.StatusRequest{ID: id}, &rep); err != nil {
		return rep, err
	}
	if rep.Error != "" {
		return rep, errors.New(rep.Error)
	}
	return rep, nil
}

// Cancel stops a task.
func (c *Client) Cancel(ctx context.Context, id string) error {
	var rep proto.CtlReply
	if err := c.request(ctx, c.subj.Cancel(), proto.CancelRequest{ID: id}, &rep); err != nil {
		return err
	}
	if !rep.OK {
		return errors.New(rep.Error)
	}
	return nil
}

// SubmitAndWait submits t and follows it to its end; fn (may be nil) sees
// every event. A failed task returns its status and an error wrapping
// ErrTaskFailed with the master's reason.
func (c *Client) SubmitAndWait(ctx context.Context, t *tasks.MultiStageTask, fn func(proto.TaskEvent)) (proto.TaskStatus, error) {
	t.Normalize()
	if err := t.Validate(); err != nil {
		return proto.TaskStatus{}, err
	}
	if t.ID == "" {
		t.ID = "t" + nuid.Next()[10:]
	}
	// Subscribe before submitting so no event is missed.
	f, err := c.follow(t.ID)
	if err != nil {
		return proto.TaskStatus{}, err
	}
	defer f.Unsubscribe()
	id, err := c.Submit(ctx, t)
	if err != nil {
		return proto.TaskStatus{}, err
	}
	return c.wait(ctx, id, f, fn)
}

// Follow follows a submitted task to its end.
func (c *Client) Follow(ctx context.Context, id string, fn func(proto.TaskEvent)) (proto.TaskStatus, error) {
	f, err := c.follow(id)
	if err != nil {
		return proto.TaskStatus{}, err
	}
	defer f.Unsubscribe()
	return c.wait(ctx, id, f, fn)
}

func (c *Client) follow(id string) (*nats.Subscription, error) {
	sub, err := c.nc.SubscribeSync(c.subj.TaskEvents(id))
	if err != nil {
		return nil, err
	}
	sub.SetPendingLimits(-1, -1)
	return sub, c.nc.Flush()
}

func finished(s proto.TaskStatus) bool {
	return s.State == proto.Done || s.State == proto.Failed || s.State == proto.Cancelled
}

func (c *Client) wait(ctx context.Context, id string, sub *nats.Subscription, fn func(proto.TaskEvent)) (proto.TaskStatus, error) {
	end := func(s proto.TaskStatus) (proto.TaskStatus, error) {
		if s.State == proto.Done {
			return s, nil
		}
		return s, fmt.Errorf("%w: task %s (%s) %s: %s", ErrTaskFailed, s.ID, s.Name, s.State, s.Reason)
	}
	// Events can be missed (a master restarted, a slow subscriber); poll
	// the status now and then so the wait always ends.
	lastPoll := time.Now()
	for {
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		msg, err := sub.NextMsgWithContext(wctx)
		cancel()
		if ctx.Err() != nil {
			return proto.TaskStatus{}, ctx.Err()
		}
		if err == nil {
			var ev proto.TaskEvent
			if json.Unmarshal(msg.Data, &ev) == nil {
				if fn != nil {
					fn(ev)
				}
				if (ev.Kind == "done" || ev.Kind == "failed") && finished(ev.Status) {
					return end(ev.Status)
				}
			}
		}
		if time.Since(lastPoll) >= 2*time.Second {
			lastPoll = time.Now()
			rep, err := c.Status(ctx, id)
			if err != nil {
				if errors.Is(err, ErrNoMaster) {
					return proto.TaskStatus{}, err
				}
				continue
			}
			if len(rep.Tasks) == 1 && finished(rep.Tasks[0]) {
				if fn != nil {
					fn(proto.TaskEvent{Kind: map[bool]string{true: "done", false: "failed"}[rep.Tasks[0].State == proto.Done], Status: rep.Tasks[0]})
				}
				return end(rep.Tasks[0])
			}
		}
	}
}
