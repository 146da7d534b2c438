// Command shopify runs Shopify work through the provider profiles against
// the simulated Shopify of package sim, and prints what the fleet did:
//
//	go run ./examples/shopify                       # in memory
//	go run ./examples/shopify -redis redis://127.0.0.1:6379
//
// With -redis the two processes of the fleet share their buckets, pauses
// and bulk leases through Redis, each on a client of its own.
//
//  1. GraphQL: 8 workers in 2 processes query one shop whose cost bucket
//     (1000 points restoring 100/s; every query requests 100 points and
//     costs 40, taking 50 ms) the fleet does not know: the profile's
//     bootstrap is 1000 at 50/s, and the real size and rate are learned
//     from throttleStatus. Every query reserves its requested cost first,
//     is refunded the difference, and is not sent when the bucket cannot
//     hold it.
//  2. REST: the same fleet on the REST bucket (40, leaking 2/s).
//  3. Bulk: bulk query jobs of two shops (spelt several ways) under API
//     versions 2025-10 (one at a time per shop) and 2026-01 (five).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicerl/sluice/lease"
	"github.com/sluicerl/sluice/provider"
	"github.com/sluicerl/sluice/sim"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
	"github.com/sluicerl/sluice/store/redisstore"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "shopify:", err)
		os.Exit(1)
	}
}

type stores struct {
	rates  []store.RateStore
	leases []store.LeaseStore
}

