package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/server"
	"github.com/sluicerl/sluice/slot"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/pgstore"
	"github.com/sluicerl/sluice/store/sqlitestore"
)

// The slot figures (seed 003): 500,000 events all asking for one instant,
// at most 100 per PT4S window, then `slots verify`'s checks.
const (
	slotsEvents   = 500_000
	slotsMax      = 100
	slotsWindow   = 4 * time.Second
	slotsCall     = 10_000 // events per AssignBatch call
	slotsFloorRow = 1_000  // events per statement of the bare insert floor
)

// slotCase is one slot figure; -only matches its id.
type slotCase struct {
	id, label string
}

var slotCases = []slotCase{
	{"slots/postgres/insert-floor", "PostgreSQL: bare INSERT of 1,000 events per statement (the floor), 500K events"},
	{"slots/postgres/batch", "PostgreSQL: AssignBatch, 500K events for one instant, 100 per PT4S"},
	{"slots/postgres/single-32", "PostgreSQL: AssignSlot, one event per call, 32 goroutines"},
	{"slots/postgres/naive-32", "PostgreSQL: naive prototype, one transaction of 3 statements per event, FOR UPDATE (waits), 32 goroutines"},
	{"slots/sqlite/batch", "SQLite: AssignBatch, 500K events for one instant, 100 per PT4S"},
	{"slots/http/postgres-32", "HTTP POST /api/v1/slots over PostgreSQL, 32 connections"},
	{"slots/http/sqlite-32", "HTTP POST /api/v1/slots over SQLite, 32 connections"},
	{"slots/http/postgres-batch-32", "HTTP POST /api/v1/slots/batch of 100 events over PostgreSQL, 32 connections"},
}

type slotsOpts struct {
	duration time.Duration // single-event and HTTP figures
	pgURL    string
}

// slotsFigures runs the slot cases that match, each once (they are long:
// 500K events each), and prints one line per figure.
func slotsFigures(ctx context.Context, w io.Writer, stderr io.Writer, match func(string) bool, o slotsOpts) error {
	var run []slotCase
	for _, c := range slotCases {
		if match(c.id) {
			run = append(run, c)
		}
	}
	if len(run) == 0 {
		return nil
	}
	fmt.Fprintf(w, "\nslots (seed 003): %d events for one instant, at most %d per %s window, each figure run once;\n", slotsEvents, slotsMax, store.FormatWindowSize(slotsWindow))
	fmt.Fprintf(w, "AssignBatch calls of %d events; single-event and HTTP figures run %s; every store is verified after.\n", slotsCall, o.duration)
	for _, c := range run {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		fmt.Fprintf(stderr, "slots: %s ...\n", c.id)
		line, err := runSlotCase(ctx, c, o)
		if err != nil {
			fmt.Fprintf(w, "%-30s FAILED: %v\n", c.id, err)
			continue
		}
		fmt.Fprintf(w, "%-30s %s\n", c.id, line)
		if f, ok := w.(interface{ Flush() error }); ok {
			_ = f.Flush()
		}
	}
	return nil
}

// slotEnv is a fresh slot store with the seed's config.
type slotEnv struct {
	sch   *slot.Scheduler
	pool  *pgxpool.Pool
	close func()
}

func pgSlotEnv(ctx context.Context, url string, conns int32) (*slotEnv, error) {
	admin, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, err
	}
	schema := fmt.Sprintf("sluice_bench_slots_%d_%x", os.Getpid(), time.Now().UnixNano())
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		admin.Close()
		return nil, err
	}
	drop := func() {
		_, _ = admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
		admin.Close()
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		drop()
		return nil, err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns, cfg.MinConns = conns, conns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		drop()
		return nil, err
	}
	closeAll := func() { pool.Close(); drop() }
	if _, err := pgstore.Migrate(ctx, pool); err != nil {
		closeAll()
		return nil, err
	}
	st, err := pgstore.New(pool, pgstore.Config{})
	if err != nil {
		closeAll()
		return nil, err
	}
	env, err := newSlotEnv(ctx, st, closeAll)
	if err != nil {
		return nil, err
	}
	env.pool = pool
	return env, nil
}

