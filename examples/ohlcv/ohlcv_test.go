package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/internal/testenv"
	"github.com/sluicerl/sluice/job"
	"github.com/sluicerl/sluice/outbound"
	"github.com/sluicerl/sluice/store"
)

// TestMain makes the test binary a worker process when the coordinator
// starts it with workerEnv set, as the example's binary is.
func TestMain(m *testing.M) {
	if raw := os.Getenv(workerEnv); raw != "" {
		os.Exit(workerMain(raw))
	}
	os.Exit(m.Run())
}

// TestSeed000TwoWorkerProcessesNeverExceedLimit is seed 000's acceptance
// check "with 2 workers, rate_limit_usage never exceeds rate_limit within
// a period", with 2 worker OS processes (this test binary again) sharing
// one SQLite file (records, limiter state and candles), or one PostgreSQL
// schema: they drain 6 klines streams from the simulated exchange, whose
// own per-window count (the weight it admitted and every answer it gave,
// by the window it decided in) shows that no window was asked for more
// than its limit: no 429, no 418, and the weight used in each window at
// most the exchange's budget. Every candle is written exactly once and
// every page fetched once, and the cursors are persisted: read again
// through a fresh store after the workers exited.
func TestSeed000TwoWorkerProcessesNeverExceedLimit(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			o := options{Jobs: defaultJobs, Workers: 2, Capacity: 40, Window: 2 * time.Second, Page: 100,
				PacingWait: -1, BanAfter: 5, BanFor: 10 * time.Second, Timeout: 5 * time.Minute}
			if backend == "sqlite" {
				o.DB = filepath.Join(t.TempDir(), "ohlcv.db")
			} else {
				o.Postgres = testenv.WithSearchPath(testenv.PostgresURL(), testenv.PostgresSchema(t, "sluice_ohlcv_"))
			}
			var log testenv.SyncBuffer
			o.Log = &log
			t.Cleanup(func() { t.Logf("worker processes' output:\n%s", log.String()) })
			ctx := context.Background()
			res, err := coordinate(ctx, o)
			require.NoError(t, err)
			require.Len(t, res.pids, 2)
			require.NotEqual(t, res.pids[0], res.pids[1])
			checkSeed000Run(t, o, res)

			// The cursors were persisted: a store opened now (after both
			// worker processes exited) reads them.
			rec, err := openRecords(ctx, o.DB, o.Postgres)
			require.NoError(t, err)
			defer rec.close()
			for _, j := range res.jobs {
				got, err := rec.jobs.GetJob(ctx, j.ID)
				require.NoError(t, err)
				require.Equal(t, wantCursor(t, got), got.Cursor, j.ID)
			}
		})
	}
}

