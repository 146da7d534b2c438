package server_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/server"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

var leasePolicies = append([]limiter.Policy{
	{Name: "bulk", Algorithm: store.Concurrency, Permits: 2, TTL: 30 * time.Second},
	{Name: "jobs", Algorithm: store.Concurrency, Permits: 1, TTL: 10 * time.Second},
}, testPolicies...)

func leaseSetup(t *testing.T) *bundle {
	t.Helper()
	b := setup(t, server.Config{})
	lim, err := limiter.New(limiter.Config{
		Store:    memstore.New(memstore.Config{Clock: b.clock}),
		Clock:    b.clock,
		Policies: leasePolicies,
	})
	require.NoError(t, err)
	srv, err := server.New(server.Config{Limiter: lim})
	require.NoError(t, err)
	b.srv, b.h = srv, srv.Handler()
	return b
}

func (b *bundle) leaseDo(t *testing.T, method, path, body string) (*httptest.ResponseRecorder, map[string]any) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := httptest.NewRecorder()
	b.h.ServeHTTP(rec, req)
	var m map[string]any
	if rec.Body.Len() > 0 {
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &m), rec.Body.String())
	}
	return rec, m
}

func TestLeaseAPI(t *testing.T) {
	t.Parallel()
	b := leaseSetup(t)
	rec, a := b.leaseDo(t, "POST", "/v1/leases", `{"policy":"bulk","key":"shop-1","holder":"worker-a"}`)
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	require.Equal(t, "worker-a", a["holder"])
	require.Equal(t, float64(2), a["permits"])
	require.Equal(t, float64(30000), a["ttlMs"])
	require.Equal(t, float64(1), a["held"])
	require.Equal(t, start.Add(30*time.Second).UTC().Format(time.RFC3339Nano), a["expiresAt"])
	id := a["id"].(string)
	require.Equal(t, "/v1/leases/"+id, rec.Header().Get("Location"))

	rec, bl := b.leaseDo(t, "POST", "/v1/leases", `{"policy":"bulk","key":"shop-1"}`)
	require.Equal(t, http.StatusCreated, rec.Code)
	require.NotEmpty(t, bl["holder"], "a holder id is made up")
	require.Greater(t, bl["token"].(float64), a["token"].(float64))

	rec, p := b.leaseDo(t, "POST", "/v1/leases", `{"policy":"bulk","key":"shop-1"}`)
	require.Equal(t, http.StatusConflict, rec.Code)
	require.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
	require.Equal(t, server.TypeLeaseUnavailable, p["type"])
	require.Equal(t, float64(30000), p["retryAfterMs"])
	require.Equal(t, "30", rec.Header().Get("Retry-After"))

	rec, list := b.leaseDo(t, "GET", "/v1/leases?policy=bulk&key=shop-1", "")
	require.Equal(t, http.StatusOK, rec.Code)
	require.Len(t, list["leases"], 2)
	// A listing hands out nothing that renews or releases a lease: no id,
	// no holder id (which, with the public token, would make the id).
	for _, l := range list["leases"].([]any) {
		require.NotContains(t, l, "id")
		require.NotContains(t, l, "holder")
	}
	require.NotContains(t, rec.Body.String(), "worker-a")
	require.NotContains(t, rec.Body.String(), bl["holder"].(string))
	require.NotContains(t, rec.Body.String(), id)
	sum := sha256.Sum256([]byte("worker-a"))
	require.Equal(t, hex.EncodeToString(sum[:8]), list["leases"].([]any)[0].(map[string]any)["holderHash"])

	b.clock.Advance(10 * time.Second)
	rec, r := b.leaseDo(t, "POST", "/v1/leases/"+id+"/renew", "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, start.Add(40*time.Second).UTC().Format(time.RFC3339Nano), r["expiresAt"])

	rec, _ = b.leaseDo(t, "DELETE", "/v1/leases/"+id, "")
	require.Equal(t, http.StatusNoContent, rec.Code)
	rec, p = b.leaseDo(t, "DELETE", "/v1/leases/"+id, "")
	require.Equal(t, http.StatusNotFound, rec.Code)
	require.Equal(t, server.TypeLeaseNotHeld, p["type"])
	rec, _ = b.leaseDo(t, "POST", "/v1/leases/"+id+"/renew", "")
	require.Equal(t, http.StatusNotFound, rec.Code)

	// The other lease expires; a stale release frees nothing of a successor.
	b.clock.Advance(30 * time.Second)
	rec, c := b.leaseDo(t, "POST", "/v1/leases", `{"policy":"bulk","key":"shop-1"}`)
	require.Equal(t, http.StatusCreated, rec.Code)
	rec, _ = b.leaseDo(t, "DELETE", "/v1/leases/"+bl["id"].(string), "")
	require.Equal(t, http.StatusNotFound, rec.Code)
	rec, list = b.leaseDo(t, "GET", "/v1/leases?policy=bulk&key=shop-1", "")
	require.Equal(t, http.StatusOK, rec.Code)
	require.Len(t, list["leases"], 1)
	require.Equal(t, c["token"], list["leases"].([]any)[0].(map[string]any)["token"])
}

func TestLeaseAPIMixed(t *testing.T) {
	t.Parallel()
	b := leaseSetup(t)
	// strict allows one unit a minute: the first request gets both.
	body := `{"policy":"jobs","key":"j","items":[{"policy":"strict","key":"acct"}]}`
	rec, a := b.leaseDo(t, "POST", "/v1/leases", body)
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	require.Len(t, a["decisions"], 1)
	rec, _ = b.leaseDo(t, "DELETE", "/v1/leases/"+a["id"].(string), "")
	require.Equal(t, http.StatusNoContent, rec.Code)
	// The permit is free but the rate refuses: 429, no lease taken.
	rec, p := b.leaseDo(t, "POST", "/v1/leases", body)
	require.Equal(t, http.StatusTooManyRequests, rec.Code, rec.Body.String())
	require.Equal(t, server.TypeRateLimited, p["type"])
	rec, list := b.leaseDo(t, "GET", "/v1/leases?policy=jobs&key=j", "")
	require.Equal(t, http.StatusOK, rec.Code)
	require.Empty(t, list["leases"])

	// A holder asking again for the permit it holds (every permit held),
	// refused by the rate: 429 too, not 409; it keeps its lease.
	rec, w := b.leaseDo(t, "POST", "/v1/leases", `{"policy":"jobs","key":"j2","holder":"w"}`)
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	rec, p = b.leaseDo(t, "POST", "/v1/leases", `{"policy":"jobs","key":"j2","holder":"w","items":[{"policy":"strict","key":"acct"}]}`)
	require.Equal(t, http.StatusTooManyRequests, rec.Code, rec.Body.String())
	require.Equal(t, server.TypeRateLimited, p["type"])
	rec, _ = b.leaseDo(t, "POST", "/v1/leases/"+w["id"].(string)+"/renew", "")
	require.Equal(t, http.StatusOK, rec.Code, "w still holds its lease")
}

// b64 is a lease id's encoding of raw.
func b64(raw string) string { return base64.RawURLEncoding.EncodeToString([]byte(raw)) }

func TestLeaseAPIErrors(t *testing.T) {
	t.Parallel()
	b := leaseSetup(t)
	for _, tc := range []struct {
		name, method, path, body string
		code                     int
		typ, detail              string
	}{
		{"no policy", "POST", "/v1/leases", `{"key":"k"}`, 422, server.TypeInvalidRequest, "policy is required"},
		{"unknown policy", "POST", "/v1/leases", `{"policy":"nope","key":"k"}`, 422, server.TypeUnknownPolicy, "unknown policy"},
		{"rate policy", "POST", "/v1/leases", `{"policy":"api","key":"k"}`, 422, server.TypeInvalidRequest, "not concurrency"},
		{"no key", "POST", "/v1/leases", `{"policy":"bulk"}`, 422, server.TypeInvalidRequest, "key is required"},
		{"long holder", "POST", "/v1/leases", `{"policy":"bulk","key":"k","holder":"` + strings.Repeat("h", 300) + `"}`, 422, server.TypeInvalidRequest, "holder is 300 bytes, longer than 256"},
		{"NUL in holder", "POST", "/v1/leases", `{"policy":"bulk","key":"k","holder":"a\u0000b"}`, 422, server.TypeInvalidRequest, "holder contains control character U+0000 at byte 1"},
		{"unknown field", "POST", "/v1/leases", `{"policy":"bulk","key":"k","ttl":5}`, 400, server.TypeMalformedRequest, "the policy sets permits and ttl"},
		{"malformed", "POST", "/v1/leases", `{"policy":`, 400, server.TypeMalformedRequest, ""},
		{"trailing", "POST", "/v1/leases", `{"policy":"bulk","key":"k"} {}`, 400, server.TypeMalformedRequest, "after the JSON object"},
		{"shadow item", "POST", "/v1/leases", `{"policy":"bulk","key":"k","items":[{"policy":"trial","key":"k"}]}`, 422, server.TypeInvalidRequest, "shadow"},
		{"lease item", "POST", "/v1/leases", `{"policy":"bulk","key":"k","items":[{"policy":"jobs","key":"k"}]}`, 422, server.TypeInvalidRequest, "concurrency policy"},
		{"bad id", "DELETE", "/v1/leases/not-an-id", "", 422, server.TypeInvalidRequest, "path parameter id is not base64url"},
		{"bad renew id", "POST", "/v1/leases/WyJ4Il0/renew", "", 422, server.TypeInvalidRequest, "JSON array of 4 values"},
		{"not an array", "DELETE", "/v1/leases/" + b64(`{"a":1}`), "", 422, server.TypeInvalidRequest, "JSON array of 4 values"},
		{"token not an integer", "DELETE", "/v1/leases/" + b64(`["bulk","k","h","1"]`), "", 422, server.TypeInvalidRequest, "integer token"},
		{"token 0", "DELETE", "/v1/leases/" + b64(`["bulk","k","h",0]`), "", 422, server.TypeInvalidRequest, "token 0; tokens start at 1"},
		{"NUL in key", "DELETE", "/v1/leases/" + b64(`["bulk","a\u0000b","h",1]`), "", 422, server.TypeInvalidRequest, "key that contains control character U+0000"},
		{"invalid UTF-8 holder", "DELETE", "/v1/leases/" + b64("[\"bulk\",\"k\",\"\xff\",1]"), "", 422, server.TypeInvalidRequest, "not text"},
		{"lone surrogate", "DELETE", "/v1/leases/" + b64(`["bulk","k","\ud800",1]`), "", 422, server.TypeInvalidRequest, "not text"},
		{"empty policy", "DELETE", "/v1/leases/" + b64(`["","k","h",1]`), "", 422, server.TypeInvalidRequest, "policy that is empty"},
		{"long holder id", "DELETE", "/v1/leases/" + b64(`["bulk","k","`+strings.Repeat("h", 300)+`",1]`), "", 422, server.TypeInvalidRequest, "holder that is 300 bytes"},
		{"unknown policy id", "DELETE", "/v1/leases/" + b64(`["nope","k","h",1]`), "", 404, server.TypeLeaseNotHeld, `policy "nope"`},
		{"rate policy id", "POST", "/v1/leases/" + b64(`["api","k","h",1]`) + "/renew", "", 404, server.TypeLeaseNotHeld, "not a concurrency policy"},
		{"unheld id", "DELETE", "/v1/leases/" + b64(`["bulk","k","h",1]`), "", 404, server.TypeLeaseNotHeld, "not held"},
		{"list without key", "GET", "/v1/leases?policy=bulk", "", 422, server.TypeInvalidRequest, "key is required"},
		{"list without policy", "GET", "/v1/leases?key=k", "", 422, server.TypeInvalidRequest, "2 concurrency policies"},
		{"list rate policy", "GET", "/v1/leases?key=k&policy=api", "", 422, server.TypeInvalidRequest, "not concurrency"},
		{"lease in take", "POST", "/v1/take", `{"policy":"bulk","key":"k"}`, 422, server.TypeInvalidRequest, "POST /v1/leases"},
	} {
		rec, p := b.leaseDo(t, tc.method, tc.path, tc.body)
		require.Equal(t, tc.code, rec.Code, "%s: %s", tc.name, rec.Body.String())
		require.Equal(t, tc.typ, p["type"], tc.name)
		require.Contains(t, p["detail"], tc.detail, tc.name)
	}
	rec, _ := b.leaseDo(t, "PUT", "/v1/leases", `{}`)
	require.Equal(t, http.StatusMethodNotAllowed, rec.Code)
	require.Equal(t, "GET, HEAD, POST", rec.Header().Get("Allow"))
	req := httptest.NewRequest("POST", "/v1/leases", strings.NewReader(`{}`))
	rec = httptest.NewRecorder()
	b.h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusUnsupportedMediaType, rec.Code)
}

