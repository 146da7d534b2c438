package aimd

import (
	"cmp"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// provider is a simulated upstream with a hidden limit. It answers each
// request at its arrival with a status and a latency.
type provider interface {
	serve(now int64) (throttled bool, latency int64)
}

// bucketProvider throttles (429, fast) beyond a token bucket of limit/s
// with a burst of limit/5; the limit can change.
type bucketProvider struct {
	limit  float64
	tokens float64
	last   int64
}

func (p *bucketProvider) serve(now int64) (bool, int64) {
	burst := max(p.limit/5, 1)
	if p.last != 0 {
		p.tokens = min(p.tokens+float64(now-p.last)/float64(s1)*p.limit, burst)
	} else {
		p.tokens = burst
	}
	p.last = now
	if p.tokens >= 1 {
		p.tokens--
		return false, 40 * ms
	}
	return true, 5 * ms
}

// slowProvider never throttles: beyond its capacity requests queue, and
// latency grows with the queue (a silent slowdown).
type slowProvider struct {
	limit   float64
	backlog float64 // requests waiting
	last    int64
}

func (p *slowProvider) serve(now int64) (bool, int64) {
	if p.last != 0 {
		p.backlog = max(p.backlog-float64(now-p.last)/float64(s1)*p.limit, 0)
	}
	p.last = now
	p.backlog++
	return false, 40*ms + int64(p.backlog/p.limit*float64(s1))
}

type response struct {
	at, latency int64
	throttled   bool
	client      int
}

// simulate runs clients independent senders (processes that share no
// state), each pacing requests at its own controller's rate (as a GCRA
// limiter would) for seconds and feeding its responses back, against one
// provider. It returns per second: requests sent, successes, throttles and
// the sum of the rates at the end of the second. change, if not nil, runs
// at the start of every second.
func simulate(t *testing.T, c *Controller, p provider, seconds int, change func(sec int), clients ...int) (sent, good, throttled []int, rates []float64) {
	t.Helper()
	n := 1
	if len(clients) > 0 {
		n = clients[0]
	}
	states := make([]State, n)
	next := make([]int64, n) // each client's next send
	for i := range states {
		states[i] = c.Init()
		next[i] = t0 + int64(i)*s1/int64(10*n) // not all at once
	}
	var (
		now      = t0
		inflight []response
		end      = t0 + int64(seconds)*s1
		second   = -1
	)
	sent, good, throttled, rates = make([]int, seconds), make([]int, seconds), make([]int, seconds), make([]float64, seconds)
	for now < end {
		// The next event: a response or a client's send.
		ci := 0
		for i := range next {
			if next[i] < next[ci] {
				ci = i
			}
		}
		if len(inflight) > 0 && inflight[0].at <= next[ci] {
			r := inflight[0]
			inflight = inflight[1:]
			now = r.at
			in := Sample{Outcome: Success, Latency: r.latency}
			if r.throttled {
				in.Outcome = Throttled
			}
			c.Observe(&states[r.client], now, in)
		} else {
			now = next[ci]
			if now >= end {
				break
			}
			if sec := int((now - t0) / s1); sec != second {
				for second < sec {
					second++
					if change != nil {
						change(second)
					}
				}
			}
			s := &states[ci]
			if until, paused := s.Paused(now); paused {
				next[ci] = until
				continue
			}
			thr, lat := p.serve(now)
			sec := int((now - t0) / s1)
			sent[sec]++
			if thr {
				throttled[sec]++
			} else {
				good[sec]++
			}
			r := response{at: now + lat, latency: lat, throttled: thr, client: ci}
			k, _ := slices.BinarySearchFunc(inflight, r.at, func(a response, at int64) int { return cmp.Compare(a.at, at+1) })
			inflight = slices.Insert(inflight, k, r)
			rate := c.Rate(s)
			if rate > 1e5 {
				t.Fatalf("rate ran away to %v at second %d", rate, sec)
			}
			next[ci] = now + int64(float64(s1)/rate)
		}
		if sec := int((now - t0) / s1); sec < seconds {
			rates[sec] = 0
			for i := range states {
				rates[sec] += c.Rate(&states[i])
			}
		}
	}
	return sent, good, throttled, rates
}

func sum(v []int) int {
	n := 0
	for _, x := range v {
		n += x
	}
	return n
}

func TestConvergesOnABucketProvider(t *testing.T) {
	t.Parallel()
	for _, limit := range []float64{20, 200, 2000} {
		p := &bucketProvider{limit: limit}
		c := mustNew(t, Config{Start: 1})
		sent, good, thr, _ := simulate(t, c, p, 60, func(sec int) {
			if sec == 30 {
				p.limit = limit / 2 // the hidden limit halves mid-run
			}
		})
		// From a 1/s start, within 10 s: goodput at the limit.
		g := float64(sum(good[10:30])) / 20
		require.GreaterOrEqual(t, g, 0.9*limit, "limit %v: goodput %v/s after convergence", limit, g)
		require.LessOrEqual(t, float64(sum(thr[10:30])), 0.02*float64(sum(sent[10:30])), "limit %v: throttles after convergence", limit)
		// After the halving: within 10 s, back under the new limit.
		g = float64(sum(good[40:60])) / 20
		require.GreaterOrEqual(t, g, 0.9*limit/2, "limit %v: goodput after halving", limit)
		require.LessOrEqual(t, float64(sum(thr[40:60])), 0.02*float64(sum(sent[40:60])), "limit %v: throttles after halving", limit)
		t.Logf("limit %v: goodput %.3f then %.3f of the limit, throttles %.2f%% then %.2f%%", limit,
			float64(sum(good[10:30]))/20/limit, float64(sum(good[40:60]))/20/(limit/2),
			100*float64(sum(thr[10:30]))/float64(sum(sent[10:30])), 100*float64(sum(thr[40:60]))/float64(sum(sent[40:60])))
	}
}

func TestConvergesOnASilentSlowdown(t *testing.T) {
	t.Parallel()
	const limit = 100.0
	p := &slowProvider{limit: limit}
	c := mustNew(t, Config{Start: 1})
	_, good, _, rates := simulate(t, c, p, 40, nil)
	g := float64(sum(good[15:40])) / 25
	require.GreaterOrEqual(t, g, 0.8*limit, "goodput %v/s", g)
	for sec := 15; sec < 40; sec++ {
		require.LessOrEqual(t, rates[sec], 1.3*limit, "second %d: rate %v runs away from a provider that only slows down", sec, rates[sec])
	}
	t.Logf("rates %.0f", rates)
	t.Logf("goodput %.3f of capacity, final rate %.1f, backlog %.1f", g/limit, rates[39], p.backlog)
}

func TestWithoutDecreaseItWouldNotConverge(t *testing.T) {
	t.Parallel()
	// The simulation itself must be able to fail: a controller that
	// ignores throttles (Failed instead of Throttled is not possible
	// here, so pin the rate above the limit: its floor is its ceiling)
	// floods.
	p := &bucketProvider{limit: 100}
	c := mustNew(t, Config{Start: 1000, Floor: 1000, Ceiling: 1000})
	sent, _, thr, _ := simulate(t, c, p, 20, nil)
	require.Greater(t, float64(sum(thr[10:20])), 0.02*float64(sum(sent[10:20])))
}

// TestTwoProcessesWithoutSharedState is the "AIMD without shared state"
// contender: two processes, each adapting on its own, against one hidden
// limit. Each sees only its own throttles, and still the pair settles near
// the limit.
func TestTwoProcessesWithoutSharedState(t *testing.T) {
	t.Parallel()
	const limit = 200.0
	p := &bucketProvider{limit: limit}
	c := mustNew(t, Config{Start: 1})
	sent, good, thr, rates := simulate(t, c, p, 60, func(sec int) {
		if sec == 30 {
			p.limit = limit / 2
		}
	}, 2)
	g1, g2 := float64(sum(good[10:30]))/20/limit, float64(sum(good[40:60]))/20/(limit/2)
	t1 := float64(sum(thr[10:30])) / float64(sum(sent[10:30]))
	t2 := float64(sum(thr[40:60])) / float64(sum(sent[40:60]))
	t.Logf("goodput %.3f then %.3f of the limit, throttles %.2f%% then %.2f%%, rates %.0f", g1, g2, 100*t1, 100*t2, rates)
	require.GreaterOrEqual(t, g1, 0.9)
	require.GreaterOrEqual(t, g2, 0.9)
	require.LessOrEqual(t, t1, 0.02)
	require.LessOrEqual(t, t2, 0.02)
}
