// Package slottest is the conformance suite of store.SlotStore: every
// backend that keeps slots calls Run from its own tests and passes it
// unchanged. It covers seed 003's test list: the proportional first window
// and its constrained jitter, overflow to the next window, the skip over
// full windows, the CLOSED status at the last slot, the isolation of
// far-future events, idempotency (also under concurrent duplicates), batch
// assignment, config versions with shared counters, and 100 goroutines on
// one target time checked by VerifySlots.
package slottest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/store"
)

// NewStore returns a store with no slots and no configs, isolated from
// every other call's store (its own schema or file).
type NewStore func(t *testing.T) store.SlotStore

// T0 is a window boundary for every window size the suite uses.
var T0 = time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)

// Run runs the suite. Subtests run in parallel, each on a store of its own.
func Run(t *testing.T, newStore NewStore) {
	t.Run("ProportionalFirstWindow", func(t *testing.T) { t.Parallel(); testProportional(t, newStore(t)) })
	t.Run("Overflow", func(t *testing.T) { t.Parallel(); testOverflow(t, newStore(t)) })
	t.Run("SkipsFullWindows", func(t *testing.T) { t.Parallel(); testSkip(t, newStore(t)) })
	t.Run("ClosedAtLastSlot", func(t *testing.T) { t.Parallel(); testClosed(t, newStore(t)) })
	t.Run("FarFutureIsolation", func(t *testing.T) { t.Parallel(); testFarFuture(t, newStore(t)) })
	t.Run("Idempotent", func(t *testing.T) { t.Parallel(); testIdempotent(t, newStore(t)) })
	t.Run("ConcurrentDuplicates", func(t *testing.T) { t.Parallel(); testConcurrentDuplicates(t, newStore(t)) })
	t.Run("Configs", func(t *testing.T) { t.Parallel(); testConfigs(t, newStore(t)) })
	t.Run("Batch", func(t *testing.T) { t.Parallel(); testBatch(t, newStore(t)) })
	t.Run("BatchBeyondHeadroom", func(t *testing.T) { t.Parallel(); testBatchBeyondHeadroom(t, newStore(t)) })
	t.Run("ConcurrentBatchDuplicates", func(t *testing.T) { t.Parallel(); testConcurrentBatchDuplicates(t, newStore(t)) })
	t.Run("BatchMatchesSingle", func(t *testing.T) { t.Parallel(); testBatchMatchesSingle(t, newStore, newStore(t)) })
	t.Run("InvalidInput", func(t *testing.T) { t.Parallel(); testInvalid(t, newStore(t)) })
	t.Run("Concurrent100", func(t *testing.T) { t.Parallel(); testConcurrent(t, newStore(t)) })
	t.Run("SubMicrosecondRequest", func(t *testing.T) { t.Parallel(); testSubMicrosecond(t, newStore(t)) })
}

// testSubMicrosecond asks for times between two microseconds (the unit
// slots are kept in), with the smallest jitter and in other time zones:
// the slot is never before the requested instant, in single and batch
// assignment alike.
func testSubMicrosecond(t *testing.T, s store.SlotStore) {
	c := put(t, s, "sub", 10, time.Second, 0)
	paris := time.FixedZone("UTC+2", 2*3600)
	reqs := []time.Time{
		T0.Add(999_999_999 * time.Nanosecond).In(paris), // the window's last µs, rounded up: the next window
		T0.Add(500*time.Millisecond + 1),
		T0.Add(2*time.Second + 999),
	}
	for i, req := range reqs {
		sl := assign(t, s, c, fmt.Sprint("sub-", i), req, 0)
		require.False(t, sl.ScheduledTime.Before(req), "event %d: scheduled %s before requested %s", i, sl.ScheduledTime, req)
		require.False(t, sl.RequestedTime.Before(req), "event %d: requested time recorded as %s, before %s", i, sl.RequestedTime, req)
		require.Equal(t, time.UTC, sl.ScheduledTime.Location())
	}
	evs := make([]store.SlotEvent, len(reqs))
	for i, req := range reqs {
		evs[i] = store.SlotEvent{EventID: fmt.Sprint("subb-", i), RequestedTime: req}
	}
	res, err := s.AssignSlots(context.Background(), store.AssignSlotsParams{Config: c, Events: evs})
	require.NoError(t, err)
	for i, r := range res {
		require.NoError(t, r.Err)
		require.False(t, r.Slot.ScheduledTime.Before(reqs[i]), "batch event %d: scheduled %s before requested %s", i, r.Slot.ScheduledTime, reqs[i])
	}
	Verify(t, s)
}

