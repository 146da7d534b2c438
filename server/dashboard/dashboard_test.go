package dashboard_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/server"
	"github.com/sluicerl/sluice/server/dashboard"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

// handlerFixture is the dashboard over a server, in process, without a
// browser.
type handlerFixture struct {
	h    http.Handler
	jobs store.JobStore
}

func newHandler(t *testing.T, authorize func(*http.Request, bool) error, withJobs bool) *handlerFixture {
	t.Helper()
	lim, err := limiter.New(limiter.Config{Policies: []limiter.Policy{
		{Name: "api", Rate: 10, Period: time.Hour, Burst: 10},
		{Name: "export", Algorithm: store.Concurrency, Permits: 1, TTL: time.Minute},
	}})
	require.NoError(t, err)
	rec := dashboard.NewRecorder(nil)
	cfg := server.Config{Limiter: lim, Observer: rec}
	dcfg := dashboard.Config{Limiter: lim, Recorder: rec, Authorize: authorize}
	var jobs store.JobStore
	if withJobs {
		jobs = memstore.NewJobStore(memstore.JobConfig{})
		cfg.Jobs, dcfg.Jobs = jobs, jobs
	}
	srv, err := server.New(cfg)
	require.NoError(t, err)
	dcfg.API = srv.Handler()
	d, err := dashboard.New(dcfg)
	require.NoError(t, err)
	return &handlerFixture{h: dashboard.Mount(srv.Handler(), d), jobs: jobs}
}

func (f *handlerFixture) do(t *testing.T, method, target string, form url.Values, header map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	var body *strings.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	} else {
		body = strings.NewReader("")
	}
	req := httptest.NewRequest(method, target, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, req)
	return w
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	lim, err := limiter.New(limiter.Config{Policies: []limiter.Policy{{Name: "p", Rate: 1, Period: time.Second}}})
	require.NoError(t, err)
	_, err = dashboard.New(dashboard.Config{Recorder: dashboard.NewRecorder(nil)})
	require.ErrorContains(t, err, "Limiter is required")
	_, err = dashboard.New(dashboard.Config{Limiter: lim})
	require.ErrorContains(t, err, "Recorder is required")
	_, err = dashboard.New(dashboard.Config{Limiter: lim, Recorder: dashboard.NewRecorder(nil), Refresh: -time.Second})
	require.ErrorContains(t, err, "Refresh")
}

// Every page renders, with and without sources, as a page and as the
// fragment the script refreshes; the API stays where it was.
func TestPagesRender(t *testing.T) {
	t.Parallel()
	for _, withJobs := range []bool{false, true} {
		f := newHandler(t, nil, withJobs)
		for _, p := range []string{"", "policies", "outbound", "breakers", "leases", "slots", "jobs"} {
			for _, q := range []string{"", "?fragment=1"} {
				w := f.do(t, "GET", "/ui/"+p+q, nil, nil)
				require.Equal(t, http.StatusOK, w.Code, "/ui/%s%s: %s", p, q, w.Body)
				require.Contains(t, w.Header().Get("Content-Security-Policy"), "script-src 'self'")
				if q == "" {
					require.Contains(t, w.Body.String(), `<html lang="en">`)
				} else {
					require.NotContains(t, w.Body.String(), "<html")
				}
			}
		}
		require.Equal(t, http.StatusOK, f.do(t, "GET", "/ui/static/app.js", nil, nil).Code)
		require.Equal(t, http.StatusNotFound, f.do(t, "GET", "/ui/nope", nil, nil).Code)
		require.Equal(t, http.StatusOK, f.do(t, "GET", "/healthz", nil, nil).Code, "the API is still mounted")
		w := f.do(t, "GET", "/ui", nil, nil)
		require.Equal(t, http.StatusTemporaryRedirect, w.Code)
		require.Equal(t, "/ui/", w.Header().Get("Location"))
	}
}

// Bad input on a page is named on the page, never a panic or a 5xx.
func TestBadInputIsNamed(t *testing.T) {
	t.Parallel()
	f := newHandler(t, nil, true)
	cases := []struct{ target, want string }{
		{"/ui/policies?policy=api&key=" + url.QueryEscape("a\x00b"), "control"},
		{"/ui/policies?policy=nope&key=k", "is not one of this server&#39;s rate policies"},
		{"/ui/policies?policy=api&key=", "type a key"},
		{"/ui/policies?policy=api&key=" + strings.Repeat("k", 600), "is 600 bytes, longer than 512"},
		{"/ui/leases?policy=api&key=k", "is not one of this server&#39;s concurrency policies"},
		{"/ui/leases?policy=export&key=" + url.QueryEscape("\x01"), "control"},
	}
	for _, c := range cases {
		w := f.do(t, "GET", c.target, nil, nil)
		require.Equal(t, http.StatusOK, w.Code, c.target)
		require.Contains(t, w.Body.String(), c.want, c.target)
	}
}

