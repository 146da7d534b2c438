package bench

import (
	"net/http"
	"net/http/httptest"

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
