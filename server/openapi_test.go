package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/outbound"
	"github.com/sluicerl/sluice/provider"
	"github.com/sluicerl/sluice/server"
	"github.com/sluicerl/sluice/slot"
	"github.com/sluicerl/sluice/store/memstore"
	"github.com/sluicerl/sluice/store/sqlitestore"
)

// openAPIChecker sends requests to a server with every optional part and
// validates each response (and each request the server accepted) against
// the document the server serves at /openapi.json, counting the statuses
// seen per operation.
type openAPIChecker struct {
	t      *testing.T
	h      http.Handler
	router routers.Router
	doc    *openapi3.T
	seen   map[string][]int // operationId -> statuses
	// reloadErr is what the server's Config.Reload answers.
	reloadErr error
}

func newOpenAPIChecker(t *testing.T) *openAPIChecker {
	t.Helper()
	clk := clocktest.New(start)
	lim, err := limiter.New(limiter.Config{Store: memstore.New(memstore.Config{Clock: clk}), Clock: clk, Policies: leasePolicies})
	require.NoError(t, err)
	st, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "slots.db"), sqlitestore.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	sch, err := slot.New(slot.Config{Store: st})
	require.NoError(t, err)
	set, err := provider.Embedded()
	require.NoError(t, err)
	reg := provider.NewRegistry(set)
	oc, err := outbound.New(outbound.Config{Clock: clk, Store: memstore.New(memstore.Config{Clock: clk}), ProviderProfiles: reg})
	require.NoError(t, err)
	c := &openAPIChecker{t: t, seen: map[string][]int{}}
	srv, err := server.New(server.Config{Limiter: lim, Slots: sch, Jobs: memstore.NewJobStore(memstore.JobConfig{}),
		Outbound: oc, Providers: reg, Reload: func(context.Context) error { return c.reloadErr }})
	require.NoError(t, err)
	c.h = srv.Handler()

	// The document the server serves, not the file.
	rec := httptest.NewRecorder()
	c.h.ServeHTTP(rec, httptest.NewRequest("GET", "/openapi.json", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(rec.Body.Bytes())
	require.NoError(t, err)
	require.Equal(t, "3.1.0", doc.OpenAPI)
	require.NoError(t, doc.Validate(loader.Context), "the document is not valid OpenAPI")
	doc.Servers = nil // match requests to any host
	c.doc = doc
	c.router, err = legacy.NewRouter(doc)
	require.NoError(t, err)
	return c
}

// do sends a request and validates its response; it returns the response.
func (c *openAPIChecker) do(method, path, body string) *httptest.ResponseRecorder {
	t := c.t
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := httptest.NewRecorder()
	c.h.ServeHTTP(rec, req)

	vreq := httptest.NewRequest(method, path, strings.NewReader(body))
	if body != "" {
		vreq.Header.Set("Content-Type", "application/json")
	}
	route, params, err := c.router.FindRoute(vreq)
	if err != nil && (rec.Code == http.StatusMethodNotAllowed || rec.Code == http.StatusNotFound) {
		// No operation to check against: the answer is a problem.
		require.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
		var v any
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &v))
		require.NoError(t, c.doc.Components.Schemas["Problem"].Value.VisitJSON(v), "%s %s -> %d %s", method, path, rec.Code, rec.Body.String())
		return rec
	}
	require.NoError(t, err, "%s %s is in no path of the document", method, path)
	in := &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route,
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true, AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
	if rec.Code < 300 {
		require.NoError(t, openapi3filter.ValidateRequest(context.Background(), in),
			"%s %s %s: the server accepted a request the document refuses", method, path, body)
	}
	err = openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: rec.Code, Header: rec.Header(),
		Body: io.NopCloser(bytes.NewReader(rec.Body.Bytes())), Options: in.Options,
	})
	require.NoError(t, err, "%s %s -> %d %s", method, path, rec.Code, rec.Body.String())
	c.seen[route.Operation.OperationID] = append(c.seen[route.Operation.OperationID], rec.Code)
	return rec
}

