package server_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/server"
)

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	a := authSetup(t, server.Config{Idempotency: server.IdempotencyConfig{TTL: time.Hour}})
	take := `{"policy":"strict","key":"k"}` // one a minute
	first := a.as(t, a.taker, "POST", "/v1/take", take, "Idempotency-Key", "req-1")
	require.Equal(t, http.StatusOK, first.Code)
	require.Empty(t, first.Header().Get(server.ReplayedHeader))

	// The retry gets the first answer and is not charged.
	again := a.as(t, a.taker, "POST", "/v1/take", take, "Idempotency-Key", "req-1")
	require.Equal(t, http.StatusOK, again.Code)
	require.Equal(t, "true", again.Header().Get(server.ReplayedHeader))
	require.Equal(t, first.Body.String(), again.Body.String())
	require.Equal(t, first.Header().Get("RateLimit"), again.Header().Get("RateLimit"))
	require.Contains(t, a.metrics(t), `sluice_decisions_total{policy="strict",result="allowed"} 1`, "charged once")

	// A new key is a new request: charged, and refused (one a minute).
	require.Equal(t, http.StatusTooManyRequests, a.as(t, a.taker, "POST", "/v1/take", take, "Idempotency-Key", "req-2").Code)
	// The same key with another body: 422.
	p := requireProblem(t, a.as(t, a.taker, "POST", "/v1/take", `{"policy":"strict","key":"other"}`, "Idempotency-Key", "req-1"),
		http.StatusUnprocessableEntity, server.TypeIdempotencyKeyReused)
	require.Contains(t, p.Detail, "another request body")
	// Keys are per token: another token's "req-1" is its own request.
	rec := a.as(t, a.admin, "POST", "/v1/take", take, "Idempotency-Key", "req-1")
	require.Equal(t, http.StatusTooManyRequests, rec.Code)
	require.Empty(t, rec.Header().Get(server.ReplayedHeader))

	// Bad keys are 400, before anything is charged.
	for _, k := range []string{"", "a b", strings.Repeat("k", 256), "é"} {
		requireProblem(t, a.as(t, a.taker, "POST", "/v1/take", take, "Idempotency-Key", k), http.StatusBadRequest, server.TypeMalformedRequest)
	}
	requireProblem(t, a.as(t, a.taker, "POST", "/v1/take", take, "Idempotency-Key", "x", "Idempotency-Key", "y"),
		http.StatusBadRequest, server.TypeMalformedRequest)

	// After the TTL the key is forgotten: the same request is charged
	// again (the minute has passed too, so it is allowed).
	a.clock.Advance(time.Hour + time.Second)
	rec = a.as(t, a.taker, "POST", "/v1/take", take, "Idempotency-Key", "req-1")
	require.Equal(t, http.StatusOK, rec.Code)
	require.Empty(t, rec.Header().Get(server.ReplayedHeader))
	require.Contains(t, a.metrics(t), `sluice_decisions_total{policy="strict",result="allowed"} 2`)
}

func TestIdempotencyLeaseAndOversize(t *testing.T) {
	t.Parallel()
	a := authSetup(t, server.Config{MaxBodyBytes: 64})
	body := `{"policy":"jobs","key":"k"}` // one permit
	first := a.as(t, a.leaser, "POST", "/v1/leases", body, "Idempotency-Key", "acq-1")
	require.Equal(t, http.StatusCreated, first.Code)
	again := a.as(t, a.leaser, "POST", "/v1/leases", body, "Idempotency-Key", "acq-1")
	require.Equal(t, http.StatusCreated, again.Code, "the retry is the same grant, not a 409")
	require.Equal(t, first.Body.String(), again.Body.String())
	require.Equal(t, first.Header().Get("Location"), again.Header().Get("Location"))

	// A body over the limit is still 413 with a key.
	rec := a.as(t, a.leaser, "POST", "/v1/leases", `{"policy":"jobs","key":"`+strings.Repeat("k", 100)+`"}`, "Idempotency-Key", "big")
	require.Equal(t, http.StatusRequestEntityTooLarge, rec.Code)
}
