package outbound

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptrace"
	"sync"
	"time"

	"github.com/sluicerl/sluice/clock"

	"github.com/sluicerl/sluice/signal"
	"github.com/sluicerl/sluice/store"
)

// RoundTrip sends req through the layers under req's key.
func (c *Client) RoundTrip(req *http.Request) (*http.Response, error) {
	key, label := c.keyFor(req)
	if key == "" {
		return nil, fmt.Errorf("%w: request to %q has no host", ErrEmptyKey, req.URL)
	}
	if err := store.CheckKey(key); err != nil {
		return nil, fmt.Errorf("outbound: %w", err)
	}
	ctx := req.Context()
	cancel := context.CancelFunc(func() {})
	if c.timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
	}
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	first := true
	res, err := c.call(ctx, key, label, c.idempotent(req), replayable, func(ctx context.Context) attemptResult {
		r := req.WithContext(ctx)
		if !first && req.GetBody != nil {
			b, err := req.GetBody()
			if err != nil {
				return attemptResult{in: signal.Response{Err: err}}
			}
			r.Body = b
		}
		first = false
		var t ttfb
		r = r.WithContext(httptrace.WithClientTrace(r.Context(), t.trace(c.clk)))
		resp, err := c.base.RoundTrip(r)
		if err != nil {
			return attemptResult{in: signal.Response{Err: err}}
		}
		return attemptResult{resp: resp, in: signal.Response{Status: resp.StatusCode, Header: resp.Header, Body: peekJSON(resp)}, wait: t.wait()}
	})
	if err == nil && res.resp == nil && res.in.Err != nil {
		err = res.in.Err
	}
	if err != nil {
		cancel()
		if res.resp != nil {
			_ = res.resp.Body.Close()
		}
		return nil, err
	}
	res.resp.Body = &cancelBody{ReadCloser: res.resp.Body, cancel: cancel}
	return res.resp, nil
}

type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// maxPeek bounds the JSON body read for GraphQL signals.
const maxPeek = 256 << 10

// peekJSON reads a JSON body of at most maxPeek bytes for the parser and
// puts it back for the caller; other bodies are left alone.
func peekJSON(resp *http.Response) []byte {
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt != "application/json" && mt != "application/graphql-response+json" {
		return nil
	}
	if resp.ContentLength > maxPeek {
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxPeek+1))
	rest := resp.Body
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), rest), rest}
	if err != nil || len(b) > maxPeek {
		return nil
	}
	return b
}

// ttfb measures the provider's part of an attempt: from the request
// written to the first byte of the response (issue 18: the time spent
// waiting for a connection, dialing and handshaking is the client's).
type ttfb struct {
	mu          sync.Mutex
	wrote, read time.Time
}

func (t *ttfb) trace(clk clock.Clock) *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) {
			t.mu.Lock()
			t.wrote = clk.Now()
			t.mu.Unlock()
		},
		GotFirstResponseByte: func() {
			t.mu.Lock()
			t.read = clk.Now()
			t.mu.Unlock()
		},
	}
}

// wait returns the time to first byte, 0 when the transport did not
// report both ends (a transport that is not net/http's).
func (t *ttfb) wait() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.wrote.IsZero() || t.read.IsZero() || t.read.Before(t.wrote) {
		return 0
	}
	return max(t.read.Sub(t.wrote), time.Microsecond)
}
