package outbound

import (
	"context"
	"math"
	"strconv"
	"time"

	"github.com/sluicerl/sluice/store"
)

// What a key shares with the fleet through the store, besides its pacing
// GCRA and its pause (pacing.go): the adapted rate (Config.SharedRate) and
// a learned window budget. Both are encoded as the remaining units of a
// long fixed window; the layout is the stored format, shared with every
// process of the fleet, so it must not change.

// sharedRateLimit encodes a rate (in thousandths of a request per second)
// as the remaining units of a long fixed window: Sync writes it, a peek
// reads it. A fresh window (nothing written, or written more than a day
// ago) reads as full: no shared rate.
var sharedRateLimit = store.Limit{Name: "outbound-rate", Algorithm: store.FixedWindow, Rate: 1 << 40, Period: 24 * time.Hour}

func (c *Client) readShared(ctx context.Context, ks *keyState) (float64, bool) {
	r, err := c.store.Take(ctx, store.TakeParams{Key: ks.names.rate, Limit: sharedRateLimit, Cost: 0})
	if err != nil || r.Remaining >= sharedRateLimit.Rate || r.Remaining <= 0 {
		return 0, false
	}
	return float64(r.Remaining) / 1000, true
}

func (c *Client) writeShared(ctx context.Context, ks *keyState, rate float64) {
	v := int64(math.Round(rate * 1000))
	v = min(max(v, 1), sharedRateLimit.Rate-1)
	_, _ = c.store.Sync(ctx, store.SyncParams{Key: ks.names.rate, Limit: sharedRateLimit, Remaining: v})
}

// syncPause pauses the key for the fleet for d µs.
func (c *Client) syncPause(ctx context.Context, ks *keyState, d int64) {
	_, _ = c.store.Sync(ctx, store.SyncParams{
		Key: ks.names.pause, Limit: pauseLimit, Remaining: 0, ResetAfter: time.Duration(d) * time.Microsecond,
	})
}

// syncBan marks the key's pause of d µs as a ban (a 418, signal.Report's
// Banned) for every process sharing the store: one that hears of the pause
// reads the mark (readBan) and starts over as the process banned does
// (aimd's restart), rather than cut its rate as for a refusal and resume,
// when the ban ends, at a rate the provider banned the fleet for (issue
// 18). The mark is a pause of its own key, so it ends with the ban; it is
// written before the pause, so that no process finds the pause without it.
func (c *Client) syncBan(ctx context.Context, ks *keyState, d int64) {
	_, _ = c.store.Sync(ctx, store.SyncParams{
		Key: ks.names.ban, Limit: pauseLimit, Remaining: 0, ResetAfter: time.Duration(d) * time.Microsecond,
	})
}

// readBan reports whether the key's fleet-wide pause is a ban (syncBan). A
// store that does not answer says no: the pause is then a refusal's.
func (c *Client) readBan(ctx context.Context, ks *keyState) bool {
	r, err := c.store.Take(ctx, store.TakeParams{Key: ks.names.ban, Limit: pauseLimit, Cost: 0})
	return err == nil && !r.Allowed && r.RetryAfter > 0
}

// budgetLimit keeps a key's learned window budget (see usedWeight) in the
// store for every process sharing it, encoded like sharedRateLimit, under a
// key that names the window's length (a budget learned for a minute's
// window means nothing for a second's). A stored budget lasts until the end
// of the UTC day it was written in (fixed windows align to the epoch); the
// process that learned it keeps it, and its next refusal writes it again.
var budgetLimit = store.Limit{Name: "outbound-budget", Algorithm: store.FixedWindow, Rate: 1 << 40, Period: 24 * time.Hour}

func budgetKey(ks *keyState, window int64) string {
	return ks.names.budget + ":" + strconv.FormatInt(window, 10)
}

func (c *Client) readBudget(ctx context.Context, ks *keyState, window int64) {
	r, err := c.store.Take(ctx, store.TakeParams{Key: budgetKey(ks, window), Limit: budgetLimit, Cost: 0})
	if err != nil || r.Remaining >= budgetLimit.Rate || r.Remaining <= 0 {
		return
	}
	ks.adapt.takeBudget(window, r.Remaining) // if still the window it was learned for
}

