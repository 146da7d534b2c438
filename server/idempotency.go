package server

import (
	"bytes"
	clist "container/list"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/sluicerl/sluice/clock"
)

// IdempotencyHeader names the request header that makes a quota-consuming
// POST safe to retry (draft-ietf-httpapi-idempotency-key-header).
const IdempotencyHeader = "Idempotency-Key"

// ReplayedHeader marks an answer replayed from the Idempotency-Key cache.
const ReplayedHeader = "Idempotent-Replayed"

// Defaults of IdempotencyConfig.
const (
	DefaultIdempotencyTTL      = 24 * time.Hour
	DefaultIdempotencyMaxKeys  = 100_000
	DefaultIdempotencyMaxBytes = 64 << 20
	// MaxIdempotencyKeyLen bounds an Idempotency-Key value.
	MaxIdempotencyKeyLen = 255
)

// IdempotencyConfig bounds the Idempotency-Key cache. Zero fields take the
// defaults.
type IdempotencyConfig struct {
	// TTL is how long an answer is replayed. Zero means
	// DefaultIdempotencyTTL.
	TTL time.Duration
	// MaxKeys bounds the keys remembered; the oldest go first. Zero
	// means DefaultIdempotencyMaxKeys.
	MaxKeys int
	// MaxBytes bounds the bytes of remembered answers (bodies and
	// headers); the oldest go first. Zero means DefaultIdempotencyMaxBytes.
	MaxBytes int64
}

// idempotentRoutes are the quota-consuming POSTs that honour
// Idempotency-Key: takes, lease acquires and slot bookings.
var idempotentRoutes = map[string]bool{
	http.MethodPost + " " + routeTake:       true,
	http.MethodPost + " " + routeLeases:     true,
	http.MethodPost + " " + routeSlots:      true,
	http.MethodPost + " " + routeSlotsBatch: true,
}

// idempotency remembers the answers of requests that carried an
// Idempotency-Key, per server process (in memory, not in the state store:
// a retry that reaches another server of a fleet is charged again). The
// cache key is the caller's token name, the route and the key, so two
// callers never share answers. A retry with the same body gets the first
// answer again, marked Idempotent-Replayed: true, and is not charged; with
// another body, 422; while the first is still running, 409. Answers of
// 5xx are not remembered (nothing was decided: a retry should be). It is
// safe for concurrent use.
type idempotency struct {
	ttl      time.Duration
	maxKeys  int
	maxBytes int64
	clock    clock.Clock

	mu    sync.Mutex
	byKey map[string]*clist.Element // of *idemEntry
	order *clist.List               // oldest first (every entry has the same TTL)
	bytes int64
}

type idemEntry struct {
	key     string
	sum     [sha256.Size]byte // of the request body
	expires time.Time
	done    bool // the answer is recorded
	status  int
	header  http.Header
	body    []byte
	size    int64
}

func newIdempotency(cfg IdempotencyConfig, c clock.Clock) (*idempotency, error) {
	if cfg.TTL < 0 || cfg.MaxKeys < 0 || cfg.MaxBytes < 0 {
		return nil, fmt.Errorf("server: config: Idempotency fields must be >= 0, got %+v", cfg)
	}
	i := &idempotency{ttl: cfg.TTL, maxKeys: cfg.MaxKeys, maxBytes: cfg.MaxBytes, clock: c,
		byKey: map[string]*clist.Element{}, order: clist.New()}
	if i.ttl == 0 {
		i.ttl = DefaultIdempotencyTTL
	}
	if i.maxKeys == 0 {
		i.maxKeys = DefaultIdempotencyMaxKeys
	}
	if i.maxBytes == 0 {
		i.maxBytes = DefaultIdempotencyMaxBytes
	}
	return i, nil
}