// want is do that also checks the status.
func (c *openAPIChecker) want(status int, method, path, body string) *httptest.ResponseRecorder {
	c.t.Helper()
	rec := c.do(method, path, body)
	require.Equal(c.t, status, rec.Code, "%s %s %s: %s", method, path, body, rec.Body.String())
	return rec
}

// TestOpenAPIResponsesValidate sends every endpoint successful and failing
// requests and validates each answer against the served document, then
// checks that every operation of the document answered at least one
// success and (when it reads anything from the request) one error.
func TestOpenAPIResponsesValidate(t *testing.T) {
	t.Parallel()
	c := newOpenAPIChecker(t)

	// Takes, policies, health, metrics, the document.
	c.want(200, "POST", "/v1/take", `{"policy":"api","key":"k"}`)
	c.want(200, "POST", "/v1/take", `{"items":[{"policy":"api","key":"k","cost":2},{"policy":"orders","key":"k"}]}`)
	c.want(200, "POST", "/v1/take", `{"policy":"strict","key":"k"}`)
	c.want(429, "POST", "/v1/take", `{"policy":"strict","key":"k"}`)
	c.want(422, "POST", "/v1/take", `{"policy":"nope","key":"k"}`)
	c.want(400, "POST", "/v1/take", `{"policy":`)
	c.want(415, "POST", "/v1/take", ``)
	c.want(200, "GET", "/v1/policies", "")
	c.want(405, "POST", "/v1/policies", "")
	c.want(200, "GET", "/healthz", "")
	c.want(405, "DELETE", "/healthz", "")
	c.want(200, "GET", "/metrics", "")
	c.want(405, "POST", "/metrics", "")
	c.want(200, "GET", "/openapi.json", "")
	c.want(405, "POST", "/openapi.json", "")

	// Leases.
	rec := c.want(201, "POST", "/v1/leases", `{"policy":"jobs","key":"k","holder":"w1"}`)
	id := decodeAs[struct{ ID string }](t, rec.Body.Bytes()).ID
	c.want(409, "POST", "/v1/leases", `{"policy":"jobs","key":"k","holder":"w2"}`)
	c.want(429, "POST", "/v1/leases", `{"policy":"bulk","key":"k","items":[{"policy":"strict","key":"k"}]}`)
	c.want(201, "POST", "/v1/leases", `{"policy":"bulk","key":"k2","items":[{"policy":"api","key":"k2"}]}`)
	c.want(200, "GET", "/v1/leases?policy=jobs&key=k", "")
	c.want(422, "GET", "/v1/leases?policy=nope&key=k", "")
	c.want(200, "POST", "/v1/leases/"+id+"/renew", "")
	c.want(204, "DELETE", "/v1/leases/"+id, "")
	c.want(404, "POST", "/v1/leases/"+id+"/renew", "")
	c.want(404, "DELETE", "/v1/leases/"+id, "")

	// Jobs.
	c.want(201, "PUT", "/v1/connectors/binance", `{"policies":["api"],"profile":"binance"}`)
	c.want(200, "PUT", "/v1/connectors/binance", `{"status":"active","policies":["api"]}`)
	c.want(422, "PUT", "/v1/connectors/binance", `{"status":"sleepy"}`)
	c.want(200, "GET", "/v1/connectors", "")
	c.want(422, "GET", "/v1/connectors?limit=0", "")
	c.want(200, "GET", "/v1/connectors/binance", "")
	c.want(404, "GET", "/v1/connectors/nope", "")
	c.want(200, "POST", "/v1/connectors/binance/pause", "")
	c.want(404, "POST", "/v1/connectors/nope/pause", "")
	c.want(200, "POST", "/v1/connectors/binance/resume", "")
	c.want(404, "POST", "/v1/connectors/nope/resume", "")
	job := "/v1/jobs/binance:BTC-USDT:1m" // kin-openapi's router decodes %2F before matching
	c.want(201, "PUT", job, `{"connector_id":"binance","type":"ohlcv","params":{"symbol":"BTC/USDT"},"interval_ms":60000,"priority":5}`)
	c.want(200, "PUT", job, `{"connector_id":"binance","type":"ohlcv","interval_ms":60000}`)
	c.want(404, "PUT", "/v1/jobs/x", `{"connector_id":"nope","type":"ohlcv","interval_ms":60000}`)
	c.want(201, "PUT", "/v1/jobs/binance:cron", `{"connector_id":"binance","type":"report","cron":"0 9 * * MON-FRI","time_zone":"Europe/Paris","disabled":true}`)
	c.want(422, "PUT", "/v1/jobs/binance:cron", `{"connector_id":"binance","type":"report","cron":"0 9 * *"}`)
	c.want(200, "GET", "/v1/jobs", "")
	c.want(422, "GET", "/v1/jobs?limit=x", "")
	c.want(200, "GET", job, "")
	c.want(404, "GET", "/v1/jobs/nope", "")
	c.want(200, "POST", job+"/trigger", "")
	rec = c.want(200, "POST", "/v1/jobs/claim", `{"holder":"w1","limit":1,"lease_ttl_ms":30000}`)
	claims := decodeAs[struct{ Claims []struct{ Token int64 } }](t, rec.Body.Bytes()).Claims
	require.Len(t, claims, 1)
	tok := claims[0].Token
	c.want(400, "POST", "/v1/jobs/claim", `{"holder":1}`)
	c.want(200, "POST", job+"/heartbeat", fmt.Sprintf(`{"token":%d,"lease_ttl_ms":30000}`, tok))
	c.want(204, "POST", job+"/commit", fmt.Sprintf(`{"token":%d,"cursor":"c1"}`, tok))
	c.want(409, "POST", job+"/commit", fmt.Sprintf(`{"token":%d,"cursor":"c1"}`, tok+1))
	c.want(422, "POST", job+"/finish", fmt.Sprintf(`{"token":%d,"schedule":true,"delay_ms":5}`, tok))
	c.want(204, "POST", job+"/finish", fmt.Sprintf(`{"token":%d,"schedule":true,"requests":3}`, tok))
	c.want(404, "POST", job+"/explode", `{}`)
	c.want(200, "PUT", "/v1/job-groups/binance", `{"weight":3}`)
	c.want(422, "PUT", "/v1/job-groups/binance", `{"weight":0}`)
	c.want(200, "GET", "/v1/job-groups/binance", "")
	c.want(422, "GET", "/v1/job-groups/a%01b", "")
	for _, list := range []string{"/v1/runs", "/v1/gaps", "/v1/breaker-transitions", "/v1/job-groups"} {
		c.want(200, "GET", list, "")
		c.want(422, "GET", list+"?limit=-1", "")
	}

	// Slots.
	c.want(201, "POST", "/admin/rate-limit/config", `{"configName":"default","maxPerWindow":2,"windowSize":"PT4S"}`)
	c.want(422, "POST", "/admin/rate-limit/config", `{"configName":"default","maxPerWindow":0,"windowSize":"PT4S"}`)
	c.want(200, "GET", "/admin/rate-limit/config/default", "")
	c.want(404, "GET", "/admin/rate-limit/config/nope", "")
	at := time.Now().UTC().Add(time.Hour).Format(time.RFC3339)
	c.want(201, "POST", "/api/v1/slots", fmt.Sprintf(`{"eventId":"e1","configName":"default","requestedTime":%q}`, at))
	c.want(200, "POST", "/api/v1/slots", fmt.Sprintf(`{"eventId":"e1","configName":"default","requestedTime":%q}`, at))
	c.want(422, "POST", "/api/v1/slots", fmt.Sprintf(`{"eventId":"e2","configName":"nope","requestedTime":%q}`, at))
	c.want(200, "POST", "/api/v1/slots/batch", fmt.Sprintf(`{"configName":"default","events":[{"eventId":"e1","requestedTime":%q},{"eventId":"e3","requestedTime":%q}]}`, at, at))
	c.want(422, "POST", "/api/v1/slots/batch", `{"configName":"default","events":[]}`)
	c.want(200, "GET", "/api/v1/slots/e1", "")
	c.want(404, "GET", "/api/v1/slots/nope", "")
	c.want(200, "POST", "/v1/admin/reload", "")
	c.reloadErr = errors.New("policies.yaml:3:7: policies[0].rate: must be > 0")
	c.want(422, "POST", "/v1/admin/reload", "")
	c.want(405, "GET", "/v1/admin/reload", "")
	c.want(200, "GET", "/admin/rate-limit/verify", "")
	c.want(405, "POST", "/admin/rate-limit/verify", "")
	c.want(200, "POST", "/admin/rate-limit/cache/flush", "")
	c.want(405, "GET", "/admin/rate-limit/cache/flush", "")
	c.want(200, "POST", "/admin/rate-limit/config/default/deactivate", "")
	c.want(404, "POST", "/admin/rate-limit/config/nope/deactivate", "")

	// Outbound.
	rec = c.want(200, "POST", "/v1/outbound/acquire", `{"key":"api.example.com","idempotent":true}`)
	permit := decodeAs[permitAnswer](t, rec.Body.Bytes()).Permit
	c.want(422, "POST", "/v1/outbound/acquire", `{"key":"k","profile":"nope"}`)
	body, err := json.Marshal(map[string]any{"permit": permit, "status": 429,
		"headers": map[string]any{"Retry-After": "2", "X-RateLimit-Remaining": []string{"0"}}, "latencyMs": 12.5})
	require.NoError(t, err)
	c.want(200, "POST", "/v1/outbound/report", string(body))
	c.want(409, "POST", "/v1/outbound/report", string(body))
	c.want(429, "POST", "/v1/outbound/acquire", `{"key":"api.example.com"}`)
	c.want(200, "GET", "/v1/outbound/api.example.com", "")
	c.want(404, "GET", "/v1/outbound/never", "")
	rec = c.want(200, "POST", "/v1/outbound/acquire", `{"key":"Shop-A.myshopify.com","profile":"shopify-rest","method":"GET","path":"/admin/api/2025-10/products.json","cost":1}`)
	permit = decodeAs[permitAnswer](t, rec.Body.Bytes()).Permit
	c.want(200, "POST", "/v1/outbound/report", fmt.Sprintf(`{"permit":%q,"status":200,"headers":{"X-Shopify-Shop-Api-Call-Limit":"1/40"}}`, permit))
	c.want(422, "POST", "/v1/outbound/acquire", `{"key":"k","method":"GET"}`)

	// Provider profiles.
	c.want(200, "GET", "/v1/providers", "")
	c.want(200, "GET", "/v1/providers/github", "")
	c.want(200, "GET", "/v1/providers/shopify-bulk", "")
	c.want(404, "GET", "/v1/providers/nope", "")

	// Every operation answered a success and an error, each validated.
	var missing []string
	for path, item := range c.doc.Paths.Map() {
		for method, op := range item.Operations() {
			codes := c.seen[op.OperationID]
			ok := slices.ContainsFunc(codes, func(s int) bool { return s < 300 })
			// An operation that reads nothing from the request (no
			// parameters, no body) has no 4xx of its own to check: its
			// errors are the 405s checked above, and 5xx.
			bad := slices.ContainsFunc(codes, func(s int) bool { return s >= 400 }) ||
				op.RequestBody == nil && len(op.Parameters) == 0
			if !ok || !bad {
				missing = append(missing, fmt.Sprintf("%s %s (statuses seen: %v)", method, path, codes))
			}
		}
	}
	slices.Sort(missing)
	require.Empty(t, missing, "operations not checked with both a success and an error")
}