// TestSeed000TwoWorkerProcessesFillTheWindowThenPark is the same check
// with a window of an hour, which no machine, however slow or loaded, ends
// before the 2 worker processes have spent its budget: so the limit is
// reached for certain. The exchange admitted the limiter's share of the
// window and refused nothing, a job parked (no_capacity) instead of
// calling, nothing failed, and no cursor is past what was written.
func TestSeed000TwoWorkerProcessesFillTheWindowThenPark(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			o := options{Jobs: defaultJobs, Workers: 2, Capacity: 40, Window: time.Hour, Page: 100,
				PacingWait: -1, BanAfter: 5, BanFor: 10 * time.Second, Timeout: 5 * time.Minute}
			if backend == "sqlite" {
				o.DB = filepath.Join(t.TempDir(), "ohlcv.db")
			} else {
				o.Postgres = testenv.WithSearchPath(testenv.PostgresURL(), testenv.PostgresSchema(t, "sluice_ohlcv_"))
			}
			var log testenv.SyncBuffer
			o.Log = &log
			t.Cleanup(func() { t.Logf("worker processes' output:\n%s", log.String()) })
			o.Until = func(ctx context.Context, js store.JobStore, ids []string) (bool, error) {
				for _, id := range ids {
					j, err := js.GetJob(ctx, id)
					if err != nil || j.ParkedReason == store.PressureNoCapacity {
						return err == nil, err
					}
				}
				return false, nil
			}
			res, err := coordinate(context.Background(), o)
			require.NoError(t, err)

			ex := res.exchange
			var used int64
			for _, w := range ex.Windows {
				require.LessOrEqual(t, w.Used, o.Capacity, "window %s: the exchange admitted more weight than its limit", w.Start)
				require.Equal(t, map[int]int64{200: w.Requests}, w.Status, "window %s: every request within the limit, none refused", w.Start)
				used += w.Used
			}
			require.Zero(t, ex.Sim.Throttled, "429s")
			require.Zero(t, ex.Sim.Banned, "418s")
			require.Equal(t, ex.Sim.Weight, used)
			require.GreaterOrEqual(t, used, o.Capacity-res.margin, "a job parked only once the window's share was spent")
			parked := 0
			for _, j := range res.jobs {
				if j.ParkedReason == store.PressureNoCapacity {
					parked++
				}
				require.Zero(t, j.Failures, "%s: failures (%s)", j.ID, j.LastError)
				var p struct{ Symbol, Timeframe string }
				require.NoError(t, json.Unmarshal(j.Params, &p))
				step, err := job.ParseTimeframe(p.Timeframe)
				require.NoError(t, err)
				key := p.Symbol + " " + p.Timeframe
				c := res.candles[key]
				require.Equal(t, ex.Served[key].Candles, c.Candles, "%s: every candle served was written", key)
				require.Zero(t, c.Rewritten, "%s: candles written more than once", key)
				if c.Candles == 0 {
					require.Empty(t, j.Cursor, key)
					continue
				}
				require.Equal(t, fmt.Sprintf(`{"since_ms":%d}`, c.Last+step.Milliseconds()), j.Cursor, "%s: the cursor is right after the last candle written", key)
			}
			require.Positive(t, parked, "a job parked for want of capacity")
		})
	}
}

// wantCursor is the cursor after a job's whole history.
func wantCursor(t *testing.T, j store.Job) string {
	t.Helper()
	var p struct{ Timeframe string }
	require.NoError(t, json.Unmarshal(j.Params, &p))
	step, err := job.ParseTimeframe(p.Timeframe)
	require.NoError(t, err)
	return fmt.Sprintf(`{"since_ms":%d}`, sinceMS+int64(historyLen(step))*step.Milliseconds())
}

