package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/slottest"
)

func TestSlotConformance(t *testing.T) {
	t.Parallel()
	slottest.Run(t, func(t *testing.T) store.SlotStore { return setup(t, options{maxConns: 8}).store })
}

// TestSlotLockedWindowsSkipped: windows another transaction holds are
// skipped, never waited on, and past the headroom the search gives up with
// ErrExhausted.
func TestSlotLockedWindowsSkipped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	c, err := b.store.PutSlotConfig(ctx, store.SlotConfig{Name: "lk", MaxPerWindow: 5, WindowSize: time.Second, Headroom: 3})
	require.NoError(t, err)
	t0 := slottest.T0
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	lock := func(i int) {
		var ok bool
		require.NoError(t, tx.QueryRow(ctx, "SELECT sluice_slot_lock($1, $2)", "lk", t0.Add(time.Duration(i)*time.Second).UnixMicro()).Scan(&ok))
		require.True(t, ok)
	}
	// Hold the requested window and the next two: the fourth is taken.
	for i := range 3 {
		lock(i)
	}
	actx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	sl, err := b.store.AssignSlot(actx, store.AssignSlotParams{Config: c, Event: store.SlotEvent{EventID: "a", RequestedTime: t0, Jitter: 0.5}})
	require.NoError(t, err)
	require.Equal(t, t0.Add(3*time.Second), sl.WindowStart)
	// Hold three more: nothing within the headroom of 3 after window 1.
	for i := 3; i < 6; i++ {
		lock(i)
	}
	_, err = b.store.AssignSlot(actx, store.AssignSlotParams{Config: c, Event: store.SlotEvent{EventID: "b", RequestedTime: t0, Jitter: 0.5}})
	require.ErrorIs(t, err, store.ErrExhausted)
	res, err := b.store.AssignSlots(actx, store.AssignSlotsParams{Config: c, Events: []store.SlotEvent{{EventID: "c", RequestedTime: t0}}})
	require.NoError(t, err)
	require.ErrorIs(t, res[0].Err, store.ErrExhausted)
	require.NoError(t, tx.Rollback(ctx))
	sl, err = b.store.AssignSlot(ctx, store.AssignSlotParams{Config: c, Event: store.SlotEvent{EventID: "b", RequestedTime: t0, Jitter: 0.5}})
	require.NoError(t, err)
	require.Equal(t, t0, sl.WindowStart)
	slottest.Verify(t, b.store)
}