// openStores returns one store per process: Redis clients of their own
// under one fresh prefix, or one shared in-memory store.
func openStores(url string, n int) (stores, func(), error) {
	var s stores
	if url == "" {
		m := memstore.New(memstore.Config{})
		l := memstore.NewLeases(memstore.LeasesConfig{})
		for range n {
			s.rates, s.leases = append(s.rates, m), append(s.leases, l)
		}
		return s, func() {}, nil
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		return s, nil, err
	}
	prefix := fmt.Sprintf("example-shopify-%08x:", rand.Uint32())
	var clients []*redis.Client
	for range n {
		c := redis.NewClient(opts)
		clients = append(clients, c)
		rs, err := redisstore.New(c, redisstore.Config{Prefix: prefix})
		if err != nil {
			return s, nil, err
		}
		s.rates, s.leases = append(s.rates, rs), append(s.leases, rs)
	}
	if err := clients[0].Ping(context.Background()).Err(); err != nil {
		return s, nil, fmt.Errorf("redis at %s: %w", url, err)
	}
	return s, func() {
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

func run() error {
	redisURL := flag.String("redis", "", "share state through the Redis at this URL (empty: in memory)")
	duration := flag.Duration("duration", 20*time.Second, "how long each rate run lasts")
	flag.Parse()
	ctx := context.Background()
	st, closeStores, err := openStores(*redisURL, 2)
	if err != nil {
		return err
	}
	defer closeStores()
	set, err := provider.Embedded()
	if err != nil {
		return err
	}
	backend := "memory"
	if *redisURL != "" {
		backend = "Redis"
	}
	fmt.Printf("8 workers in 2 processes over %s, %s per run\n\n", backend, *duration)
	fmt.Println("profile          hidden limit     goodput/limit  throttled  bans  points used/restored  refunded")

	// 1. GraphQL.
	gql, err := sim.NewProfileProvider(sim.ProfileConfig{Profile: "shopify-graphql", Capacity: 1000, Rate: 100,
		RequestedCost: 100, ActualCost: 40, Latency: 50 * time.Millisecond})
	if err != nil {
		return err
	}
	sum, refunded, err := fleet(ctx, set, "shopify-graphql", st, gql, "https://Demo-Shop.myshopify.com/admin/api/2026-01/graphql.json", 100, *duration)
	if err != nil {
		return err
	}
	ps := gql.Stats()
	restored := 1000 + 100*duration.Seconds()
	fmt.Printf("shopify-graphql  %-15s  %13.3f  %8.2f%%  %4d  %20.3f  %8d\n", "2.5 queries/s", sum.GoodputRatio, 100*sum.ThrottleRatio, sum.Bans, float64(ps.Points)/restored, refunded)

	// 2. REST.
	rest, err := sim.NewProfileProvider(sim.ProfileConfig{Profile: "shopify-rest", Latency: 20 * time.Millisecond})
	if err != nil {
		return err
	}
	sum, _, err = fleet(ctx, set, "shopify-rest", st, rest, "https://demo-shop.myshopify.com/admin/api/2026-01/products.json", 0, *duration)
	if err != nil {
		return err
	}
	fmt.Printf("shopify-rest     %-15s  %13.3f  %8.2f%%  %4d  %20s  %8s\n", "2 requests/s", sum.GoodputRatio, 100*sum.ThrottleRatio, sum.Bans, "-", "-")

	// 3. Bulk.
	fmt.Println()
	bulk, _ := set.Get("shopify-bulk")
	for _, version := range []string{"2025-10", "2026-01"} {
		if err := bulkJobs(ctx, bulk, st, version); err != nil {
			return err
		}
	}
	return nil
}

// fleet runs 8 workers in 2 processes, each process a provider.Transport
// over its own store client, against the simulated provider.
func fleet(ctx context.Context, set *provider.Set, profile string, st stores, p *sim.ProfileProvider, url string, cost int64, d time.Duration) (sim.Summary, int64, error) {
	prof, err := set.Lookup(profile)
	if err != nil {
		return sim.Summary{}, 0, err
	}
	var mu sync.Mutex
	var refunded int64
	res, err := sim.Run(ctx, sim.Config{
		Workers: 8, Processes: 2, Duration: d, URL: url,
		Base:  sim.HandlerTransport{Handler: p},
		Limit: func(time.Duration) float64 { return p.Limit(0) },
		NewClient: func(i int, base http.RoundTripper) (sim.Client, error) {
			rt, err := provider.NewRuntime(provider.Config{Profile: prof, Store: st.rates[i], Prefix: "example:"})
			if err != nil {
				return sim.Client{}, err
			}
			return sim.Client{Transport: &provider.Transport{
				Runtime: rt, Base: base,
				Cost: func(*http.Request) int64 { return cost },
				OnSettle: func(_ *http.Request, _ *provider.Ticket, o provider.Outcome) {
					mu.Lock()
					refunded += o.Refunded
					mu.Unlock()
				},
			}}, nil
		},
	})
	if err != nil {
		return sim.Summary{}, 0, err
	}
	return sim.Summarize(res), refunded, nil
}

// bulkJobs runs bulk query jobs of two shops at once, each holding the
// shop's bulk-query lease for 300 ms, and prints when each ran.
func bulkJobs(ctx context.Context, bulk *provider.Profile, st stores, version string) error {
	shops := []string{"Shop-A.myshopify.com", "https://shop-a.myshopify.com/admin", "shop-a", "SHOP-A", "shop-a.myshopify.com", "shop-a", "shop-b"}
	start := time.Now()
	type event struct {
		at         time.Duration
		job, shop  string
		what       string
		concurrent int
	}
	var mu sync.Mutex
	var events []event
	running := map[string]int{}
	var wg sync.WaitGroup
	errs := make([]error, len(shops))
	for i, shop := range shops {
		wg.Go(func() {
			l, err := lease.New(lease.Config{Store: st.leases[i%len(st.leases)]})
			if err != nil {
				errs[i] = err
				return
			}
			lp, err := bulk.LeaseParams("bulk-query", shop, version, fmt.Sprintf("job-%d", i))
			if err != nil {
				errs[i] = err
				return
			}
			h, err := l.AcquireWait(ctx, lp)
			if err != nil {
				errs[i] = err
				return
			}
			mu.Lock()
			running[lp.Key]++
			events = append(events, event{time.Since(start), fmt.Sprintf("job-%d", i), lp.Key, "start", running[lp.Key]})
			mu.Unlock()
			time.Sleep(300 * time.Millisecond) // the bulk operation runs
			mu.Lock()
			running[lp.Key]--
			mu.Unlock()
			_ = h.Release(ctx)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	slices.SortFunc(events, func(a, b event) int { return int(a.at - b.at) })
	perm, _ := bulk.Lease("bulk-query")
	fmt.Printf("bulk queries, API %s (%d per shop at once):\n", version, perm.PermitsFor(version))
	most := map[string]int{}
	for _, e := range events {
		most[e.shop] = max(most[e.shop], e.concurrent)
	}
	var lines []string
	for shop, n := range most {
		lines = append(lines, fmt.Sprintf("  %s: at most %d running at once", shop, n))
	}
	slices.Sort(lines)
	fmt.Println(strings.Join(lines, "\n"))
	fmt.Printf("  all %d jobs done in %.1fs\n", len(shops), time.Since(start).Seconds())
	return nil
}
