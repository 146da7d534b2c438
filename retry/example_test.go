package retry_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/sluicerl/sluice/retry"
)

func Example() {
	p, err := retry.New(retry.Config{Base: 100 * time.Millisecond, Cap: 5 * time.Second, BudgetCapacity: 2, BudgetFloor: -1})
	if err != nil {
		panic(err)
	}
	r := retry.NewRetrier(p, rand.New(rand.NewPCG(1, 1)))
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()

	// A 429 with Retry-After: 3 s is the floor of the delay.
	d := r.Decide(now, retry.Attempt{N: 1, Outcome: retry.Transient, RetryAfter: 3_000_000, HasRetryAfter: true})
	fmt.Println(d.Retry, time.Duration(d.Delay)*time.Microsecond)

	// A 502 on a non-idempotent call: it may have been processed.
	d = r.Decide(now, retry.Attempt{N: 1, Outcome: retry.Transient, Unknown: true})
	fmt.Println(d.Retry, d.Stop)

	// The budget held two retries; the third is refused by the budget,
	// not by the provider.
	r.Decide(now, retry.Attempt{N: 1, Outcome: retry.Transient})
	d = r.Decide(now, retry.Attempt{N: 1, Outcome: retry.Transient})
	err = &retry.Error{Reason: d.Stop, Attempts: 1, Last: errors.New("503 service unavailable")}
	fmt.Println(errors.Is(err, retry.ErrBudgetExhausted), err)
	// Output:
	// true 3s
	// false retry: outcome unknown and the call is not idempotent
	// true retry: retry budget exhausted after 1 attempts: 503 service unavailable
}
