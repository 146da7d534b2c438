package redisstore

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// call is one script call, made alone or waiting in the batcher's queue.
type call struct {
	ctx  context.Context
	keys []string
	args []any
	// take marks a single-key Take ("g", or "t" with one key), which a
	// batch combines with the other takes of its group into one "b" call.
	take  bool
	group group
	state atomic.Int32 // queued, sent or abandoned
	val   []int64
	err   error
	done  chan struct{} // closed once val and err are set
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

// run runs the script once with keys and args, batching it with concurrent
// calls (see the package documentation). take and g describe a single-key
// Take, which a batch may combine with others.
func (s *Store) run(ctx context.Context, keys []string, args []any, take bool, g group) ([]int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.unbatched {
		return reply(rateScript.Run(ctx, s.client, keys, args...))
	}
	s.mu.Lock()
	if s.inFlight < s.maxInFlight {
		// Nothing to wait for: go now, alone.
		s.inFlight++
		s.mu.Unlock()
		if ctx.Done() == nil {
			// Nothing can end the wait early: stay on this goroutine.
			v, err := reply(rateScript.Run(ctx, s.client, keys, args...))
			s.next()
			return v, err
		}
		// go-redis honours a context only with ContextTimeoutEnabled:
		// make the round trip on a goroutine of its own, so that the
		// caller returns when its context ends whatever the client's
		// settings.
		c := &call{ctx: ctx, keys: keys, args: args, done: make(chan struct{})}
		c.state.Store(sent)
		go s.alone(c)
		return wait(ctx, c)
	}
	c := &call{ctx: ctx, keys: keys, args: args, take: take, group: g, done: make(chan struct{})}
	s.queue = append(s.queue, c)
	s.mu.Unlock()
	return wait(ctx, c)
}

// wait waits for c's result or the end of ctx.
func wait(ctx context.Context, c *call) ([]int64, error) {
	done := ctx.Done()
	if done == nil {
		<-c.done
		return c.val, c.err
	}
	select {
	case <-c.done:
		return c.val, c.err
	case <-done:
		// Never sent if still queued; otherwise the outcome is unknown.
		c.state.CompareAndSwap(queued, abandoned)
		return nil, ctx.Err()
	}
}

// alone makes the round trip of one call.
func (s *Store) alone(c *call) {
	c.val, c.err = reply(rateScript.Run(c.ctx, s.client, c.keys, c.args...))
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
// of one group combined into one "b" call.
type unit struct {
	calls []*call
	keys  []string
	args  []any
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
		if !c.take {
			units = append(units, &unit{calls: []*call{c}, keys: c.keys, args: c.args})
			continue
		}
		u := takes[c.group]
		if u == nil {
			if takes == nil {
				takes = make(map[group]*unit, 1)
			}
			u = &unit{args: []any{"b", 0}}
			takes[c.group] = u
			units = append(units, u)
		}
		u.calls = append(u.calls, c)
		u.keys = append(u.keys, c.keys[0])
		u.args = appendBatchTake(u.args, c.args)
	}

	ctx, cancel := batchContext(live)
	defer cancel()
	pipe := s.client.Pipeline()
	for _, u := range units {
		u.cmd = pipe.EvalSha(ctx, rateScript.Hash(), u.keys, u.args...)
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
			u.cmd = pipe.Eval(ctx, rateSource, u.keys, u.args...)
		}
		_, _ = pipe.Exec(ctx)
	}
	for _, u := range units {
		v, err := reply(u.cmd)
		if u.args[0] != "b" {
			c := u.calls[0]
			c.val, c.err = v, err
			close(c.done)
			continue
		}
		if err == nil && len(v) != 1+5*len(u.calls) {
			err = errUnexpectedReply(len(v))
		}
		// Hand each take the reply of a call of its own, "t" or "g" (see
		// takeResult).
		var vals []int64
		if err == nil {
			vals = make([]int64, 7*len(u.calls))
		}
		for i, c := range u.calls {
			if err != nil {
				c.err = err
			} else {
				cv := vals[7*i : 7*i+7 : 7*i+7]
				cv[0], _ = takeTimes(c.args)
				if cv[0] == 0 {
					cv[0] = v[0]
				}
				item := v[1+5*i : 1+5*i+5] // allowed, remaining, retry after, reset after, delay
				if c.args[0] == "g" {
					// allowed, remaining, reset after, retry after, delay
					cv[1], cv[2], cv[3], cv[4], cv[5] = item[0], item[1], item[3], item[2], item[4]
					cv = cv[:6]
				} else {
					cv[1] = item[0]
					copy(cv[2:], item)
				}
				c.val = cv
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