// wrap returns h, honouring Idempotency-Key when method and path are an
// idempotent route.
func (i *idempotency) wrap(method, path string, h http.HandlerFunc) http.HandlerFunc {
	if !idempotentRoutes[method+" "+path] {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		vals := r.Header.Values(IdempotencyHeader)
		if len(vals) == 0 {
			h(w, r)
			return
		}
		if len(vals) > 1 || !validIdemKey(vals[0]) {
			writeProblem(w, &problem{Type: TypeMalformedRequest, Title: "Malformed request", Status: http.StatusBadRequest,
				Detail: fmt.Sprintf("%s must be one value of 1 to %d visible ASCII characters", IdempotencyHeader, MaxIdempotencyKeyLen)})
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			// Too large, or cut: the handler answers it (413, 400).
			r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), errReader{err}))
			h(w, r)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		var principal string
		if rs := stateOf(r); rs != nil {
			principal = rs.principal.Name
		}
		key := principal + "\x00" + method + " " + path + "\x00" + vals[0]
		e, fresh := i.begin(key, sha256.Sum256(body))
		switch {
		case fresh:
			rec := &recorder{ResponseWriter: w}
			defer func() { i.finish(e, rec) }() // also when h panics: the entry is dropped
			h(rec, r)
		case e == nil:
			writeProblem(w, &problem{Type: TypeIdempotencyKeyReused, Title: "Idempotency-Key reused", Status: http.StatusUnprocessableEntity,
				Detail: IdempotencyHeader + " was already used with another request body; use a new key for a new request"})
		case !e.done:
			w.Header().Set("Retry-After", "1")
			writeProblem(w, &problem{Type: TypeIdempotencyInFlight, Title: "Request in progress", Status: http.StatusConflict,
				Detail: "the first request with this " + IdempotencyHeader + " has not finished; retry"})
		default:
			hd := w.Header()
			for k, v := range e.header {
				hd[k] = v
			}
			hd.Set(ReplayedHeader, "true")
			w.WriteHeader(e.status)
			_, _ = w.Write(e.body)
		}
	}
}

// validIdemKey: 1 to MaxIdempotencyKeyLen visible ASCII characters.
func validIdemKey(k string) bool {
	if k == "" || len(k) > MaxIdempotencyKeyLen {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// begin looks key up. It returns a new in-flight entry and true when the
// key is not remembered; the remembered entry and false when it is, with
// the same body sum (done or still in flight); nil and false when it is
// remembered with another body.
func (i *idempotency) begin(key string, sum [sha256.Size]byte) (*idemEntry, bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	now := i.clock.Now()
	i.evict(now)
	if el, ok := i.byKey[key]; ok {
		e := el.Value.(*idemEntry)
		if e.sum != sum {
			return nil, false
		}
		if e.done {
			// A copy: the caller reads it unlocked.
			cp := *e
			return &cp, false
		}
		return e, false
	}
	e := &idemEntry{key: key, sum: sum, expires: now.Add(i.ttl), size: int64(len(key)) + 128}
	i.byKey[key] = i.order.PushBack(e)
	i.bytes += e.size
	i.evict(now)
	return e, true
}

// finish records the answer of e's request, or forgets e when the answer
// is not to be replayed (5xx, or none written: a panic).
func (i *idempotency) finish(e *idemEntry, rec *recorder) {
	i.mu.Lock()
	defer i.mu.Unlock()
	el, ok := i.byKey[e.key]
	if !ok || el.Value != e {
		return // evicted meanwhile
	}
	if !rec.wrote || rec.status >= 500 {
		i.remove(el)
		return
	}
	e.done, e.status, e.header, e.body = true, rec.status, rec.Header().Clone(), rec.body.Bytes()
	delete(e.header, ReplayedHeader)
	extra := int64(len(e.body))
	for k, vs := range e.header {
		for _, v := range vs {
			extra += int64(len(k) + len(v))
		}
	}
	e.size += extra
	i.bytes += extra
	i.evict(i.clock.Now())
}

// evict drops expired entries, then the oldest while over a bound.
func (i *idempotency) evict(now time.Time) {
	for el := i.order.Front(); el != nil; el = i.order.Front() {
		e := el.Value.(*idemEntry)
		if !now.After(e.expires) && len(i.byKey) <= i.maxKeys && i.bytes <= i.maxBytes {
			return
		}
		i.remove(el)
	}
}

func (i *idempotency) remove(el *clist.Element) {
	e := i.order.Remove(el).(*idemEntry)
	delete(i.byKey, e.key)
	i.bytes -= e.size
}

// len is the number of remembered keys (tests).
func (i *idempotency) len() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return len(i.byKey)
}

// recorder passes a response through and keeps a copy of it.
type recorder struct {
	http.ResponseWriter
	status int
	wrote  bool
	body   bytes.Buffer
}

func (w *recorder) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recorder) Write(b []byte) (int, error) {
	if !w.wrote {
		w.status, w.wrote = http.StatusOK, true
	}
	w.body.Write(b)
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }
