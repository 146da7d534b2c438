package dashboard

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/sluicerl/sluice/clock"
	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/outbound"
	"github.com/sluicerl/sluice/slot"
	"github.com/sluicerl/sluice/store"
)

// Prefix is the path the dashboard is served under.
const Prefix = "/ui/"

// DefaultRefresh is how often an open page refreshes its live part.
const DefaultRefresh = 5 * time.Second

// OutboundSource gives the adaptive outbound state the outbound page shows:
// *outbound.Client has it. A server holding several clients can merge
// their snapshots.
type OutboundSource interface {
	Snapshot(max int) outbound.Snapshot
}

// Config configures a Dashboard. Zero fields take the documented defaults;
// every optional source left nil shows its page's empty state.
type Config struct {
	// Limiter is the server's limiter: policies, key look-ups (a take of
	// cost 0, which charges nothing) and lease holders. Required.
	Limiter *limiter.Limiter
	// Current, when set, returns the limiter in force now, asked on every
	// page so that the pages follow a configuration reload (wire
	// server.Server.Limiter here). Nil: Limiter, always.
	Current func() *limiter.Limiter
	// Recorder is the server's observer (server.Config.Observer): the
	// decisions, lease keys and slot configs the server handled. Required.
	Recorder *Recorder
	// API is the server's own handler (server.Server.Handler): pausing and
	// resuming connectors and flushing the slot config cache go through
	// it, as any API client's would, with the page request's
	// Authorization header. Nil leaves those actions out.
	API http.Handler
	// Jobs, Slots and Outbound are the sources of the jobs, slots and
	// outbound pages (and of breaker transitions: Jobs). Nil shows the
	// page's empty state.
	Jobs     store.JobStore
	Slots    *slot.Scheduler
	Outbound OutboundSource
	// Authorize, when set, is asked before every page and JSON answer
	// (action false) and before every state-changing action (action
	// true; these want the admin scope where auth exists). A non-nil
	// error is answered 403 with its text. Nil allows everything.
	Authorize func(r *http.Request, action bool) error
	// StoreName names the rate store on the overview ("memory", "redis",
	// ...). Empty shows "unnamed".
	StoreName string
	// Clock times the outbound samples and page times. Nil means the real
	// clock.
	Clock clock.Clock
	// Refresh is how often open pages refresh. Zero means
	// DefaultRefresh.
	Refresh time.Duration
	// Logger receives errors of the sources. Nil discards them.
	Logger *slog.Logger
}

// Dashboard serves the pages under Prefix. It is safe for concurrent use.
// Build it with New; the zero value is not usable.
type Dashboard struct {
	cfg     Config
	clk     clock.Clock
	log     *slog.Logger
	pages   map[string]*template.Template
	handler http.Handler

	mu      sync.Mutex // guards samples, sampled
	samples map[string]*sampleRing
	sampled time.Time
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// page is one page of the dashboard.
type page struct {
	path, file, title string
}

var pages = []page{
	{"", "overview.html", "Overview"},
	{"policies", "policies.html", "Policies and keys"},
	{"outbound", "outbound.html", "Adaptive outbound"},
	{"breakers", "breakers.html", "Breakers"},
	{"leases", "leases.html", "Leases"},
	{"slots", "slots.html", "Slots"},
	{"jobs", "jobs.html", "Jobs"},
}

// New returns a Dashboard for cfg.
func New(cfg Config) (*Dashboard, error) {
	if cfg.Limiter == nil {
		return nil, errors.New("dashboard: config: Limiter is required")
	}
	if cfg.Recorder == nil {
		return nil, errors.New("dashboard: config: Recorder is required (the one given to server.Config.Observer)")
	}
	if cfg.Refresh < 0 {
		return nil, fmt.Errorf("dashboard: config: Refresh must be >= 0, got %s", cfg.Refresh)
	}
	if cfg.Refresh == 0 {
		cfg.Refresh = DefaultRefresh
	}
	if cfg.StoreName == "" {
		cfg.StoreName = "unnamed"
	}
	d := &Dashboard{cfg: cfg, clk: clock.Or(cfg.Clock), log: cfg.Logger, pages: map[string]*template.Template{},
		samples: map[string]*sampleRing{}}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	for _, p := range pages {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+p.file)
		if err != nil {
			return nil, fmt.Errorf("dashboard: templates: %w", err)
		}
		d.pages[p.path] = t
	}
	d.handler = d.routes()
	return d, nil
}

