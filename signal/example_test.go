package signal_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/sluicerl/sluice/signal"
)

func ExampleParse() {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	h := http.Header{}
	h.Set("Retry-After", "Tue, 01 Jan 2030 00:00:30 GMT")
	h.Set("RateLimit-Policy", `"burst";q=100;w=60, "day";q=5000;w=86400`)
	h.Set("RateLimit", `"burst";r=0;t=30, "day";r=1200;t=40000`)

	rep := signal.Parse(now, signal.Response{Status: http.StatusTooManyRequests, Header: h})
	fmt.Println(rep.Class, "throttled:", rep.Throttled)
	fmt.Println("retry after:", time.Duration(rep.RetryAfter)*time.Microsecond)
	fmt.Printf("headline: %d of %d left, more in %v\n", rep.Remaining, rep.Limit, time.Duration(rep.ResetAfter)*time.Microsecond)
	for _, p := range rep.Policies[:rep.NPolicies] {
		fmt.Printf("policy %q: %d per %v, %d left\n", p.Name, p.Limit, time.Duration(p.Window)*time.Microsecond, p.Remaining)
	}
	// Output:
	// transient throttled: true
	// retry after: 30s
	// headline: 0 of 100 left, more in 30s
	// policy "burst": 100 per 1m0s, 0 left
	// policy "day": 5000 per 24h0m0s, 1200 left
}

func ExampleParse_shopifyGraphQL() {
	body := []byte(`{"errors":[{"message":"Throttled","extensions":{"code":"THROTTLED"}}],
	  "extensions":{"cost":{"requestedQueryCost":152,"actualQueryCost":null,
	  "throttleStatus":{"maximumAvailable":2000.0,"currentlyAvailable":2,"restoreRate":100.0}}}}`)

	rep := signal.Parse(0, signal.Response{Status: http.StatusOK, Body: body})
	fmt.Println(rep.Class, "throttled:", rep.Throttled)
	fmt.Printf("cost %.0f, %d of %d points left, refill %.0f/s\n", rep.CostRequested, rep.Remaining, rep.Limit, rep.RestoreRate)
	fmt.Println("retry after:", time.Duration(rep.RetryAfter)*time.Microsecond)
	// Output:
	// transient throttled: true
	// cost 152, 2 of 2000 points left, refill 100/s
	// retry after: 1.5s
}

func ExampleClassify() {
	for _, status := range []int{200, 404, 429, 502} {
		fmt.Println(status, signal.Classify(status, nil))
	}
	// Output:
	// 200 success
	// 404 permanent
	// 429 transient
	// 502 transient
}
