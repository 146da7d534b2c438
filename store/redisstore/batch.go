package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// call is one script call, made alone or waiting in the batcher's queue.
type call struct {
	ctx   context.Context
	req   request
	state atomic.Int32 // queued, sent or abandoned
	// The decoded reply: the instant, all (for 't'), the items (the
	// caller's, see decode, or one) and the error.
	now   int64
	all   bool
	items []item
	one   [1]item // the item of a call of one
	err   error
	done  chan struct{} // closed once the reply is set
}

// request is what one script call carries.
type request struct {
	op   string // ARGV[1]
	keys []string
	args []any
	// single marks a single-key Take ('g', or 't' with one key), which a
	// batch may send in a 'b' call instead, as take, with the other takes
	// of take.group.
	single bool
	take   take
}

// group says which calls one script may serve: those whose keys share a
// slot on a cluster, a tag on a ring, any on a single server.
type group struct {
	slot uint16
	tag  string
}

// groupOf returns the group of a key whose hash tag is tag.
func (s *Store) groupOf(tag string) group {
	switch s.routing {
	case cluster:
		return group{slot: slot(tag)}
	case ring:
		return group{tag: tag}
	}
	return group{}
}

const (
	queued int32 = iota
	sent
	abandoned
)

// run runs the script once with the request r, batching it with concurrent
// calls (see the package documentation), and decodes the reply (see
// decode): into items, or when items is nil into the one item it returns
// (none for a reset).
func (s *Store) run(ctx context.Context, r request, items []item) (now int64, all bool, one item, err error) {
	if err := ctx.Err(); err != nil {
		return 0, false, item{}, err
	}
	if s.unbatched {
		return r.do(ctx, s.client, items)
	}
	s.mu.Lock()
	if s.inFlight < s.maxInFlight {
		// Nothing to wait for: go now, alone.
		s.inFlight++
		s.mu.Unlock()
		if ctx.Done() == nil || s.deadlines && hasDeadline(ctx) {
			// Nothing can end the wait early, or the client bounds the
			// round trip's I/O by the context's deadline: stay on this
			// goroutine (no goroutine, channel or select per call).
			now, all, one, err := r.do(ctx, s.client, items)
			s.next()
			return now, all, one, err
		}
		// go-redis honours a context only with ContextTimeoutEnabled,
		// and then only its deadline: make the round trip on a goroutine
		// of its own, so that the caller returns when its context ends
		// whatever the client's settings.
		s.spawned.Add(1)
		c := newCall(ctx, r, items)
		c.state.Store(sent)
		go s.alone(c)
		return wait(ctx, c)
	}
	c := newCall(ctx, r, items)
	s.queue = append(s.queue, c)
	s.mu.Unlock()
	return wait(ctx, c)
}

func hasDeadline(ctx context.Context) bool {
	_, ok := ctx.Deadline()
	return ok
}

// newCall returns a call of r whose reply goes into items, or when items
// is nil into c.one (none for a reset).
func newCall(ctx context.Context, r request, items []item) *call {
	c := &call{ctx: ctx, req: r, items: items, done: make(chan struct{})}
	if items == nil && r.op != opReset {
		c.items = c.one[:]
	}
	return c
}

// do makes r's round trip on the caller's goroutine and decodes the reply
// as run does.
func (r *request) do(ctx context.Context, client Client, items []item) (now int64, all bool, one item, err error) {
	var buf [1]item
	dst := items
	if dst == nil && r.op != opReset {
		dst = buf[:]
	}
	now, all, err = r.decode(rateScript.Run(ctx, client, r.keys, r.args...), dst)
	return now, all, buf[0], err
}

// decode decodes the reply of r's script call into items.
func (r *request) decode(cmd *redis.Cmd, items []item) (now int64, all bool, err error) {
	v, err := cmd.Result()
	if err != nil {
		return 0, false, scriptErr(err)
	}
	return decode(r.op, v, items)
}

// wait waits for c's result or the end of ctx.
func wait(ctx context.Context, c *call) (now int64, all bool, one item, err error) {
	done := ctx.Done()
	if done == nil {
		<-c.done
		return c.now, c.all, c.one[0], c.err
	}
	select {
	case <-c.done:
		return c.now, c.all, c.one[0], c.err
	case <-done:
		// Never sent if still queued; otherwise the outcome is unknown.
		c.state.CompareAndSwap(queued, abandoned)
		return 0, false, item{}, ctx.Err()
	}
}

// alone makes the round trip of one call.
func (s *Store) alone(c *call) {
	c.now, c.all, c.err = c.req.decode(rateScript.Run(c.ctx, s.client, c.req.keys, c.req.args...), c.items)
	close(c.done)
	s.next()
}

