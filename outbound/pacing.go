package outbound

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sluicerl/sluice/clock"
	"github.com/sluicerl/sluice/store"
)

// pacing returns the GCRA limit for rate r.
func (c *Client) pacing(r float64) store.Limit {
	r = min(max(r, 1e-3), 1e6)
	return store.Limit{Name: "outbound", Rate: 1, Period: time.Duration(float64(time.Second) / r), Burst: c.burst}
}

// spacing returns the limit of the fleet's spacing GCRA at rate r (see
// turn.space): a burst of one, so that no two of the fleet's calls leave
// closer than its interval.
func spacing(r float64) store.Limit {
	r = min(max(r, 1e-3), 1e6)
	return store.Limit{Name: "outbound-space", Rate: 1, Period: time.Duration(float64(time.Second) / r), Burst: 1}
}

// pauseLimit is the fleet-wide pause of a key: so fast (a million a
// second, a millisecond's burst) that it never holds anything back, until a
// Sync with nothing remaining pushes it into the future until a
// Retry-After, a ban or an exhausted quota has passed. Every attempt takes
// it together with its pacing limit, all or nothing, in one store call.
var pauseLimit = store.Limit{Name: "outbound-pause", Rate: 1, Period: time.Microsecond, Burst: 1000}

func sleep(ctx context.Context, clk clock.Clock, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// wait is the rate limiter: it blocks until the key's pacing and the
// fleet's pause let one attempt through.
func (c *Client) wait(ctx context.Context, ks *keyState) error { return c.waitUntil(ctx, ks, 0) }

// waitUntil is wait that gives up, with a *WaitError saying how long the
// caller should wait, rather than sleep past limit (Unix µs; 0: no limit).
func (c *Client) waitUntil(ctx context.Context, ks *keyState, limit int64) error {
	start := c.clk.Now()
	defer func() {
		if c.metrics != nil {
			c.metrics.wait.WithLabelValues(ks.label).Observe(c.clk.Now().Sub(start).Seconds())
		}
	}()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if c.shared {
			if r, ok := c.readShared(ctx, ks); ok {
				ks.adapt.adopt(r)
			}
		}
		now := c.now()
		tn := ks.adapt.turn(now)
		paceKey := ks.names.pace
		if tn.stated {
			// The provider stated its rate: that is the fleet's rate,
			// so every process paces on the fleet's GCRA.
			paceKey = ks.names.fleet
		}
		if tn.paused {
			if limit > 0 && tn.until > limit {
				return &WaitError{Key: ks.key, RetryAfter: time.Duration(tn.until-now) * time.Microsecond, Paused: true}
			}
			if err := sleep(ctx, c.clk, time.Duration(tn.until-now)*time.Microsecond); err != nil {
				return err
			}
			continue
		}
		maxDelay := c.reserveFor(ctx, limit)
		lim := c.pacing(tn.rate)
		items := [2]store.Item{
			{Key: paceKey, Limit: lim, Cost: 1},
			{Key: ks.names.pause, Limit: pauseLimit, Cost: 1},
		}
		asked := c.clk.Now()
		all, err := c.store.TakeAll(ctx, store.TakeAllParams{Items: items[:], MaxDelay: maxDelay})
		rtt := c.clk.Now().Sub(asked)
		if err != nil {
			return fmt.Errorf("outbound: key %q: rate store: %w", ks.key, err)
		}
		if len(all.Results) != len(items) {
			return fmt.Errorf("outbound: key %q: rate store answered %d results for %d items", ks.key, len(all.Results), len(items))
		}
		if all.Allowed {
			delay := max(all.Results[0].Delay, all.Results[1].Delay)
			ks.adapt.booked(now, delay.Microseconds())
			// giveBack returns the booked turn when the caller gives up
			// waiting for it.
			giveBack := func() {
				_, _ = c.store.Settle(context.WithoutCancel(ctx), store.SettleParams{
					Key: paceKey, Limit: lim, Reserved: 1, Actual: 0, ReservedAt: all.Results[0].At,
				})
			}
			slept := c.clk.Now()
			if err := sleep(ctx, c.clk, delay); err != nil {
				giveBack()
				return err
			}
			late := time.Duration(0)
			if delay > 0 {
				late = c.clk.Now().Sub(slept) - delay
				// A pause may have begun, here or in another process,
				// while this turn was booked: a turn booked before a
				// Retry-After must not be spent during it.
				if ks.adapt.paused(c.now()) {
					continue
				}
				asked := c.clk.Now()
				p, err := c.store.Take(ctx, store.TakeParams{Key: ks.names.pause, Limit: pauseLimit, Cost: 0})
				rtt += c.clk.Now().Sub(asked)
				if err != nil {
					return fmt.Errorf("outbound: key %q: rate store: %w", ks.key, err)
				}
				if !p.Allowed && p.RetryAfter > 0 {
					c.notePause(ctx, ks, p.RetryAfter)
					continue
				}
			}
			// A turn that was due at once says nothing of the timers (on a
			// starved machine it is often one overdue), only of the store.
			if delay > 0 {
				ewma(&c.lag, late)
			}
			if jitter := c.storeJitter(rtt); delay > 0 || jitter > 0 {
				ewma(&c.sendLag, late+jitter)
			}
			if tn.space > 0 {
				// The fleet's spacing, taken at this call's own turn,
				// not when it was booked: a turn booked ahead leaves
				// later, and the fleet's next turn counts from when it
				// does. A turn further off than a turn may be booked
				// is waited for, as the own pace's is: left on its own
				// pace, the call would leave within a token's time of
				// another process's (issue 18: at 1-2 calls a second,
				// the fleet's interval is longer than MaxReserve, and
				// two processes resuming from a pause together were
				// refused every time against a bucket of one token).
				spaceLim := spacing(tn.space)
				sp, err := c.store.Take(ctx, store.TakeParams{Key: ks.names.space, Limit: spaceLim, Cost: 1, MaxDelay: c.reserveFor(ctx, limit)})
				if err != nil {
					giveBack()
					return fmt.Errorf("outbound: key %q: rate store: %w", ks.key, err)
				}
				if !sp.Allowed {
					giveBack()
					if err := c.holdOff(ctx, ks, c.now(), limit, max(sp.RetryAfter, time.Millisecond), false); err != nil {
						return err
					}
					continue
				}
				if sp.Allowed && sp.Delay > 0 {
					if err := sleep(ctx, c.clk, sp.Delay); err != nil {
						giveBack()
						_, _ = c.store.Settle(context.WithoutCancel(ctx), store.SettleParams{
							Key: ks.names.space, Limit: spaceLim, Reserved: 1, Actual: 0, ReservedAt: sp.At,
						})
						return err
					}
					if ks.adapt.paused(c.now()) {
						continue
					}
				}
			}
			if d := c.spread(ks, lim, limit, turnAt(asked, slept, all.Results[0].At, delay)); d > 0 {
				if err := sleep(ctx, c.clk, d); err != nil {
					giveBack()
					return err
				}
				if ks.adapt.paused(c.now()) {
					continue
				}
			}
			// Another call of this process may have been refused while
			// the store was answering: its pause holds here already
			// but had not reached the store, so the store let this
			// turn through, and the call would be refused too (issue
			// 18, real processes against a clock window: calls sent
			// 0.3-0.5 ms after their own process's refusal came, one
			// more refusal for a provider that bans after five). The
			// loop's next turn sleeps until the pause ends.
			if ks.adapt.refused(c.now()) {
				continue
			}
			return nil
		}
		var wait time.Duration
		for _, r := range all.Results {
			if !r.Allowed {
				wait = max(wait, r.RetryAfter)
			}
		}
		if !all.Results[0].Allowed {
			ks.adapt.heldBack(now)
		}
		p := all.Results[1]
		if !p.Allowed && p.RetryAfter > 0 {
			c.notePause(ctx, ks, p.RetryAfter)
		}
		if err := c.holdOff(ctx, ks, now, limit, wait, !p.Allowed); err != nil {
			return err
		}
	}
}

