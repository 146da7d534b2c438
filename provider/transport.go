package provider

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/sluicerl/sluice/lease"
	"github.com/sluicerl/sluice/signal"
)

// Transport is an http.RoundTripper that applies a Runtime's profile to
// every request: it waits until the request's limits have room (Wait),
// sends it, settles it with the response, and when the provider throttled
// or banned the key, waits as long as it asked and sends the request again
// (throttled work is delayed, not failed). Unknown outcomes and permanent
// errors are returned as they are, never retried, and so are transient
// failures (a 5xx on an idempotent request: the caller's retry policy
// decides); a throttled request whose body cannot be replayed is an error.
//
// When the profile has leases held around every call (Lease.Hold
// HoldCall: GitHub's concurrent requests), each attempt waits for a permit
// of each before it is sent and holds it until the response body is closed
// (the caller must close it, as always), or frees it at once on a
// transport error, a retry or a cancelled context.
//
// It reads GraphQL response bodies (up to MaxBody) to settle their cost,
// and hands the caller an unread copy. A Transport is safe for concurrent
// use; its zero value is not usable (Runtime is required).
type Transport struct {
	// Runtime applies the profile. Required.
	Runtime *Runtime
	// Base sends requests. Nil means http.DefaultTransport.
	Base http.RoundTripper
	// Key returns a request's key (or keys by scope). Nil means the
	// request's host for every scope.
	Key func(*http.Request) Call
	// Cost returns a request's cost for limits charged by cost (a GraphQL
	// query's requested cost). Nil means 1.
	Cost func(*http.Request) int64
	// MaxAttempts bounds the attempts of one request, throttles included.
	// Zero means 10.
	MaxAttempts int
	// MaxBody bounds the response body read to settle its cost. Zero
	// means 1 MiB.
	MaxBody int64
	// OnSettle, if set, sees every attempt's outcome (for counting).
	OnSettle func(*http.Request, *Ticket, Outcome)
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.Runtime == nil {
		return nil, errors.New("provider: Transport without a Runtime")
	}
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	call := Call{Key: req.URL.Host}
	if t.Key != nil {
		call = t.Key(req)
	}
	call.Method, call.Path = req.Method, req.URL.Path
	if t.Cost != nil {
		call.Cost = t.Cost(req)
	}
	attempts := t.MaxAttempts
	if attempts == 0 {
		attempts = 10
	}
	maxBody := t.MaxBody
	if maxBody == 0 {
		maxBody = 1 << 20
	}
	ctx := req.Context()
	for n := 1; ; n++ {
		tk, err := t.Runtime.Wait(ctx, call)
		if err != nil {
			return nil, err
		}
		// The per-call permits are the Transport's to free: when the
		// response's body is closed, or now when there is none to hand on.
		held := tk.takeLeases()
		r := req
		if n > 1 {
			if req.GetBody == nil && req.Body != nil && req.Body != http.NoBody {
				_ = releaseLeases(ctx, held)
				return nil, fmt.Errorf("provider: %s %s: throttled, and its body cannot be replayed", req.Method, req.URL.Path)
			}
			r = req.Clone(ctx)
			if req.GetBody != nil {
				if r.Body, err = req.GetBody(); err != nil {
					_ = releaseLeases(ctx, held)
					return nil, err
				}
			}
		}
		resp, rerr := base.RoundTrip(r)
		in := t.response(resp, rerr, maxBody)
		o, serr := t.Runtime.Settle(context.WithoutCancel(ctx), tk, in)
		if t.OnSettle != nil {
			t.OnSettle(req, tk, o)
		}
		if serr != nil && rerr == nil {
			_ = resp.Body.Close()
			_ = releaseLeases(ctx, held)
			return nil, serr
		}
		if !o.Retry || o.Kind == Failed || n >= attempts || ctx.Err() != nil {
			if resp == nil || resp.Body == nil {
				_ = releaseLeases(ctx, held)
				return resp, rerr
			}
			if len(held) > 0 {
				resp.Body = &releasingBody{ReadCloser: resp.Body, held: held}
			}
			return resp, rerr
		}
		// Throttled or banned: wait as asked, then take a turn again.
		if resp != nil {
			_ = resp.Body.Close()
		}
		_ = releaseLeases(ctx, held)
		if o.Delay > 0 {
			tm := t.Runtime.clk.NewTimer(o.Delay)
			select {
			case <-tm.C():
			case <-ctx.Done():
				tm.Stop()
				return nil, ctx.Err()
			}
		}
	}
}

// releasingBody frees a call's per-call permits when the response body is
// closed: the call is done when its caller has read what it wanted.
type releasingBody struct {
	io.ReadCloser
	once sync.Once
	held []*lease.Lease
}

func (b *releasingBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(func() { _ = releaseLeases(context.Background(), b.held) })
	return err
}

// response reads what Settle needs: the status, the header and, for JSON,
// the body (replaced with an unread copy).
func (t *Transport) response(resp *http.Response, err error, maxBody int64) (in signal.Response) {
	if err != nil {
		in.Err = err
		return in
	}
	in.Status, in.Header = resp.StatusCode, resp.Header
	if ct := resp.Header.Get("Content-Type"); bytes.Contains([]byte(ct), []byte("json")) {
		b, rerr := io.ReadAll(io.LimitReader(resp.Body, maxBody))
		_ = resp.Body.Close()
		if rerr == nil {
			in.Body = b
		}
		resp.Body = io.NopCloser(bytes.NewReader(b))
	}
	return in
}

var _ http.RoundTripper = (*Transport)(nil)
