package outbound_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/outbound"
	"github.com/sluicerl/sluice/provider"
)

// tinyProfiles returns the embedded profiles plus "tiny": 2 requests an
// hour per lower-cased key (a GCRA of burst 2, one an hour), 429 its throttle, 5xx unknown.
func tinyProfiles(t *testing.T) *provider.Registry {
	t.Helper()
	f := filepath.Join(t.TempDir(), "tiny.yaml")
	require.NoError(t, os.WriteFile(f, []byte(`schema: 1
name: tiny
revision: "1"
key: lower
limits:
  - name: hourly
    scope: token
    algorithm: gcra
    capacity: 2
    rate: 1
    per: 1h
outcomes:
  throttle:
    - {status: [429]}
  unknown:
    - {status: [500, 502, 503, 504]}
`), 0o600))
	s, err := provider.Load(f)
	require.NoError(t, err)
	return provider.NewRegistry(s)
}

func TestProfileUnknownIsInvalidConfig(t *testing.T) {
	_, err := outbound.New(outbound.Config{Profile: "nope"})
	require.ErrorIs(t, err, outbound.ErrInvalidConfig)
	require.ErrorContains(t, err, `"nope"`)
	c, err := outbound.New(outbound.Config{})
	require.NoError(t, err)
	_, err = c.Acquire(context.Background(), "k", &outbound.AcquireOpts{Profile: "nope"})
	require.ErrorIs(t, err, outbound.ErrUnknownProfile)
}

func TestAcquireProfileReservesAndSettles(t *testing.T) {
	c, err := outbound.New(outbound.Config{ProviderProfiles: tinyProfiles(t), AIMD: aimdStart(1000)})
	require.NoError(t, err)
	ctx := context.Background()
	opts := &outbound.AcquireOpts{Profile: "tiny", MaxWait: time.Second}
	for i := range 2 {
		p, err := c.Acquire(ctx, "Token-A", opts)
		require.NoError(t, err, "call %d", i)
		require.Equal(t, "token-a", p.Key(), "the profile's key rule applies")
		v, err := p.Report(ctx, outbound.Outcome{Status: 200})
		require.NoError(t, err)
		require.Equal(t, "ok", v.Profile)
	}
	// The profile's hourly limit is spent: the third call is not made.
	_, err = c.Acquire(ctx, "token-a", opts)
	var we *outbound.WaitError
	require.ErrorAs(t, err, &we)
	require.Greater(t, we.RetryAfter, 30*time.Minute)
	// Another key has its own budget; an unknown outcome (a 5xx after a
	// POST) is never retried, whatever the caller said.
	p, err := c.Acquire(ctx, "token-b", &outbound.AcquireOpts{Profile: "tiny", Idempotent: true,
		Call: outbound.ProviderCall{Method: "POST", Path: "/order"}})
	require.NoError(t, err)
	v, err := p.Report(ctx, outbound.Outcome{Status: 503})
	require.NoError(t, err)
	require.Equal(t, "unknown", v.Profile)
	require.False(t, v.Retry)
	require.ErrorIs(t, v.Stop, outbound.ErrUnknownOutcome)
	// Without a profile the same key is not limited by it.
	p, err = c.Acquire(ctx, "token-a", &outbound.AcquireOpts{MaxWait: time.Second})
	require.NoError(t, err)
	p.Cancel()
}

