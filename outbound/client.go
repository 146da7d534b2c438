package outbound

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicerl/sluice/aimd"
	"github.com/sluicerl/sluice/breaker"
	"github.com/sluicerl/sluice/clock"
	"github.com/sluicerl/sluice/provider"
	"github.com/sluicerl/sluice/retry"
	"github.com/sluicerl/sluice/signal"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

// Defaults for the zero fields of Config.
const (
	// DefaultIdleTTL is Config.IdleTTL when it is zero.
	DefaultIdleTTL = 10 * time.Minute
	// DefaultMaxKeys is Config.MaxKeys when it is zero.
	DefaultMaxKeys = 10000
)

// DefaultAIMD is the AIMD configuration of a Config whose AIMD is the
// zero value: the settings every figure of the README was measured with
// (issue 18: providers whose limits are unknown, whose Retry-After rounds
// up to whole seconds so that every refusal pauses the whole fleet, and
// some of which ban after a few refusals). Package aimd's own defaults
// (aimd.Config's zero fields) are a plain AIMD sawtooth; these add what a
// fleet sharing one credential needs:
//   - SlowStart 2: an unknown limit is found in seconds (x7.4 a second);
//   - Decrease 0.8 with a 500 ms Cooldown: fewer, deeper cuts, one per
//     burst of refusals, since each refusal costs a pause;
//   - Plateau 0.91 held for Hold 10 s: the rate levels off just under the
//     last cut and probes above it rarely (TCP CUBIC's plateau);
//   - LatencyFactor 3 and Queue 2.5: scheduler noise is not a slowdown,
//     but a provider that queues calls is slowed for before it is slow.
//
// To change one setting, start from DefaultAIMD() and set the field: a
// non-zero Config.AIMD is used as given, its zero fields meaning package
// aimd's defaults.
func DefaultAIMD() aimd.Config {
	return aimd.Config{
		SlowStart:     2,
		Decrease:      0.8,
		Cooldown:      500 * time.Millisecond,
		LatencyFactor: 3,
		Plateau:       0.91,
		Hold:          10 * time.Second,
		Queue:         2.5,
	}
}

// ErrInvalidConfig is wrapped by New for a Config it cannot use; the
// message names the field.
var ErrInvalidConfig = errors.New("outbound: invalid config")

// ErrEmptyKey: Do was called without a key, or a request has no host.
var ErrEmptyKey = errors.New("outbound: empty key")

// ErrNotRetryable is wrapped around a request that cannot be retried
// (a body without GetBody) when the only way on was a retry.
var ErrNotRetryable = errors.New("outbound: request body cannot be replayed")

