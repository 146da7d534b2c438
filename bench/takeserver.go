package bench

import (
	"net/http"
	"net/http/httptest"
	"strconv"

	"github.com/sluicerl/sluice/auth"
	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/server"
	"github.com/sluicerl/sluice/server/dashboard"
)

// TakeHandler returns Sluice's HTTP API over lim, as `sluice serve` mounts
// it: server.New with every other setting at its default.
func TakeHandler(lim *limiter.Limiter) (http.Handler, error) {
	s, err := server.New(server.Config{Limiter: lim})
	if err != nil {
		return nil, err
	}
	return s.Handler(), nil
}

// AuthTokens is the size of the token set TakeHandlerAuth configures: a
// small deployment's, each request's token compared with every one.
const AuthTokens = 10

// TakeHandlerAuth is TakeHandler with bearer-token auth on, as `sluice
// serve --tokens` runs it: a set of AuthTokens tokens with scope take, of
// which it returns one to send.
func TakeHandlerAuth(lim *limiter.Limiter) (http.Handler, string, error) {
	specs := make([]auth.Spec, AuthTokens)
	var token string
	for i := range specs {
		token = auth.NewToken()
		specs[i] = auth.Spec{Name: "worker-" + strconv.Itoa(i), Scopes: auth.Take, SHA256: auth.Hash(token)}
	}
	ts, err := auth.New(specs)
	if err != nil {
		return nil, "", err
	}
	s, err := server.New(server.Config{Limiter: lim, Auth: auth.NewKeyring(ts)})
	if err != nil {
		return nil, "", err
	}
	return s.Handler(), token, nil
}

// TakeHandlerWithDashboard returns TakeHandler's API as `sluice serve`
// mounts it with the dashboard: the server feeds a dashboard.Recorder on
// every decision, and /ui/ serves the dashboard. The returned refresh
// renders the overview's live part in process, as an open page does on
// every refresh.
func TakeHandlerWithDashboard(lim *limiter.Limiter) (h http.Handler, refresh func() int, err error) {
	rec := dashboard.NewRecorder(nil)
	s, err := server.New(server.Config{Limiter: lim, Observer: rec})
	if err != nil {
		return nil, nil, err
	}
	d, err := dashboard.New(dashboard.Config{Limiter: lim, Recorder: rec, API: s.Handler(), StoreName: "memory"})
	if err != nil {
		return nil, nil, err
	}
	h = dashboard.Mount(s.Handler(), d)
	refresh = func() int {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, dashboard.Prefix+"?fragment=1", nil))
		return w.Code
	}
	return h, refresh, nil
}
