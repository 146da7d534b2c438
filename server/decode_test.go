package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/server"
	"github.com/sluicerl/sluice/slot"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

// fullSetup is a server with rate, lease and slot policies: every
// endpoint, and a slot config named "default". Slots are in memory.
func fullSetup(t *testing.T, cfg server.Config) *bundle {
	t.Helper()
	sch, err := slot.New(slot.Config{})
	require.NoError(t, err)
	b := setup(t, server.Config{})
	lim, err := limiter.New(limiter.Config{
		Store:    memstore.New(memstore.Config{Clock: b.clock}),
		Clock:    b.clock,
		Policies: leasePolicies,
	})
	require.NoError(t, err)
	cfg.Limiter, cfg.Slots = lim, sch
	srv, err := server.New(cfg)
	require.NoError(t, err)
	b.srv, b.h = srv, srv.Handler()
	rec := b.do(t, http.MethodPost, "/admin/rate-limit/config", "application/json",
		`{"configName":"default","maxPerWindow":100000,"windowSize":"PT1H","headroom":10}`)
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	return b
}

// TestStrictJSON: every endpoint that reads a body refuses, the same way,
// what encoding/json alone lets through: a field name in the wrong case,
// a field named twice, a charset other than UTF-8, data after the object.
// Nested values (take and lease items, batch events) are as strict.
func TestStrictJSON(t *testing.T) {
	t.Parallel()
	b := fullSetup(t, server.Config{})
	const ev = `{"eventId":"e1","requestedTime":"2025-06-01T12:00:00Z"}`
	endpoints := []struct {
		path, good string
		field      string // a field of good, and its pointer
		ptr        string
	}{
		{"/v1/take", `{"policy":"api","key":"k"}`, "key", "#/key"},
		{"/v1/take", `{"items":[{"policy":"api","key":"k"}]}`, "key", "#/items/0/key"},
		{"/v1/leases", `{"policy":"bulk","key":"k"}`, "key", "#/key"},
		{"/v1/leases", `{"policy":"bulk","key":"k2","items":[{"policy":"api","key":"k"}]}`, "policy", "#/items/0/policy"},
		{"/api/v1/slots", `{"eventId":"e1","configName":"default","requestedTime":"2025-06-01T12:00:00Z"}`, "eventId", "#/eventId"},
		{"/api/v1/slots/batch", `{"configName":"default","events":[` + ev + `]}`, "requestedTime", "#/events/0/requestedTime"},
		{"/admin/rate-limit/config", `{"configName":"c","maxPerWindow":1,"windowSize":"PT4S"}`, "windowSize", "#/windowSize"},
	}
	for _, ep := range endpoints {
		// The first occurrence of the field: top level, or in the first item.
		quoted := `"` + ep.field + `":`
		i := strings.LastIndex(ep.good, quoted)
		if !strings.Contains(ep.ptr, "/0/") {
			i = strings.Index(ep.good, quoted)
		}
		require.GreaterOrEqual(t, i, 0, ep.path)
		// The field's value: up to the next , or }.
		j := i + len(quoted) + strings.IndexAny(ep.good[i+len(quoted):], ",}")
		value := ep.good[i+len(quoted) : j]
		upper := ep.good[:i] + `"` + strings.ToUpper(ep.field[:1]) + ep.field[1:] + `":` + ep.good[i+len(quoted):]
		twice := ep.good[:j] + "," + quoted + value + ep.good[j:]

		t.Run(ep.path+" "+ep.ptr, func(t *testing.T) {
			// The good body passes the decoder (whatever the handler then says).
			rec := b.do(t, http.MethodPost, ep.path, "application/json; charset=UTF-8", ep.good)
			require.Less(t, rec.Code, 300, rec.Body.String())

			rec = b.do(t, http.MethodPost, ep.path, "application/json", upper)
			p := requireProblem(t, rec, http.StatusBadRequest, server.TypeMalformedRequest)
			require.Contains(t, p.Detail, "case-sensitive", upper)
			require.Contains(t, p.Detail, fmt.Sprintf("did you mean %q", ep.field))
			require.Len(t, p.Errors, 1)
			require.Equal(t, ep.ptr[:strings.LastIndex(ep.ptr, "/")+1]+strings.ToUpper(ep.field[:1])+ep.field[1:], p.Errors[0].Pointer)

			rec = b.do(t, http.MethodPost, ep.path, "application/json", twice)
			p = requireProblem(t, rec, http.StatusBadRequest, server.TypeMalformedRequest)
			require.Contains(t, p.Detail, "given twice", twice)
			require.Len(t, p.Errors, 1)
			require.Equal(t, ep.ptr, p.Errors[0].Pointer)

			rec = b.do(t, http.MethodPost, ep.path, "application/json", ep.good+`{}`)
			p = requireProblem(t, rec, http.StatusBadRequest, server.TypeMalformedRequest)
			require.Contains(t, p.Detail, "data after the JSON object")

			for _, ct := range []string{"application/json; charset=latin1", "application/json; charset=iso-8859-1",
				"application/json; version=2", "application/merge-patch+json", "text/json"} {
				rec = b.do(t, http.MethodPost, ep.path, ct, ep.good)
				p = requireProblem(t, rec, http.StatusUnsupportedMediaType, "about:blank")
				require.Contains(t, p.Detail, ct[strings.LastIndexAny(ct, "=; ")+1:], ct)
			}
		})
	}
}

