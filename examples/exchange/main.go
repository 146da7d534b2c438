// Command exchange runs an exchange fleet through the binance profile
// against the simulated Binance of package sim, and prints what it did:
//
//	go run ./examples/exchange                      # in memory
//	go run ./examples/exchange -redis redis://127.0.0.1:6379
//
// The profile is the embedded binance one overridden by binance-demo.yaml
// beside this file (600 weight per 10 s window instead of 6000 a minute,
// so that a short run crosses several windows).
//
//  1. 8 workers in 2 processes poll klines (weight 2) from one IP: every
//     request is charged its weight in the window aligned to the clock,
//     all or nothing, before it is sent.
//  2. A client without Sluice on the same IP ignores the 429s and gets the
//     IP banned (418). The first fleet request that meets the ban opens the
//     key for both processes until the ban ends: the fleet sends nothing
//     more during it.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicerl/sluice/provider"
	"github.com/sluicerl/sluice/sim"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
	"github.com/sluicerl/sluice/store/redisstore"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "exchange:", err)
		os.Exit(1)
	}
}

func openStores(url string, n int) ([]store.RateStore, func(), error) {
	if url == "" {
		m := memstore.New(memstore.Config{})
		return []store.RateStore{m, m}, func() {}, nil
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, nil, err
	}
	prefix := fmt.Sprintf("example-exchange-%08x:", rand.Uint32())
	var out []store.RateStore
	var clients []*redis.Client
	for range n {
		c := redis.NewClient(opts)
		clients = append(clients, c)
		s, err := redisstore.New(c, redisstore.Config{Prefix: prefix})
		if err != nil {
			return nil, nil, err
		}
		out = append(out, s)
	}
	if err := clients[0].Ping(context.Background()).Err(); err != nil {
		return nil, nil, fmt.Errorf("redis at %s: %w", url, err)
	}
	return out, func() {
		ctx := context.Background()
		iter := clients[0].Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			clients[0].Del(ctx, iter.Val())
		}
		for _, c := range clients {
			_ = c.Close()
		}
	}, nil
}

func demoProfile() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "binance-demo.yaml")
}

func run() error {
	redisURL := flag.String("redis", "", "share state through the Redis at this URL (empty: in memory)")
	duration := flag.Duration("duration", 30*time.Second, "how long the rate run lasts")
	profileFile := flag.String("profile", demoProfile(), "profile file overriding the embedded binance profile")
	flag.Parse()
	ctx := context.Background()
	stores, closeStores, err := openStores(*redisURL, 2)
	if err != nil {
		return err
	}
	defer closeStores()
	set, err := provider.Load(*profileFile)
	if err != nil {
		return err
	}
	prof, _ := set.Get("binance")
	backend := "memory"
	if *redisURL != "" {
		backend = "Redis"
	}

	// 1. The fleet alone.
	ex, err := sim.NewProfileProvider(sim.ProfileConfig{Profile: "binance", Capacity: 600, Window: 10 * time.Second, Latency: 10 * time.Millisecond})
	if err != nil {
		return err
	}
	newRuntime := func(i int) (*provider.Runtime, error) {
		return provider.NewRuntime(provider.Config{Profile: prof, Store: stores[i], Prefix: "example:"})
	}
	res, err := sim.Run(ctx, sim.Config{
		Workers: 8, Processes: 2, Duration: *duration, URL: "https://api.binance.com/api/v3/klines",
		Base:  sim.HandlerTransport{Handler: ex},
		Limit: func(time.Duration) float64 { return ex.Limit(2) },
		NewClient: func(i int, base http.RoundTripper) (sim.Client, error) {
			rt, err := newRuntime(i)
			if err != nil {
				return sim.Client{}, err
			}
			return sim.Client{Transport: &provider.Transport{Runtime: rt, Base: base}}, nil
		},
	})
	if err != nil {
		return err
	}
	sum := sim.Summarize(res)
	st := ex.Stats()
	fmt.Printf("8 workers in 2 processes over %s, %s, profile %s (revision %s)\n\n", backend, *duration, prof.Name, prof.Revision)
	fmt.Println("profile  hidden limit   goodput/limit  throttled  bans  weight served")
	fmt.Printf("binance  %-13s  %13.3f  %8.2f%%  %4d  %13d\n\n", "30 klines/s", sum.GoodputRatio, 100*sum.ThrottleRatio, st.Bans, st.Weight)

	// 2. A ban caused by someone else on the IP.
	ex2, err := sim.NewProfileProvider(sim.ProfileConfig{Profile: "binance", Capacity: 600, Window: 10 * time.Second, BanAfter: 3, BanFor: 5 * time.Second})
	if err != nil {
		return err
	}
	rogue := sim.HandlerTransport{Handler: ex2}
	for ex2.Stats().Bans == 0 {
		req, _ := http.NewRequest(http.MethodGet, "https://api.binance.com/api/v3/account", nil)
		resp, err := rogue.RoundTrip(req)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
	}
	fmt.Println("a client without Sluice got the IP banned for 5s; the fleet starts now")
	var banned, sent atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	var first sync.Once
	var firstOK time.Duration
	for w := range 8 {
		rt, err := newRuntime(w % 2)
		if err != nil {
			return err
		}
		tr := &provider.Transport{Runtime: rt, Base: sim.HandlerTransport{Handler: ex2}, OnSettle: func(_ *http.Request, _ *provider.Ticket, o provider.Outcome) {
			sent.Add(1)
			if o.Kind == provider.Banned {
				banned.Add(1)
			}
		}}
		wg.Go(func() {
			for range 5 {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://api.binance.com/api/v3/klines", nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					fmt.Println("  error:", err)
					return
				}
				_ = resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					first.Do(func() { firstOK = time.Since(start) })
				}
			}
		})
	}
	wg.Wait()
	fmt.Printf("  fleet requests answered 418: %d (of %d sent); first success after %.1fs; 40 klines done in %.1fs\n",
		banned.Load(), sent.Load(), firstOK.Seconds(), time.Since(start).Seconds())
	return nil
}