func TestLeaseMetrics(t *testing.T) {
	t.Parallel()
	b := leaseSetup(t)
	rec, a := b.leaseDo(t, "POST", "/v1/leases", `{"policy":"jobs","key":"j"}`)
	require.Equal(t, http.StatusCreated, rec.Code)
	rec, _ = b.leaseDo(t, "POST", "/v1/leases", `{"policy":"jobs","key":"j"}`)
	require.Equal(t, http.StatusConflict, rec.Code)
	rec, _ = b.leaseDo(t, "POST", "/v1/leases", `{"policy":"nope","key":"j"}`)
	require.Equal(t, http.StatusUnprocessableEntity, rec.Code)
	rec, _ = b.leaseDo(t, "DELETE", "/v1/leases/"+a["id"].(string), "")
	require.Equal(t, http.StatusNoContent, rec.Code)
	rec, _ = b.leaseDo(t, "DELETE", "/v1/leases/"+a["id"].(string), "")
	require.Equal(t, http.StatusNotFound, rec.Code)

	req := httptest.NewRequest("GET", "/metrics", nil)
	mrec := httptest.NewRecorder()
	b.h.ServeHTTP(mrec, req)
	body := mrec.Body.String()
	for _, line := range []string{
		`sluice_lease_operations_total{op="acquire",policy="jobs",result="ok"} 1`,
		`sluice_lease_operations_total{op="acquire",policy="jobs",result="unavailable"} 1`,
		`sluice_lease_operations_total{op="acquire",policy="unknown",result="invalid"} 1`,
		`sluice_lease_operations_total{op="release",policy="jobs",result="ok"} 1`,
		`sluice_lease_operations_total{op="release",policy="jobs",result="not_held"} 1`,
		`sluice_lease_operations_total{op="renew",policy="bulk",result="ok"} 0`,
	} {
		require.Contains(t, body, line)
	}
}

func TestPoliciesListConcurrency(t *testing.T) {
	t.Parallel()
	b := leaseSetup(t)
	rec, out := b.leaseDo(t, "GET", "/v1/policies", "")
	require.Equal(t, http.StatusOK, rec.Code)
	var bulk map[string]any
	for _, p := range out["policies"].([]any) {
		if m := p.(map[string]any); m["name"] == "bulk" {
			bulk = m
		}
	}
	require.Equal(t, "concurrency", bulk["algorithm"])
	require.Equal(t, float64(2), bulk["permits"])
	require.Equal(t, float64(30000), bulk["ttlMs"])
}