func put(t *testing.T, s store.SlotStore, name string, max int64, size time.Duration, headroom int64) store.SlotConfig {
	t.Helper()
	c, err := s.PutSlotConfig(context.Background(), store.SlotConfig{Name: name, MaxPerWindow: max, WindowSize: size, Headroom: headroom})
	require.NoError(t, err)
	return c
}

func assign(t *testing.T, s store.SlotStore, c store.SlotConfig, id string, at time.Time, j float64) store.Slot {
	t.Helper()
	sl, err := s.AssignSlot(context.Background(), store.AssignSlotParams{Config: c, Event: store.SlotEvent{EventID: id, RequestedTime: at, Jitter: j}})
	require.NoError(t, err, id)
	return sl
}

// Verify fails t if VerifySlots finds a problem, and returns the report.
func Verify(t testing.TB, s store.SlotStore) store.SlotReport {
	t.Helper()
	rep, err := s.VerifySlots(context.Background())
	require.NoError(t, err)
	require.Empty(t, rep.Problems)
	return rep
}

func windows(t *testing.T, s store.SlotStore, name string, from time.Time, n int, size time.Duration) []store.SlotWindow {
	t.Helper()
	ws, err := s.SlotWindows(context.Background(), name, from, from.Add(time.Duration(n)*size), n)
	require.NoError(t, err)
	return ws
}

func testProportional(t *testing.T, s store.SlotStore) {
	const size = 4 * time.Second
	c := put(t, s, "p", 100, size, 0)
	// One second into the window: 3/4 of it remains, so 75 slots.
	req := T0.Add(time.Second)
	rng := rand.New(rand.NewPCG(1, 2))
	perWindow := map[time.Time]int{}
	for i := range 100 {
		j := rng.Float64()
		sl := assign(t, s, c, fmt.Sprintf("p-%d", i), req, j)
		require.Equal(t, store.SlotNew, sl.Status)
		require.False(t, sl.ScheduledTime.Before(req), "scheduled before requested")
		require.True(t, sl.ScheduledTime.Before(sl.WindowStart.Add(size)))
		require.False(t, sl.ScheduledTime.Before(sl.WindowStart))
		perWindow[sl.WindowStart]++
		// The jitter decides the offset exactly.
		if sl.WindowStart.Equal(T0) {
			want := T0.Add(time.Duration(store.SlotOffset(j, time.Second.Microseconds(), size.Microseconds())) * time.Microsecond)
			require.Equal(t, want, sl.ScheduledTime)
		} else {
			want := sl.WindowStart.Add(time.Duration(store.SlotOffset(j, 0, size.Microseconds())) * time.Microsecond)
			require.Equal(t, want, sl.ScheduledTime)
		}
	}
	require.Equal(t, map[time.Time]int{T0: 75, T0.Add(size): 25}, perWindow)
	// A request 3.99 s into a window gets floor(100 * 0.01/4) = 0 there.
	late := T0.Add(2*size + 3990*time.Millisecond)
	sl := assign(t, s, c, "late", late, 0.5)
	require.Equal(t, T0.Add(3*size), sl.WindowStart)
	Verify(t, s)
}

func testOverflow(t *testing.T, s store.SlotStore) {
	c := put(t, s, "o", 3, time.Second, 0)
	var got []time.Time
	for i := range 7 {
		got = append(got, assign(t, s, c, fmt.Sprint("o-", i), T0, 0.25).WindowStart)
	}
	s1, s2 := T0.Add(time.Second), T0.Add(2*time.Second)
	require.Equal(t, []time.Time{T0, T0, T0, s1, s1, s1, s2}, got)
	ws := windows(t, s, "o", T0, 5, time.Second)
	require.Len(t, ws, 3) // the second full window gave the third its row
	require.Equal(t, []int64{3, 3, 1}, []int64{ws[0].Count, ws[1].Count, ws[2].Count})
	require.Equal(t, []bool{true, true, false}, []bool{ws[0].Closed, ws[1].Closed, ws[2].Closed})
	Verify(t, s)
}

// testSkip fills 50 windows, then asks with a headroom of 2: only a skip
// to the first open window (not a walk over the full ones) finds it.
func testSkip(t *testing.T, s store.SlotStore) {
	c := put(t, s, "s", 2, time.Second, 2)
	for i := range 100 {
		assign(t, s, c, fmt.Sprint("fill-", i), T0, 0.5)
	}
	sl := assign(t, s, c, "after", T0, 0.5)
	require.Equal(t, T0.Add(50*time.Second), sl.WindowStart)
	// From the middle of the full run too.
	sl = assign(t, s, c, "middle", T0.Add(20*time.Second+time.Millisecond), 0.5)
	require.Equal(t, T0.Add(50*time.Second), sl.WindowStart)
	Verify(t, s)
}

func testClosed(t *testing.T, s store.SlotStore) {
	c := put(t, s, "c", 4, time.Second, 0)
	for i := range 4 {
		assign(t, s, c, fmt.Sprint("c-", i), T0, 0.1)
		ws := windows(t, s, "c", T0, 1, time.Second)
		require.Len(t, ws, 1)
		require.Equal(t, int64(i+1), ws[0].Count)
		require.Equal(t, i == 3, ws[0].Closed, "after slot %d", i+1)
	}
	Verify(t, s)
}

func testFarFuture(t *testing.T, s store.SlotStore) {
	c := put(t, s, "f", 2, 4*time.Second, 3)
	far := T0.AddDate(1, 0, 0)
	for i := range 20 {
		sl := assign(t, s, c, fmt.Sprint("far-", i), far, 0.5)
		require.False(t, sl.WindowStart.Before(far))
	}
	// Near-term events land in their own windows, untouched by the far ones.
	for i := range 4 {
		sl := assign(t, s, c, fmt.Sprint("near-", i), T0, 0.5)
		require.Equal(t, T0.Add(time.Duration(i/2)*4*time.Second), sl.WindowStart)
	}
	// And far ones keep filling from where they were.
	sl := assign(t, s, c, "far-more", far, 0.5)
	require.Equal(t, far.Add(10*4*time.Second), sl.WindowStart)
	Verify(t, s)
}

func testIdempotent(t *testing.T, s store.SlotStore) {
	ctx := context.Background()
	c := put(t, s, "i", 10, time.Second, 0)
	a := assign(t, s, c, "evt", T0, 0.3)
	require.Equal(t, store.SlotNew, a.Status)
	// Other times, jitter and even config: the same slot.
	c2 := put(t, s, "i2", 1, time.Minute, 0)
	b := assign(t, s, c2, "evt", T0.Add(time.Hour), 0.9)
	require.Equal(t, store.SlotExisting, b.Status)
	a.Status = store.SlotExisting
	require.Equal(t, a, b)
	got, err := s.GetSlot(ctx, "evt")
	require.NoError(t, err)
	require.Equal(t, a, got)
	_, err = s.GetSlot(ctx, "nope")
	require.ErrorIs(t, err, store.ErrSlotNotFound)
	ws := windows(t, s, "i", T0, 2, time.Second)
	require.Equal(t, int64(1), ws[0].Count)
	Verify(t, s)
}

func testConcurrentDuplicates(t *testing.T, s store.SlotStore) {
	c := put(t, s, "d", 100, 4*time.Second, 0)
	for round := range 5 {
		id := fmt.Sprint("dup-", round)
		out := make([]store.Slot, 10)
		errs := make([]error, 10)
		var wg sync.WaitGroup
		for g := range 10 {
			wg.Go(func() {
				out[g], errs[g] = s.AssignSlot(context.Background(), store.AssignSlotParams{Config: c,
					Event: store.SlotEvent{EventID: id, RequestedTime: T0, Jitter: float64(g) / 10}})
			})
		}
		wg.Wait()
		news := 0
		for g := range 10 {
			require.NoError(t, errs[g])
			if out[g].Status == store.SlotNew {
				news++
			}
			a, b := out[g], out[0]
			a.Status, b.Status = 0, 0
			require.Equal(t, b, a, "goroutine %d", g)
		}
		require.Equal(t, 1, news)
	}
	rep := Verify(t, s)
	require.Equal(t, int64(5), rep.Slots)
}

