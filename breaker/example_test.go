package breaker_test

import (
	"fmt"
	"time"

	"github.com/sluicerl/sluice/breaker"
)

func Example() {
	p, err := breaker.New(breaker.Config{ConsecutiveFailures: 3, OpenTimeout: 10 * time.Second, HalfOpenProbes: 1})
	if err != nil {
		panic(err)
	}
	b := breaker.NewLocked(p, func(e breaker.Event) {
		fmt.Printf("%s -> %s (%s) after %v\n", e.From, e.To, e.Reason, time.Duration(e.Elapsed)*time.Microsecond)
	})
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	sec := int64(1_000_000)

	// Three 503s in a row trip it.
	for range 3 {
		t, err := b.Allow(now)
		if err != nil {
			panic(err)
		}
		b.Done(now, t, breaker.Classify(503, false, false))
	}
	_, err = b.Allow(now + sec)
	fmt.Println(err)

	// After the open timeout one probe goes; its success closes it.
	t, _ := b.Allow(now + 10*sec)
	b.Done(now+11*sec, t, breaker.Classify(200, false, false))
	// Output:
	// closed -> open (consecutive_failures) after 0s
	// breaker: open
	// open -> half_open (open_timeout) after 10s
	// half_open -> closed (probes_succeeded) after 1s
}