func (c *Client) writeBudget(ctx context.Context, ks *keyState, window, budget int64) {
	v := min(max(budget, 1), budgetLimit.Rate-1)
	_, _ = c.store.Sync(ctx, store.SyncParams{Key: budgetKey(ks, window), Limit: budgetLimit, Remaining: v})
}

// fleetCountLimit keeps, for a clock second in which the fleet was refused
// late, how many calls every process sharing the key had served in it:
// each process adds its own share (tellShare) as the used units of a long
// fixed window, under a key naming the second, and reads the sum once the
// pause is over (readFleetCount). A clock-aligned window's count is the
// fleet's; each process's share of it moves from one episode to the next,
// so only the sum shows it (aimd.Controller.FleetCount). A count lasts
// until the end of the UTC hour it was written in (fixed windows align to
// the epoch), so that a fleet refused now and then leaves few keys behind:
// one written in the last second or two of an hour reads as none after
// it, and that episode shows nothing.
var fleetCountLimit = store.Limit{Name: "outbound-count", Algorithm: store.FixedWindow, Rate: 1 << 40, Period: time.Hour}

func countKey(ks *keyState, sec int64) string {
	return ks.names.count + ":" + strconv.FormatInt(sec, 10)
}

func callsKey(ks *keyState, sec int64) string {
	return ks.names.calls + ":" + strconv.FormatInt(sec, 10)
}

// addCount adds n to the fleet's count under key (fleetCountLimit). With
// SharedRate the fleet paces at one rate, not each process at its share:
// no count is kept (nor read).
func (c *Client) addCount(ctx context.Context, key string, n int) {
	if c.shared {
		return
	}
	_, _ = c.store.Take(ctx, store.TakeParams{Key: key, Limit: fleetCountLimit, Cost: int64(n)})
}

// readCount reads the fleet's count under key; false when there is none to
// read (SharedRate, or a store that does not answer).
func (c *Client) readCount(ctx context.Context, key string) (int, bool) {
	if c.shared {
		return 0, false
	}
	r, err := c.store.Take(ctx, store.TakeParams{Key: key, Limit: fleetCountLimit, Cost: 0})
	if err != nil || r.Remaining >= fleetCountLimit.Rate || r.Remaining < 0 {
		return 0, false
	}
	return int(fleetCountLimit.Rate - r.Remaining), true
}

// tellShare adds this process's share, calls served in clock second sec,
// to the fleet's count of that second.
func (c *Client) tellShare(ctx context.Context, ks *keyState, sec int64, share int) {
	c.addCount(ctx, countKey(ks, sec), share)
}

// readFleetCount reads the fleet's count of clock second sec and gives it
// to the key's controller. A store that does not answer tells nothing.
func (c *Client) readFleetCount(ctx context.Context, ks *keyState, sec, now int64) {
	if n, ok := c.readCount(ctx, countKey(ks, sec)); ok {
		ks.adapt.fleetCount(now, sec, n)
	}
}

// tellCalls adds this process's calls answered in clock second sec to the
// fleet's count of them, under keys of their own (a second may also be a
// refusal's, whose count is of calls served).
func (c *Client) tellCalls(ctx context.Context, ks *keyState, sec int64, n int) {
	c.addCount(ctx, callsKey(ks, sec), n)
}

// readFleetCalls reads the fleet's count of calls answered in clock second
// sec, of which own were this process's, and gives the key's controller its
// share of them and a test of its window read (aimd.Controller.FleetCalls).
// A store that does not answer tells nothing: the share told last lapses in
// time.
func (c *Client) readFleetCalls(ctx context.Context, ks *keyState, sec int64, own int, now int64) {
	if n, ok := c.readCount(ctx, callsKey(ks, sec)); ok {
		ks.adapt.fleetCalls(now, sec, own, n)
	}
}
