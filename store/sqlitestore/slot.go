package sqlitestore

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluicerl/sluice/store"
)

var _ store.SlotStore = (*Store)(nil)

// slotInsertRows is how many slots one prepared multi-row INSERT writes.
const slotInsertRows = 200

// slotChunk is the most events of a batch placed in one transaction, so
// that other callers get the file in between.
const slotChunk = 10_000

// slotStmts are the slot statements, prepared on first use on the store's
// connection (guarded by Store.mu, as every use of the connection is).
type slotStmts struct {
	get, window, nextOpen, upsertWindow, successor *sql.Stmt
	existing, insertMany                           *sql.Stmt
}

func (s *Store) slotStatements(ctx context.Context) (*slotStmts, error) {
	if s.slots != nil {
		return s.slots, nil
	}
	st := &slotStmts{}
	var err error
	prep := func(dst **sql.Stmt, q string) {
		if err == nil {
			*dst, err = s.conn.PrepareContext(ctx, q)
		}
	}
	prep(&st.get, `SELECT config_name, config_version, requested_at, window_start, scheduled_at FROM sluice_slots WHERE event_id = ?`)
	prep(&st.window, `SELECT slot_count, status = 'CLOSED' FROM sluice_slot_windows WHERE config_name = ? AND window_start = ?`)
	prep(&st.nextOpen, `SELECT window_start FROM sluice_slot_windows
WHERE config_name = ? AND status = 'OPEN' AND window_start > ? ORDER BY window_start LIMIT 1`)
	prep(&st.upsertWindow, `INSERT INTO sluice_slot_windows (config_name, window_start, slot_count, status) VALUES (?, ?, ?, ?)
ON CONFLICT (config_name, window_start) DO UPDATE SET slot_count = excluded.slot_count, status = excluded.status`)
	prep(&st.successor, `INSERT INTO sluice_slot_windows (config_name, window_start) VALUES (?, ?) ON CONFLICT DO NOTHING`)
	prep(&st.existing, `SELECT s.event_id, s.config_name, s.config_version, s.requested_at, s.window_start, s.scheduled_at
FROM sluice_slots s WHERE s.event_id IN (SELECT value FROM json_each(?))`)
	prep(&st.insertMany, slotInsertSQL(slotInsertRows))
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: preparing slot statements (is the schema migrated?): %w", err)
	}
	s.slots = st
	return st, nil
}

func slotInsertSQL(n int) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO sluice_slots (event_id, config_name, config_version, window_us, requested_at, window_start, scheduled_at) VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("(?,?,?,?,?,?,?)")
	}
	return b.String()
}

// PutSlotConfig implements store.SlotStore.
func (s *Store) PutSlotConfig(ctx context.Context, cfg store.SlotConfig) (store.SlotConfig, error) {
	if err := cfg.Validate(); err != nil {
		return store.SlotConfig{}, err
	}
	cfg.Headroom = cfg.EffectiveHeadroom()
	err := s.do(ctx, 0, func(tx *txn) error {
		tx.wrote = true
		c := tx.s.conn
		var us int64
		switch err := c.QueryRowContext(tx.ctx, `SELECT window_us FROM sluice_slot_configs WHERE name = ? ORDER BY version DESC LIMIT 1`, cfg.Name).Scan(&us); {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return wrap(err)
		default:
			prev := store.SlotConfig{WindowSize: time.Duration(us) * time.Microsecond}
			if err := store.CheckKeepsWindowSize(&prev, &cfg); err != nil {
				return err
			}
		}
		if _, err := c.ExecContext(tx.ctx, `UPDATE sluice_slot_configs SET active = 0 WHERE name = ? AND active`, cfg.Name); err != nil {
			return wrap(err)
		}
		if err := c.QueryRowContext(tx.ctx, `SELECT coalesce(max(version), 0) + 1 FROM sluice_slot_configs WHERE name = ?`, cfg.Name).
			Scan(&cfg.Version); err != nil {
			return wrap(err)
		}
		cfg.CreatedAt = time.UnixMicro(tx.s.clk.Now().UnixMicro()).UTC()
		_, err := c.ExecContext(tx.ctx, `INSERT INTO sluice_slot_configs (name, version, max_per_window, window_us, headroom, active, created_at)
VALUES (?, ?, ?, ?, ?, 1, ?)`, cfg.Name, cfg.Version, cfg.MaxPerWindow, cfg.WindowSize.Microseconds(), cfg.Headroom, cfg.CreatedAt.UnixMicro())
		return wrap(err)
	})
	if err != nil {
		return store.SlotConfig{}, err
	}
	cfg.Active = true
	return cfg, nil
}

