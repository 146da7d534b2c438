package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sluicerl/sluice/job"
	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/outbound"
	"github.com/sluicerl/sluice/store"
)

// workerEnv carries a worker process's workerConfig (JSON): the example's
// binary (or its test binary) started with it set is a worker.
const workerEnv = "SLUICE_OHLCV_WORKER"

// policyName is the limiter policy the jobs file's connector names.
const policyName = "binance-weight"

// workerConfig is what the coordinator hands each worker process.
type workerConfig struct {
	Holder     string        `json:"holder"`
	DB         string        `json:"db"`
	Postgres   string        `json:"postgres,omitempty"`
	Exchange   string        `json:"exchange"`
	Rate       int64         `json:"rate"`   // weight per window the limiter lets through
	Window     time.Duration `json:"window"` // the exchange's window
	Page       int           `json:"page"`
	PacingWait time.Duration `json:"pacing_wait"`
	SinceMS    int64         `json:"since_ms"` // where a job without a cursor starts
	NoPacing   bool          `json:"no_pacing,omitempty"`
}

// cursor is a job's cursor, seed 000's shape: the open time of the next
// candle to fetch.
type cursor struct {
	SinceMS int64 `json:"since_ms"`
}

// workerMain runs one worker process until its standard input ends (the
// coordinator closed it, or died) or it is interrupted, and returns its
// exit code.
func workerMain(raw string) int {
	var c workerConfig
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		fmt.Fprintf(os.Stderr, "ohlcv worker: %s: %v\n", workerEnv, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	if err := runWorker(ctx, c); err != nil {
		fmt.Fprintf(os.Stderr, "ohlcv worker %s: %v\n", c.Holder, err)
		return 1
	}
	return 0
}

func runWorker(ctx context.Context, c workerConfig) error {
	rec, err := openRecords(ctx, c.DB, c.Postgres)
	if err != nil {
		return err
	}
	defer rec.close()
	cfg := job.Config{Store: rec.jobs, Holder: c.Holder, PollInterval: 50 * time.Millisecond,
		MaxPacingWait: c.PacingWait, ShutdownGrace: 10 * time.Second,
		Handlers: map[string]job.Handler{"ohlcv": ohlcvHandler(rec, c)}}
	if !c.NoPacing {
		// The exchange's weight window as a limiter policy, its state in the
		// shared records: every call takes its weight before it is sent, and
		// the gate holds back claims while the window is spent.
		lim, err := limiter.New(limiter.Config{Store: rec.rates, Policies: []limiter.Policy{
			{Name: policyName, Algorithm: store.FixedWindow, Rate: c.Rate, Period: c.Window}}})
		if err != nil {
			return err
		}
		cfg.Limiter = lim
		cfg.Gate = job.CapacityGate(lim, job.ConnectorPolicies(rec.jobs, time.Second, nil))
	}
	var (
		mu              sync.Mutex
		claims, commits int
		parks           = map[string]int{}
	)
	cfg.OnEvent = func(e job.Event) {
		mu.Lock()
		defer mu.Unlock()
		switch e.Kind {
		case job.EventClaim:
			claims++
		case job.EventCommit:
			commits++
		case job.EventPark:
			parks[e.Reason]++
		case job.EventFailure:
			fmt.Fprintf(os.Stderr, "  worker %s: %s failed: %v\n", c.Holder, e.JobID, e.Err)
		}
	}
	w, err := job.New(cfg)
	if err != nil {
		return err
	}
	err = w.Run(ctx)
	mu.Lock()
	defer mu.Unlock()
	parked := "none"
	if len(parks) > 0 {
		var ps []string
		for r, n := range parks {
			ps = append(ps, fmt.Sprintf("%d %s", n, r))
		}
		sort.Strings(ps)
		parked = strings.Join(ps, ", ")
	}
	fmt.Fprintf(os.Stderr, "  worker %s (pid %d) stopped: %d claims, %d slices committed, parks: %s\n",
		c.Holder, os.Getpid(), claims, commits, parked)
	return err
}

// ohlcvHandler is the job handler: it pages klines from the job's cursor
// until the exchange has none after it (seed 002 D11: a short page is not
// the end, an empty one is), writing each page in one transaction and
// committing the cursor after it only then.
func ohlcvHandler(rec *records, c workerConfig) job.Handler {
	client := &http.Client{Timeout: 30 * time.Second}
	return func(ctx context.Context, run *job.Run) error {
		var p struct {
			Symbol    string `json:"symbol"`
			Timeframe string `json:"timeframe"`
		}
		if err := json.Unmarshal(run.Job().Params, &p); err != nil || p.Symbol == "" || p.Timeframe == "" {
			return job.Permanent(fmt.Errorf("job %s: params %s: want symbol and timeframe", run.Job().ID, run.Job().Params))
		}
		step, err := job.ParseTimeframe(p.Timeframe)
		if err != nil {
			return job.Permanent(fmt.Errorf("job %s: timeframe: %w", run.Job().ID, err))
		}
		cur := cursor{SinceMS: c.SinceMS}
		if s := run.Cursor(); s != "" {
			if err := json.Unmarshal([]byte(s), &cur); err != nil {
				return job.Permanent(fmt.Errorf("job %s: cursor %q: %w", run.Job().ID, s, err))
			}
		}
		symbol := strings.ReplaceAll(p.Symbol, "/", "")
		for {
			var body []byte
			err := run.CallCost(ctx, klinesWeight, func(ctx context.Context) error {
				u := fmt.Sprintf("%s/api/v3/klines?symbol=%s&interval=%s&startTime=%d&limit=%d",
					c.Exchange, url.QueryEscape(symbol), url.QueryEscape(p.Timeframe), cur.SinceMS, c.Page)
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
				if err != nil {
					return err
				}
				resp, err := client.Do(req)
				if err != nil {
					return err
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
				if err != nil {
					return err
				}
				if resp.StatusCode != http.StatusOK {
					return &outbound.StatusError{Status: resp.StatusCode, Header: resp.Header, Body: b}
				}
				body = b
				return nil
			})
			if err != nil {
				return exchangeError(err)
			}
			cs, err := parseKlines(body)
			if err != nil {
				return fmt.Errorf("job %s: klines from %d: %w", run.Job().ID, cur.SinceMS, err)
			}
			if len(cs) == 0 {
				return nil // drained: nothing after the cursor yet
			}
			if err := rec.writeCandles(ctx, p.Symbol, p.Timeframe, run.Token(), cs); err != nil {
				return fmt.Errorf("job %s: writing candles: %w", run.Job().ID, err)
			}
			cur.SinceMS = cs[len(cs)-1].OpenTime + step.Milliseconds()
			b, _ := json.Marshal(cur)
			if err := run.Commit(ctx, string(b)); err != nil {
				return err // a budget ran out or the lease was lost
			}
		}
	}
}

// exchangeError maps what Run.Call returned for the worker: Binance's 418
// (an IP ban) is source pressure that parks the job until the ban ends; a
// 4xx other than 429 is our request's fault and permanent. 429 and the
// rest Run.Call has already classified.
func exchangeError(err error) error {
	var se *outbound.StatusError
	if !errors.As(err, &se) {
		return err
	}
	switch {
	case se.Status == http.StatusTeapot:
		secs, _ := strconv.Atoi(se.Header.Get("Retry-After"))
		return job.Pressure(store.PressureBanned, time.Duration(max(secs, 1))*time.Second, err)
	case se.Status >= 400 && se.Status < 500 && se.Status != http.StatusTooManyRequests:
		return job.Permanent(fmt.Errorf("exchange answered %d: %s", se.Status, strings.TrimSpace(string(se.Body))))
	}
	return err
}

// parseKlines reads Binance's klines array: [openTime, "open", "high",
// "low", "close", "volume", closeTime, ...] per candle, oldest first.
func parseKlines(body []byte) ([]candle, error) {
	var rows [][]json.RawMessage
	if err := json.Unmarshal(body, &rows); err != nil {
		return nil, fmt.Errorf("not a klines array: %w", err)
	}
	out := make([]candle, 0, len(rows))
	for i, r := range rows {
		if len(r) < 6 {
			return nil, fmt.Errorf("kline %d has %d fields, want at least 6", i, len(r))
		}
		var c candle
		if err := json.Unmarshal(r[0], &c.OpenTime); err != nil {
			return nil, fmt.Errorf("kline %d: open time: %w", i, err)
		}
		for k, dst := range []*float64{&c.Open, &c.High, &c.Low, &c.Close, &c.Volume} {
			var s string
			if err := json.Unmarshal(r[k+1], &s); err != nil {
				return nil, fmt.Errorf("kline %d: field %d: %w", i, k+1, err)
			}
			v, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return nil, fmt.Errorf("kline %d: field %d: %w", i, k+1, err)
			}
			*dst = v
		}
		if i > 0 && c.OpenTime <= out[i-1].OpenTime {
			return nil, fmt.Errorf("kline %d opens at %d, not after %d", i, c.OpenTime, out[i-1].OpenTime)
		}
		out = append(out, c)
	}
	return out, nil
}