func TestActionsAskAuthorizeAndConfirmation(t *testing.T) {
	t.Parallel()
	var asked []bool
	deny := errors.New("the admin scope is required")
	f := newHandler(t, func(r *http.Request, action bool) error {
		asked = append(asked, action)
		if action && r.Header.Get("Authorization") != "Bearer admin" {
			return deny
		}
		return nil
	}, true)
	ctx := t.Context()
	_, _, err := f.jobs.UpsertConnector(ctx, store.Connector{ID: "binance"})
	require.NoError(t, err)
	pause := "/ui/actions/connectors/binance/pause"
	json := map[string]string{"Accept": "application/json", "Authorization": "Bearer admin"}

	// Pages ask with action false.
	require.Equal(t, http.StatusOK, f.do(t, "GET", "/ui/jobs", nil, nil).Code)
	require.Equal(t, []bool{false}, asked)
	// Without the admin scope: 403, nothing paused.
	w := f.do(t, "POST", pause, url.Values{"confirm": {"yes"}}, map[string]string{"Accept": "application/json"})
	require.Equal(t, http.StatusForbidden, w.Code)
	require.Contains(t, w.Body.String(), "the admin scope is required")
	// Cross-site: refused.
	w = f.do(t, "POST", pause, url.Values{"confirm": {"yes"}}, map[string]string{"Accept": "application/json",
		"Authorization": "Bearer admin", "Sec-Fetch-Site": "cross-site"})
	require.Equal(t, http.StatusForbidden, w.Code)
	w = f.do(t, "POST", pause, url.Values{"confirm": {"yes"}}, map[string]string{"Accept": "application/json",
		"Authorization": "Bearer admin", "Origin": "https://evil.example"})
	require.Equal(t, http.StatusForbidden, w.Code)
	// Unconfirmed: a confirmation page, nothing paused.
	w = f.do(t, "POST", pause, url.Values{}, map[string]string{"Authorization": "Bearer admin"})
	require.Equal(t, http.StatusOK, w.Code)
	require.Contains(t, w.Body.String(), "Do you want to pause connector binance?")
	c, err := f.jobs.GetConnector(ctx, "binance")
	require.NoError(t, err)
	require.Equal(t, store.ConnectorActive, c.Status)
	// Confirmed: paused, through the API.
	w = f.do(t, "POST", pause, url.Values{"confirm": {"yes"}}, json)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.JSONEq(t, `{"ok":true,"message":"connector binance paused"}`, w.Body.String())
	c, err = f.jobs.GetConnector(ctx, "binance")
	require.NoError(t, err)
	require.Equal(t, store.ConnectorPaused, c.Status)
	// A plain form is redirected back.
	w = f.do(t, "POST", "/ui/actions/connectors/binance/resume", url.Values{"confirm": {"yes"}}, map[string]string{"Authorization": "Bearer admin"})
	require.Equal(t, http.StatusSeeOther, w.Code)
	require.Equal(t, "/ui/jobs", w.Header().Get("Location"))
	// The API's refusal is passed on, a 4xx with its words.
	w = f.do(t, "POST", "/ui/actions/connectors/nope/pause", url.Values{"confirm": {"yes"}}, json)
	require.Equal(t, http.StatusNotFound, w.Code)
	require.Contains(t, w.Body.String(), "the API refused")
	w = f.do(t, "POST", "/ui/actions/connectors/binance/explode", url.Values{"confirm": {"yes"}}, json)
	require.Equal(t, http.StatusNotFound, w.Code)
	// Lease release: bad token, and a lease no longer held.
	w = f.do(t, "POST", "/ui/actions/leases/release", url.Values{"confirm": {"yes"}, "policy": {"export"}, "key": {"k"},
		"holder": {"00"}, "token": {"x"}}, json)
	require.Equal(t, http.StatusBadRequest, w.Code)
	require.Contains(t, w.Body.String(), "token must be a whole number")
	w = f.do(t, "POST", "/ui/actions/leases/release", url.Values{"confirm": {"yes"}, "policy": {"export"}, "key": {"k"},
		"holder": {"00"}, "token": {"1"}}, json)
	require.Equal(t, http.StatusNotFound, w.Code)
	require.Contains(t, w.Body.String(), "no longer held")
	// No slot scheduler: no flush.
	w = f.do(t, "POST", "/ui/actions/slots/flush", url.Values{"confirm": {"yes"}}, json)
	require.Equal(t, http.StatusNotFound, w.Code)
	require.Contains(t, asked, true)
}