func checkSeed000Run(t *testing.T, o options, res *result) {
	t.Helper()
	ex := res.exchange
	t.Logf("exchange: %d requests, %d weight, max %d of %d in a window, %d windows; %d runs",
		ex.Sim.Requests, ex.Sim.Weight, ex.MaxUsed(), o.Capacity, len(ex.Windows), len(res.runs))

	// The exchange's own count, window by window.
	var totalWeight int64
	for _, w := range ex.Windows {
		require.LessOrEqual(t, w.Used, o.Capacity, "window %s: the exchange admitted more weight than its limit", w.Start)
		require.Equal(t, map[int]int64{200: w.Requests}, w.Status, "window %s: every request within the limit, none refused", w.Start)
		totalWeight += w.Used
	}
	require.Zero(t, ex.Sim.Throttled, "429s")
	require.Zero(t, ex.Sim.Banned, "418s")
	require.Zero(t, ex.Bad, "malformed requests")
	require.Equal(t, ex.Sim.Weight, totalWeight)
	// Every candle written exactly once, every page fetched once.
	require.Len(t, res.jobs, 6)
	var pages int64
	for _, j := range res.jobs {
		var p struct{ Symbol, Timeframe string }
		require.NoError(t, json.Unmarshal(j.Params, &p))
		step, err := job.ParseTimeframe(p.Timeframe)
		require.NoError(t, err)
		n := int64(historyLen(step))
		key := p.Symbol + " " + p.Timeframe
		c := res.candles[key]
		require.Equal(t, n, c.Candles, key)
		require.Equal(t, int64(sinceMS), c.First, key)
		require.Equal(t, sinceMS+(n-1)*step.Milliseconds(), c.Last, key)
		require.Zero(t, c.Rewritten, "%s: candles written more than once", key)
		s := ex.Served[key]
		require.Equal(t, n, s.Candles, "%s: candles served", key)
		wantPages := (n+int64(o.Page)-1)/int64(o.Page) + 1 // and the empty page that ends the run
		require.Equal(t, wantPages, s.Requests, "%s: pages fetched", key)
		pages += s.Requests
		require.Zero(t, j.Failures, "%s: failures (%s)", j.ID, j.LastError)
		require.Equal(t, wantCursor(t, j), j.Cursor, j.ID)
	}
	require.Equal(t, ex.Sim.Requests, pages, "every request was a page of a job")
	require.Equal(t, pages*klinesWeight, ex.Sim.Weight)

	// The candles hold what the exchange served.
	rec, err := openRecords(context.Background(), o.DB, o.Postgres)
	require.NoError(t, err)
	defer rec.close()
	for _, at := range []int64{sinceMS, sinceMS + 777*60_000} {
		got, err := rec.candleRow(context.Background(), "ETH/USDT", "1m", at)
		require.NoError(t, err)
		op, hi, lo, cl, vol := candleAt("ETHUSDT", "1m", at)
		require.InDelta(t, op, got.Open, 0.005)
		require.InDelta(t, hi, got.High, 0.005)
		require.InDelta(t, lo, got.Low, 0.005)
		require.InDelta(t, cl, got.Close, 0.005)
		require.InDelta(t, vol, got.Volume, 0.005)
	}
}

// TestParseKlines: the handler reads Binance's klines arrays and refuses a
// malformed one with what was wrong.
func TestParseKlines(t *testing.T) {
	t.Parallel()
	cs, err := parseKlines([]byte(`[[1705622400000,"1.50","2.00","1.00","1.75","10.00",1705622459999,"17.5",10,"5","8.75","0"],[1705622460000,"1.75","1.80","1.70","1.70","3",1705622519999,"5.1",3,"1","1.7","0"]]`))
	require.NoError(t, err)
	require.Equal(t, []candle{{OpenTime: 1705622400000, Open: 1.5, High: 2, Low: 1, Close: 1.75, Volume: 10},
		{OpenTime: 1705622460000, Open: 1.75, High: 1.8, Low: 1.7, Close: 1.7, Volume: 3}}, cs)
	cs, err = parseKlines([]byte("[]\n"))
	require.NoError(t, err)
	require.Empty(t, cs)
	for body, want := range map[string]string{
		`{"code":-1003}`:                                    "not a klines array",
		`[[1705622400000,"1","2","0.5"]]`:                   "kline 0 has 4 fields",
		`[["x","1","2","0.5","1","1"]]`:                     "kline 0: open time",
		`[[1,"1","2","0.5","one","1"]]`:                     "kline 0: field 4",
		`[[1,"1","2","0.5","1",1]]`:                         "kline 0: field 5",
		`[[2,"1","2","1","1","1"],[2,"1","2","1","1","1"]]`: "kline 1 opens at 2, not after 2",
	} {
		_, err := parseKlines([]byte(body))
		require.ErrorContains(t, err, want, body)
	}
}

