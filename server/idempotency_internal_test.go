package server

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/clock/clocktest"
)

func idemDo(h http.Handler, key, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, routeTake, strings.NewReader(body))
	req.Header.Set(IdempotencyHeader, key)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestIdempotencyInFlightAndFailures(t *testing.T) {
	t.Parallel()
	i, err := newIdempotency(IdempotencyConfig{}, clocktest.New(time.Unix(0, 0)))
	require.NoError(t, err)
	calls := 0
	entered, release := make(chan struct{}), make(chan struct{})
	status := http.StatusOK
	h := i.wrap(http.MethodPost, routeTake, func(w http.ResponseWriter, r *http.Request) {
		calls++
		if r.Header.Get("X-Block") != "" {
			close(entered)
			<-release
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte("call " + strconv.Itoa(calls)))
	})

	// A retry while the first is running: 409, the handler not run.
	done := make(chan *httptest.ResponseRecorder)
	go func() {
		req := httptest.NewRequest(http.MethodPost, routeTake, strings.NewReader("{}"))
		req.Header.Set(IdempotencyHeader, "k1")
		req.Header.Set("X-Block", "1")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		done <- rec
	}()
	select {
	case <-entered:
	case <-time.After(time.Minute):
		t.Fatal("the first request never reached the handler")
	}
	rec := idemDo(h, "k1", "{}")
	require.Equal(t, http.StatusConflict, rec.Code)
	require.Contains(t, rec.Body.String(), TypeIdempotencyInFlight)
	close(release)
	require.Equal(t, "call 1", (<-done).Body.String())
	rec = idemDo(h, "k1", "{}")
	require.Equal(t, "call 1", rec.Body.String())
	require.Equal(t, 1, calls)

	// A 5xx is not remembered: the retry runs the handler again.
	status = http.StatusServiceUnavailable
	require.Equal(t, "call 2", idemDo(h, "k2", "{}").Body.String())
	status = http.StatusOK
	require.Equal(t, "call 3", idemDo(h, "k2", "{}").Body.String())
	require.Equal(t, "call 3", idemDo(h, "k2", "{}").Body.String())

	// Routes that are not quota-consuming POSTs pass through untouched.
	get := i.wrap(http.MethodGet, routePolicies, func(w http.ResponseWriter, _ *http.Request) { calls++ })
	before := calls
	req := httptest.NewRequest(http.MethodGet, routePolicies, nil)
	req.Header.Set(IdempotencyHeader, "k3")
	get.ServeHTTP(httptest.NewRecorder(), req)
	get.ServeHTTP(httptest.NewRecorder(), req)
	require.Equal(t, before+2, calls)
}

func TestIdempotencyBounds(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(time.Unix(0, 0))
	i, err := newIdempotency(IdempotencyConfig{MaxKeys: 3, MaxBytes: 4096, TTL: time.Minute}, clk)
	require.NoError(t, err)
	n := 0
	big := strings.Repeat("x", 1500)
	h := i.wrap(http.MethodPost, routeTake, func(w http.ResponseWriter, r *http.Request) {
		n++
		if r.Header.Get("X-Big") != "" {
			_, _ = w.Write([]byte(big))
			return
		}
		_, _ = w.Write([]byte(strconv.Itoa(n)))
	})
	for _, k := range []string{"a", "b", "c", "d"} {
		idemDo(h, k, "{}")
	}
	require.Equal(t, 3, i.len(), "at most MaxKeys")
	require.Equal(t, "5", idemDo(h, "a", "{}").Body.String(), "the oldest key was forgotten")
	require.Equal(t, "4", idemDo(h, "d", "{}").Body.String(), "a newer one is replayed")

	// Bytes: three answers of 1500 bytes exceed 4096; the oldest goes.
	for _, k := range []string{"x", "y", "z"} {
		req := httptest.NewRequest(http.MethodPost, routeTake, strings.NewReader("{}"))
		req.Header.Set(IdempotencyHeader, k)
		req.Header.Set("X-Big", "1")
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	i.mu.Lock()
	_, hasX := i.byKey["\x00POST /v1/take\x00x"]
	_, hasZ := i.byKey["\x00POST /v1/take\x00z"]
	bytes := i.bytes
	i.mu.Unlock()
	require.False(t, hasX)
	require.True(t, hasZ)
	require.LessOrEqual(t, bytes, int64(4096))

	// Expiry.
	clk.Advance(time.Minute + time.Second)
	idemDo(h, "fresh", "{}")
	require.Equal(t, 1, i.len(), "expired keys are dropped")
}
