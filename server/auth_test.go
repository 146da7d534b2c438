package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/auth"
	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/server"
	"github.com/sluicerl/sluice/slot"
	"github.com/sluicerl/sluice/store/memstore"
	"github.com/sluicerl/sluice/store/sqlitestore"
)

// authBundle is a server with auth over leasePolicies, slots and jobs, and
// one token per role.
type authBundle struct {
	*bundle
	keys                                  *auth.Keyring
	taker, leaser, leaser2, reader, admin string
}

func authSetup(t *testing.T, cfg server.Config) *authBundle {
	t.Helper()
	a := &authBundle{taker: auth.NewToken(), leaser: auth.NewToken(), leaser2: auth.NewToken(),
		reader: auth.NewToken(), admin: auth.NewToken()}
	ts, err := auth.ParseFile("tokens", []byte(strings.Join([]string{
		auth.Line("taker", auth.Take, a.taker),
		auth.Line("leaser", auth.Lease, a.leaser),
		auth.Line("leaser2", auth.Lease, a.leaser2),
		auth.Line("reader", auth.Read, a.reader),
		auth.Line("admin", auth.All, a.admin),
	}, "\n")))
	require.NoError(t, err)
	a.keys = auth.NewKeyring(ts)
	cfg.Auth = a.keys
	b := setup(t, server.Config{})
	if cfg.Limiter == nil {
		lim, err := limiter.New(limiter.Config{Store: memstore.New(memstore.Config{Clock: b.clock}), Clock: b.clock, Policies: leasePolicies})
		require.NoError(t, err)
		cfg.Limiter = lim
	}
	if cfg.Clock == nil {
		cfg.Clock = b.clock
	}
	srv, err := server.New(cfg)
	require.NoError(t, err)
	b.srv, b.h = srv, srv.Handler()
	a.bundle = b
	return a
}

func (a *authBundle) as(t *testing.T, token, method, path, body string, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	a.h.ServeHTTP(rec, req)
	return rec
}

// TestAuthEveryRouteNeedsAToken walks the route table, as the 404 lists
// it, with slots and jobs on: every route but /healthz and /metrics
// answers 401 without a token and with an unknown one.
func TestAuthEveryRouteNeedsAToken(t *testing.T) {
	t.Parallel()
	st, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "slots.db"), sqlitestore.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	sch, err := slot.New(slot.Config{Store: st})
	require.NoError(t, err)
	a := authSetup(t, server.Config{Slots: sch, Jobs: memstore.NewJobStore(memstore.JobConfig{})})

	rec := a.as(t, "", http.MethodGet, "/no/such/route", "")
	p := requireProblem(t, rec, http.StatusNotFound, "about:blank")
	list := strings.TrimPrefix(p.Detail, "no such endpoint; the endpoints are ")
	wild := regexp.MustCompile(`\{[^}]*\}`)
	n := 0
	for _, ep := range strings.Split(list, ", ") {
		method, path, ok := strings.Cut(ep, " ")
		require.True(t, ok, ep)
		path = wild.ReplaceAllString(path, "x")
		if path == "/healthz" || path == "/metrics" {
			require.Equal(t, http.StatusOK, a.as(t, "", method, path, "").Code, "%s is open", ep)
			continue
		}
		n++
		rec := a.as(t, "", method, path, "{}")
		requireProblem(t, rec, http.StatusUnauthorized, server.TypeUnauthorized)
		require.Equal(t, `Bearer realm="sluice"`, rec.Header().Get("WWW-Authenticate"), ep)
		rec = a.as(t, auth.NewToken(), method, path, "{}")
		requireProblem(t, rec, http.StatusUnauthorized, server.TypeUnauthorized)
		require.Contains(t, rec.Header().Get("WWW-Authenticate"), `error="invalid_token"`, ep)
	}
	require.Greater(t, n, 25, "the walk covered the slot and job routes")
}