// TestExchangeRefusesBadRequests: the simulated exchange answers a
// malformed klines request 400 with Binance's error shape, counts it, and
// charges it no weight.
func TestExchangeRefusesBadRequests(t *testing.T) {
	t.Parallel()
	ex, err := newExchange(40, 2*time.Second, time.UnixMilli(sinceMS), 5, time.Second)
	require.NoError(t, err)
	ex.now = func() time.Time { return time.Date(2026, 1, 19, 12, 30, 0, 0, time.UTC) }
	for _, q := range []string{"symbol=BTC/USDT&interval=1m&startTime=0&limit=100", "symbol=BTCUSDT&interval=1M&startTime=0&limit=100",
		"symbol=BTCUSDT&interval=1m&startTime=-5&limit=100", "symbol=BTCUSDT&interval=1m&startTime=0&limit=1001", "symbol=BTCUSDT&interval=1m"} {
		rec := httptest.NewRecorder()
		ex.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/v3/klines?"+q, nil))
		require.Equal(t, http.StatusBadRequest, rec.Code, q)
		require.Contains(t, rec.Body.String(), `"code":-1100`, q)
	}
	rec := httptest.NewRecorder()
	ex.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/v3/klines?symbol=BTCUSDT&interval=1h&startTime=0&limit=100", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	cs, err := parseKlines(rec.Body.Bytes())
	require.NoError(t, err)
	require.Len(t, cs, 100)
	require.EqualValues(t, sinceMS, cs[0].OpenTime)
	require.Equal(t, "2", rec.Header().Get("X-Mbx-Used-Weight-2s"))
	st := ex.stats()
	require.EqualValues(t, 5, st.Bad)
	require.EqualValues(t, 1, st.Sim.Requests)
	require.EqualValues(t, 2, st.Sim.Weight)
}

// TestExchangeBansAfterRepeated429s: past the window's budget the exchange
// answers 429 with Retry-After; a client that keeps coming back before it
// is banned (418 with Retry-After), which the handler turns into a park
// (banned) rather than a failure.
func TestExchangeBansAfterRepeated429s(t *testing.T) {
	t.Parallel()
	ex, err := newExchange(4, time.Hour, time.UnixMilli(sinceMS), 3, time.Minute)
	require.NoError(t, err)
	at := time.Date(2026, 1, 19, 12, 30, 0, 0, time.UTC)
	ex.now = func() time.Time { return at } // one window for certain
	get := func() *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		ex.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/v3/klines?symbol=BTCUSDT&interval=1m&startTime=0&limit=100", nil))
		return rec
	}
	var codes []int
	for range 7 {
		codes = append(codes, get().Code)
	}
	// 2 admitted (weight 4), a 429 that sets the Retry-After, 2 early
	// returns refused 429, the third early return banned, then banned.
	require.Equal(t, []int{200, 200, 429, 429, 429, 418, 418}, codes)
	rec := get()
	require.Equal(t, http.StatusTeapot, rec.Code)
	require.NotEmpty(t, rec.Header().Get("Retry-After"))
	st := ex.stats()
	require.EqualValues(t, 1, st.Sim.Bans)
	require.EqualValues(t, 4, st.MaxUsed())
	require.EqualValues(t, 6, st.Refused)

	err = exchangeError(&outbound.StatusError{Status: rec.Code, Header: rec.Header(), Body: rec.Body.Bytes()})
	var pe *job.PressureError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, store.PressureBanned, pe.Reason)
	require.Positive(t, pe.Wait)
	err = exchangeError(&outbound.StatusError{Status: http.StatusBadRequest})
	require.True(t, job.IsPermanent(err), "a 400 is the request's fault: permanent")
}

// FuzzParseKlines: whatever the exchange sends, the parser returns candles
// in strictly increasing open time or an error, and never panics.
func FuzzParseKlines(f *testing.F) {
	f.Add([]byte(`[[1705622400000,"1.50","2.00","1.00","1.75","10.00",1705622459999,"17.5",10,"5","8.75","0"]]`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"code":-1003,"msg":"Too much request weight used"}`))
	f.Add([]byte(`[[1,"1","2","1","1","1"],[1,"1","2","1","1","1"]]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		cs, err := parseKlines(body)
		if err != nil {
			require.Empty(t, cs)
			return
		}
		for i := 1; i < len(cs); i++ {
			require.Greater(t, cs[i].OpenTime, cs[i-1].OpenTime)
		}
	})
}
