package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicerl/sluice/store"
)

var _ store.SlotStore = (*Store)(nil)

// slotChunk bounds the events of one sluice_slot_assign_batch call (one
// transaction): each window it touches holds an advisory lock until commit,
// and PostgreSQL's lock table is finite.
func slotChunk(maxPerWindow int64) int {
	return int(min(10_000, max(maxPerWindow*64, 1_000)))
}

const (
	slotAssignSQL = `SELECT status, o_cfg, o_ver, o_req, o_ws, o_sched
FROM sluice_slot_assign($1, $2, $3, $4, $5, $6, $7, $8)`
	slotBatchSQL = `SELECT idx, status, o_cfg, o_ver, o_req, o_ws, o_sched
FROM sluice_slot_assign_batch($1, $2, $3, $4, $5, $6, $7, $8)`
	slotGetSQL = `SELECT config_name, config_version, requested_at, window_start, scheduled_at
FROM sluice_slots WHERE event_id = $1`
	slotPutConfigSQL = `WITH deact AS (
    UPDATE sluice_slot_configs SET active = false WHERE name = $1 AND active
)
INSERT INTO sluice_slot_configs (name, version, max_per_window, window_us, headroom)
SELECT $1, coalesce(max(version), 0) + 1, $2, $3, $4 FROM sluice_slot_configs WHERE name = $1
RETURNING version, created_at`
	slotConfigSQL = `SELECT version, max_per_window, window_us, headroom, created_at
FROM sluice_slot_configs WHERE name = $1 AND active ORDER BY version DESC LIMIT 1`
	slotLatestSizeSQL = `SELECT window_us FROM sluice_slot_configs WHERE name = $1 ORDER BY version DESC LIMIT 1`
	slotDeactivateSQL = `UPDATE sluice_slot_configs SET active = false WHERE name = $1 AND active`
)

