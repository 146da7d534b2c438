package limiter_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

// newExampleLimiter returns a Limiter whose store and sleeps follow a manual
// clock, so that the examples print the same thing on every run. Programs
// leave Store and Clock nil (an in-memory store on the real clock) or pass a
// shared store.
func newExampleLimiter(policies ...limiter.Policy) (*limiter.Limiter, *clocktest.Clock) {
	clk := clocktest.New(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	l, err := limiter.New(limiter.Config{
		Store:    memstore.New(memstore.Config{Clock: clk}),
		Clock:    clk,
		Policies: policies,
	})
	if err != nil {
		log.Fatal(err)
	}
	return l, clk
}

func ExampleLimiter_Allow() {
	// Two requests per second per user, in bursts of up to three.
	l, clk := newExampleLimiter(limiter.Policy{Name: "api", Rate: 2, Period: time.Second, Burst: 3})
	ctx := context.Background()

	for i := 1; i <= 4; i++ {
		d, err := l.Allow(ctx, "api", "user-42")
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("request %d: allowed=%t remaining=%d retry after %s\n", i, d.Allowed, d.Remaining, d.RetryAfter)
	}

	clk.Advance(500 * time.Millisecond)
	d, err := l.Allow(ctx, "api", "user-42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("500ms later: allowed=%t remaining=%d\n", d.Allowed, d.Remaining)

	// Another key has its own budget.
	d, err = l.Allow(ctx, "api", "user-7")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("another user: allowed=%t remaining=%d\n", d.Allowed, d.Remaining)
	// Output:
	// request 1: allowed=true remaining=2 retry after 0s
	// request 2: allowed=true remaining=1 retry after 0s
	// request 3: allowed=true remaining=0 retry after 0s
	// request 4: allowed=false remaining=0 retry after 500ms
	// 500ms later: allowed=true remaining=0
	// another user: allowed=true remaining=2
}

func ExampleHandle_ReserveN() {
	// A GraphQL cost bucket: 1000 points, restored at 50 points a second.
	l, _ := newExampleLimiter(limiter.Policy{Name: "graphql", Rate: 50, Period: time.Second, Burst: 1000})
	h, err := l.Handle("graphql")
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	// Reserve the query's requested cost before sending it...
	r, err := h.ReserveN(ctx, "shop-1", 100, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("reserved 100: ok=%t delay=%s remaining=%d\n", r.OK, r.Delay, r.Decision.Remaining)

	// ...then settle with the actual cost the response reported: the
	// difference goes back to the bucket.
	if err := r.Settle(ctx, 12); err != nil {
		log.Fatal(err)
	}
	d, err := h.AllowN(ctx, "shop-1", 0) // a cost of 0 peeks
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("settled at 12: remaining=%d\n", d.Remaining)

	// A reservation beyond what is available now is booked ahead.
	r, err = h.ReserveN(ctx, "shop-1", 1000, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("reserved 1000: ok=%t delay=%s\n", r.OK, r.Delay)
	// The caller gives up: the units go back.
	if err := r.Cancel(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("settle again:", r.Settle(ctx, 1000))
	// Output:
	// reserved 100: ok=true delay=0s remaining=900
	// settled at 12: remaining=988
	// reserved 1000: ok=true delay=240ms
	// settle again: limiter: reservation already settled
}

func ExampleLimiter_AllowAll() {
	// An exchange counts request weight per IP and orders per account, and
	// an order must fit in both.
	l, _ := newExampleLimiter(
		limiter.Policy{Name: "weight", Rate: 1200, Period: time.Minute, Burst: 100},
		limiter.Policy{Name: "orders", Algorithm: store.FixedWindow, Rate: 2, Period: 10 * time.Second},
	)
	ctx := context.Background()
	order := []limiter.Request{
		{Policy: "weight", Key: "203.0.113.7", Cost: 10},
		{Policy: "orders", Key: "account-1", Cost: 1},
	}
	for i := 1; i <= 3; i++ {
		md, err := l.AllowAll(ctx, order)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("order %d: allowed=%t", i, md.Allowed)
		for _, d := range md.Decisions {
			if !d.Allowed {
				fmt.Printf(", refused by %s", d.Policy)
			}
		}
		if !md.Allowed {
			fmt.Printf(", retry after %s", md.RetryAfter)
		}
		fmt.Println()
	}
	// The refused order took no weight either.
	d, err := l.AllowN(ctx, "weight", "203.0.113.7", 0)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("weight remaining: %d\n", d.Remaining)
	// Output:
	// order 1: allowed=true
	// order 2: allowed=true
	// order 3: allowed=false, refused by orders, retry after 10s
	// weight remaining: 80
}

func ExampleParse() {
	policies, err := limiter.Parse("policies.yaml", []byte(`
policies:
  binance-weight:
    rate: 1200
    period: 1m
    burst: 100
  orders-10s:
    algorithm: fixed_window
    limit: 50
    window: 10s
  github-hourly:
    algorithm: sliding_window
    limit: 5000
    unit: hour
    shadow: true
`))
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range policies {
		fmt.Printf("%s: %s, %d per %s", p.Name, p.Algorithm, p.Rate, p.Period)
		if p.Algorithm == store.GCRA {
			fmt.Printf(", bursts of %d", p.Limit().Max())
		}
		if p.Shadow {
			fmt.Print(", shadow")
		}
		fmt.Println()
	}

	// Every problem is reported with its file, line, column and key.
	_, err = limiter.Parse("policies.yaml", []byte(`
policies:
  api:
    rate: 0
    period: 1 minute
`))
	fmt.Println(err)
	// Output:
	// binance-weight: gcra, 1200 per 1m0s, bursts of 100
	// orders-10s: fixed_window, 50 per 10s
	// github-hourly: sliding_window, 5000 per 1h0m0s, shadow
	// policies.yaml:4:11: policies.api.rate: want a positive integer, got "0"
	// policies.yaml:5:13: policies.api.period: want a positive duration such as 1s, 10s, 1m or 24h, got "1 minute"
}