// Config configures a Client: a plain value that New copies. Every zero
// field means its documented default, so the zero Config is a client over
// http.DefaultTransport with an in-memory store.
type Config struct {
	// Base sends the requests. Nil means http.DefaultTransport.
	Base http.RoundTripper
	// Store keeps each key's pacing state (and, with SharedRate, its
	// adapted rate). Processes that share a store share every key's pace
	// and pauses. Nil means a new in-memory store of this client alone.
	Store store.RateStore
	// Clock times waits and latencies. Nil means the real clock. The
	// store's clock decides pacing.
	Clock clock.Clock
	// Prefix is prepended to every store key. Empty means "outbound:".
	Prefix string
	// Profiles maps host keys (see HostKey) to a provider profile name:
	// every host of a profile shares one key, the profile name.
	Profiles map[string]string
	// Profile names the provider profile (package provider) every call of
	// the client applies unless the call names its own (AcquireOpts.Profile,
	// DoOpts.Profile): the provider's own limits reserved before each
	// attempt and settled after it, its outcome rules, its key
	// normalization (see provider.go). Empty: none. A name that
	// ProviderProfiles lacks is ErrInvalidConfig.
	Profile string
	// ProviderProfiles holds the profiles that Profile and the calls'
	// profiles name; a server swaps its set in on reload. Nil means the
	// profiles built into Sluice (provider.Embedded).
	ProviderProfiles *provider.Registry
	// Leases keeps the permits of the profiles' leases held around every
	// call (provider.HoldCall: GitHub's concurrent requests per token).
	// Nil means Store when it keeps leases (Redis, PostgreSQL: the fleet
	// shares them), else the leases Store can keep (store.LeaseKeeper:
	// memstore, this client alone; pass one Leases to clients sharing a
	// memstore), else an in-memory store per profile.
	Leases store.LeaseStore
	// MaxConcurrent bounds the calls in flight per key (the bulkhead).
	// Zero means no bound.
	MaxConcurrent int
	// Timeout bounds a whole call, retries included. Zero means none
	// beyond the caller's context.
	Timeout time.Duration
	// Burst is how many attempts a key may send at once after a quiet
	// spell. Zero means 1: strict pacing, where a process's attempts on a
	// key also leave at least half a pacing interval apart, even when a
	// slow store answered several turns at once.
	Burst int64
	// MaxReserve is how far ahead an attempt may book its turn; longer
	// waits poll the store again. A turn booked before another process
	// synced a pause into the store is not cancelled, so this bounds how
	// late such a turn may go out. Zero means 100 ms.
	MaxReserve time.Duration
	// AIMD configures each key's rate controller. The zero value means
	// DefaultAIMD(); any other value is used as given.
	AIMD aimd.Config
	// SharedRate keeps each key's adapted rate in Store and paces every
	// process sharing the store on one GCRA at that rate, so that the
	// fleet adapts as one. Without it each process adapts and paces its
	// own share (a pacing key of its own, see Instance); pauses are
	// shared either way.
	SharedRate bool
	// Instance names this client among those sharing Store, for its own
	// pacing keys. Empty means a random name.
	Instance string
	// Idempotent says whether a request may be retried after an outcome
	// that leaves it unknown (a 5xx, a timeout after sending). Nil means
	// GET, HEAD, OPTIONS, TRACE, PUT and DELETE are, and requests carrying
	// an Idempotency-Key header.
	Idempotent func(*http.Request) bool
	// IdleTTL drops a key's local state (its adapted rate, breaker and
	// retry budget, counters) once it has been idle this long with no
	// call in flight: a sweep on Clock every IdleTTL/2 (but at most once a
	// second) drops it, and so does a new key's arrival while MaxKeys
	// keys are held. Its pacing and pauses live on in Store. The sweep
	// runs only while the client holds keys. Zero means DefaultIdleTTL.
	IdleTTL time.Duration
	// MaxKeys is how many keys the client holds before a new key first
	// drops the idle ones (it is no hard cap: keys in use are kept). Zero
	// means DefaultMaxKeys.
	MaxKeys int
	// Metrics, when set, registers the client's Prometheus metrics.
	Metrics Registerer
	// KeyLabels labels metrics of Do keys with the raw key. Without it they
	// are labelled "other"; host and profile keys are always labelled with
	// the host or profile.
	KeyLabels bool
	// Signal configures the response parser (its Retry-After clamp).
	Signal signal.Config
	// Retry configures each key's retries and retry budget; Breaker each
	// key's circuit breaker.
	Retry   retry.Config
	Breaker breaker.Config
	// OnBreakerEvent, if set, receives every breaker transition (no
	// payloads or credentials: see breaker.Event) with its key, to
	// persist or show. It runs under the key's breaker lock: keep it
	// quick and do not call the client from it.
	OnBreakerEvent func(key string, e breaker.Event)
	// Rand is the jitter source of retry backoff. Nil means math/rand/v2.
	Rand retry.Rand
}

// Client is an outbound client: the layers of the package doc composed
// over per-key state. It is safe for concurrent use; calls to different
// keys take no lock of the client's in common. Build it with New; the zero value is not usable.
type Client struct {
	base       http.RoundTripper
	store      store.RateStore
	clk        clock.Clock
	prefix     string
	profiles   map[string]string
	timeout    time.Duration
	burst      int64
	maxReserve time.Duration
	ctl        *aimd.Controller
	shared     bool
	idempotent func(*http.Request) bool
	keyLabels  bool
	instance   string
	parser     *signal.Parser
	signalCfg  signal.Config
	metrics    *metrics
	profile    string
	providers  *providers

	keys *registry

	requests, throttles, retries, rejected atomic.Int64
	// lag is an EWMA (µs) of how late this process's pacing timers fire:
	// its own scheduling delay, which sends calls in bunches (bunchedAt).
	// sendLag is one of how late its calls leave their booked turns: that
	// and its store's stalls (storeJitter), which an attempt's latency
	// must not be mistaken for the provider's (starved). Whether a
	// refusal came from a bunch (aimd.Sample.Bunched, which keeps the
	// rate) is still judged by the timers alone (issue 18: with sendLag
	// in its place, retry-after-seconds on a saturated machine fell from
	// 0.96 to 0.90 of the limit in two runs of three, side by side with
	// the build before; not traced further).
	lag, sendLag atomic.Int64
	// rtt keeps the fastest store round trip of booking a turn (µs) in
	// this BaseWindow and the last (storeJitter).
	rttMu sync.Mutex
	rtt   aimd.Fastest
}

