package outbound

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/sluicerl/sluice/retry"
	"github.com/sluicerl/sluice/signal"
)

// attemptResult is what one attempt produced.
type attemptResult struct {
	resp *http.Response // RoundTrip only
	in   signal.Response
	// wait is how long the provider took to answer, when the attempt
	// measured it (HTTP: from the request written to the first response
	// byte); 0 means the attempt's whole duration stands for it.
	wait time.Duration
}

// call runs the layers for one call under key, in the order of the
// package doc: the caller (RoundTrip, Do) has applied the timeout; here
// the bulkhead, then per attempt the rate limiter, the circuit breaker,
// the request, and the retry decision. attempt sends one attempt;
// replayable says whether a second attempt is possible at all.
func (c *Client) call(ctx context.Context, key, label string, idempotent, replayable bool, attempt func(context.Context) attemptResult) (attemptResult, error) {
	ks := c.keys.acquire(key, label)
	defer c.keys.release(ks)
	// 1. bulkhead
	if err := ks.bulk.enter(ctx); err != nil {
		return attemptResult{}, err
	}
	defer ks.bulk.leave()
	c.requests.Add(1)
	ks.counts.requests.Add(1)
	var last attemptResult
	var rep signal.Report
	for n := 1; ; n++ {
		// 3. rate limiter
		if err := c.wait(ctx, ks); err != nil {
			return last, err
		}
		// 4. circuit breaker: an open breaker fails at once, without
		// touching the retry budget.
		done, err := ks.policy.allow(c.now())
		if err != nil {
			c.reject(ks, "breaker_open")
			return last, err
		}
		// 6. the request
		begin := c.clk.Now()
		res := attempt(ctx)
		end := c.clk.Now()
		c.parser.ParseTo(&rep, end.UnixMicro(), res.in)
		done(end.UnixMicro(), &rep)
		latency := end.Sub(begin)
		if res.wait > 0 && res.wait < latency {
			// The provider's time, without the connection's set-up
			// or the wait for one, which are the client's.
			latency = res.wait
		}
		c.observe(ctx, ks, &rep, latency, end.UnixMicro())
		if last.resp != nil {
			_ = last.resp.Body.Close()
		}
		last = res
		// 5. retry: every outcome goes to the budget (successes refill
		// it); only transient failures are retried.
		d := ks.policy.retry(n, &rep, idempotent, c.now())
		if !d.Retry {
			if errors.Is(d.Stop, retry.ErrBudgetExhausted) {
				c.reject(ks, "budget_exhausted")
				return last, &retry.Error{Reason: d.Stop, Attempts: n, Last: lastError(res)}
			}
			return last, nil
		}
		if !replayable {
			return last, nil
		}
		if err := sleep(ctx, c.clk, time.Duration(d.Delay)*time.Microsecond); err != nil {
			return last, nil
		}
		c.retries.Add(1)
		ks.counts.retries.Add(1)
		if c.metrics != nil {
			c.metrics.retries.WithLabelValues(ks.label).Inc()
		}
	}
}

// lastError is the error that stands for an attempt's result.
func lastError(r attemptResult) error {
	if r.in.Err != nil {
		return r.in.Err
	}
	return &StatusError{Status: r.in.Status, Header: r.in.Header}
}

func (c *Client) reject(ks *keyState, reason string) {
	c.rejected.Add(1)
	ks.counts.rejected.Add(1)
	if c.metrics != nil {
		c.metrics.rejected.WithLabelValues(ks.label, reason).Inc()
	}
}