func TestAuthScopes(t *testing.T) {
	t.Parallel()
	a := authSetup(t, server.Config{})
	take := `{"policy":"api","key":"k"}`
	require.Equal(t, http.StatusOK, a.as(t, a.taker, "POST", "/v1/take", take).Code)
	require.Equal(t, http.StatusOK, a.as(t, a.admin, "POST", "/v1/take", take).Code, "* holds take")

	rec := a.as(t, a.reader, "POST", "/v1/take", take)
	p := requireProblem(t, rec, http.StatusForbidden, server.TypeForbidden)
	require.Contains(t, p.Detail, `token "reader" has scopes "read"; this endpoint needs "take"`)
	require.Equal(t, `Bearer realm="sluice", error="insufficient_scope", scope="take"`, rec.Header().Get("WWW-Authenticate"))

	require.Equal(t, http.StatusOK, a.as(t, a.reader, "GET", "/v1/policies", "").Code)
	requireProblem(t, a.as(t, a.taker, "GET", "/v1/policies", ""), http.StatusForbidden, server.TypeForbidden)
	requireProblem(t, a.as(t, a.taker, "POST", "/v1/admin/reload", ""), http.StatusForbidden, server.TypeForbidden)
	requireProblem(t, a.as(t, a.leaser, "POST", "/v1/take", take), http.StatusForbidden, server.TypeForbidden)

	// Malformed headers are 401 with invalid_token, never a 5xx.
	for _, h := range []string{"Basic Zm9vOmJhcg==", "Bearer", "Bearer  a b", "sluice_x"} {
		req := httptest.NewRequest("POST", "/v1/take", strings.NewReader(take))
		req.Header.Set("Authorization", h)
		rec := httptest.NewRecorder()
		a.h.ServeHTTP(rec, req)
		requireProblem(t, rec, http.StatusUnauthorized, server.TypeUnauthorized)
	}

	// A token revoked by a reload of the keyring is refused at once.
	ts, err := auth.ParseFile("tokens", []byte(auth.Line("admin", auth.All, a.admin)))
	require.NoError(t, err)
	a.keys.Store(ts)
	requireProblem(t, a.as(t, a.taker, "POST", "/v1/take", take), http.StatusUnauthorized, server.TypeUnauthorized)
}

// TestAuthLeaseOnlyByHolder: a lease acquired with one token can be
// renewed and released only with that token, even by another token with
// the lease scope that knows the lease id (holder and fencing token).
func TestAuthLeaseOnlyByHolder(t *testing.T) {
	t.Parallel()
	a := authSetup(t, server.Config{})
	rec := a.as(t, a.leaser, "POST", "/v1/leases", `{"policy":"jobs","key":"k","holder":"w1"}`)
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	var l struct{ ID, Holder string }
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &l))
	require.Equal(t, "leaser/w1", l.Holder, "the holder is bound to the token's name")

	// Another token, same chosen holder: a different holder, so the one
	// permit is taken.
	rec = a.as(t, a.leaser2, "POST", "/v1/leases", `{"policy":"jobs","key":"k","holder":"w1"}`)
	requireProblem(t, rec, http.StatusConflict, server.TypeLeaseUnavailable)

	for _, op := range []struct{ method, path string }{{"POST", "/v1/leases/" + l.ID + "/renew"}, {"DELETE", "/v1/leases/" + l.ID}} {
		p := requireProblem(t, a.as(t, a.leaser2, op.method, op.path, ""), http.StatusForbidden, server.TypeForbidden)
		require.Contains(t, p.Detail, "acquired with another token")
	}
	// Still held: the other token's release freed nothing.
	requireProblem(t, a.as(t, a.leaser2, "POST", "/v1/leases", `{"policy":"jobs","key":"k"}`), http.StatusConflict, server.TypeLeaseUnavailable)
	require.Equal(t, http.StatusOK, a.as(t, a.leaser, "POST", "/v1/leases/"+l.ID+"/renew", "").Code)
	require.Equal(t, http.StatusNoContent, a.as(t, a.leaser, "DELETE", "/v1/leases/"+l.ID, "").Code)
	require.Equal(t, http.StatusCreated, a.as(t, a.leaser2, "POST", "/v1/leases", `{"policy":"jobs","key":"k"}`).Code)

	// A holder that no longer fits once bound is a 422 naming it.
	rec = a.as(t, a.leaser, "POST", "/v1/leases", `{"policy":"bulk","key":"k","holder":"`+strings.Repeat("h", 250)+`"}`)
	p := requireProblem(t, rec, http.StatusUnprocessableEntity, server.TypeInvalidRequest)
	require.Contains(t, p.Detail, `with the token name "leaser" before it`)
}

// TestNewRefusesRouteWithoutScope is in routes_internal_test.go.
