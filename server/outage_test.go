package server_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/server"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/guard"
)

// TestOutageAnswersSaySo: a decision the shared store did not make carries
// the Sluice-Outage header and the outage fields, so a client can tell a
// fail_closed outage denial from the limit being spent; store decisions
// carry neither.
func TestOutageAnswersSaySo(t *testing.T) {
	t.Parallel()
	g, err := guard.New(faultStore{errors.New("dial tcp: connection refused")}, guard.Config{Limits: map[string]store.Outage{
		"api":    {Mode: store.FailOpen},
		"strict": {Mode: store.FailClosed},
	}})
	require.NoError(t, err)
	lim, err := limiter.New(limiter.Config{Store: g, Policies: testPolicies})
	require.NoError(t, err)
	b := setup(t, server.Config{Limiter: lim})

	type decision struct {
		Allowed      bool   `json:"allowed"`
		Outage       string `json:"outage"`
		OutageReason string `json:"outageReason"`
	}
	for _, tc := range []struct {
		policy string
		status int
		mode   string
	}{
		{"api", http.StatusOK, "fail_open"},
		{"strict", http.StatusTooManyRequests, "fail_closed"},
	} {
		rec := b.take(t, `{"policy":"`+tc.policy+`","key":"k"}`)
		require.Equal(t, tc.status, rec.Code, rec.Body.String())
		require.Equal(t, tc.mode+";reason=store_down", rec.Header().Get(server.OutageHeader))
		var d decision
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &d))
		require.Equal(t, decision{Allowed: tc.status == http.StatusOK, Outage: tc.mode, OutageReason: "store_down"}, d)
	}

	// A store decision says nothing of outages.
	b = setup(t, server.Config{})
	rec := b.take(t, `{"policy":"api","key":"k"}`)
	require.Equal(t, http.StatusOK, rec.Code)
	require.Empty(t, rec.Header().Get(server.OutageHeader))
	require.NotContains(t, rec.Body.String(), "outage")
}

// TestStoreRefusedValueIs422: a value the store refuses (a PostgreSQL data
// exception) is the request's fault.
func TestStoreRefusedValueIs422(t *testing.T) {
	t.Parallel()
	for _, refusal := range []error{store.ErrInvalidValue, store.ErrOutOfRange} {
		b := setup(t, server.Config{Limiter: faultLimiter(t, refusal)})
		requireProblem(t, b.take(t, `{"policy":"api","key":"k"}`), http.StatusUnprocessableEntity, server.TypeInvalidRequest)
	}
}