// TestDuplicateKeyDeep: a field named twice is refused at any depth, even
// inside a value the server reads raw (a cost).
func TestDuplicateKeyDeep(t *testing.T) {
	t.Parallel()
	b := setup(t, server.Config{})
	rec := b.take(t, `{"policy":"api","key":"k","cost":{"a":1,"a":2}}`)
	p := requireProblem(t, rec, http.StatusBadRequest, server.TypeMalformedRequest)
	require.Equal(t, "#/cost/a", p.Errors[0].Pointer)
	// Names that decode to the same string are the same name.
	rec = b.take(t, `{"policy":"api","key":"k","ke\u0079":"j"}`)
	p = requireProblem(t, rec, http.StatusBadRequest, server.TypeMalformedRequest)
	require.Equal(t, "#/key", p.Errors[0].Pointer)
	// The same name in two objects is fine.
	rec = b.take(t, `{"items":[{"policy":"api","key":"a"},{"policy":"api","key":"b"}]}`)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
}

// TestNotFoundListsEveryEndpoint: the 404 names every endpoint, and each
// one it names is served.
func TestNotFoundListsEveryEndpoint(t *testing.T) {
	t.Parallel()
	b := fullSetup(t, server.Config{})
	rec := b.do(t, http.MethodGet, "/v2/nothing", "", "")
	p := requireProblem(t, rec, http.StatusNotFound, "about:blank")
	listed := regexp.MustCompile(`(GET|POST|DELETE) (/[^ ,]*)`).FindAllStringSubmatch(p.Detail, -1)
	var got []string
	for _, m := range listed {
		got = append(got, m[0])
		path := strings.NewReplacer("{eventId...}", "e1", "{name}", "default", "{id}", "x").Replace(m[2])
		rec := b.do(t, m[1], path, "application/json", `{}`)
		require.NotEqual(t, http.StatusMethodNotAllowed, rec.Code, m[0])
		require.NotContains(t, rec.Body.String(), "no such endpoint", m[0])
	}
	require.ElementsMatch(t, []string{
		"POST /v1/take", "GET /v1/policies", "GET /healthz", "GET /metrics", "GET /openapi.json", "POST /v1/admin/reload",
		"POST /v1/leases", "GET /v1/leases", "POST /v1/leases/{id}/renew", "DELETE /v1/leases/{id}",
		"POST /api/v1/slots", "POST /api/v1/slots/batch", "GET /api/v1/slots/{eventId...}",
		"POST /admin/rate-limit/config", "GET /admin/rate-limit/config/{name}",
		"POST /admin/rate-limit/config/{name}/deactivate", "POST /admin/rate-limit/cache/flush",
		"GET /admin/rate-limit/verify",
	}, got)
}