// lim is the limiter in force now (Config.Current), else Config.Limiter.
func (d *Dashboard) lim() *limiter.Limiter {
	if d.cfg.Current != nil {
		if l := d.cfg.Current(); l != nil {
			return l
		}
	}
	return d.cfg.Limiter
}

// Handler serves the dashboard; mount it at Prefix.
func (d *Dashboard) Handler() http.Handler { return d.handler }

// Run samples the outbound source every interval (zero: 10s) until ctx
// ends, so that the learned-rate charts have history while nobody looks.
// Pages sample too, at most once a second.
func (d *Dashboard) Run(ctx context.Context, interval time.Duration) {
	if d.cfg.Outbound == nil {
		return
	}
	if interval <= 0 {
		interval = 10 * time.Second
	}
	for {
		d.sampleOutbound(true)
		t := d.clk.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

func (d *Dashboard) routes() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	fileServer := http.StripPrefix(Prefix+"static/", http.FileServerFS(static))
	mux.Handle("GET "+Prefix+"static/", d.guard(false, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		fileServer.ServeHTTP(w, r)
	}))
	for _, p := range pages {
		pattern := "GET " + Prefix + p.path
		if p.path == "" {
			pattern += "{$}"
		}
		mux.Handle(pattern, d.guard(false, d.servePage(p)))
	}
	mux.Handle("POST "+Prefix+"actions/connectors/{id}/{op}", d.guard(true, d.connectorAction))
	mux.Handle("POST "+Prefix+"actions/leases/release", d.guard(true, d.releaseLease))
	mux.Handle("POST "+Prefix+"actions/slots/flush", d.guard(true, d.flushSlots))
	mux.Handle(Prefix, d.guard(false, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no such dashboard page; the pages are "+pageList(), http.StatusNotFound)
	}))
	return mux
}

func pageList() string {
	var ps []string
	for _, p := range pages {
		ps = append(ps, Prefix+p.path)
	}
	return strings.Join(ps, ", ")
}

// guard sets the security headers and asks Authorize.
func (d *Dashboard) guard(action bool, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; form-action 'self'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "same-origin")
		if d.cfg.Authorize != nil {
			if err := d.cfg.Authorize(r, action); err != nil {
				http.Error(w, "dashboard: not allowed: "+err.Error(), http.StatusForbidden)
				return
			}
		}
		h(w, r)
	})
}

// view is what every page template gets.
type view struct {
	Title    string
	Path     string
	Pages    []page
	Refresh  int64 // ms
	Now      time.Time
	Data     any
	Query    map[string]string
	Actions  bool // state-changing actions are offered
	Fragment bool
}

// Path etc. for templates.
func (p page) Path() string  { return Prefix + p.path }
func (p page) Title() string { return p.title }

func (d *Dashboard) servePage(p page) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		q := r.URL.Query()
		data, err := d.gather(ctx, p.path, q)
		if err != nil {
			d.log.Error("dashboard: gathering page", "page", p.title, "err", err)
		}
		v := view{Title: p.title, Path: Prefix + p.path, Pages: pages, Refresh: d.cfg.Refresh.Milliseconds(),
			Now: d.clk.Now().UTC(), Data: data, Query: map[string]string{}, Actions: d.cfg.API != nil,
			Fragment: q.Get("fragment") != ""}
		for k := range q {
			v.Query[k] = q.Get(k)
		}
		name := "layout"
		if v.Fragment {
			name = "live"
		}
		var b strings.Builder
		if err := d.pages[p.path].ExecuteTemplate(&b, name, v); err != nil {
			d.log.Error("dashboard: rendering page", "page", p.title, "err", err)
			http.Error(w, "dashboard: could not render the page; it has been logged", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write([]byte(b.String()))
	}
}

// Mount returns api with the dashboard in front of it at Prefix: /ui/...
// goes to the dashboard (and net/http redirects /ui there), every other path to
// api.
func Mount(api http.Handler, d *Dashboard) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(Prefix, d.Handler())
	mux.Handle("/", api)
	return mux
}