// holdOff waits, at now, for a turn wait away, at most MaxReserve (at
// least a millisecond) before the caller asks again, or gives up with a
// *WaitError when the turn is past limit (Unix µs; 0: none). paused says
// the key's pause, not its pace, holds the turn back.
func (c *Client) holdOff(ctx context.Context, ks *keyState, now, limit int64, wait time.Duration, paused bool) error {
	if limit > 0 && now+wait.Microseconds() > limit {
		return &WaitError{Key: ks.key, RetryAfter: wait, Paused: paused}
	}
	return sleep(ctx, c.clk, min(wait, max(c.maxReserve, time.Millisecond)))
}

// reserveFor returns how far ahead a turn may be booked for a call that
// gives up at ctx's deadline or at limit (Unix µs; 0: none): at most
// Config.MaxReserve.
func (c *Client) reserveFor(ctx context.Context, limit int64) time.Duration {
	d := c.maxReserve
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, max(dl.Sub(c.clk.Now()), 0))
	}
	if limit > 0 {
		d = min(d, max(time.Duration(limit-c.now())*time.Microsecond, 0))
	}
	return d
}

// turnAt returns when (Unix µs) a turn booked with a store call sent at
// asked and answered at answered came due, delay after the store's
// decision: at the decision's own instant (Result.At) when that lies
// between the two on this process's clock (a store on this machine, or one
// whose clock agrees within the call), otherwise as if decided when the
// answer came. A turn whose answer reached the process late (a store
// starved of CPU writing it) came due where the store booked it, not
// delay after the late answer.
func turnAt(asked, answered time.Time, at int64, delay time.Duration) int64 {
	from := answered.UnixMicro()
	if at >= asked.UnixMicro() && at <= from {
		from = at
	}
	return from + delay.Microseconds()
}