func testConfigs(t *testing.T, s store.SlotStore) {
	ctx := context.Background()
	_, err := s.ActiveSlotConfig(ctx, "cfg")
	require.ErrorIs(t, err, store.ErrConfigNotFound)
	v1 := put(t, s, "cfg", 3, 4*time.Second, 0)
	require.Equal(t, int64(1), v1.Version)
	require.Equal(t, int64(store.DefaultSlotHeadroom), v1.Headroom)
	got, err := s.ActiveSlotConfig(ctx, "cfg")
	require.NoError(t, err)
	require.Equal(t, v1.Version, got.Version)
	require.Equal(t, 4*time.Second, got.WindowSize)
	require.True(t, got.Active)
	for i := range 2 {
		assign(t, s, v1, fmt.Sprint("v1-", i), T0, 0.5)
	}
	v2 := put(t, s, "cfg", 4, 4*time.Second, 7)
	require.Equal(t, int64(2), v2.Version)
	got, err = s.ActiveSlotConfig(ctx, "cfg")
	require.NoError(t, err)
	require.Equal(t, int64(2), got.Version)
	require.Equal(t, int64(4), got.MaxPerWindow)
	require.Equal(t, int64(7), got.Headroom)
	// The counter is shared across versions: two more fill the window of 4.
	for i := range 3 {
		sl := assign(t, s, v2, fmt.Sprint("v2-", i), T0, 0.5)
		require.Equal(t, int64(2), sl.ConfigVersion)
		if i < 2 {
			require.Equal(t, T0, sl.WindowStart)
		} else {
			require.Equal(t, T0.Add(4*time.Second), sl.WindowStart)
		}
	}
	require.NoError(t, s.DeactivateSlotConfig(ctx, "cfg"))
	_, err = s.ActiveSlotConfig(ctx, "cfg")
	require.ErrorIs(t, err, store.ErrConfigNotFound)
	require.ErrorIs(t, s.DeactivateSlotConfig(ctx, "cfg"), store.ErrConfigNotFound)
	// A new window size would overlap the shared counters: refused, also
	// after deactivation, and nothing is stored.
	_, err = s.PutSlotConfig(ctx, store.SlotConfig{Name: "cfg", MaxPerWindow: 5, WindowSize: time.Second})
	require.ErrorIs(t, err, store.ErrInvalidSlotConfig)
	require.ErrorContains(t, err, "windowSize cannot change from PT4S to PT1S")
	_, err = s.ActiveSlotConfig(ctx, "cfg")
	require.ErrorIs(t, err, store.ErrConfigNotFound)
	v3 := put(t, s, "cfg", 5, 4*time.Second, 0)
	require.Equal(t, int64(3), v3.Version)
	_, err = s.PutSlotConfig(ctx, store.SlotConfig{Name: "bad", MaxPerWindow: 0, WindowSize: time.Second})
	require.ErrorIs(t, err, store.ErrInvalidSlotConfig)
	Verify(t, s)
}

func events(prefix string, n int, at time.Time, seed uint64) []store.SlotEvent {
	rng := rand.New(rand.NewPCG(seed, seed+1))
	out := make([]store.SlotEvent, n)
	for i := range out {
		out[i] = store.SlotEvent{EventID: fmt.Sprintf("%s-%d", prefix, i), RequestedTime: at, Jitter: rng.Float64()}
	}
	return out
}

func testBatch(t *testing.T, s store.SlotStore) {
	ctx := context.Background()
	const size = 4 * time.Second
	c := put(t, s, "b", 100, size, 0)
	evs := events("b", 5000, T0.Add(2*time.Second), 7)
	// A repeated id inside the batch, and one that already has a slot.
	pre := assign(t, s, c, "b-10", T0.Add(time.Hour), 0.5)
	evs = append(evs, store.SlotEvent{EventID: "b-3", RequestedTime: T0, Jitter: 0.1})
	res, err := s.AssignSlots(ctx, store.AssignSlotsParams{Config: c, Events: evs})
	require.NoError(t, err)
	require.Len(t, res, len(evs))
	perWindow := map[time.Time]int{}
	for i, r := range res {
		require.NoError(t, r.Err, i)
		require.Equal(t, evs[i].EventID, r.Slot.EventID)
		switch {
		case evs[i].EventID == "b-10":
			pre.Status = store.SlotExisting
			require.Equal(t, pre, r.Slot)
			continue
		case i == len(evs)-1:
			require.Equal(t, store.SlotExisting, r.Slot.Status)
			want := res[3].Slot
			want.Status = store.SlotExisting
			require.Equal(t, want, r.Slot)
			continue
		}
		require.Equal(t, store.SlotNew, r.Slot.Status, i)
		require.False(t, r.Slot.ScheduledTime.Before(evs[i].RequestedTime))
		perWindow[r.Slot.WindowStart]++
	}
	// Half the first window (50), then 100 a window.
	require.Equal(t, 50, perWindow[T0])
	for w, n := range perWindow {
		if !w.Equal(T0) {
			require.LessOrEqual(t, n, 100)
		}
	}
	require.Len(t, perWindow, 51)
	rep := Verify(t, s)
	require.Equal(t, int64(5000), rep.Slots)
	// Again: every event EXISTING with the same slot.
	again, err := s.AssignSlots(ctx, store.AssignSlotsParams{Config: c, Events: evs})
	require.NoError(t, err)
	for i := range again {
		want := res[i].Slot
		want.Status = store.SlotExisting
		require.Equal(t, want, again[i].Slot, i)
	}
	Verify(t, s)
}