func sqliteSlotEnv(ctx context.Context) (*slotEnv, error) {
	dir, err := os.MkdirTemp("", "sluicebench-slots")
	if err != nil {
		return nil, err
	}
	st, err := sqlitestore.Open(ctx, filepath.Join(dir, "slots.db"), sqlitestore.Config{})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return newSlotEnv(ctx, st, func() { _ = st.Close(); _ = os.RemoveAll(dir) })
}

func newSlotEnv(ctx context.Context, st store.SlotStore, closeFn func()) (*slotEnv, error) {
	sch, err := slot.New(slot.Config{Store: st, MaxBatch: slotsCall})
	if err == nil {
		_, err = sch.PutConfig(ctx, store.SlotConfig{Name: "default", MaxPerWindow: slotsMax, WindowSize: slotsWindow})
	}
	if err != nil {
		closeFn()
		return nil, err
	}
	return &slotEnv{sch: sch, close: closeFn}, nil
}

var slotsAt = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// verify runs the verify checks and says how long they took.
func (e *slotEnv) verify(ctx context.Context, want int64) (string, error) {
	start := time.Now()
	rep, err := e.sch.Verify(ctx)
	if err != nil {
		return "", err
	}
	if len(rep.Problems) > 0 {
		return "", fmt.Errorf("verify: %d problems, first: %s", len(rep.Problems), rep.Problems[0])
	}
	if want >= 0 && rep.Slots != want {
		return "", fmt.Errorf("verify: %d slots, want %d", rep.Slots, want)
	}
	return fmt.Sprintf("verify ok (%d slots, %d windows) in %s", rep.Slots, rep.Windows, time.Since(start).Round(time.Millisecond)), nil
}

func runSlotCase(ctx context.Context, c slotCase, o slotsOpts) (string, error) {
	switch c.id {
	case "slots/postgres/insert-floor":
		return slotsInsertFloor(ctx, o.pgURL)
	case "slots/postgres/batch":
		env, err := pgSlotEnv(ctx, o.pgURL, 4)
		if err != nil {
			return "", err
		}
		defer env.close()
		return slotsBatch(ctx, env)
	case "slots/sqlite/batch":
		env, err := sqliteSlotEnv(ctx)
		if err != nil {
			return "", err
		}
		defer env.close()
		return slotsBatch(ctx, env)
	case "slots/postgres/single-32":
		env, err := pgSlotEnv(ctx, o.pgURL, 32)
		if err != nil {
			return "", err
		}
		defer env.close()
		return slotsSingle(ctx, env, 32, o.duration)
	case "slots/postgres/naive-32":
		env, err := pgSlotEnv(ctx, o.pgURL, 32)
		if err != nil {
			return "", err
		}
		defer env.close()
		return slotsNaive(ctx, env, 32, o.duration)
	case "slots/http/postgres-32":
		env, err := pgSlotEnv(ctx, o.pgURL, 32)
		if err != nil {
			return "", err
		}
		defer env.close()
		return slotsHTTP(ctx, env, 32, 1, o.duration)
	case "slots/http/postgres-batch-32":
		env, err := pgSlotEnv(ctx, o.pgURL, 32)
		if err != nil {
			return "", err
		}
		defer env.close()
		return slotsHTTP(ctx, env, 32, 100, o.duration)
	case "slots/http/sqlite-32":
		env, err := sqliteSlotEnv(ctx)
		if err != nil {
			return "", err
		}
		defer env.close()
		return slotsHTTP(ctx, env, 32, 1, o.duration)
	}
	return "", fmt.Errorf("unknown case %s", c.id)
}

