package server

import (
	"math/bits"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/auth"
	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/store/memstore"
)

// TestCovers: a route pattern covers a literal path when every segment
// matches, so the literal path gets no catch-all 405 that net/http would
// refuse as conflicting with the pattern.
func TestCovers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pattern, path string
		want          bool
	}{
		{"/v1/jobs/{id}", "/v1/jobs/claim", true},
		{"/api/v1/slots/{eventId...}", "/api/v1/slots/batch", true},
		{"/api/v1/slots/{eventId...}", "/api/v1/slots", false},
		{"/v1/jobs/{id}/{op}", "/v1/jobs/claim", false},
		{"/v1/jobs/{id}", "/v1/jobs/{id}/{op}", false},
		{"/v1/connectors/{id}/pause", "/v1/connectors/{id}/resume", false},
		{"/v1/leases/{id}", "/v1/leases", false},
		{"/v1/jobs", "/v1/jobs/{id}", false},
	} {
		if got := covers(tc.pattern, tc.path); got != tc.want {
			t.Errorf("covers(%q, %q) = %v, want %v", tc.pattern, tc.path, got, tc.want)
		}
	}
}

// TestRoutesHaveOneScope: every route of the table names exactly one
// scope, and a table with a route without one is refused.
func TestRoutesHaveOneScope(t *testing.T) {
	t.Parallel()
	lim, err := limiter.New(limiter.Config{})
	require.NoError(t, err)
	s, err := New(Config{Limiter: lim, Jobs: memstore.NewJobStore(memstore.JobConfig{})})
	require.NoError(t, err)
	for _, rt := range s.endpoints() {
		require.True(t, rt.scope == auth.Public || (rt.scope&^auth.All == 0 && bits.OnesCount8(uint8(rt.scope)) == 1),
			"%s %s has scope %q", rt.method, rt.path, rt.scope)
	}
	_, err = s.routes(append(s.endpoints(), route{method: http.MethodGet, path: "/v1/unscoped", h: s.health}))
	require.ErrorContains(t, err, "route GET /v1/unscoped: want exactly one scope")
}
