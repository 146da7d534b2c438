package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/server"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

func TestReloadSwapsPolicies(t *testing.T) {
	t.Parallel()
	b := setup(t, server.Config{})
	st := memstore.New(memstore.Config{Clock: b.clock})
	lim, err := limiter.New(limiter.Config{Store: st, Clock: b.clock, Policies: leasePolicies})
	require.NoError(t, err)
	srv, err := server.New(server.Config{Limiter: lim})
	require.NoError(t, err)
	b.srv, b.h = srv, srv.Handler()

	rec := b.do(t, "POST", "/v1/leases", "application/json", `{"policy":"jobs","key":"k"}`)
	require.Equal(t, http.StatusCreated, rec.Code)
	var l struct{ ID string }
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &l))

	// The new config drops "strict" and "jobs", changes "api", adds "fresh".
	next, err := limiter.New(limiter.Config{Store: st, Clock: b.clock, Policies: []limiter.Policy{
		{Name: "api", Rate: 20, Period: time.Second, Burst: 20},
		{Name: "fresh", Rate: 1, Period: time.Second},
		{Name: "bulk", Algorithm: store.Concurrency, Permits: 2, TTL: 30 * time.Second},
	}})
	require.NoError(t, err)
	require.NoError(t, srv.Reload(next))

	rec = b.take(t, `{"policy":"api","key":"k"}`)
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, `"api";q=20;w=1`, rec.Header().Get("RateLimit-Policy"))
	require.Equal(t, http.StatusOK, b.take(t, `{"policy":"fresh","key":"k"}`).Code)

	p := requireProblem(t, b.take(t, `{"policy":"strict","key":"k"}`), http.StatusNotFound, server.TypePolicyRemoved)
	require.Contains(t, p.Detail, `names policy "strict", which a configuration reload removed`)
	requireProblem(t, b.take(t, `{"policy":"never","key":"k"}`), http.StatusUnprocessableEntity, server.TypeUnknownPolicy)
	requireProblem(t, b.do(t, "POST", "/v1/leases", "application/json", `{"policy":"jobs","key":"k"}`), http.StatusNotFound, server.TypePolicyRemoved)
	p = requireProblem(t, b.do(t, "DELETE", "/v1/leases/"+l.ID, "", ""), http.StatusNotFound, server.TypePolicyRemoved)
	require.Contains(t, p.Detail, `policy "jobs" was removed by a configuration reload`)
	require.Contains(t, b.metrics(t), `sluice_decisions_total{policy="fresh",result="allowed"} 1`)

	// Added back, it answers again.
	again, err := limiter.New(limiter.Config{Store: st, Clock: b.clock, Policies: leasePolicies})
	require.NoError(t, err)
	require.NoError(t, srv.Reload(again))
	require.Equal(t, http.StatusOK, b.take(t, `{"policy":"strict","key":"k"}`).Code)
}

func TestReloadEndpoint(t *testing.T) {
	t.Parallel()
	b := setup(t, server.Config{})
	require.Equal(t, http.StatusNotImplemented, b.do(t, "POST", "/v1/admin/reload", "", "").Code)

	var srv *server.Server
	var fail error
	st := memstore.New(memstore.Config{Clock: b.clock})
	lim, err := limiter.New(limiter.Config{Store: st, Clock: b.clock, Policies: testPolicies})
	require.NoError(t, err)
	srv, err = server.New(server.Config{Limiter: lim, Reload: func(context.Context) error {
		if fail != nil {
			return fail
		}
		next, err := limiter.New(limiter.Config{Store: st, Clock: b.clock, Policies: testPolicies[:1]})
		if err != nil {
			return err
		}
		return srv.Reload(next)
	}})
	require.NoError(t, err)
	h := srv.Handler()
	b.h = h

	fail = limiter.ConfigErrors{{File: "p.yaml", Line: 3, Column: 5, Path: "policies.api.rate", Msg: "want a positive integer"}}
	p := requireProblem(t, b.do(t, "POST", "/v1/admin/reload", "", ""), http.StatusUnprocessableEntity, server.TypeInvalidConfig)
	require.Contains(t, p.Detail, "refused whole and the old one stays in force")
	require.Len(t, p.Errors, 1)
	require.Contains(t, p.Errors[0].Detail, "p.yaml:3:5")
	require.Equal(t, http.StatusOK, b.take(t, `{"policy":"strict","key":"k"}`).Code, "the old config stays")

	fail = errors.New("open p.yaml: permission denied")
	requireProblem(t, b.do(t, "POST", "/v1/admin/reload", "", ""), http.StatusUnprocessableEntity, server.TypeInvalidConfig)

	fail = nil
	rec := b.do(t, "POST", "/v1/admin/reload", "", "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.JSONEq(t, `{"policies":[{"name":"api","algorithm":"gcra","rate":10,"periodMs":1000,"burst":10,"shadow":false,"description":"general API"}]}`, rec.Body.String())
	requireProblem(t, b.take(t, `{"policy":"strict","key":"k"}`), http.StatusNotFound, server.TypePolicyRemoved)
}

// TestReloadNeverHalf: while configs A (both policies burst 10) and B
// (both burst 20) are swapped in a loop, every all-or-nothing take sees
// one config whole: its two items' limits and its RateLimit-Policy
// header agree.
func TestReloadNeverHalf(t *testing.T) {
	t.Parallel()
	st := memstore.New(memstore.Config{})
	cfg := func(n int64) *limiter.Limiter {
		lim, err := limiter.New(limiter.Config{Store: st, Policies: []limiter.Policy{
			{Name: "a", Rate: n, Period: time.Second, Burst: n},
			{Name: "b", Rate: n, Period: time.Second, Burst: n},
		}})
		require.NoError(t, err)
		return lim
	}
	confA, confB := cfg(10), cfg(20)
	srv, err := server.New(server.Config{Limiter: confA})
	require.NoError(t, err)
	b := &bundle{srv: srv, h: srv.Handler()}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			next := confA
			if i%2 == 0 {
				next = confB
			}
			if err := srv.Reload(next); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for i := 0; i < 400; i++ {
		rec := b.take(t, `{"items":[{"policy":"a","key":"k","cost":0},{"policy":"b","key":"k","cost":0}]}`)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		var out struct{ Items []struct{ Limit int64 } }
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out))
		require.Equal(t, out.Items[0].Limit, out.Items[1].Limit, "one config per request")
		n := out.Items[0].Limit
		require.Contains(t, []string{`"a";q=10;w=1, "b";q=10;w=1`, `"a";q=20;w=1, "b";q=20;w=1`}, rec.Header().Get("RateLimit-Policy"))
		require.Contains(t, rec.Header().Get("RateLimit-Policy"), `q=`+map[int64]string{10: "10", 20: "20"}[n])
	}
	close(stop)
	wg.Wait()
}
