package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/sluicerl/sluice/auth"
	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/outbound"
	"github.com/sluicerl/sluice/provider"
	"github.com/sluicerl/sluice/server"
	"github.com/sluicerl/sluice/server/dashboard"
	"github.com/sluicerl/sluice/slot"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/guard"
	"github.com/sluicerl/sluice/store/memstore"
)

// DefaultAddr is where serve listens without --addr or SLUICE_ADDR.
const DefaultAddr = "127.0.0.1:8080"

// DefaultPolicies are what serve enforces without --config or
// SLUICE_CONFIG: one GCRA policy named "default", 100 units per second
// with bursts of 100.
func DefaultPolicies() []limiter.Policy {
	return []limiter.Policy{{
		Name:        "default",
		Rate:        100,
		Period:      time.Second,
		Burst:       100,
		Description: "built-in default: 100 per second, bursts of 100",
	}}
}

type serveFlags struct {
	addr            string
	config          string
	state           string
	db              string
	storeTimeout    time.Duration
	logLevel        string
	logFormat       string
	shutdownTimeout time.Duration
	cleanupInterval time.Duration
	memoryMaxBytes  int64
	maxBody         byteSize
	rls             rlsFlags // rls.go
	maxHeader       byteSize
	tokens          string   // reload.go
	profiles        []string // provider profile files (reload.go)
	insecureNoAuth  bool
	watch           bool
}

// byteSize is a flag holding a count of bytes: a whole number with an
// optional unit, B, KiB, MiB, GiB (powers of 1024) or KB, MB, GB (of 1000):
// 4194304, 4MiB, 512KiB.
type byteSize int64

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }
func (b *byteSize) Type() string   { return "bytes" }

