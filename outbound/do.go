package outbound

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/sluicerl/sluice/provider"
	"github.com/sluicerl/sluice/signal"
	"github.com/sluicerl/sluice/store"
)

// StatusError lets a Do function report a response it got: the status and
// headers are read like an HTTP response's. It is a plain value; the zero
// value is a response without a status, read as a failed call.
type StatusError struct {
	Status int
	Header http.Header
	Body   []byte
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("outbound: status %d", e.Status)
}

// DoOpts are per-call options of Do. The zero value is a call that is not
// idempotent.
type DoOpts struct {
	// Idempotent says the call may be retried when its outcome is
	// unknown (a timeout after sending, a 5xx).
	Idempotent bool
	// Profile names the call's provider profile (see provider.go); empty
	// means Config.Profile. Every attempt is reserved against its limits
	// (waiting for room, within the call's context) before fn and settled
	// with fn's outcome after it; Call describes the call to it.
	Profile string
	Call    ProviderCall
}

// Do runs fn through the layers under key. fn reports its outcome by its
// error: nil is a success, a *StatusError is read as an HTTP response, and
// any other error is classified by signal.ClassifyError. Do returns the
// last attempt's error, or the error of a layer that stopped the call.
func (c *Client) Do(ctx context.Context, key string, opts *DoOpts, fn func(context.Context) error) error {
	if key == "" {
		return ErrEmptyKey
	}
	// The key names a limiter key and a breaker: the identifier rule
	// applies (store.CheckID).
	if err := store.CheckKey(key); err != nil {
		return fmt.Errorf("outbound: %w", err)
	}
	label := "other"
	if c.keyLabels {
		label = key
	}
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	var o DoOpts
	if opts != nil {
		o = *opts
	}
	rt, err := c.profileFor(o.Profile)
	if err != nil {
		return err
	}
	var last error
	_, err = c.call(ctx, key, label, o.Idempotent, true, func(ctx context.Context) attemptResult {
		var t *provider.Ticket
		if rt != nil {
			if t, last = rt.Wait(ctx, o.Call.call(key)); last != nil {
				return attemptResult{in: signal.Response{Err: last}}
			}
			// Settle frees the per-call permits; this frees them if fn
			// panics.
			defer func() { _ = rt.Release(context.WithoutCancel(ctx), t) }()
		}
		last = fn(ctx)
		var se *StatusError
		var in signal.Response
		switch {
		case last == nil:
			in = signal.Response{Status: http.StatusOK}
		case errors.As(last, &se):
			in = signal.Response{Status: se.Status, Header: se.Header, Body: se.Body}
		default:
			in = signal.Response{Err: last}
		}
		if t != nil {
			var v Verdict
			_ = settle(ctx, rt, t, in, &v)
		}
		return attemptResult{in: in}
	})
	if err != nil {
		return err
	}
	return last
}