// passedTurns and passedFloor: an attempt more than passedTurns intervals
// of its pace and passedFloor after its turn (see turnAt) left the pace
// behind in a stall (spread).
const (
	passedTurns = 2
	passedFloor = 50 * time.Millisecond
)

// spread returns how much longer an attempt whose turn came due at turn
// (Unix µs, see turnAt) waits so that it leaves no sooner than half a
// pacing interval (lim) after the last attempt this process sent on the
// key, and takes that instant as the key's last. The store books turns a
// whole interval apart, but an attempt leaves when the store's answer
// reaches it: answers a stalling store (a Redis starved of CPU) held back
// arrive together, and every turn booked in the stall would leave at that
// instant, a bunch the provider refuses or queues (issue 18: on a
// saturated machine 4 calls of one process left at once, 35 to 122 ms
// after their turns; a 429 with a whole-second Retry-After then paused the
// fleet for a second). Spread half an interval apart the bunch drains at
// twice the rate, and a timer late by less than half an interval delays
// nothing.
//
// An attempt whose turn passed more than passedTurns intervals (and
// passedFloor) before keeps a whole interval instead: a bunch that long
// held back, drained at twice the rate, is more than a provider's small
// burst takes (issue 18, a saturated machine, traced: a Redis that decided
// turns 40 ms apart but answered them 75-160 ms late sent 14 calls of the
// fleet in 176 ms at a level of 46/s of 50, and the provider's 429 paused
// the fleet for a whole second). The workers waiting here book no more
// turns, so the bunch drains at the pace.
//
// A key paced with a burst (Config.Burst above 1) is let through at once,
// as its burst allows, and an attempt never waits past limit (Unix µs; 0:
// none), the caller's MaxWait: its turn is booked, and it leaves rather
// than fail.
func (c *Client) spread(ks *keyState, lim store.Limit, limit, turn int64) time.Duration {
	if lim.Burst > 1 {
		return 0
	}
	gap := (lim.Period / 2).Microseconds()
	now := c.now()
	if now-turn > max(passedTurns*lim.Period, passedFloor).Microseconds() {
		gap = lim.Period.Microseconds()
	}
	for {
		last := ks.left.Load()
		at := max(now, last+gap)
		if limit > 0 {
			// Sent early with the bunch: the next still keeps its
			// distance from the last one spread.
			at = max(min(at, limit), now)
		}
		if ks.left.CompareAndSwap(last, max(last, at)) {
			return time.Duration(at-now) * time.Microsecond
		}
	}
}