func (b *byteSize) Set(s string) error {
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}
	num, mult := strings.TrimSpace(s), int64(1)
	for _, u := range units {
		if n, ok := strings.CutSuffix(num, u.suffix); ok {
			num, mult = strings.TrimSpace(n), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 1 || n > (1<<40)/mult {
		return fmt.Errorf("want a positive size in bytes such as 4194304 or 4MiB (units B, KiB, MiB, GiB, KB, MB, GB)")
	}
	*b = byteSize(n * mult)
	return nil
}

func newServeCmd(opts *Options) *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the HTTP API",
		Long: `Run the HTTP API: POST /v1/take, POST|GET /v1/leases, POST /v1/leases/{id}/renew,
DELETE /v1/leases/{id}, GET /v1/policies, GET /healthz, GET /metrics, the
adaptive calls of workers in any language (POST /v1/outbound/acquire,
/v1/outbound/report, GET /v1/outbound/{key}), GET /openapi.json (the OpenAPI
document of every endpoint), and the
slot API (POST /api/v1/slots, /api/v1/slots/batch, GET /api/v1/slots/{eventId},
/admin/rate-limit/config...) over the records database, and the dashboard
at /ui/ (policies, keys, leases, slots, jobs; live).

Without --config, serve enforces one built-in policy, "default": GCRA,
100 per second, bursts of 100. Rate state lives in memory unless --state
names a shared store (Redis, PostgreSQL) or a SQLite file. With a shared
store each call's deadline follows the store's latency (4 x its p99),
from --store-timeout (default 1s) up to 10 times it; a call that times out
is denied, and the store is held down, with each policy's
on_store_outage mode deciding, only on connection errors or on timeouts
sustained across a window (3 within 5s, at least half the calls). Outage
answers carry a Sluice-Outage header and an "outage" body field. Records (used by slots and jobs) go
to --db, by default the SQLite file sluice.db in the working directory;
pending migrations are applied at start. It stops gracefully on SIGINT or
SIGTERM: it stops accepting, lets in-flight requests finish (at most
--shutdown-timeout), then exits.

With --grpc-addr and --rls-config, serve also answers Envoy's rate limit
service (gRPC envoy.service.ratelimit.v3.RateLimitService, with health and
reflection) from envoyproxy/ratelimit configuration files; their rules are
policies named rls:DOMAIN.KEY_VALUE... beside --config's, sharing state with
the HTTP API.

Auth: with --tokens FILE or an "auth:" section in --config, every route
but /healthz and /metrics needs "Authorization: Bearer <token>" with the
route's scope ('sluice token create' mints one). Without tokens, serve
refuses an address that is not loopback-only unless --insecure-no-auth.

Provider profiles: --profiles FILE (repeatable) overrides or adds to the
built-in profiles, as 'sluice providers --file' does; GET /v1/providers
lists them, and POST /v1/outbound/acquire with "profile" applies one.

Reload: SIGHUP, a change to --config, --tokens or --profiles (unless
--watch=false), or POST /v1/admin/reload (scope admin) rereads them all. A configuration
that fails validation is refused whole and the old one stays in force; a
reload cannot turn auth on or off, nor change on_store_outage on a shared
--state (restart for those).
Each flag can also be set by its environment variable; a flag given on the
command line wins.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			source, err := applyEnv(cmd.Flags(), opts.Getenv, []envFlag{
				{"addr", "SLUICE_ADDR"},
				{"config", "SLUICE_CONFIG"},
				{"state", "SLUICE_STATE"},
				{"db", "SLUICE_DB"},
				{"store-timeout", "SLUICE_STORE_TIMEOUT"},
				{"log-level", "SLUICE_LOG_LEVEL"},
				{"log-format", "SLUICE_LOG_FORMAT"},
				{"shutdown-timeout", "SLUICE_SHUTDOWN_TIMEOUT"},
				{"cleanup-interval", "SLUICE_CLEANUP_INTERVAL"},
				{"max-body", "SLUICE_MAX_BODY"},
				{"memory-max-bytes", "SLUICE_MEMORY_MAX_BYTES"},
				rlsEnv[0], rlsEnv[1], rlsEnv[2],
				{"max-header", "SLUICE_MAX_HEADER"},
				{"tokens", "SLUICE_TOKENS"},
				{"insecure-no-auth", "SLUICE_INSECURE_NO_AUTH"},
				{"watch", "SLUICE_WATCH"},
			})
			if err != nil {
				return err
			}
			return runServe(cmd.Context(), opts, &f, source)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.addr, "addr", DefaultAddr, "`host:port` to listen on (env SLUICE_ADDR); port 0 picks a free port")
	fs.StringVar(&f.config, "config", "", "policy `file` (YAML; env SLUICE_CONFIG); default: one built-in policy")
	fs.StringVar(&f.state, "state", DefaultState,
		"rate state `URL` (env SLUICE_STATE): memory:, sqlite:PATH, redis://HOST:PORT[/DB], redis+cluster://HOST:PORT?addr=HOST:PORT..., postgres://...")
	fs.StringVar(&f.db, "db", DefaultDB,
		"records database `URL` (env SLUICE_DB): sqlite:PATH or postgres://...")
	fs.DurationVar(&f.storeTimeout, "store-timeout", guard.DefaultTimeout,
		"shortest deadline of a call to a shared store (env SLUICE_STORE_TIMEOUT); the deadline follows the store's latency (4 x p99) up to 10 times this; a call past it is denied, and the store is held down (outage modes decide) only on connection errors or timeouts sustained across a window")
	fs.StringVar(&f.logLevel, "log-level", "info", "log `level`: debug, info, warn or error (env SLUICE_LOG_LEVEL)")
	fs.StringVar(&f.logFormat, "log-format", "text", "log `format`: text or json (env SLUICE_LOG_FORMAT)")
	fs.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 10*time.Second,
		"how long to let in-flight requests finish on shutdown (env SLUICE_SHUTDOWN_TIMEOUT)")
	fs.DurationVar(&f.cleanupInterval, "cleanup-interval", DefaultCleanupInterval,
		"how often to delete stale rate rows and expired leases from a SQLite or PostgreSQL --state; 0 never (env SLUICE_CLEANUP_INTERVAL)")
	f.maxBody = server.DefaultMaxBodyBytes
	fs.Var(&f.maxBody, "max-body", "largest request body the API reads, in bytes or with a unit (4MiB, 512KiB); larger ones get 413 (env SLUICE_MAX_BODY)")
	f.maxHeader = 64 << 10
	fs.Var(&f.maxHeader, "max-header", "largest request header block the server reads (request line and headers), in bytes or with a unit; larger ones get 431 (env SLUICE_MAX_HEADER)")
	fs.StringVar(&f.tokens, "tokens", "", "token `file` (env SLUICE_TOKENS): lines of NAME SCOPES sha256:HEX ('sluice token create' prints one); with it, or an auth section in --config, every route but /healthz and /metrics needs a bearer token")
	fs.BoolVar(&f.insecureNoAuth, "insecure-no-auth", false, "serve without tokens on an address that is not loopback-only (env SLUICE_INSECURE_NO_AUTH); without it serve refuses to")
	fs.StringSliceVar(&f.profiles, "profiles", nil, "provider profile YAML `file` overriding or adding to the built-in profiles ('sluice providers list --file FILE' shows the result; repeatable): GET /v1/providers lists them and the outbound endpoints' \"profile\" field applies them; reloaded with --config")
	fs.BoolVar(&f.watch, "watch", true, "reload --config, --tokens and --profiles when they change (env SLUICE_WATCH); SIGHUP and POST /v1/admin/reload always reload")
	fs.Int64Var(&f.memoryMaxBytes, "memory-max-bytes", memstore.DefaultMaxBytes,
		"with --state memory:, the most `bytes` the keys holding state may take (key length plus 96 each); a new key beyond it is refused with 503, never by forgetting a key that owes (env SLUICE_MEMORY_MAX_BYTES)")
	f.rls.add(fs)
	return cmd
}

func (f *serveFlags) validate(source map[string]string) (slog.Level, error) {
	if err := checkAddr(f.addr); err != nil {
		return 0, usagef("invalid %s %q: %v", source["addr"], f.addr, err)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return 0, usagef("invalid %s %q: want debug, info, warn or error", source["log-level"], f.logLevel)
	}
	if f.logFormat != "text" && f.logFormat != "json" {
		return 0, usagef("invalid %s %q: want text or json", source["log-format"], f.logFormat)
	}
	if _, _, err := parseStoreURL(source["state"], f.state); err != nil {
		return 0, err
	}
	if _, _, err := parseDBURL(source["db"], f.db); err != nil {
		return 0, err
	}
	if f.storeTimeout <= 0 {
		return 0, usagef("invalid %s %s: want a positive duration such as 1s", source["store-timeout"], f.storeTimeout)
	}
	if f.cleanupInterval < 0 {
		return 0, usagef("invalid %s %s: want a duration >= 0 such as 1m (0 turns cleanup off)", source["cleanup-interval"], f.cleanupInterval)
	}
	if f.memoryMaxBytes <= 0 {
		return 0, usagef("invalid %s %d: want a positive number of bytes", source["memory-max-bytes"], f.memoryMaxBytes)
	}
	if err := f.rls.validate(source); err != nil {
		return 0, err
	}
	if f.shutdownTimeout <= 0 {
		return 0, usagef("invalid %s %s: want a positive duration such as 10s", source["shutdown-timeout"], f.shutdownTimeout)
	}
	return level, nil
}

// readableDurations writes durations in logs as Go durations ("1.5s"),
// not the JSON handler's nanosecond integers.
func readableDurations(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}

// checkAddr checks a listen address: host:port with a numeric port (the
// host may be empty, meaning every interface).
func checkAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("want host:port such as %s (%v)", DefaultAddr, strings.TrimPrefix(err.Error(), "address "+addr+": "))
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	return nil
}

func runServe(ctx context.Context, opts *Options, f *serveFlags, source map[string]string) error {
	level, err := f.validate(source)
	if err != nil {
		return err
	}
	hopts := &slog.HandlerOptions{Level: level, ReplaceAttr: readableDurations}
	var handler slog.Handler = slog.NewTextHandler(opts.Stderr, hopts)
	if f.logFormat == "json" {
		handler = slog.NewJSONHandler(opts.Stderr, hopts)
	}
	log := slog.New(handler)

	cfg, err := loadLive(f.config, f.tokens) // reload.go
	if err != nil {
		return err
	}
	policies, from := cfg.policies, cfg.from
	if f.config != "" && len(policies) == 0 {
		log.Warn("the policy file defines no policies: /v1/take and /v1/leases refuse every request", "config", f.config)
	}
	var keys *auth.Keyring
	switch {
	case cfg.tokens != nil:
		keys = auth.NewKeyring(cfg.tokens)
	case !loopbackOnly(f.addr) && !f.insecureNoAuth:
		return usagef("refusing to serve %s without tokens: it is not a loopback-only address; give --tokens (or an auth section in --config), or --insecure-no-auth to serve everyone", f.addr)
	}
	rules, err := f.rls.load()
	if err != nil {
		return err
	}
	if rules != nil && keys == nil && !loopbackOnly(f.rls.grpcAddr) && !f.insecureNoAuth {
		return usagef("refusing to serve gRPC on %s without tokens: it is not a loopback-only address; give --tokens (or an auth section in --config), or --insecure-no-auth to serve everyone", f.rls.grpcAddr)
	}
	if rules != nil {
		policies = append(policies, rules.Policies()...) // the descriptors' state is the HTTP API's
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	fallbacks := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_store_fallback_total",
		Help: "Operations not decided by the shared store, by policy, outage mode and reason: store_down (the store is held down and the mode decided) or timeout (the store is up but did not answer in time; denied in every mode).",
	}, []string{"policy", "mode", "reason"})
	reg.MustRegister(fallbacks)
	for _, p := range policies { // known series start at zero
		for _, r := range []store.FallbackReason{store.FallbackStoreDown, store.FallbackTimeout} {
			fallbacks.WithLabelValues(p.Name, p.Outage.Mode.String(), r.String())
		}
	}
	st, err := openState(ctx, source["state"], f.state, policies, f.storeTimeout,
		func(policy string, mode store.OutageMode, reason store.FallbackReason, _ error) {
			fallbacks.WithLabelValues(policy, mode.String(), reason.String()).Inc()
		}, log, f.memoryMaxBytes)
	if err != nil {
		return err
	}
	defer st.close()
	records, err := openRecords(ctx, source["db"], f.db)
	if err != nil {
		return err
	}
	defer records.Close()
	slots, closeSlots, err := openSlots(ctx, source["db"], f.db, slot.Config{})
	if err != nil {
		return err
	}
	defer closeSlots()
	jobs, closeJobs, err := openJobs(ctx, source["db"], f.db) // jobs.go
	if err != nil {
		return err
	}
	defer closeJobs()

	lim, err := limiter.New(limiter.Config{Store: st.store, Leases: st.leases, Policies: policies})
	if err != nil {
		return err
	}
	rec := dashboard.NewRecorder(nil) // the dashboard's feed of decisions
	// The adaptive calls of workers in any language (/v1/outbound/...):
	// pauses, learned budgets and the adapted rate are shared through the
	// rate store with every server of the fleet. The AIMD settings are
	// outbound.DefaultAIMD(), those the README's figures were measured with.
	profSet, err := provider.Load(f.profiles...)
	if err != nil {
		return fmt.Errorf("--profiles: %w", err)
	}
	profiles := provider.NewRegistry(profSet)
	ob, err := outbound.New(outbound.Config{Store: st.store, Leases: st.leases, SharedRate: true, Metrics: reg, ProviderProfiles: profiles})
	if err != nil {
		return err
	}
	rl := &reloader{config: f.config, tokens: f.tokens, profiles: f.profiles, st: st, keys: keys, log: log}
	rl.hooks = append(rl.hooks, rl.profileHook(profiles))
	if rules != nil {
		rl.extra = rules.Policies()
	}
	srv, err := server.New(server.Config{Limiter: lim, Logger: log, Registry: reg, Slots: slots, Jobs: jobs, MaxBodyBytes: int64(f.maxBody),
		Outbound: ob, Providers: profiles, Auth: keys, Reload: rl.reload, Observer: rec})
	if err != nil {
		return err
	}
	rl.srv = srv
	dash, err := dashboard.New(dashboard.Config{Limiter: lim, Current: srv.Limiter, Recorder: rec, API: srv.Handler(), Jobs: jobs, Slots: slots,
		Outbound: ob, StoreName: strings.SplitN(f.state, ":", 2)[0], Logger: log})
	if err != nil {
		return err
	}
	// /ui/ is the dashboard, the rest the API. With tokens, a browser
	// gives one as the password of its login prompt: scope read to look,
	// admin to act (the actions go through the API with it).
	routes := http.NewServeMux()
	routes.Handle(dashboard.Prefix, auth.Browser(keys, "sluice dashboard", dash.Handler()))
	routes.Handle("/", srv.Handler())

	grpcSrv, err := startRLS(ctx, opts, &f.rls, rules, lim, reg, log, keys)
	if err != nil {
		return err
	}
	defer func() { _ = grpcSrv.shutdown(context.WithoutCancel(ctx)) }() // a no-op once shut down below
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", f.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", f.addr, err)
	}
	hs := &http.Server{
		Handler:           routes,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    int(f.maxHeader),
		ErrorLog:          slog.NewLogLogger(handler, slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	cctx, stopCleanups := context.WithCancel(ctx)
	cleaned, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(cleaned)
		runCleanups(cctx, log, st.cleanups, f.cleanupInterval)
	}()
	defer func() { stopCleanups(); <-cleaned }() // before the store closes
	reloads, hup := make(chan struct{}), notifySIGHUP()
	go func() {
		defer close(reloads)
		rl.reloadLoop(cctx, hup, f.watch && (f.config != "" || f.tokens != "" || len(f.profiles) > 0)) // reload.go
	}()
	defer func() { stopCleanups(); <-reloads }()
	go func() { // the dashboard's learned-rate history of the outbound keys
		defer close(sampled)
		dash.Run(cctx, 0)
	}()
	defer func() { stopCleanups(); <-sampled }()

	log.Info("sluice listening", "addr", ln.Addr().String(), "policies", len(policies), "config", from, "auth", keys != nil,
		"state", redactURL(f.state), "db", redactURL(f.db))
	fmt.Fprintf(opts.Stdout, "sluice listening on http://%s\n", ln.Addr())
	if opts.Ready != nil {
		opts.Ready(ln.Addr())
	}

	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-grpcSrv.stopped():
		return grpcSrv.err()
	case <-ctx.Done():
	}
	log.Info("shutting down", "timeout", f.shutdownTimeout)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.shutdownTimeout)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		_ = hs.Close()
		return fmt.Errorf("shutdown: in-flight requests did not finish within %s: %w", f.shutdownTimeout, err)
	}
	if err := grpcSrv.shutdown(sctx); err != nil {
		return err
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	log.Info("stopped")
	return nil
}
