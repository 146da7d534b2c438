package sim

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
)

// HandlerTransport is an http.RoundTripper that serves every request with
// Handler in process: no sockets, no connection pool. It is safe for
// concurrent use when Handler is; its zero value has no handler and
// answers every request with 404.
type HandlerTransport struct {
	Handler http.Handler
}

// RoundTrip serves req with the handler and returns its recorded response.
// When req's context ends before the handler returns, RoundTrip returns the
// context's error.
func (t HandlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		// The handler may read the body after the caller reuses it: copy.
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(b))
	}
	rec := httptest.NewRecorder()
	h := t.Handler
	if h == nil {
		h = http.NotFoundHandler()
	}
	if req.RequestURI == "" {
		req.RequestURI = req.URL.RequestURI()
	}
	h.ServeHTTP(rec, req)
	if err := req.Context().Err(); err != nil {
		return nil, err
	}
	resp := rec.Result()
	resp.Request = req
	return resp, nil
}