// notePause tells the key's controller about a pause another process
// synced into the store, as if this process had been told the Retry-After
// itself: the key pauses and its rate decreases once for the episode, so
// that the whole fleet slows down, not only the process that was
// throttled.
func (c *Client) notePause(ctx context.Context, ks *keyState, d time.Duration) {
	now := c.now()
	// A ban another process was told of: start over as it did. Read only
	// for a pause this process has not heard of (once an episode).
	banned := !ks.adapt.knows(now, d.Microseconds()) && c.readBan(ctx, ks)
	news, window := ks.adapt.notePause(now, d.Microseconds(), c.lag.Load(), banned)
	if news && window > 0 {
		// The process that was refused may have learned the window's
		// budget from it: take it up.
		c.readBudget(ctx, ks, window)
	}
	if news {
		if k, n := ks.adapt.shareToTell(now); k != 0 {
			c.tellShare(ctx, ks, k, n)
		}
	}
}

// ewma moves the average at a (µs) by an eighth of the way to late (the
// first sample sets it): Client.lag with how late a pacing timer fired
// (the process's own scheduling delay on a starved machine), Client.
// sendLag with that plus how much longer than usual the store's answers
// took (storeJitter). Both are 0 on a fake clock with a store that
// answers at once.
func ewma(a *atomic.Int64, late time.Duration) {
	us := max(late.Microseconds(), 0)
	for {
		old := a.Load()
		v := us
		if old > 0 {
			v = old + (us-old)/8
		}
		if a.CompareAndSwap(old, v) {
			return
		}
	}
}

// storeJitter returns how much longer than the fastest of the last
// BaseWindow or two the store took to book a turn (rtt, every store call
// on the way to the attempt): the part of the round trip that differs
// from call to call. A store that answers in a steady millisecond shifts
// every call alike, and no two leave together. One that stalls (a Redis
// starved of CPU on a busy machine) holds back every call booked in the
// stall, and they leave together when it answers (issue 18: on a
// saturated machine, 4 calls of a process left at the same instant, 35 to
// 122 ms after their turns, while its timers fired within a millisecond;
// the provider's queue that bunch made read as the limit, and the fleet
// paced at 0.75-0.84 of it, under a fixed pace at 0.9x).
func (c *Client) storeJitter(rtt time.Duration) time.Duration {
	us := max(rtt.Microseconds(), 0)
	now := c.now()
	c.rttMu.Lock()
	base := c.rtt.Add(now, us)
	c.rttMu.Unlock()
	return time.Duration(max(us-base, 0)) * time.Microsecond
}

// lagShare: an attempt's latency stops meaning the provider's when the
// process's timers fire late by 1/lagShare of it or more. An attempt
// passes several scheduling points (the request's goroutine, the
// transport's, the provider's), each as late as a timer on a starved
// machine, so its latency inflates by several times the lag.
const lagShare = 8

// starved reports whether latency (µs) is not the provider's to judge: the
// process's calls leave their turns so late (its timers fire late, or its
// store stalls: Client.lag, Client.sendLag) that its own delay is an
// eighth of the latency or more (issue 18: a starved client must not slow
// itself down without any throttle).
func (c *Client) starved(latency int64) bool {
	// sendLag also counts the turns that were due at once, which say
	// nothing of the timers: a process whose timers fire late finds many
	// of its turns overdue, and their small jitter would dilute how late
	// its timers fire.
	lag := max(c.lag.Load(), c.sendLag.Load())
	return lag > 0 && lagShare*lag >= latency
}