// ActiveSlotConfig implements store.SlotStore.
func (s *Store) ActiveSlotConfig(ctx context.Context, name string) (store.SlotConfig, error) {
	c := store.SlotConfig{Name: name, Active: true}
	var us, created int64
	err := s.read(ctx, func(conn *sql.Conn) error {
		return conn.QueryRowContext(ctx, `SELECT version, max_per_window, window_us, headroom, created_at
FROM sluice_slot_configs WHERE name = ? AND active ORDER BY version DESC LIMIT 1`, name).
			Scan(&c.Version, &c.MaxPerWindow, &us, &c.Headroom, &created)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return store.SlotConfig{}, store.ErrConfigNotFound
	}
	if err != nil {
		return store.SlotConfig{}, wrap(err)
	}
	c.WindowSize = time.Duration(us) * time.Microsecond
	c.CreatedAt = time.UnixMicro(created).UTC()
	return c, nil
}

// read runs f on the store's connection outside the group-commit queue
// (a read needs no write lock), serialized with transactions.
func (s *Store) read(ctx context.Context, f func(conn *sql.Conn) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.connClosed {
		return store.ErrClosed
	}
	return f(s.conn)
}

// DeactivateSlotConfig implements store.SlotStore.
func (s *Store) DeactivateSlotConfig(ctx context.Context, name string) error {
	var n int64
	err := s.do(ctx, 0, func(tx *txn) error {
		tx.wrote = true
		r, err := tx.s.conn.ExecContext(tx.ctx, `UPDATE sluice_slot_configs SET active = 0 WHERE name = ? AND active`, name)
		if err != nil {
			return wrap(err)
		}
		n, err = r.RowsAffected()
		return wrap(err)
	})
	if err != nil {
		return err
	}
	if n == 0 {
		return store.ErrConfigNotFound
	}
	return nil
}

// slotWalk places events of one config inside one transaction, as the
// PostgreSQL functions do: phase 1 in the requested window with its
// proportional capacity, phase 2 from the first open window after it, up
// to the headroom. The file lock makes the transaction the only writer, so
// no window is ever held by another. Counts live in held until flush; a
// window that fills is written at once (CLOSED, with its successor's row)
// so that the skip query sees it.
type slotWalk struct {
	tx                  *txn
	st                  *slotStmts
	cfg                 *store.SlotConfig
	size, max, headroom int64
	held                map[int64]int64
	order               []int64 // held windows in first-touch order
	lastWS, lim, cur    int64
}

func newSlotWalk(tx *txn, st *slotStmts, cfg *store.SlotConfig) *slotWalk {
	return &slotWalk{tx: tx, st: st, cfg: cfg, size: cfg.WindowSize.Microseconds(), max: cfg.MaxPerWindow,
		headroom: cfg.EffectiveHeadroom(), held: map[int64]int64{}, lastWS: -1, cur: -1}
}

// count returns window ws's count, reading it on first touch.
func (w *slotWalk) count(ws int64) (int64, error) {
	if n, ok := w.held[ws]; ok {
		return n, nil
	}
	var n int64
	var closed bool
	err := w.st.window.QueryRowContext(w.tx.ctx, w.cfg.Name, ws).Scan(&n, &closed)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, wrap(err)
	}
	w.held[ws] = n
	w.order = append(w.order, ws)
	return n, nil
}

