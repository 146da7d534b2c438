package main

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicerl/sluice/clock"
	"github.com/sluicerl/sluice/job"
	"github.com/sluicerl/sluice/sim"
)

// klinesWeight is the request weight of GET /api/v3/klines as Binance
// documents it for a limit of 100 to 499 (and as sim.ProfileProvider
// charges it).
const klinesWeight = 2

// exchange is the simulated exchange of the example: Binance's
// GET /api/v3/klines over a fixed candle history per symbol and interval.
// Its limits are sim.ProfileProvider's binance dialect, which counts
// request weight itself per window aligned to the clock, reports it in
// X-MBX-USED-WEIGHT-<window>, answers 429 with Retry-After past it and
// 418 (a ban) to a client that keeps coming back before its Retry-After.
//
// Requests are decided one at a time, each at the time the exchange reads
// under its lock (and hands to the simulator), so that it knows in which
// window each decision fell: the per-window counts it keeps are the
// provider's own, not Sluice's.
type exchange struct {
	sim      *sim.ProfileProvider
	window   time.Duration
	capacity int64
	since    time.Time // first candle of every history
	now      func() time.Time

	mu      sync.Mutex
	pinned  pinnedClock
	windows map[int64]*windowCount // by window start, Unix ms
	served  map[string]*served     // by "BTC/USDT 1m"
	refused int64                  // 429 and 418 answers
	bad     int64                  // malformed requests (400)
}

// windowCount is what the exchange saw in one window.
type windowCount struct {
	Used     int64 // weight admitted: the X-MBX-USED-WEIGHT value at the window's last admission
	Requests int64 // every request decided in the window
	Status   map[int]int64
}

// served counts what the exchange served one stream.
type served struct {
	Requests int64
	Candles  int64
}

// pinnedClock is the simulator's clock: the time the exchange read for the
// request it is deciding.
type pinnedClock struct {
	clock.Clock
	t time.Time
}

func (c *pinnedClock) Now() time.Time { return c.t }

// historyLen is how many candles of an interval the exchange has from
// its first: a day of intervals shorter than an hour (1440 of 1m), 30 days
// of longer ones (720 of 1h).
func historyLen(step time.Duration) int {
	if step < time.Hour {
		return int(24 * time.Hour / step)
	}
	return int(30 * 24 * time.Hour / step)
}

// newExchange builds the exchange: capacity weight per window, histories
// from since.
func newExchange(capacity int64, window time.Duration, since time.Time, banAfter int, banFor time.Duration) (*exchange, error) {
	e := &exchange{window: window, capacity: capacity, since: since, now: time.Now,
		windows: map[int64]*windowCount{}, served: map[string]*served{}}
	e.pinned.Clock = clock.Or(nil)
	p, err := sim.NewProfileProvider(sim.ProfileConfig{Profile: "binance", Capacity: capacity, Window: window,
		BanAfter: banAfter, BanFor: banFor, Clock: &e.pinned})
	if err != nil {
		return nil, err
	}
	e.sim = p
	return e, nil
}

// weightHeader is the used-weight header for a window, as sim writes it
// (X-Mbx-Used-Weight-1M for a minute, -2S for 2 seconds, -1H for an hour).
func weightHeader(window time.Duration) string {
	day := 24 * time.Hour
	switch {
	case window%day == 0:
		return fmt.Sprintf("X-Mbx-Used-Weight-%dD", window/day)
	case window%time.Hour == 0:
		return fmt.Sprintf("X-Mbx-Used-Weight-%dH", window/time.Hour)
	case window%time.Minute == 0:
		return fmt.Sprintf("X-Mbx-Used-Weight-%dM", window/time.Minute)
	}
	return fmt.Sprintf("X-Mbx-Used-Weight-%dS", max(1, int(window/time.Second)))
}

func badRequest(w http.ResponseWriter, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	b, _ := json.Marshal(map[string]any{"code": -1100, "msg": msg})
	_, _ = w.Write(append(b, '\n'))
}