func slotsBatch(ctx context.Context, env *slotEnv) (string, error) {
	evs := make([]slot.Event, slotsEvents)
	for i := range evs {
		evs[i] = slot.Event{EventID: "evt-" + strconv.Itoa(i), RequestedTime: slotsAt}
	}
	start := time.Now()
	for i := 0; i < len(evs); i += slotsCall {
		res, err := env.sch.AssignBatch(ctx, "default", evs[i:min(i+slotsCall, len(evs))])
		if err != nil {
			return "", err
		}
		for _, r := range res {
			if r.Err != nil {
				return "", r.Err
			}
		}
	}
	el := time.Since(start)
	v, err := env.verify(ctx, slotsEvents)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d events in %s = %.0f events/s; %s", slotsEvents, el.Round(time.Millisecond),
		float64(slotsEvents)/el.Seconds(), v), nil
}

// slotsInsertFloor is the bare prototype the issue measures against: the
// 500K events as 500 INSERT statements of 1,000 rows (array unnest) into a
// table of sluice_slots' shape, with windows and times computed in Go and
// no counters, idempotency check or locking.
func slotsInsertFloor(ctx context.Context, url string) (string, error) {
	env, err := pgSlotEnv(ctx, url, 1)
	if err != nil {
		return "", err
	}
	defer env.close()
	if _, err := env.pool.Exec(ctx, `CREATE TABLE bench_slots_floor (LIKE sluice_slots INCLUDING ALL)`); err != nil {
		return "", err
	}
	const sql = `INSERT INTO bench_slots_floor (event_id, config_name, config_version, window_us, requested_at, window_start, scheduled_at)
SELECT id, 'default', 1, $2, $3, ws, sc FROM unnest($1::text[], $4::bigint[], $5::bigint[]) AS u(id, ws, sc)`
	ids := make([]string, slotsFloorRow)
	wss := make([]int64, slotsFloorRow)
	scs := make([]int64, slotsFloorRow)
	size, at := slotsWindow.Microseconds(), slotsAt.UnixMicro()
	start := time.Now()
	for i := 0; i < slotsEvents; i += slotsFloorRow {
		for k := range slotsFloorRow {
			n := int64(i + k)
			ids[k] = "evt-" + strconv.FormatInt(n, 10)
			wss[k] = at + n/slotsMax*size
			scs[k] = wss[k] + n%size
		}
		if _, err := env.pool.Exec(ctx, sql, ids, size, at, wss, scs); err != nil {
			return "", err
		}
	}
	el := time.Since(start)
	return fmt.Sprintf("%d events in %s = %.0f events/s (500 statements of 1,000 rows, one commit each)",
		slotsEvents, el.Round(time.Millisecond), float64(slotsEvents)/el.Seconds()), nil
}