// nextOpen returns the first window at or after c that is not full.
func (w *slotWalk) nextOpen(c int64) (int64, error) {
	for {
		n, ok := w.held[c]
		if ok && n < w.max {
			return c, nil
		}
		if !ok {
			var closed bool
			err := w.st.window.QueryRowContext(w.tx.ctx, w.cfg.Name, c).Scan(&n, &closed)
			if errors.Is(err, sql.ErrNoRows) || (err == nil && !closed) {
				return c, nil
			}
			if err != nil {
				return 0, wrap(err)
			}
		}
		var o int64
		err := w.st.nextOpen.QueryRowContext(w.tx.ctx, w.cfg.Name, c).Scan(&o)
		if errors.Is(err, sql.ErrNoRows) {
			return c + w.size, nil
		}
		if err != nil {
			return 0, wrap(err)
		}
		o += (w.size - o%w.size) % w.size
		if n, ok := w.held[o]; !ok || n < w.max {
			return o, nil
		}
		c = o + w.size
	}
}

// bump counts one more slot in window ws; a window that fills is written.
func (w *slotWalk) bump(ws int64) error {
	w.held[ws]++
	if w.held[ws] < w.max {
		return nil
	}
	w.tx.wrote = true
	if _, err := w.st.upsertWindow.ExecContext(w.tx.ctx, w.cfg.Name, ws, w.held[ws], "CLOSED"); err != nil {
		return wrap(err)
	}
	_, err := w.st.successor.ExecContext(w.tx.ctx, w.cfg.Name, ws+w.size)
	return wrap(err)
}

// place finds e's window and scheduled time, or ok false past the headroom.
func (w *slotWalk) place(e *store.SlotEvent) (ws, sched int64, ok bool, err error) {
	p := store.PlanSlot(e.RequestedMicros(), w.size, w.max)
	if p.FirstMax > 0 {
		n, err := w.count(p.WindowStart)
		if err != nil {
			return 0, 0, false, err
		}
		if n < p.FirstMax {
			if err := w.bump(p.WindowStart); err != nil {
				return 0, 0, false, err
			}
			return p.WindowStart, p.WindowStart + store.SlotOffset(e.Jitter, p.Elapsed, w.size), true, nil
		}
	}
	// Every window before cur is full (SQLite has no other writer to
	// skip), so the headroom counts from cur, as a single assignment's
	// search would start there.
	if p.WindowStart != w.lastWS {
		w.lastWS = p.WindowStart
		s, err := w.nextOpen(p.WindowStart + w.size)
		if err != nil {
			return 0, 0, false, err
		}
		w.cur = max(w.cur, s)
		w.lim = w.cur + w.headroom*w.size
	}
	for w.cur < w.lim {
		n, err := w.count(w.cur)
		if err != nil {
			return 0, 0, false, err
		}
		if n >= w.max {
			if w.cur, err = w.nextOpen(w.cur + w.size); err != nil {
				return 0, 0, false, err
			}
			w.lim = w.cur + w.headroom*w.size
			continue
		}
		ws = w.cur
		if err := w.bump(ws); err != nil {
			return 0, 0, false, err
		}
		return ws, ws + store.SlotOffset(e.Jitter, 0, w.size), true, nil
	}
	return 0, 0, false, nil
}

// flush writes every held window that is not full (full ones were written
// when they filled).
func (w *slotWalk) flush() error {
	for _, ws := range w.order {
		n := w.held[ws]
		if n >= w.max || n == 0 {
			continue
		}
		w.tx.wrote = true
		if _, err := w.st.upsertWindow.ExecContext(w.tx.ctx, w.cfg.Name, ws, n, "OPEN"); err != nil {
			return wrap(err)
		}
	}
	return nil
}