// TestSlotConcurrentBatches: three bulk loads of one instant at once. Each
// transaction holds many windows, so the other's search finds them held
// and runs out of headroom; the retry rounds let every event through once
// the holder commits.
func TestSlotConcurrentBatches(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxConns: 4})
	ctx := context.Background()
	c, err := b.store.PutSlotConfig(ctx, store.SlotConfig{Name: "cb", MaxPerWindow: 10, WindowSize: time.Second, Headroom: 5})
	require.NoError(t, err)
	const n = 3000
	var wg sync.WaitGroup
	const loads = 3
	errs := make([]error, loads)
	for g := range loads {
		wg.Go(func() {
			evs := make([]store.SlotEvent, n)
			for i := range evs {
				evs[i] = store.SlotEvent{EventID: fmt.Sprintf("cb%d-%d", g, i), RequestedTime: slottest.T0, Jitter: 0.5}
			}
			res, err := b.store.AssignSlots(ctx, store.AssignSlotsParams{Config: c, Events: evs})
			errs[g] = err
			for _, r := range res {
				errs[g] = errors.Join(errs[g], r.Err)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	rep := slottest.Verify(t, b.store)
	require.Equal(t, int64(loads*n), rep.Slots)
}

// TestSlotNeedsReadCommitted: under a stronger isolation the count read
// after a window's lock could be stale, so the functions refuse to run.
func TestSlotNeedsReadCommitted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SELECT * FROM sluice_slot_assign('x', 1, 10, 1000000, 100, 'e', 0, 0.5)")
	require.ErrorContains(t, err, "assignments need READ COMMITTED isolation, not repeatable read")
}

// TestSlotBatchDuplicateCommittedInItsWindow: a single assignment of an id
// commits, after a batch has looked its ids up, into a window the batch
// reaches later and also places that id in. The batch must return the
// stored slot (EXISTING) and not count the id in that window a second
// time. A trigger holds the batch on a gate (an advisory lock the test
// holds) while it fills the window before, so the order is certain.
func TestSlotBatchDuplicateCommittedInItsWindow(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxConns: 4})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const k = 5 // the batch fills windows 0..k-1, two events each, then X
	c, err := b.store.PutSlotConfig(ctx, store.SlotConfig{Name: "gate", MaxPerWindow: 2, WindowSize: time.Second})
	require.NoError(t, err)
	t0 := slottest.T0
	gateWS := t0.Add((k - 1) * time.Second).UnixMicro()
	_, err = b.pool.Exec(ctx, fmt.Sprintf(`
CREATE FUNCTION test_gate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.window_start = %d THEN
        PERFORM pg_advisory_xact_lock(hashtextextended(current_schema() || ' test gate', 0));
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER test_gate BEFORE INSERT ON sluice_slot_windows FOR EACH ROW EXECUTE FUNCTION test_gate();`, gateWS))
	require.NoError(t, err)
	gate, err := b.pool.Acquire(ctx)
	require.NoError(t, err)
	defer gate.Release()
	var key int64
	require.NoError(t, gate.QueryRow(ctx, `SELECT hashtextextended(current_schema() || ' test gate', 0)`).Scan(&key))
	_, err = gate.Exec(ctx, `SELECT pg_advisory_lock($1)`, key)
	require.NoError(t, err)

	evs := make([]store.SlotEvent, 0, 2*k+1)
	for i := range 2 * k {
		evs = append(evs, store.SlotEvent{EventID: fmt.Sprint("g-", i), RequestedTime: t0, Jitter: 0.25})
	}
	evs = append(evs, store.SlotEvent{EventID: "X", RequestedTime: t0, Jitter: 0.75})
	var (
		res  []store.SlotResult
		berr error
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		res, berr = b.store.AssignSlots(ctx, store.AssignSlotsParams{Config: c, Events: evs})
	}()
	// Wait until the batch waits at the gate.
	for {
		var waiting bool
		require.NoError(t, gate.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
AND classid::text::bigint = ($1::bigint >> 32) & 4294967295 AND objid::text::bigint = $1::bigint & 4294967295)`, key).Scan(&waiting))
		if waiting {
			break
		}
		select {
		case <-done:
			t.Fatalf("the batch finished without reaching the gate: %v", berr)
		case <-time.After(5 * time.Millisecond):
		}
	}
	// Windows 0..k-1 are the batch's: X lands in window k, and commits.
	single, err := b.store.AssignSlot(ctx, store.AssignSlotParams{Config: c, Event: store.SlotEvent{EventID: "X", RequestedTime: t0, Jitter: 0.1}})
	require.NoError(t, err)
	require.Equal(t, store.SlotNew, single.Status)
	require.Equal(t, t0.Add(k*time.Second), single.WindowStart)
	_, err = gate.Exec(ctx, `SELECT pg_advisory_unlock($1)`, key)
	require.NoError(t, err)
	<-done
	require.NoError(t, berr)
	x := res[len(res)-1]
	require.NoError(t, x.Err)
	require.Equal(t, store.SlotExisting, x.Slot.Status, "X was NEW in the single assignment")
	single.Status = store.SlotExisting
	require.Equal(t, single, x.Slot)
	got, err := b.store.GetSlot(ctx, "X")
	require.NoError(t, err)
	require.Equal(t, single, got)
	rep := slottest.Verify(t, b.store)
	require.Equal(t, int64(2*k+1), rep.Slots)
}

// TestSlotSkipDoesNotWalk: after 50 full windows, an assignment locks and
// counts only the requested window and the first open one: the skip goes
// through the index of open windows, never window by window over the full
// ones (PostgreSQL's per-transaction function statistics count the
// window tries). The conformance suite's skip test cannot tell a walk from
// a skip, since full windows never count against the headroom.
func TestSlotSkipDoesNotWalk(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	c, err := b.store.PutSlotConfig(ctx, store.SlotConfig{Name: "walk", MaxPerWindow: 2, WindowSize: time.Second, Headroom: 2})
	require.NoError(t, err)
	t0 := slottest.T0
	evs := make([]store.SlotEvent, 100)
	for i := range evs {
		evs[i] = store.SlotEvent{EventID: fmt.Sprint("w-", i), RequestedTime: t0, Jitter: 0.5}
	}
	_, err = b.store.AssignSlots(ctx, store.AssignSlotsParams{Config: c, Events: evs})
	require.NoError(t, err)
	tries := func(call string, args ...any) (ws int64, n int64) {
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, "SET LOCAL track_functions = 'pl'")
		require.NoError(t, err)
		// The view also holds the session's counts not yet flushed: take
		// the difference.
		count := func() (n int64) {
			require.NoError(t, tx.QueryRow(ctx, `SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions
WHERE funcname = 'sluice_slot_try' AND schemaname = current_schema()`).Scan(&n))
			return n
		}
		before := count()
		require.NoError(t, tx.QueryRow(ctx, call, args...).Scan(&ws))
		return ws, count() - before
	}
	size := time.Second.Microseconds()
	for _, at := range []time.Time{t0, t0.Add(20*time.Second + time.Millisecond)} {
		ws, n := tries(`SELECT o_ws FROM sluice_slot_assign('walk', $1, 2, $2, 2, 'one', $3, 0.5)`, c.Version, size, at.UnixMicro())
		require.Equal(t, t0.Add(50*time.Second).UnixMicro(), ws)
		require.LessOrEqual(t, n, int64(2), "single assignment from %s: %d window tries", at, n)
		ws, n = tries(`SELECT o_ws FROM sluice_slot_assign_batch('walk', $1, 2, $2, 2, ARRAY['one'], ARRAY[$3::bigint], ARRAY[0.5::float8])`, c.Version, size, at.UnixMicro())
		require.Equal(t, t0.Add(50*time.Second).UnixMicro(), ws)
		require.LessOrEqual(t, n, int64(2), "batch from %s: %d window tries", at, n)
	}
}

// TestSlotRolledBackSuccessorLeavesNoHole: a window fills while another
// transaction holds the next one, and that transaction then rolls back
// (a cancelled request). The next window must stay findable: the skip
// over the full windows may not jump past it to an open window far ahead
// (here, a year ahead).
func TestSlotRolledBackSuccessorLeavesNoHole(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := b.store.PutSlotConfig(ctx, store.SlotConfig{Name: "hole", MaxPerWindow: 1, WindowSize: time.Second})
	require.NoError(t, err)
	t0 := slottest.T0
	at := func(id string, req time.Time) store.Slot {
		sl, err := b.store.AssignSlot(ctx, store.AssignSlotParams{Config: c, Event: store.SlotEvent{EventID: id, RequestedTime: req, Jitter: 0.5}})
		require.NoError(t, err, id)
		return sl
	}
	require.Equal(t, t0, at("e0", t0).WindowStart)
	// Another transaction holds window 2 (and gives it a row), then rolls
	// back, after window 1 filled.
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	var n int64
	require.NoError(t, tx.QueryRow(ctx, `SELECT sluice_slot_try('hole', $1)`, t0.Add(2*time.Second).UnixMicro()).Scan(&n))
	require.Zero(t, n)
	require.Equal(t, t0.Add(time.Second), at("e1", t0).WindowStart)
	require.NoError(t, tx.Rollback(ctx))
	far := t0.AddDate(1, 0, 0)
	require.Equal(t, far, at("far", far).WindowStart)
	require.Equal(t, t0.Add(2*time.Second), at("e2", t0).WindowStart)
	res, err := b.store.AssignSlots(ctx, store.AssignSlotsParams{Config: c, Events: []store.SlotEvent{{EventID: "e3", RequestedTime: t0}}})
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
	require.Equal(t, t0.Add(3*time.Second), res[0].Slot.WindowStart)
	// Window 1 stayed OPEN while full; the search that met it closed it.
	ws, err := b.store.SlotWindows(ctx, "hole", t0, t0.Add(5*time.Second), 5)
	require.NoError(t, err)
	require.Len(t, ws, 5)
	for i, w := range ws {
		require.Equal(t, i < 4, w.Closed, "window %d", i)
		require.Equal(t, int64(min(1, 4-i)), w.Count, "window %d", i)
	}
	slottest.Verify(t, b.store)
}

// TestSlotExhaustedDuplicateGetsTheStoredSlot: an assignment finds no
// window within its headroom (all held) while a concurrent assignment of
// the same id commits a slot: the answer is that slot, not ErrExhausted,
// for a single assignment and a batch alike. A gate (an advisory lock the
// test holds, taken by the skip function) holds the search after its
// lookup while the other slot commits.
func TestSlotExhaustedDuplicateGetsTheStoredSlot(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxConns: 4})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := b.store.PutSlotConfig(ctx, store.SlotConfig{Name: "ex", MaxPerWindow: 1, WindowSize: time.Second, Headroom: 2})
	require.NoError(t, err)
	t0 := slottest.T0
	w := func(i int) int64 { return t0.Add(time.Duration(i) * time.Second).UnixMicro() }
	_, err = b.store.AssignSlot(ctx, store.AssignSlotParams{Config: c, Event: store.SlotEvent{EventID: "e0", RequestedTime: t0}})
	require.NoError(t, err)
	// Windows 1 and 2 (the whole headroom) are held by another transaction.
	holder, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(ctx) }()
	for i := 1; i <= 2; i++ {
		var ok bool
		require.NoError(t, holder.QueryRow(ctx, `SELECT sluice_slot_lock('ex', $1)`, w(i)).Scan(&ok))
		require.True(t, ok)
	}
	gate, err := b.pool.Acquire(ctx)
	require.NoError(t, err)
	defer gate.Release()
	var key int64
	require.NoError(t, gate.QueryRow(ctx, `SELECT hashtextextended(current_schema() || ' test gate', 0)`).Scan(&key))
	_, err = gate.Exec(ctx, `CREATE OR REPLACE FUNCTION sluice_slot_next_open(cfg text, c bigint, size bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE st text; o bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(current_schema() || ' test gate', 0));
    SELECT status INTO st FROM sluice_slot_windows WHERE config_name = cfg AND window_start = c;
    IF NOT FOUND OR st = 'OPEN' THEN RETURN c; END IF;
    SELECT window_start INTO o FROM sluice_slot_windows
    WHERE config_name = cfg AND status = 'OPEN' AND window_start > c ORDER BY window_start LIMIT 1;
    IF o IS NULL THEN RETURN c + size; END IF;
    RETURN o;
END $$`)
	require.NoError(t, err)
	waitGate := func(done <-chan struct{}) {
		for {
			var waiting bool
			require.NoError(t, gate.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
AND classid::text::bigint = ($1::bigint >> 32) & 4294967295 AND objid::text::bigint = $1::bigint & 4294967295)`, key).Scan(&waiting))
			if waiting {
				return
			}
			select {
			case <-done:
				t.Fatal("the search finished without reaching the gate")
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	// commit gives id a slot in window i as another process would have.
	commit := func(id string, i int) store.Slot {
		_, err := b.pool.Exec(ctx, `INSERT INTO sluice_slots VALUES ($1, 'ex', $2, 1000000, $3, $4::bigint, $4::bigint + 500000)`, id, c.Version, w(0), w(i))
		require.NoError(t, err)
		_, err = b.pool.Exec(ctx, `INSERT INTO sluice_slot_windows (config_name, window_start, slot_count) VALUES ('ex', $1, 1)`, w(i))
		require.NoError(t, err)
		return store.Slot{EventID: id, ConfigName: "ex", ConfigVersion: c.Version, RequestedTime: t0,
			WindowStart: time.UnixMicro(w(i)).UTC(), ScheduledTime: time.UnixMicro(w(i) + 500000).UTC(), Status: store.SlotExisting}
	}
	for round, batch := range []bool{false, true} {
		id := fmt.Sprint("dup-", round)
		_, err = gate.Exec(ctx, `SELECT pg_advisory_lock($1)`, key)
		require.NoError(t, err)
		var got store.Slot
		var aerr error
		done := make(chan struct{})
		go func() {
			defer close(done)
			ev := store.SlotEvent{EventID: id, RequestedTime: t0, Jitter: 0.5}
			if !batch {
				got, aerr = b.store.AssignSlot(ctx, store.AssignSlotParams{Config: c, Event: ev})
				return
			}
			var res []store.SlotResult
			res, aerr = b.store.AssignSlots(ctx, store.AssignSlotsParams{Config: c, Events: []store.SlotEvent{ev}})
			if aerr == nil {
				got, aerr = res[0].Slot, res[0].Err
			}
		}()
		waitGate(done)
		want := commit(id, 10+round)
		_, err = gate.Exec(ctx, `SELECT pg_advisory_unlock($1)`, key)
		require.NoError(t, err)
		<-done
		require.NoError(t, aerr, "batch %v", batch)
		require.Equal(t, want, got, "batch %v", batch)
	}
	require.NoError(t, holder.Rollback(ctx))
	slottest.Verify(t, b.store)
}
