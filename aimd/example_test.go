package aimd_test

import (
	"fmt"
	"time"

	"github.com/sluicerl/sluice/aimd"
)

func Example() {
	c, err := aimd.New(aimd.Config{Start: 10, Floor: 1, Ceiling: 1000})
	if err != nil {
		panic(err)
	}
	s := c.Init()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	ms := int64(1000)

	// Fast successes: slow start grows the rate.
	for range 10 {
		now += 100 * ms
		c.Observe(&s, now, aimd.Sample{Outcome: aimd.Success, Latency: 40 * ms})
	}
	fmt.Printf("after 1s of successes: %.1f/s\n", c.Rate(&s))

	// A 429 with Retry-After: one decrease, and a pause.
	now += 10 * ms
	d := c.Observe(&s, now, aimd.Sample{Outcome: aimd.Throttled, Latency: 5 * ms, RetryAfter: 2_000 * ms})
	fmt.Printf("%s: %.1f/s, paused for %v\n", d.Reason, d.Rate, time.Duration(d.PausedUntil-now)*time.Microsecond)

	// More 429s for requests already in flight: the same episode.
	d = c.Observe(&s, now+1*ms, aimd.Sample{Outcome: aimd.Throttled, Latency: 5 * ms})
	fmt.Printf("same episode: %.1f/s\n", d.Rate)
	// Output:
	// after 1s of successes: 23.6/s
	// throttled: 21.2/s, paused for 2s
	// same episode: 21.2/s
}