// insertSlots writes rows (7 values each), slotInsertRows per statement.
func (tx *txn) insertSlots(st *slotStmts, vals []any) error {
	const cols = 7
	if len(vals) > 0 {
		tx.wrote = true
	}
	for len(vals) >= slotInsertRows*cols {
		if _, err := st.insertMany.ExecContext(tx.ctx, vals[:slotInsertRows*cols]...); err != nil {
			return wrap(err)
		}
		vals = vals[slotInsertRows*cols:]
	}
	if len(vals) > 0 {
		if _, err := tx.s.conn.ExecContext(tx.ctx, slotInsertSQL(len(vals)/cols), vals...); err != nil {
			return wrap(err)
		}
	}
	return nil
}

// AssignSlot implements store.SlotStore. It is one transaction, group
// committed with concurrent operations.
func (s *Store) AssignSlot(ctx context.Context, p store.AssignSlotParams) (store.Slot, error) {
	res, err := s.assign(ctx, &p.Config, []store.SlotEvent{p.Event}, true)
	if err != nil {
		return store.Slot{}, err
	}
	return res[0].Slot, res[0].Err
}

// AssignSlots implements store.SlotStore: events sorted by requested time,
// repeated ids folded, up to 10,000 events per transaction, slots written
// with multi-row INSERTs.
func (s *Store) AssignSlots(ctx context.Context, p store.AssignSlotsParams) ([]store.SlotResult, error) {
	return s.assign(ctx, &p.Config, p.Events, false)
}

func (s *Store) assign(ctx context.Context, cfg *store.SlotConfig, events []store.SlotEvent, single bool) ([]store.SlotResult, error) {
	if err := cfg.CheckStored(); err != nil {
		return nil, err
	}
	var (
		order, first []int
		err          error
	)
	if single {
		if err := events[0].Check(); err != nil {
			return nil, err
		}
		order, first = []int{0}, []int{0}
	} else if order, first, err = store.SlotBatchOrder(events); err != nil {
		return nil, err
	}
	out := make([]store.SlotResult, len(events))
	for start := 0; start < len(order); start += slotChunk {
		part := order[start:min(start+slotChunk, len(order))]
		err := s.do(ctx, 0, func(tx *txn) error {
			st, err := s.slotStatements(tx.ctx)
			if err != nil {
				return err
			}
			// Ids that already have slots.
			have := map[string]store.Slot{}
			if single {
				sl := store.Slot{EventID: events[part[0]].EventID, Status: store.SlotExisting}
				var req, ws, sc int64
				err := st.get.QueryRowContext(tx.ctx, sl.EventID).Scan(&sl.ConfigName, &sl.ConfigVersion, &req, &ws, &sc)
				if err == nil {
					sl.RequestedTime, sl.WindowStart, sl.ScheduledTime = micro(req), micro(ws), micro(sc)
					have[sl.EventID] = sl
				} else if !errors.Is(err, sql.ErrNoRows) {
					return wrap(err)
				}
			} else {
				ids := make([]string, len(part))
				for k, i := range part {
					ids[k] = events[i].EventID
				}
				js, err := json.Marshal(ids)
				if err != nil {
					return err
				}
				rows, err := st.existing.QueryContext(tx.ctx, string(js))
				if err != nil {
					return wrap(err)
				}
				for rows.Next() {
					sl := store.Slot{Status: store.SlotExisting}
					var req, ws, sc int64
					if err := rows.Scan(&sl.EventID, &sl.ConfigName, &sl.ConfigVersion, &req, &ws, &sc); err != nil {
						_ = rows.Close()
						return wrap(err)
					}
					sl.RequestedTime, sl.WindowStart, sl.ScheduledTime = micro(req), micro(ws), micro(sc)
					have[sl.EventID] = sl
				}
				if err := rows.Close(); err != nil {
					return wrap(err)
				}
			}
			w := newSlotWalk(tx, st, cfg)
			size := cfg.WindowSize.Microseconds()
			vals := make([]any, 0, 7*len(part))
			for _, i := range part {
				e := &events[i]
				if sl, ok := have[e.EventID]; ok {
					out[i] = store.SlotResult{Slot: sl}
					continue
				}
				ws, sc, ok, err := w.place(e)
				if err != nil {
					return err
				}
				if !ok {
					out[i] = store.SlotResult{Err: store.ErrExhausted}
					continue
				}
				req := e.RequestedMicros()
				out[i] = store.SlotResult{Slot: store.Slot{EventID: e.EventID, ConfigName: cfg.Name, ConfigVersion: cfg.Version,
					RequestedTime: micro(req), WindowStart: micro(ws), ScheduledTime: micro(sc), Status: store.SlotNew}}
				vals = append(vals, e.EventID, cfg.Name, cfg.Version, size, req, ws, sc)
			}
			if err := tx.insertSlots(st, vals); err != nil {
				return err
			}
			return w.flush()
		})
		if err != nil {
			return nil, err
		}
	}
	store.FillRepeats(out, first)
	return out, nil
}