// TestSlotMethodNotAllowed: the batch path is POST only, whatever method
// is tried, though GET /api/v1/slots/{eventId} would match it.
func TestSlotMethodNotAllowed(t *testing.T) {
	t.Parallel()
	b := fullSetup(t, server.Config{})
	for _, tt := range []struct{ method, path, allow string }{
		{http.MethodPut, "/api/v1/slots/batch", "POST"},
		{http.MethodGet, "/api/v1/slots/batch", "POST"},
		{http.MethodDelete, "/api/v1/slots/batch", "POST"},
		{http.MethodOptions, "/api/v1/slots/batch", "POST"},
		{http.MethodPut, "/api/v1/slots/e1", "GET, HEAD"},
		{http.MethodGet, "/api/v1/slots", "POST"},
		{http.MethodPost, "/v1/leases/x", "DELETE"},
		{http.MethodPut, "/v1/leases", "GET, HEAD, POST"},
	} {
		rec := b.do(t, tt.method, tt.path, "application/json", `{}`)
		requireProblem(t, rec, http.StatusMethodNotAllowed, "about:blank")
		require.Equal(t, tt.allow, rec.Header().Get("Allow"), tt.method+" "+tt.path)
	}
}

// TestDefaultBodyCapFitsMaxBatch: the default cap reads a batch of the
// most events (10,000) with event ids of the longest length, the README's
// promise; one byte of cap less than a body gets a 413 naming the cap.
func TestDefaultBodyCapFitsMaxBatch(t *testing.T) {
	t.Parallel()
	var sb strings.Builder
	sb.WriteString(`{"configName":"default","events":[`)
	at := time.Date(2025, 6, 1, 12, 0, 0, 123456789, time.UTC)
	for i := range slot.DefaultMaxBatch {
		if i > 0 {
			sb.WriteByte(',')
		}
		id := fmt.Sprintf("%0*d", store.MaxEventIDLen, i)
		fmt.Fprintf(&sb, `{"eventId":%q,"requestedTime":%q}`, id, at.Format(time.RFC3339Nano))
	}
	sb.WriteString(`]}`)
	body := sb.String()
	require.Less(t, len(body), server.DefaultMaxBodyBytes)

	b := fullSetup(t, server.Config{})
	rec := b.do(t, http.MethodPost, "/api/v1/slots/batch", "application/json", body)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var out struct{ Assigned int }
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out))
	require.Equal(t, slot.DefaultMaxBatch, out.Assigned)

	small := fullSetup(t, server.Config{MaxBodyBytes: 1 << 20})
	rec = small.do(t, http.MethodPost, "/api/v1/slots/batch", "application/json", body)
	p := requireProblem(t, rec, http.StatusRequestEntityTooLarge, "about:blank")
	require.Contains(t, p.Detail, "1048576 bytes (1 MiB)")
}

// TestHolderDetail: a bad holder's detail names the field once, in the
// identifier rule's words (store.CheckID).
func TestHolderDetail(t *testing.T) {
	t.Parallel()
	b := leaseSetup(t)
	for body, want := range map[string]string{
		`{"policy":"bulk","key":"k","holder":"` + strings.Repeat("h", 100000) + `"}`: "holder is 100000 bytes, longer than 256",
		`{"policy":"bulk","key":"k","holder":"a\u0000b"}`:                            "holder contains control character U+0000 at byte 1",
	} {
		rec, _ := b.leaseDo(t, http.MethodPost, "/v1/leases", body)
		p := requireProblem(t, rec, http.StatusUnprocessableEntity, server.TypeInvalidRequest)
		require.Equal(t, want, p.Detail)
		require.Equal(t, want, p.Errors[0].Detail)
		require.Equal(t, "#/holder", p.Errors[0].Pointer)
	}
}

// TestQueryParameterDetail: errors in query parameters name them as such,
// in the same idiom as body fields.
func TestQueryParameterDetail(t *testing.T) {
	t.Parallel()
	b := leaseSetup(t)
	rec, _ := b.leaseDo(t, http.MethodGet, "/v1/leases", "")
	p := requireProblem(t, rec, http.StatusUnprocessableEntity, server.TypeInvalidRequest)
	require.Equal(t, "query parameter key is required; query parameter policy is required: the server holds 2 concurrency policies", p.Detail)
	require.Equal(t, "#/query/key", p.Errors[0].Pointer)
	require.Equal(t, "#/query/policy", p.Errors[1].Pointer)

	rec, _ = b.leaseDo(t, http.MethodGet, "/v1/leases?key=k&policy=api", "")
	p = requireProblem(t, rec, http.StatusUnprocessableEntity, server.TypeInvalidRequest)
	require.Equal(t, `query parameter policy names gcra policy "api", not concurrency: leases need a concurrency policy`, p.Detail)
}
