package provider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/signal"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

// callLeaseProfile is a profile with a generous rate and a lease of
// permits held around every call.
func callLeaseProfile(t *testing.T, permits int) *Profile {
	t.Helper()
	p, err := Parse("conc.yaml", fmt.Appendf(nil, `schema: 1
name: conc
revision: r1
key: lower
limits:
  - {name: requests, scope: token, algorithm: gcra, capacity: 1000, rate: 1000, per: 1s}
leases:
  - {name: concurrent, scope: token, permits: %d, ttl: 1m, hold: call}
`, permits))
	require.NoError(t, err)
	require.Len(t, p.CallLeases(), 1)
	return p
}

// countingLeases is a lease store that counts the acquires it refused
// (a call waiting for a permit), announcing releases as its store does.
type countingLeases struct {
	store.LeaseStore
	w       store.LeaseWatcher
	refused atomic.Int64
}

func newCountingLeases(ls store.LeaseStore) *countingLeases {
	w, _ := ls.(store.LeaseWatcher)
	return &countingLeases{LeaseStore: ls, w: w}
}

func (c *countingLeases) Acquire(ctx context.Context, p store.AcquireParams) (store.AcquireResult, error) {
	r, err := c.LeaseStore.Acquire(ctx, p)
	if err == nil && !r.Acquired {
		c.refused.Add(1)
	}
	return r, err
}

func (c *countingLeases) WatchLease(ctx context.Context, name, key string) (<-chan struct{}, func(), error) {
	return c.w.WatchLease(ctx, name, key)
}

// holders returns how many permits of the conc profile's lease are held
// for key under prefix.
func holders(t *testing.T, ls store.LeaseStore, prefix, key string) int {
	t.Helper()
	h, err := ls.Holders(context.Background(), store.HoldersParams{Name: "conc.concurrent", Key: prefix + key})
	require.NoError(t, err)
	return len(h)
}

// inflightServer answers each request only once the test lets it (one
// token on proceed each), counting the requests in flight and the most
// seen at once.
type inflightServer struct {
	*httptest.Server
	proceed         chan struct{}
	stop            chan struct{} // closed when the test ends: nobody waits
	arrived         atomic.Int64
	inflight, maxIn atomic.Int64
}

func newInflightServer(t *testing.T) *inflightServer {
	s := &inflightServer{proceed: make(chan struct{}, 64), stop: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := s.inflight.Add(1)
		defer s.inflight.Add(-1)
		for {
			m := s.maxIn.Load()
			if n <= m || s.maxIn.CompareAndSwap(m, n) {
				break
			}
		}
		s.arrived.Add(1)
		select {
		case <-s.proceed:
		case <-s.stop:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(s.Close)
	t.Cleanup(func() { close(s.stop) }) // runs first
	return s
}

// runConcurrent sends calls requests through the transports (round robin)
// at once, under a lease of permits: once permits are in flight and every
// other call has been refused a permit (it waits), the server lets them
// all through; none may ever see more than permits in flight, and every
// call succeeds.
func runConcurrent(t *testing.T, srv *inflightServer, trs []*Transport, refused func() int64, permits, calls int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, calls)
	for i := range calls {
		tr := trs[i%len(trs)]
		wg.Go(func() {
			req, _ := http.NewRequest("GET", srv.URL+"/repos/o/r", nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				errs <- err
				return
			}
			b, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if err == nil && (resp.StatusCode != 200 || string(b) != "ok") {
				err = fmt.Errorf("status %d body %q", resp.StatusCode, b)
			}
			errs <- err
		})
	}
	// Every call beyond the permits waits: it was refused a permit.
	require.Eventually(t, func() bool {
		return srv.arrived.Load() >= int64(permits) && refused() >= int64(calls-permits)
	}, 20*time.Second, time.Millisecond, "want %d calls in flight and %d refused a permit", permits, calls-permits)
	require.LessOrEqual(t, srv.maxIn.Load(), int64(permits))
	for range calls {
		srv.proceed <- struct{}{}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, int64(calls), srv.arrived.Load())
	require.LessOrEqual(t, srv.maxIn.Load(), int64(permits), "never more than the lease's permits in flight")
}

// TestTransportCallLeaseBoundsConcurrency: with a lease of 2 permits held
// around every call, 6 concurrent calls never have more than 2 in flight,
// and all 6 succeed (the others wait for a permit, they do not fail).
func TestTransportCallLeaseBoundsConcurrency(t *testing.T) {
	t.Parallel()
	p := callLeaseProfile(t, 2)
	st := memstore.New(memstore.Config{})
	cl := newCountingLeases(st.KeepLeases())
	rt, err := NewRuntime(Config{Profile: p, Store: st, Leases: cl})
	require.NoError(t, err)
	srv := newInflightServer(t)
	tr := &Transport{Runtime: rt, Key: func(*http.Request) Call { return Call{Key: "Tok"} }}
	runConcurrent(t, srv, []*Transport{tr}, cl.refused.Load, 2, 6)
	require.Equal(t, 0, holders(t, cl, "provider:", "tok"), "every permit freed once the bodies are closed")
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestTransportCallLeaseReleased: the permit is held while the call runs
// and freed when the body is closed, on a transport error and when the
// context is cancelled (while waiting for a permit, and during the call);
// a later call then gets it.
func TestTransportCallLeaseReleased(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := callLeaseProfile(t, 1)
	st := memstore.New(memstore.Config{})
	cl := newCountingLeases(st.KeepLeases())
	rt, err := NewRuntime(Config{Profile: p, Store: st, Leases: cl})
	require.NoError(t, err)
	held := func() int { return holders(t, cl, "provider:", "tok") }
	var mode atomic.Value // what the base does
	mode.Store("ok")
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if n := held(); n != 1 {
			return nil, fmt.Errorf("%d permits held during the call, want 1", n)
		}
		switch mode.Load() {
		case "error":
			return nil, errors.New("connection refused")
		case "block":
			<-r.Context().Done()
			return nil, r.Context().Err()
		}
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
	})
	tr := &Transport{Runtime: rt, Base: base, Key: func(*http.Request) Call { return Call{Key: "tok"} }}
	get := func(ctx context.Context) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://api.test/repos/o/r", nil)
		return tr.RoundTrip(req)
	}

	// Body close.
	resp, err := get(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, held(), "held until the body is closed")
	require.NoError(t, resp.Body.Close())
	require.Equal(t, 0, held())
	require.NoError(t, resp.Body.Close(), "a second Close frees nothing more")

	// Transport error.
	mode.Store("error")
	_, err = get(ctx)
	require.ErrorContains(t, err, "connection refused")
	require.Equal(t, 0, held())

	// Cancelled during the call.
	mode.Store("block")
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := get(cctx); done <- err }()
	require.Eventually(t, func() bool { return held() == 1 }, 30*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.Equal(t, 0, held())

	// Cancelled while waiting for the permit another call holds.
	mode.Store("ok")
	first, err := get(ctx)
	require.NoError(t, err)
	refused := cl.refused.Load()
	cctx, cancel = context.WithCancel(ctx)
	go func() { _, err := get(cctx); done <- err }()
	require.Eventually(t, func() bool { return cl.refused.Load() > refused }, 30*time.Second, time.Millisecond, "the second call waits")
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.Equal(t, 1, held(), "only the first call's permit")
	require.NoError(t, first.Body.Close())
	require.Equal(t, 0, held())

	// A later call gets the permit.
	resp, err = get(ctx)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, 0, held())
}