// PutSlotConfig implements store.SlotStore. Concurrent puts of one name
// are serialized by a transaction-level advisory lock on the name.
func (s *Store) PutSlotConfig(ctx context.Context, cfg store.SlotConfig) (store.SlotConfig, error) {
	if err := cfg.Validate(); err != nil {
		return store.SlotConfig{}, err
	}
	cfg.Headroom = cfg.EffectiveHeadroom()
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended(current_schema() || ' slotcfg ' || $1, 0))`, cfg.Name); err != nil {
			return err
		}
		var us int64
		switch err := tx.QueryRow(ctx, slotLatestSizeSQL, cfg.Name).Scan(&us); {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return err
		default:
			prev := store.SlotConfig{WindowSize: time.Duration(us) * time.Microsecond}
			if err := store.CheckKeepsWindowSize(&prev, &cfg); err != nil {
				return err
			}
		}
		return tx.QueryRow(ctx, slotPutConfigSQL, cfg.Name, cfg.MaxPerWindow, cfg.WindowSize.Microseconds(), cfg.Headroom).
			Scan(&cfg.Version, &cfg.CreatedAt)
	})
	if errors.Is(err, store.ErrInvalidSlotConfig) {
		return store.SlotConfig{}, err
	}
	if err != nil {
		return store.SlotConfig{}, wrap("put slot config", err)
	}
	cfg.Active = true
	return cfg, nil
}

// ActiveSlotConfig implements store.SlotStore.
func (s *Store) ActiveSlotConfig(ctx context.Context, name string) (store.SlotConfig, error) {
	if !store.ValidSlotConfigName(name) {
		return store.SlotConfig{}, store.ErrConfigNotFound
	}
	c := store.SlotConfig{Name: name, Active: true}
	var us int64
	err := s.queryRow(ctx, slotConfigSQL, name).Scan(&c.Version, &c.MaxPerWindow, &us, &c.Headroom, &c.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.SlotConfig{}, store.ErrConfigNotFound
	}
	if err != nil {
		return store.SlotConfig{}, wrap("slot config", err)
	}
	c.WindowSize = time.Duration(us) * time.Microsecond
	return c, nil
}

// DeactivateSlotConfig implements store.SlotStore.
func (s *Store) DeactivateSlotConfig(ctx context.Context, name string) error {
	if !store.ValidSlotConfigName(name) {
		return store.ErrConfigNotFound
	}
	tag, err := s.exec(ctx, slotDeactivateSQL, name)
	if err != nil {
		return wrap("deactivate slot config", err)
	}
	if tag.RowsAffected() == 0 {
		return store.ErrConfigNotFound
	}
	return nil
}

func slotFrom(eventID, status, cfg string, ver int64, req, ws, sched *int64) (store.Slot, error) {
	sl := store.Slot{EventID: eventID, ConfigName: cfg, ConfigVersion: ver}
	switch status {
	case "NEW":
		sl.Status = store.SlotNew
	case "EXISTING":
		sl.Status = store.SlotExisting
	case "EXHAUSTED":
		return store.Slot{}, store.ErrExhausted
	default:
		return store.Slot{}, fmt.Errorf("pgstore: unexpected slot status %q", status)
	}
	if req == nil || ws == nil || sched == nil {
		return store.Slot{}, errors.New("pgstore: slot without times")
	}
	sl.RequestedTime = time.UnixMicro(*req).UTC()
	sl.WindowStart = time.UnixMicro(*ws).UTC()
	sl.ScheduledTime = time.UnixMicro(*sched).UTC()
	return sl, nil
}

// AssignSlot implements store.SlotStore in one round trip: one call of the
// sluice_slot_assign function (migration slots).
func (s *Store) AssignSlot(ctx context.Context, p store.AssignSlotParams) (store.Slot, error) {
	if err := p.Config.CheckStored(); err != nil {
		return store.Slot{}, err
	}
	if err := p.Event.Check(); err != nil {
		return store.Slot{}, err
	}
	c := &p.Config
	var (
		status      string
		cfg         *string
		ver         *int64
		req, ws, sc *int64
	)
	err := s.queryRow(ctx, slotAssignSQL, c.Name, c.Version, c.MaxPerWindow, c.WindowSize.Microseconds(),
		c.EffectiveHeadroom(), p.Event.EventID, p.Event.RequestedMicros(), p.Event.Jitter).
		Scan(&status, &cfg, &ver, &req, &ws, &sc)
	if err != nil {
		return store.Slot{}, wrap("assign slot", err)
	}
	if status == "EXHAUSTED" {
		return store.Slot{}, store.ErrExhausted
	}
	return slotFrom(p.Event.EventID, status, deref(cfg), derefInt(ver), req, ws, sc)
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func derefInt(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// slotRetryRounds is how many rounds in a row without progress AssignSlots
// tries the events that found no window within the headroom, waiting
// slotRetryWait, doubled each such round: other transactions (another
// batch) held the windows they needed, and once those commit their full
// windows are skipped. A round that places some events starts the count
// and the wait afresh.
const (
	slotRetryRounds = 5
	slotRetryWait   = 25 * time.Millisecond
)

// AssignSlots implements store.SlotStore. Events are sorted by requested
// time, repeated ids folded into their first occurrence, and sent in
// chunks of up to 10,000 events, each one call of sluice_slot_assign_batch
// (one round trip and one transaction). Events left ErrExhausted because
// other transactions held the windows are tried again (see
// slotRetryRounds), so that concurrent bulk loads do not starve each other.
func (s *Store) AssignSlots(ctx context.Context, p store.AssignSlotsParams) ([]store.SlotResult, error) {
	if err := p.Config.CheckStored(); err != nil {
		return nil, err
	}
	order, first, err := store.SlotBatchOrder(p.Events)
	if err != nil {
		return nil, err
	}
	out := make([]store.SlotResult, len(p.Events))
	if err := s.assignChunks(ctx, &p, order, out); err != nil {
		return nil, err
	}
	again := exhausted(order, out)
	wait := slotRetryWait
	for idle := 0; len(again) > 0 && idle < slotRetryRounds; {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		if err := s.assignChunks(ctx, &p, again, out); err != nil {
			return nil, err
		}
		left := exhausted(again, out)
		if len(left) < len(again) {
			idle, wait = 0, slotRetryWait
		} else {
			idle, wait = idle+1, 2*wait
		}
		again = left
	}
	store.FillRepeats(out, first)
	return out, nil
}

// exhausted returns the indexes of order whose result is ErrExhausted, in
// order.
func exhausted(order []int, out []store.SlotResult) []int {
	var left []int
	for _, i := range order {
		if errors.Is(out[i].Err, store.ErrExhausted) {
			left = append(left, i)
		}
	}
	return left
}

// assignChunks assigns the events at indexes order (sorted by requested
// time, no repeated ids) and sets their results in out.
func (s *Store) assignChunks(ctx context.Context, p *store.AssignSlotsParams, order []int, out []store.SlotResult) error {
	c := &p.Config
	chunk := slotChunk(c.MaxPerWindow)
	for start := 0; start < len(order); start += chunk {
		part := order[start:min(start+chunk, len(order))]
		ids := make([]string, len(part))
		reqs := make([]int64, len(part))
		jits := make([]float64, len(part))
		for k, i := range part {
			e := &p.Events[i]
			ids[k], reqs[k], jits[k] = e.EventID, e.RequestedMicros(), e.Jitter
		}
		err := func() error {
			rows, err := s.pool.Query(ctx, slotBatchSQL, c.Name, c.Version, c.MaxPerWindow, c.WindowSize.Microseconds(),
				c.EffectiveHeadroom(), ids, reqs, jits)
			if err != nil {
				return err
			}
			defer rows.Close()
			seen := 0
			for rows.Next() {
				var (
					idx         int32
					status      string
					cfg         *string
					ver         *int64
					req, ws, sc *int64
				)
				if err := rows.Scan(&idx, &status, &cfg, &ver, &req, &ws, &sc); err != nil {
					return err
				}
				if idx < 1 || int(idx) > len(part) {
					return fmt.Errorf("result for event %d of %d", idx, len(part))
				}
				i := part[idx-1]
				sl, err := slotFrom(p.Events[i].EventID, status, deref(cfg), derefInt(ver), req, ws, sc)
				out[i] = store.SlotResult{Slot: sl, Err: err}
				if err != nil && !errors.Is(err, store.ErrExhausted) {
					return err
				}
				seen++
			}
			if err := rows.Err(); err != nil {
				return err
			}
			if seen != len(part) {
				return fmt.Errorf("%d results for %d events", seen, len(part))
			}
			return nil
		}()
		if err != nil {
			return wrap("assign slots", err)
		}
	}
	return nil
}

// GetSlot implements store.SlotStore.
func (s *Store) GetSlot(ctx context.Context, eventID string) (store.Slot, error) {
	if !store.ValidEventID(eventID) {
		return store.Slot{}, store.ErrSlotNotFound
	}
	sl := store.Slot{EventID: eventID, Status: store.SlotExisting}
	var req, ws, sc int64
	err := s.queryRow(ctx, slotGetSQL, eventID).Scan(&sl.ConfigName, &sl.ConfigVersion, &req, &ws, &sc)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Slot{}, store.ErrSlotNotFound
	}
	if err != nil {
		return store.Slot{}, wrap("get slot", err)
	}
	sl.RequestedTime, sl.WindowStart, sl.ScheduledTime = time.UnixMicro(req).UTC(), time.UnixMicro(ws).UTC(), time.UnixMicro(sc).UTC()
	return sl, nil
}

// VerifySlots implements store.SlotStore. It reads in one REPEATABLE READ
// transaction, so that counters and rows are compared at one snapshot.
func (s *Store) VerifySlots(ctx context.Context) (store.SlotReport, error) {
	var rep store.SlotReport
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		return store.VerifySlotsSQL(ctx, pgxQuerier{tx}, &rep)
	})
	if err != nil {
		return store.SlotReport{}, wrap("verify slots", err)
	}
	slices.SortFunc(rep.Problems, cmp.Compare)
	return rep, nil
}

// pgxQuerier adapts a pgx.Tx to store.SlotQuerier.
type pgxQuerier struct{ tx pgx.Tx }

func (q pgxQuerier) Query(ctx context.Context, sql string, scan func(row func(dst ...any) error) error) error {
	rows, err := q.tx.Query(ctx, sql)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows.Scan); err != nil {
			return err
		}
	}
	return rows.Err()
}

// SlotWindows implements store.SlotStore.
func (s *Store) SlotWindows(ctx context.Context, name string, from, to time.Time, limit int) ([]store.SlotWindow, error) {
	rows, err := s.pool.Query(ctx, `SELECT window_start, slot_count, status = 'CLOSED' FROM sluice_slot_windows
WHERE config_name = $1 AND window_start >= $2 AND window_start < $3 ORDER BY window_start LIMIT $4`,
		name, from.UnixMicro(), to.UnixMicro(), limit)
	if err != nil {
		return nil, wrap("slot windows", err)
	}
	defer rows.Close()
	var out []store.SlotWindow
	for rows.Next() {
		var w store.SlotWindow
		var ws int64
		if err := rows.Scan(&ws, &w.Count, &w.Closed); err != nil {
			return nil, wrap("slot windows", err)
		}
		w.Start = time.UnixMicro(ws).UTC()
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap("slot windows", err)
	}
	return out, nil
}