func slotsSingle(ctx context.Context, env *slotEnv, workers int, d time.Duration) (string, error) {
	var n, errs atomic.Int64
	var firstErr atomic.Value
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	start := time.Now()
	for g := range workers {
		wg.Go(func() {
			for i := 0; time.Now().Before(deadline); i++ {
				_, err := env.sch.Assign(ctx, fmt.Sprintf("g%d-%d", g, i), "default", slotsAt)
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	if errs.Load() > 0 {
		return "", fmt.Errorf("%d errors, first: %v", errs.Load(), firstErr.Load())
	}
	v, err := env.verify(ctx, n.Load())
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d events in %s = %.0f events/s; %s", n.Load(), el.Round(time.Millisecond), float64(n.Load())/el.Seconds(), v), nil
}

// slotsHTTP serves the slot API on loopback and drives POST /api/v1/slots
// (batch 1) or POST /api/v1/slots/batch with batch events per request from
// conns goroutines, one connection each, for d.
func slotsHTTP(ctx context.Context, env *slotEnv, conns, batch int, d time.Duration) (string, error) {
	lim, err := limiter.New(limiter.Config{Policies: []limiter.Policy{{Name: "p", Rate: 1, Period: time.Second}}})
	if err != nil {
		return "", err
	}
	srv, err := server.New(server.Config{Limiter: lim, Slots: env.sch})
	if err != nil {
		return "", err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
	url := "http://" + ln.Addr().String() + "/api/v1/slots"
	want := http.StatusCreated
	if batch > 1 {
		url += "/batch"
		want = http.StatusOK
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}, Timeout: 30 * time.Second}
	var n, bad atomic.Int64
	var firstErr atomic.Value
	lat := make([][]time.Duration, conns)
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	start := time.Now()
	for g := range conns {
		wg.Go(func() {
			for i := 0; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
				body := fmt.Appendf(nil, `{"eventId":"h%d-%d","configName":"default","requestedTime":"2025-06-01T12:00:00Z"}`, g, i)
				if batch > 1 {
					body = append(body[:0], `{"configName":"default","events":[`...)
					for k := range batch {
						if k > 0 {
							body = append(body, ',')
						}
						body = fmt.Appendf(body, `{"eventId":"h%d-%d-%d","requestedTime":"2025-06-01T12:00:00Z"}`, g, i, k)
					}
					body = append(body, "]}"...)
				}
				t0 := time.Now()
				resp, err := client.Post(url, "application/json", bytes.NewReader(body))
				if err != nil {
					bad.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != want {
					bad.Add(1)
					firstErr.CompareAndSwap(nil, "status "+resp.Status)
					continue
				}
				lat[g] = append(lat[g], time.Since(t0))
				n.Add(int64(batch))
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	if bad.Load() > 0 {
		return "", errors.New(fmt.Sprint(bad.Load(), " failed requests, first: ", firstErr.Load()))
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	p := func(q float64) time.Duration {
		if len(all) == 0 {
			return 0
		}
		return all[min(len(all)-1, int(q*float64(len(all))))].Round(10 * time.Microsecond)
	}
	v, err := env.verify(ctx, n.Load())
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d events in %s = %.0f events/s, p50 %s p99 %s per request; %s", n.Load(), el.Round(time.Millisecond),
		float64(n.Load())/el.Seconds(), p(0.5), p(0.99), v), nil
}

// slotsNaive is the prototype the issue contrasts with: per event one
// transaction that creates the window's counter if missing, locks it with
// a waiting FOR UPDATE, walks window by window to the first with room, and
// inserts the slot and bumps the counter: several round trips per event,
// and every goroutine queues on the same window's lock.
func slotsNaive(ctx context.Context, env *slotEnv, workers int, d time.Duration) (string, error) {
	size, at := slotsWindow.Microseconds(), slotsAt.UnixMicro()
	var n, errs atomic.Int64
	var firstErr atomic.Value
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	start := time.Now()
	one := func(id string) error {
		tx, err := env.pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		for ws := at; ; ws += size {
			if _, err := tx.Exec(ctx, `INSERT INTO sluice_slot_windows (config_name, window_start) VALUES ('default', $1) ON CONFLICT DO NOTHING`, ws); err != nil {
				return err
			}
			var cnt int64
			if err := tx.QueryRow(ctx, `SELECT slot_count FROM sluice_slot_windows WHERE config_name = 'default' AND window_start = $1 FOR UPDATE`, ws).Scan(&cnt); err != nil {
				return err
			}
			if cnt >= slotsMax {
				continue
			}
			if _, err := tx.Exec(ctx, `INSERT INTO sluice_slots (event_id, config_name, config_version, window_us, requested_at, window_start, scheduled_at)
VALUES ($1, 'default', 1, $2, $3, $4, $4)`, id, size, at, ws); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `UPDATE sluice_slot_windows SET slot_count = slot_count + 1,
status = CASE WHEN slot_count + 1 >= $2 THEN 'CLOSED' ELSE 'OPEN' END WHERE config_name = 'default' AND window_start = $1`, ws, slotsMax); err != nil {
				return err
			}
			return tx.Commit(ctx)
		}
	}
	for g := range workers {
		wg.Go(func() {
			for i := 0; time.Now().Before(deadline); i++ {
				if err := one(fmt.Sprintf("n%d-%d", g, i)); err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	line := fmt.Sprintf("%d events in %s = %.0f events/s", n.Load(), el.Round(time.Millisecond), float64(n.Load())/el.Seconds())
	if errs.Load() > 0 {
		line += fmt.Sprintf(", %d failed (first: %v)", errs.Load(), firstErr.Load())
	}
	return line, nil
}
