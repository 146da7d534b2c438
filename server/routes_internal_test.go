package server

import "testing"

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