// New validates cfg and returns a Client.
func New(cfg Config) (*Client, error) {
	switch {
	case cfg.MaxConcurrent < 0:
		return nil, fmt.Errorf("%w: MaxConcurrent must be >= 0, got %d", ErrInvalidConfig, cfg.MaxConcurrent)
	case cfg.Timeout < 0:
		return nil, fmt.Errorf("%w: Timeout must be >= 0, got %v", ErrInvalidConfig, cfg.Timeout)
	case cfg.Burst < 0:
		return nil, fmt.Errorf("%w: Burst must be >= 0, got %d", ErrInvalidConfig, cfg.Burst)
	case cfg.MaxReserve < 0:
		return nil, fmt.Errorf("%w: MaxReserve must be >= 0, got %v", ErrInvalidConfig, cfg.MaxReserve)
	case cfg.IdleTTL < 0 || cfg.MaxKeys < 0:
		return nil, fmt.Errorf("%w: IdleTTL and MaxKeys must be >= 0", ErrInvalidConfig)
	}
	for h, p := range cfg.Profiles {
		if h == "" || p == "" {
			return nil, fmt.Errorf("%w: profiles: empty host or profile name (%q: %q)", ErrInvalidConfig, h, p)
		}
	}
	if cfg.AIMD == (aimd.Config{}) {
		cfg.AIMD = DefaultAIMD()
	}
	ctl, err := aimd.New(cfg.AIMD)
	if err != nil {
		return nil, fmt.Errorf("%w: aimd: %w", ErrInvalidConfig, err)
	}
	parser, err := signal.New(cfg.Signal)
	if err != nil {
		return nil, fmt.Errorf("%w: signal: %w", ErrInvalidConfig, err)
	}
	pol, err := newPolicy(cfg)
	if err != nil {
		return nil, err
	}
	c := &Client{
		base: cfg.Base, store: cfg.Store, clk: clock.Or(cfg.Clock), prefix: cfg.Prefix,
		timeout: cfg.Timeout, burst: cfg.Burst, maxReserve: cfg.MaxReserve,
		ctl: ctl, shared: cfg.SharedRate, idempotent: cfg.Idempotent,
		keyLabels: cfg.KeyLabels, parser: parser, instance: cfg.Instance,
		signalCfg: cfg.Signal, profile: cfg.Profile,
	}
	if c.instance == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		c.instance = hex.EncodeToString(b[:])
	}
	if c.base == nil {
		c.base = http.DefaultTransport
	}
	if c.store == nil {
		c.store = memstore.New(memstore.Config{Clock: cfg.Clock})
	}
	if c.prefix == "" {
		c.prefix = "outbound:"
	}
	if c.providers, err = newProviders(c, cfg.ProviderProfiles, callLeases(cfg.Leases, c.store)); err != nil {
		return nil, err
	}
	if c.profile != "" {
		rt, err := c.providers.runtime(c.profile)
		if err != nil {
			return nil, fmt.Errorf("%w: Profile: %w", ErrInvalidConfig, err)
		}
		c.base = profileTransport(rt, c.base)
	}
	if len(cfg.Profiles) > 0 {
		c.profiles = make(map[string]string, len(cfg.Profiles))
		for h, p := range cfg.Profiles {
			c.profiles[h] = p
		}
	}
	if c.burst == 0 {
		c.burst = 1
	}
	if c.maxReserve == 0 {
		c.maxReserve = 100 * time.Millisecond
	}
	if c.idempotent == nil {
		c.idempotent = defaultIdempotent
	}
	idleTTL, maxKeys := cfg.IdleTTL, cfg.MaxKeys
	if idleTTL == 0 {
		idleTTL = DefaultIdleTTL
	}
	if maxKeys == 0 {
		maxKeys = DefaultMaxKeys
	}
	if cfg.Metrics != nil {
		m, err := newMetrics(cfg.Metrics)
		if err != nil {
			return nil, fmt.Errorf("outbound: metrics: %w", err)
		}
		c.metrics = m
	}
	names := newKeyNames(c.prefix, c.instance, c.shared)
	c.keys = newRegistry(c.clk, idleTTL, maxKeys, func(key, label string, now int64) *keyState {
		return newKeyState(key, label, names, ctl, pol, cfg.MaxConcurrent, now)
	})
	return c, nil
}

func defaultIdempotent(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete, "":
		return true
	}
	return r.Header.Get("Idempotency-Key") != ""
}

func (c *Client) now() int64 { return c.clk.Now().UnixMicro() }

// KeyFor returns the key a request is paced under: its profile's name when
// its host belongs to a profile, otherwise its host key.
func (c *Client) KeyFor(req *http.Request) string {
	k, _ := c.keyFor(req)
	return k
}

func (c *Client) keyFor(req *http.Request) (key, label string) {
	h := HostKey(req.URL)
	if p, ok := c.profiles[h]; ok {
		return p, p
	}
	return h, h
}

// Rate returns key's current adapted rate in requests per second and
// whether the client holds state for the key.
func (c *Client) Rate(key string) (float64, bool) {
	ks, ok := c.keys.lookup(key)
	if !ok {
		return 0, false
	}
	return ks.adapt.rate(), true
}