// testBatchMatchesSingle: a batch places events exactly as the same events
// assigned one by one in time order do (same jitter, same windows).
func testBatchMatchesSingle(t *testing.T, newStore NewStore, s store.SlotStore) {
	ctx := context.Background()
	other := newStore(t)
	c1 := put(t, s, "m", 7, 2*time.Second, 0)
	c2 := put(t, other, "m", 7, 2*time.Second, 0)
	rng := rand.New(rand.NewPCG(3, 4))
	evs := make([]store.SlotEvent, 300)
	for i := range evs {
		evs[i] = store.SlotEvent{EventID: fmt.Sprint("m-", i), Jitter: rng.Float64(),
			RequestedTime: T0.Add(time.Duration(rng.IntN(60_000_000)) * time.Microsecond)}
	}
	res, err := s.AssignSlots(ctx, store.AssignSlotsParams{Config: c1, Events: evs})
	require.NoError(t, err)
	order, _, err := store.SlotBatchOrder(evs)
	require.NoError(t, err)
	for _, i := range order {
		sl, err := other.AssignSlot(ctx, store.AssignSlotParams{Config: c2, Event: evs[i]})
		require.NoError(t, err)
		require.Equal(t, sl, res[i].Slot, "event %d", i)
	}
	Verify(t, s)
	Verify(t, other)
}

func testInvalid(t *testing.T, s store.SlotStore) {
	ctx := context.Background()
	c := put(t, s, "x", 10, time.Second, 0)
	for _, tc := range []struct {
		name string
		ev   store.SlotEvent
	}{
		{"empty id", store.SlotEvent{RequestedTime: T0}},
		{"no time", store.SlotEvent{EventID: "a"}},
		{"jitter 1", store.SlotEvent{EventID: "a", RequestedTime: T0, Jitter: 1}},
		{"negative jitter", store.SlotEvent{EventID: "a", RequestedTime: T0, Jitter: -0.1}},
		{"before 1970", store.SlotEvent{EventID: "a", RequestedTime: time.Date(1969, 1, 1, 0, 0, 0, 0, time.UTC)}},
		{"NUL in id", store.SlotEvent{EventID: "a\x00b", RequestedTime: T0}},
		{"invalid UTF-8 id", store.SlotEvent{EventID: "a\xffb", RequestedTime: T0}},
	} {
		_, err := s.AssignSlot(ctx, store.AssignSlotParams{Config: c, Event: tc.ev})
		require.ErrorIs(t, err, store.ErrInvalidEvent, tc.name)
		_, err = s.AssignSlots(ctx, store.AssignSlotsParams{Config: c, Events: []store.SlotEvent{{EventID: "ok", RequestedTime: T0}, tc.ev}})
		require.ErrorIs(t, err, store.ErrInvalidEvent, tc.name)
	}
	// Names and ids no backend could store: refused or not found, never
	// a store failure.
	for _, name := range []string{"a\x00b", "a\xffb"} {
		_, err := s.PutSlotConfig(ctx, store.SlotConfig{Name: name, MaxPerWindow: 1, WindowSize: time.Second})
		require.ErrorIs(t, err, store.ErrInvalidSlotConfig, "%q", name)
		_, err = s.ActiveSlotConfig(ctx, name)
		require.ErrorIs(t, err, store.ErrConfigNotFound, "%q", name)
		require.ErrorIs(t, s.DeactivateSlotConfig(ctx, name), store.ErrConfigNotFound, "%q", name)
		_, err = s.GetSlot(ctx, name)
		require.ErrorIs(t, err, store.ErrSlotNotFound, "%q", name)
	}
	bad := c
	bad.Version = 0
	_, err := s.AssignSlot(ctx, store.AssignSlotParams{Config: bad, Event: store.SlotEvent{EventID: "a", RequestedTime: T0}})
	require.ErrorIs(t, err, store.ErrInvalidSlotConfig)
	rep := Verify(t, s)
	require.Zero(t, rep.Slots)
}