// TestRuntimeCallLease: Reserve takes a permit (ReserveWithin answers Busy
// when none frees in time), Settle frees it, Release frees a call never
// made; a ticket that is not OK holds none.
func TestRuntimeCallLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := callLeaseProfile(t, 1)
	st := memstore.New(memstore.Config{})
	ls := st.KeepLeases()
	rt, err := NewRuntime(Config{Profile: p, Store: st, Leases: ls, Prefix: "x:"})
	require.NoError(t, err)
	held := func() int { return holders(t, ls, "x:", "tok") }
	call := Call{Key: "TOK", Method: "GET", Path: "/"}

	tk, err := rt.Reserve(ctx, call)
	require.NoError(t, err)
	require.True(t, tk.OK)
	require.Equal(t, 1, held())
	busy, err := rt.ReserveWithin(ctx, call, 0)
	require.NoError(t, err)
	require.False(t, busy.OK)
	require.True(t, busy.Busy)
	require.Equal(t, "concurrent", busy.Reason)
	require.Equal(t, 1, held())
	_, err = rt.Settle(ctx, tk, signalOK())
	require.NoError(t, err)
	require.Equal(t, 0, held())

	tk, err = rt.ReserveWithin(ctx, call, time.Second)
	require.NoError(t, err)
	require.True(t, tk.OK)
	require.Equal(t, 1, held())
	require.NoError(t, rt.Release(ctx, tk))
	require.Equal(t, 0, held())
	require.NoError(t, rt.Release(ctx, tk), "a second Release frees nothing")
	_, err = rt.Settle(ctx, tk, signalOK())
	require.NoError(t, err, "a released ticket is still settled once")

	// A reservation the rates refuse holds no permit.
	p2 := callLeaseProfile(t, 1)
	p2.Limits[0].Capacity, p2.Limits[0].Rate, p2.Limits[0].Per = 1, 1, time.Hour
	rt2, err := NewRuntime(Config{Profile: p2, Store: st, Leases: ls, Prefix: "y:"})
	require.NoError(t, err)
	tk, err = rt2.Reserve(ctx, call)
	require.NoError(t, err)
	require.True(t, tk.OK)
	_, err = rt2.Settle(ctx, tk, signalOK())
	require.NoError(t, err)
	tk, err = rt2.Reserve(ctx, call)
	require.NoError(t, err)
	require.False(t, tk.OK)
	require.Equal(t, "requests", tk.Reason)
	require.Equal(t, 0, holders(t, ls, "y:", "tok"))
}

// TestEmbeddedCallLeases: GitHub's concurrent requests are held around
// every call; Shopify's bulk leases stay the caller's.
func TestEmbeddedCallLeases(t *testing.T) {
	t.Parallel()
	s, err := Embedded()
	require.NoError(t, err)
	gh, _ := s.Get("github")
	l, ok := gh.Lease("concurrent-requests")
	require.True(t, ok)
	require.Equal(t, HoldCall, l.Hold)
	require.Equal(t, []Lease{l}, gh.CallLeases())
	bulk, _ := s.Get("shopify-bulk")
	require.Empty(t, bulk.CallLeases())
	for _, l := range bulk.Leases {
		require.Equal(t, HoldExplicit, l.Hold, l.Name)
	}
}

func signalOK() signal.Response { return signal.Response{Status: http.StatusOK} }