// ServeHTTP answers GET /api/v3/klines?symbol=BTCUSDT&interval=1m&startTime=MS&limit=N:
// up to limit candles opening at or after startTime, oldest first, an
// empty array past the end of the history.
func (e *exchange) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet || r.URL.Path != "/api/v3/klines" {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	q := r.URL.Query()
	symbol, interval := q.Get("symbol"), q.Get("interval")
	step, err := job.ParseTimeframe(interval)
	start, serr := strconv.ParseInt(q.Get("startTime"), 10, 64)
	limit, lerr := strconv.Atoi(q.Get("limit"))
	switch {
	case symbol == "" || strings.ContainsAny(symbol, "/ "):
		e.count400()
		badRequest(w, fmt.Sprintf("Illegal characters found in parameter 'symbol'; legal range is '^[A-Z0-9-_.]{1,20}$': %q", symbol))
		return
	case err != nil:
		e.count400()
		badRequest(w, fmt.Sprintf("Invalid interval %q.", interval))
		return
	case serr != nil || start < 0:
		e.count400()
		badRequest(w, fmt.Sprintf("Illegal startTime %q.", q.Get("startTime")))
		return
	case lerr != nil || limit < 1 || limit > 1000:
		e.count400()
		badRequest(w, fmt.Sprintf("Illegal limit %q: want 1 to 1000.", q.Get("limit")))
		return
	}

	// Decide under the lock, at one time read here: the simulator's
	// window and this record's are the same.
	rec := httptest.NewRecorder()
	e.mu.Lock()
	now := e.now()
	e.pinned.t = now
	e.sim.ServeHTTP(rec, r)
	win := now.Truncate(e.window).UnixMilli()
	wc := e.windows[win]
	if wc == nil {
		wc = &windowCount{Status: map[int]int64{}}
		e.windows[win] = wc
	}
	wc.Requests++
	wc.Status[rec.Code]++
	if used, err := strconv.ParseInt(rec.Header().Get(weightHeader(e.window)), 10, 64); err == nil {
		wc.Used = max(wc.Used, used)
	}
	var body []byte
	if rec.Code == http.StatusOK {
		var n int64
		body, n = e.klines(symbol, interval, step, start, limit)
		key := pairOf(symbol) + " " + interval
		s := e.served[key]
		if s == nil {
			s = &served{}
			e.served[key] = s
		}
		s.Requests++
		s.Candles += n
	} else {
		e.refused++
		body = rec.Body.Bytes()
	}
	e.mu.Unlock()

	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(body)
}

func (e *exchange) count400() {
	e.mu.Lock()
	e.bad++
	e.mu.Unlock()
}

// pairOf turns BTCUSDT back into BTC/USDT for the example's pairs.
func pairOf(symbol string) string {
	if s, ok := strings.CutSuffix(symbol, "USDT"); ok {
		return s + "/USDT"
	}
	return symbol
}

// candleAt is the history's candle of symbol and interval opening at t: a
// deterministic walk, so that a test can check what was written.
func candleAt(symbol, interval string, t int64) (open, high, low, close, volume float64) {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s %s %d", symbol, interval, t)
	x := h.Sum64()
	base := 100.0 + float64(len(symbol))*1000
	open = base + float64(x%10000)/100
	close = base + float64((x>>16)%10000)/100
	high = math.Max(open, close) + float64((x>>32)%500)/100
	low = math.Min(open, close) - float64((x>>40)%500)/100
	volume = float64((x>>48)%100000) / 100
	return open, high, low, close, volume
}

// klines renders up to limit candles from start (Unix ms) as Binance does:
// [openTime, "open", "high", "low", "close", "volume", closeTime,
// "quoteVolume", trades, "takerBuyBase", "takerBuyQuote", "0"].
func (e *exchange) klines(symbol, interval string, step time.Duration, start int64, limit int) ([]byte, int64) {
	n := historyLen(step)
	first := e.since.UnixMilli()
	stepMS := step.Milliseconds()
	i := int64(0)
	if start > first {
		i = (start - first + stepMS - 1) / stepMS
	}
	var b strings.Builder
	b.WriteString("[")
	k := 0
	for ; k < limit && i < int64(n); k, i = k+1, i+1 {
		t := first + i*stepMS
		o, h, l, c, v := candleAt(symbol, interval, t)
		if k > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `[%d,"%.2f","%.2f","%.2f","%.2f","%.2f",%d,"%.2f",%d,"%.2f","%.2f","0"]`,
			t, o, h, l, c, v, t+stepMS-1, v*c, int(v), v/2, v*c/2)
	}
	b.WriteString("]\n")
	return []byte(b.String()), int64(k)
}

// exchangeStats is what the exchange counted: a plain value.
type exchangeStats struct {
	Windows  []windowStat
	Served   map[string]served
	Sim      sim.ProfileStats
	Refused  int64
	Bad      int64
	Capacity int64
	Window   time.Duration
}

type windowStat struct {
	Start time.Time
	windowCount
}

// MaxUsed returns the most weight the exchange admitted in one window.
func (s exchangeStats) MaxUsed() int64 {
	var m int64
	for _, w := range s.Windows {
		m = max(m, w.Used)
	}
	return m
}

func (e *exchange) stats() exchangeStats {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := exchangeStats{Served: map[string]served{}, Sim: e.sim.Stats(), Refused: e.refused, Bad: e.bad,
		Capacity: e.capacity, Window: e.window}
	for k, v := range e.served {
		s.Served[k] = *v
	}
	for start, w := range e.windows {
		c := *w
		c.Status = map[int]int64{}
		for k, v := range w.Status {
			c.Status[k] = v
		}
		s.Windows = append(s.Windows, windowStat{Start: time.UnixMilli(start).UTC(), windowCount: c})
	}
	sort.Slice(s.Windows, func(i, j int) bool { return s.Windows[i].Start.Before(s.Windows[j].Start) })
	return s
}