func micro(us int64) time.Time { return time.UnixMicro(us).UTC() }

// GetSlot implements store.SlotStore.
func (s *Store) GetSlot(ctx context.Context, eventID string) (store.Slot, error) {
	sl := store.Slot{EventID: eventID, Status: store.SlotExisting}
	var req, ws, sc int64
	err := s.read(ctx, func(conn *sql.Conn) error {
		return conn.QueryRowContext(ctx, `SELECT config_name, config_version, requested_at, window_start, scheduled_at
FROM sluice_slots WHERE event_id = ?`, eventID).Scan(&sl.ConfigName, &sl.ConfigVersion, &req, &ws, &sc)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return store.Slot{}, store.ErrSlotNotFound
	}
	if err != nil {
		return store.Slot{}, wrap(err)
	}
	sl.RequestedTime, sl.WindowStart, sl.ScheduledTime = micro(req), micro(ws), micro(sc)
	return sl, nil
}

// SlotWindows implements store.SlotStore.
func (s *Store) SlotWindows(ctx context.Context, name string, from, to time.Time, limit int) ([]store.SlotWindow, error) {
	var out []store.SlotWindow
	err := s.read(ctx, func(conn *sql.Conn) error {
		rows, err := conn.QueryContext(ctx, `SELECT window_start, slot_count, status = 'CLOSED' FROM sluice_slot_windows
WHERE config_name = ? AND window_start >= ? AND window_start < ? ORDER BY window_start LIMIT ?`,
			name, from.UnixMicro(), to.UnixMicro(), limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var w store.SlotWindow
			var ws int64
			if err := rows.Scan(&ws, &w.Count, &w.Closed); err != nil {
				return err
			}
			w.Start = micro(ws)
			out = append(out, w)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, wrap(err)
	}
	return out, nil
}

// VerifySlots implements store.SlotStore, in one read transaction.
func (s *Store) VerifySlots(ctx context.Context) (store.SlotReport, error) {
	var rep store.SlotReport
	err := s.read(ctx, func(conn *sql.Conn) error {
		if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
			return err
		}
		defer func() { _, _ = conn.ExecContext(context.Background(), "ROLLBACK") }()
		return store.VerifySlotsSQL(ctx, connQuerier{conn}, &rep)
	})
	if err != nil {
		return store.SlotReport{}, wrap(err)
	}
	slices.SortFunc(rep.Problems, cmp.Compare)
	return rep, nil
}

type connQuerier struct{ conn *sql.Conn }

func (q connQuerier) Query(ctx context.Context, query string, scan func(row func(dst ...any) error) error) error {
	rows, err := q.conn.QueryContext(ctx, query)
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