// next ends a round trip: it hands the queue, if any, to a goroutine that
// sends it, keeping the round trip's place in flight.
func (s *Store) next() {
	s.mu.Lock()
	if len(s.queue) == 0 {
		s.inFlight--
		s.mu.Unlock()
		return
	}
	batch := s.takeBatch()
	s.mu.Unlock()
	go s.drain(batch)
}

// drain sends batches until the queue is empty.
func (s *Store) drain(batch []*call) {
	for {
		s.flush(batch)
		s.mu.Lock()
		if len(s.queue) == 0 {
			s.inFlight--
			s.mu.Unlock()
			return
		}
		batch = s.takeBatch()
		s.mu.Unlock()
	}
}

// takeBatch removes up to maxBatch calls from the queue; s.mu is held.
func (s *Store) takeBatch() []*call {
	n := min(len(s.queue), s.maxBatch)
	batch := s.queue[:n:n]
	s.queue = s.queue[n:]
	if len(s.queue) == 0 {
		s.queue = nil
	}
	return batch
}

// unit is one script call of a pipeline: a call of its own, or the takes
// of one group combined into one 'b' call.
type unit struct {
	calls []*call
	req   request
	cmd   *redis.Cmd
}

// flush sends the calls of batch still waiting as one pipeline, sends the
// script calls that met NOSCRIPT again with EVAL (which loads the script),
// and hands every call its result.
func (s *Store) flush(batch []*call) {
	live := batch[:0]
	for _, c := range batch {
		if c.state.CompareAndSwap(queued, sent) {
			live = append(live, c)
		}
	}
	if len(live) == 0 {
		return
	}
	s.pipelines.Add(1)
	s.batched.Add(int64(len(live)))

	// Combine the takes of each group, in queue order.
	units := make([]*unit, 0, 4)
	var takes map[group]*unit
	for _, c := range live {
		if !c.req.single {
			units = append(units, &unit{calls: []*call{c}, req: c.req})
			continue
		}
		u := takes[c.req.take.group]
		if u == nil {
			if takes == nil {
				takes = make(map[group]*unit, 1)
			}
			u = &unit{req: request{op: opBatch, args: []any{opBatch, 0}}}
			takes[c.req.take.group] = u
			units = append(units, u)
		}
		u.calls = append(u.calls, c)
		u.req.keys = append(u.req.keys, c.req.keys[0])
		u.req.args = c.req.take.appendBatch(u.req.args, c.req.args)
	}

	ctx, cancel := batchContext(live)
	defer cancel()
	pipe := s.client.Pipeline()
	for _, u := range units {
		u.cmd = pipe.EvalSha(ctx, rateScript.Hash(), u.req.keys, u.req.args...)
	}
	_, _ = pipe.Exec(ctx) // errors are per command
	var again []*unit
	for _, u := range units {
		if isNoScript(u.cmd.Err()) {
			again = append(again, u)
		}
	}
	if len(again) > 0 {
		pipe = s.client.Pipeline()
		for _, u := range again {
			u.cmd = pipe.Eval(ctx, rateSource, u.req.keys, u.req.args...)
		}
		_, _ = pipe.Exec(ctx)
	}
	for _, u := range units {
		if u.req.op != opBatch {
			c := u.calls[0]
			c.now, c.all, c.err = u.req.decode(u.cmd, c.items)
			close(c.done)
			continue
		}
		// Each take gets its item, and its own instant or else the
		// server clock.
		items := make([]item, len(u.calls))
		now, _, err := u.req.decode(u.cmd, items)
		for i, c := range u.calls {
			switch {
			case err != nil:
				c.err = err
			case items[i].err != nil:
				c.err = items[i].err
			case len(c.items) != 1:
				c.err = fmt.Errorf("redisstore: a take with room for %d items", len(c.items))
			default:
				c.items[0] = items[i]
				c.now = c.req.take.now
				if c.now == 0 {
					c.now = now
				}
			}
			close(c.done)
		}
	}
}

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// batchContext returns the context a pipeline runs under: the first call's
// values without its cancellation (one caller giving up must not fail the
// others), and the latest of the calls' deadlines when every call has one,
// so that a pipeline nobody waits for any more ends (with a client that
// has ContextTimeoutEnabled).
func batchContext(calls []*call) (context.Context, context.CancelFunc) {
	ctx := context.WithoutCancel(calls[0].ctx)
	var latest time.Time
	for _, c := range calls {
		d, ok := c.ctx.Deadline()
		if !ok {
			return ctx, func() {}
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(ctx, latest)
}