func TestDoProfile(t *testing.T) {
	c, err := outbound.New(outbound.Config{ProviderProfiles: tinyProfiles(t), AIMD: aimdStart(1000)})
	require.NoError(t, err)
	var calls atomic.Int64
	fn := func(context.Context) error { calls.Add(1); return nil }
	for range 2 {
		require.NoError(t, c.Do(context.Background(), "conn", &outbound.DoOpts{Profile: "tiny", Call: outbound.ProviderCall{Key: "acct"}}, fn))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = c.Do(ctx, "conn", &outbound.DoOpts{Profile: "tiny", Call: outbound.ProviderCall{Key: "acct"}}, fn)
	require.ErrorIs(t, err, context.DeadlineExceeded, "the hour's budget is spent: no room before the deadline")
	require.EqualValues(t, 2, calls.Load(), "fn is not called without room")
	err = c.Do(context.Background(), "conn", &outbound.DoOpts{Profile: "nope"}, fn)
	require.True(t, errors.Is(err, outbound.ErrUnknownProfile), "%v", err)
}

func TestRoundTripProfile(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hits.Add(1) }))
	defer srv.Close()
	c, err := outbound.New(outbound.Config{Profile: "tiny", ProviderProfiles: tinyProfiles(t), AIMD: aimdStart(1000)})
	require.NoError(t, err)
	hc := &http.Client{Transport: c}
	for range 2 {
		resp, err := hc.Get(srv.URL)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	_, err = hc.Do(req)
	require.Error(t, err)
	require.EqualValues(t, 2, hits.Load(), "the profile's limit held the third request back")
}

// TestAcquireProfileCallLease: a profile lease held around every call (one
// permit per token) is taken by Acquire and Do and freed by Report, Cancel
// and the end of Do; a call finding no free permit waits (within MaxWait
// or the context) instead of calling.
func TestAcquireProfileCallLease(t *testing.T) {
	f := filepath.Join(t.TempDir(), "conc.yaml")
	require.NoError(t, os.WriteFile(f, []byte(`schema: 1
name: conc
revision: "1"
key: lower
limits:
  - {name: requests, scope: token, algorithm: gcra, capacity: 1000, rate: 1000, per: 1s}
leases:
  - {name: concurrent, scope: token, permits: 1, ttl: 1m, hold: call}
`), 0o600))
	s, err := provider.Load(f)
	require.NoError(t, err)
	c, err := outbound.New(outbound.Config{ProviderProfiles: provider.NewRegistry(s), AIMD: aimdStart(1000)})
	require.NoError(t, err)
	ctx := context.Background()
	// MaxWait covers the client's own pacing; the permit wait is bounded
	// by it too.
	opts := &outbound.AcquireOpts{Profile: "conc", MaxWait: 100 * time.Millisecond}
	p1, err := c.Acquire(ctx, "Tok", opts)
	require.NoError(t, err)
	_, err = c.Acquire(ctx, "tok", opts)
	var we *outbound.WaitError
	require.ErrorAs(t, err, &we, "the token's one permit is held")
	require.True(t, we.Busy, "%v", err)
	_, err = c.Acquire(ctx, "other", opts)
	require.NoError(t, err, "another token has its own permits")
	require.True(t, p1.Cancel())
	p2, err := c.Acquire(ctx, "tok", opts)
	require.NoError(t, err, "Cancel freed the permit")
	_, err = p2.Report(ctx, outbound.Outcome{Status: 200})
	require.NoError(t, err)
	p3, err := c.Acquire(ctx, "tok", &outbound.AcquireOpts{Profile: "conc", MaxWait: time.Second})
	require.NoError(t, err, "Report freed the permit")

	var calls atomic.Int64
	fn := func(context.Context) error { calls.Add(1); return nil }
	dctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	err = c.Do(dctx, "conn", &outbound.DoOpts{Profile: "conc", Call: outbound.ProviderCall{Key: "tok"}}, fn)
	require.ErrorIs(t, err, context.DeadlineExceeded, "Do waits for the permit p3 holds, within its context")
	require.Zero(t, calls.Load())
	require.True(t, p3.Cancel())
	for range 2 {
		require.NoError(t, c.Do(ctx, "conn", &outbound.DoOpts{Profile: "conc", Call: outbound.ProviderCall{Key: "tok"}}, fn))
	}
	require.EqualValues(t, 2, calls.Load(), "Do frees its permit when done")
}