// testConcurrent: 100 goroutines, one target time, singles and batches
// mixed: no window over max, every event placed once, counters equal rows.
func testConcurrent(t *testing.T, s store.SlotStore) {
	ctx := context.Background()
	const max, perG = 10, 20
	c := put(t, s, "cc", max, 4*time.Second, 1000)
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for g := range 100 {
		wg.Go(func() {
			evs := events(fmt.Sprint("g", g), perG, T0, uint64(g))
			if g%10 == 0 {
				res, err := s.AssignSlots(ctx, store.AssignSlotsParams{Config: c, Events: evs})
				if err == nil {
					for _, r := range res {
						err = errors.Join(err, r.Err)
					}
				}
				errs <- err
				return
			}
			for _, e := range evs {
				if _, err := s.AssignSlot(ctx, store.AssignSlotParams{Config: c, Event: e}); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	rep := Verify(t, s)
	require.Equal(t, int64(100*perG), rep.Slots)
	ws := windows(t, s, "cc", T0, 1000, 4*time.Second)
	var total int64
	for _, w := range ws {
		require.LessOrEqual(t, w.Count, int64(max))
		total += w.Count
	}
	require.Equal(t, int64(100*perG), total)
}

// testBatchBeyondHeadroom: full windows never count against the headroom,
// so a batch may fill far more windows than the headroom, and so may
// singles after it.
func testBatchBeyondHeadroom(t *testing.T, s store.SlotStore) {
	ctx := context.Background()
	c := put(t, s, "h", 1, time.Second, 3)
	evs := events("h", 300, T0, 9)
	res, err := s.AssignSlots(ctx, store.AssignSlotsParams{Config: c, Events: evs})
	require.NoError(t, err)
	for i, r := range res {
		require.NoError(t, r.Err, i)
		require.Equal(t, T0.Add(time.Duration(i)*time.Second), r.Slot.WindowStart, i)
	}
	for i := range 5 {
		sl := assign(t, s, c, fmt.Sprint("h-single-", i), T0, 0.5)
		require.Equal(t, T0.Add(time.Duration(300+i)*time.Second), sl.WindowStart)
	}
	Verify(t, s)
}

// testConcurrentBatchDuplicates: four batches of the same 1,000 ids (in
// different orders, some ids repeated) at once. Every id gets one slot,
// the same in every answer; the counters count each once.
func testConcurrentBatchDuplicates(t *testing.T, s store.SlotStore) {
	ctx := context.Background()
	c := put(t, s, "bd", 50, time.Second, 1000)
	const n, loads = 1000, 4
	res := make([][]store.SlotResult, loads)
	evs := make([][]store.SlotEvent, loads)
	errs := make([]error, loads)
	var wg sync.WaitGroup
	for g := range loads {
		rng := rand.New(rand.NewPCG(uint64(g), 11))
		evs[g] = events("bd", n, T0, uint64(g))
		rng.Shuffle(n, func(i, j int) { evs[g][i], evs[g][j] = evs[g][j], evs[g][i] })
		evs[g] = append(evs[g], evs[g][:10]...)
		wg.Go(func() { res[g], errs[g] = s.AssignSlots(ctx, store.AssignSlotsParams{Config: c, Events: evs[g]}) })
	}
	wg.Wait()
	slots := map[string]store.Slot{}
	news := 0
	for g := range loads {
		require.NoError(t, errs[g])
		for i, r := range res[g] {
			require.NoError(t, r.Err)
			require.Equal(t, evs[g][i].EventID, r.Slot.EventID)
			if r.Slot.Status == store.SlotNew {
				news++
			}
			sl := r.Slot
			sl.Status = store.SlotExisting
			if prev, ok := slots[sl.EventID]; ok {
				require.Equal(t, prev, sl, "two slots for %s", sl.EventID)
			}
			slots[sl.EventID] = sl
		}
	}
	require.Len(t, slots, n)
	require.Equal(t, n, news, "each id is NEW exactly once")
	rep := Verify(t, s)
	require.Equal(t, int64(n), rep.Slots)
}
