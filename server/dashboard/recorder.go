package dashboard

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicerl/sluice/clock"
	"github.com/sluicerl/sluice/limiter"
)

// Bounds of what a Recorder keeps: memory does not grow with the keys or
// the traffic the server sees.
const (
	// BucketWidth is the width of one counting bucket.
	BucketWidth = 10 * time.Second
	// Buckets is how many buckets a policy keeps: one hour.
	Buckets = 360
	// TopKeys is how many keys the hottest-keys sketch of a policy
	// tracks (space-saving: counts are upper bounds, off by at most the
	// error shown beside them).
	TopKeys = 32
	// NearKeys is how many keys near their limit a policy remembers.
	NearKeys = 32
	// RecentDecisions is how many of a policy's latest decisions are kept
	// for the key search.
	RecentDecisions = 256
	// MaxLeaseKeys and MaxSlotConfigs bound the lease keys and slot
	// config names remembered for the leases and slots pages.
	MaxLeaseKeys   = 64
	MaxSlotConfigs = 32
	// MaxWaiters bounds the waiting holders remembered per lease key.
	MaxWaiters = 256
	// WaitWindow is how long a holder refused a lease counts as waiting
	// for it, unless granted sooner: a caller asking again within it
	// (lease.AcquireWait backs off at most a few seconds) stays waiting;
	// one that gave up drops out. An ask without a holder is given a
	// fresh one by the server, so each such refused ask is a waiter of
	// its own.
	WaitWindow = time.Minute
	// nearRatio: a key is near its limit when its remaining is at most
	// this fraction of its limit.
	nearRatio = 0.5
	// leaseWindow is how far back refused lease acquires are counted.
	leaseWindow = 5 * time.Minute
)

// Result kinds counted per bucket.
const (
	kindAllowed = iota
	kindDenied
	kindShadowDenied
	kindOutage // answers the shared store did not decide (also counted above)
	numKinds
)

// Recorder keeps what the dashboard shows of the server's decisions: per
// policy, counts of allowed, denied and shadow-denied decisions in
// 10-second buckets over the last hour, a space-saving sketch of the
// hottest keys, the keys last seen nearest their limit and the latest
// decisions; and the lease keys and slot config names the server served.
// Everything is bounded. It implements server.Observer. It is safe for
// concurrent use. Build it with NewRecorder; the zero value is not usable.
type Recorder struct {
	clk      clock.Clock
	policies sync.Map // string -> *series

	mu      sync.Mutex // guards leases, configs
	leases  []leaseSeen
	configs []string
}

// NewRecorder returns a Recorder timing its buckets on clk (nil: the real
// clock).
func NewRecorder(clk clock.Clock) *Recorder {
	return &Recorder{clk: clock.Or(clk)}
}

// series is one policy's record.
type series struct {
	mu     sync.Mutex
	epochs [Buckets]int64 // the bucket number each slot holds
	counts [Buckets][numKinds]int64
	top    topK
	near   map[string]nearSeen
	// worst is the key of near farthest from its limit (the oldest of
	// equals) when worstOK: a decision for a key not near enough to
	// displace it costs a comparison, not a scan of near.
	worst   string
	worstOK bool
	recent  [RecentDecisions]Decision
	nrec    int // decisions ever recorded (ring position)
	last    Decision
}

// Decision is one recorded decision: a plain value.
type Decision struct {
	At        time.Time
	Key       string
	Allowed   bool
	Shadowed  bool
	Limit     int64
	Remaining int64
	Outage    string // the outage mode that decided, "" when the store did
}

type nearSeen struct {
	remaining, limit int64
	at               time.Time
}

type leaseSeen struct {
	policy, key string
	last        time.Time
	refused     []time.Time // within leaseWindow, bounded
	// waiting maps the fingerprint of each holder refused and not granted
	// since to when it was first and last refused; at most MaxWaiters.
	waiting map[string]waitSpan
}

type waitSpan struct{ first, last time.Time }

func (r *Recorder) series(policy string) *series {
	if v, ok := r.policies.Load(policy); ok {
		return v.(*series)
	}
	v, _ := r.policies.LoadOrStore(policy, &series{top: newTopK(TopKeys), near: map[string]nearSeen{}})
	return v.(*series)
}

// ObserveDecision records one decision (server.Observer).
func (r *Recorder) ObserveDecision(key string, d limiter.Decision, granted bool) {
	now := r.clk.Now()
	kind := kindAllowed
	switch {
	case d.Shadowed:
		kind = kindShadowDenied
	case !granted || !d.Allowed:
		kind = kindDenied
	}
	rec := Decision{At: now, Key: key, Allowed: granted && d.Allowed, Shadowed: d.Shadowed, Limit: d.Limit, Remaining: d.Remaining}
	if d.Fallback != 0 {
		rec.Outage = d.FallbackMode.String()
	}
	s := r.series(d.Policy)
	b := now.UnixMicro() / BucketWidth.Microseconds()
	i := int(b % Buckets)
	s.mu.Lock()
	if s.epochs[i] != b {
		s.epochs[i], s.counts[i] = b, [numKinds]int64{}
	}
	s.counts[i][kind]++
	if rec.Outage != "" {
		s.counts[i][kindOutage]++
	}
	s.top.add(key)
	s.noteNear(key, d, now)
	s.recent[s.nrec%RecentDecisions] = rec
	s.nrec++
	s.last = rec
	s.mu.Unlock()
}

// noteNear remembers key when it is near its limit, and keeps a
// remembered key current. Called with s.mu held.
func (s *series) noteNear(key string, d limiter.Decision, now time.Time) {
	if d.Limit <= 0 {
		return
	}
	e := nearSeen{remaining: d.Remaining, limit: d.Limit, at: now}
	if _, ok := s.near[key]; ok {
		s.near[key] = e
		if s.worstOK && key != s.worst && e.ratio() > s.near[s.worst].ratio() {
			s.worst = key // now the farthest (a later at never wins a tie)
		} else if key == s.worst {
			s.worstOK = false // it may have come nearer than another
		}
		return
	}
	if float64(d.Remaining) > nearRatio*float64(d.Limit) {
		return
	}
	if len(s.near) < NearKeys {
		s.near[key] = e
		s.worstOK = false
		return
	}
	// Replace the entry farthest from its limit, or the oldest of equals.
	if !s.worstOK {
		var wr float64 = -1
		var wat time.Time
		for k, v := range s.near {
			if r := v.ratio(); r > wr || (r == wr && v.at.Before(wat)) {
				s.worst, wr, wat = k, r, v.at
			}
		}
		s.worstOK = true
	}
	if e.ratio() <= s.near[s.worst].ratio() {
		delete(s.near, s.worst)
		s.near[key] = e
		s.worstOK = false
	}
}

// ratio is remaining over limit (limit > 0).
func (e nearSeen) ratio() float64 { return float64(e.remaining) / float64(e.limit) }

// ObserveLease records a lease acquire (server.Observer): a refused
// holder waits until it is granted or WaitWindow passes without it asking.
func (r *Recorder) ObserveLease(policy, key, holder string, acquired bool) {
	now := r.clk.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	i := slices.IndexFunc(r.leases, func(l leaseSeen) bool { return l.policy == policy && l.key == key })
	if i < 0 {
		if len(r.leases) >= MaxLeaseKeys { // drop the least recently seen
			oldest := 0
			for j, l := range r.leases {
				if l.last.Before(r.leases[oldest].last) {
					oldest = j
				}
			}
			r.leases = slices.Delete(r.leases, oldest, oldest+1)
		}
		r.leases = append(r.leases, leaseSeen{policy: policy, key: key})
		i = len(r.leases) - 1
	}
	l := &r.leases[i]
	l.last = now
	l.refused = slices.DeleteFunc(l.refused, func(t time.Time) bool { return now.Sub(t) > leaseWindow })
	if !acquired && len(l.refused) < 1000 {
		l.refused = append(l.refused, now)
	}
	if acquired && len(l.waiting) == 0 {
		return // the common case: no fingerprint to compute
	}
	fp := holderHash(holder)
	for h, w := range l.waiting {
		if now.Sub(w.last) > WaitWindow {
			delete(l.waiting, h)
		}
	}
	if acquired {
		delete(l.waiting, fp)
		return
	}
	if l.waiting == nil {
		l.waiting = map[string]waitSpan{}
	}
	w, ok := l.waiting[fp]
	if !ok && len(l.waiting) >= MaxWaiters {
		return
	}
	if !ok {
		w.first = now
	}
	w.last = now
	l.waiting[fp] = w
}

// ObserveSlotConfig records a slot config name (server.Observer).
func (r *Recorder) ObserveSlotConfig(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if i := slices.Index(r.configs, name); i >= 0 {
		r.configs = slices.Delete(r.configs, i, i+1)
	} else if len(r.configs) >= MaxSlotConfigs {
		r.configs = r.configs[1:]
	}
	r.configs = append(r.configs, name) // most recent last
}

// Point is one time step of a policy's counts.
type Point struct {
	Start                         time.Time
	Allowed, Denied, ShadowDenied int64
	Outage                        int64
}

// Series returns a policy's counts over the last span (at most an hour),
// in steps of step (a multiple of BucketWidth), oldest first, ending with
// the step holding now.
func (r *Recorder) Series(policy string, span, step time.Duration) []Point {
	if step < BucketWidth {
		step = BucketWidth
	}
	per := int64(step / BucketWidth)
	n := int64(min(span, Buckets*BucketWidth) / step)
	if n < 1 {
		n = 1
	}
	nowB := r.clk.Now().UnixMicro() / BucketWidth.Microseconds()
	lastStep := nowB / per
	out := make([]Point, n)
	for j := range out {
		out[j].Start = time.UnixMicro((lastStep - n + 1 + int64(j)) * per * BucketWidth.Microseconds()).UTC()
	}
	v, ok := r.policies.Load(policy)
	if !ok {
		return out
	}
	s := v.(*series)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range Buckets {
		b := s.epochs[i]
		if b == 0 || b > nowB || nowB-b >= Buckets {
			continue
		}
		j := b/per - (lastStep - n + 1)
		if j < 0 || j >= n {
			continue
		}
		c := s.counts[i]
		out[j].Allowed += c[kindAllowed]
		out[j].Denied += c[kindDenied]
		out[j].ShadowDenied += c[kindShadowDenied]
		out[j].Outage += c[kindOutage]
	}
	return out
}

// HotKey is a key of the hottest-keys sketch: Count decisions at most,
// at least Count-Error.
type HotKey struct {
	Key          string
	Count, Error int64
}

// Hottest returns the n hottest keys of a policy, hottest first.
func (r *Recorder) Hottest(policy string, n int) []HotKey {
	v, ok := r.policies.Load(policy)
	if !ok {
		return nil
	}
	s := v.(*series)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.top.list(n)
}

// NearKey is a key last seen near its limit.
type NearKey struct {
	Policy           string
	Key              string
	Remaining, Limit int64
	At               time.Time
}

// Nearest returns up to n keys of a policy last seen nearest their limit
// (lowest remaining fraction first), seen within maxAge.
func (r *Recorder) Nearest(policy string, n int, maxAge time.Duration) []NearKey {
	v, ok := r.policies.Load(policy)
	if !ok {
		return nil
	}
	now := r.clk.Now()
	s := v.(*series)
	s.mu.Lock()
	out := make([]NearKey, 0, len(s.near))
	for k, e := range s.near {
		if now.Sub(e.at) <= maxAge {
			out = append(out, NearKey{Policy: policy, Key: k, Remaining: e.remaining, Limit: e.limit, At: e.at})
		}
	}
	s.mu.Unlock()
	sortNear(out)
	if len(out) > n {
		out = out[:n]
	}
	return out
}

func sortNear(ks []NearKey) {
	slices.SortFunc(ks, func(a, b NearKey) int {
		if c := cmp.Compare(fraction(a.Remaining, a.Limit), fraction(b.Remaining, b.Limit)); c != 0 {
			return c
		}
		if c := b.At.Compare(a.At); c != 0 {
			return c
		}
		return compareStrings(a.Key, b.Key)
	})
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Recent returns a policy's recorded decisions for key among its latest
// RecentDecisions, newest first, at most n.
func (r *Recorder) Recent(policy, key string, n int) []Decision {
	v, ok := r.policies.Load(policy)
	if !ok {
		return nil
	}
	s := v.(*series)
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Decision
	for i := s.nrec - 1; i >= 0 && i >= s.nrec-RecentDecisions && len(out) < n; i-- {
		if d := s.recent[i%RecentDecisions]; d.Key == key {
			out = append(out, d)
		}
	}
	return out
}

// Last returns a policy's latest recorded decision, if any.
func (r *Recorder) Last(policy string) (Decision, bool) {
	v, ok := r.policies.Load(policy)
	if !ok {
		return Decision{}, false
	}
	s := v.(*series)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last, s.nrec > 0
}

// LeaseKey is a lease key the server served, with the acquires refused
// within the last five minutes and the holders waiting for a permit (refused
// within WaitWindow and not granted since), by fingerprint, longest
// waiting first.
type LeaseKey struct {
	Policy, Key string
	Last        time.Time
	Refused     int
	Waiting     []Waiter
}

// Waiter is a holder waiting for a lease: its fingerprint (as GET
// /v1/leases shows holders) and when it was first refused.
type Waiter struct {
	HolderHash string
	Since      time.Time
}

// LeaseKeys returns the lease keys seen, most recently seen first.
func (r *Recorder) LeaseKeys() []LeaseKey {
	now := r.clk.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]LeaseKey, 0, len(r.leases))
	for _, l := range r.leases {
		n := 0
		for _, t := range l.refused {
			if now.Sub(t) <= leaseWindow {
				n++
			}
		}
		k := LeaseKey{Policy: l.policy, Key: l.key, Last: l.last, Refused: n}
		for h, w := range l.waiting {
			if now.Sub(w.last) <= WaitWindow {
				k.Waiting = append(k.Waiting, Waiter{HolderHash: h, Since: w.first})
			}
		}
		slices.SortFunc(k.Waiting, func(a, b Waiter) int {
			return cmp.Or(a.Since.Compare(b.Since), strings.Compare(a.HolderHash, b.HolderHash))
		})
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b LeaseKey) int { return b.Last.Compare(a.Last) })
	return out
}

// SlotConfigs returns the slot config names seen, most recent first.
func (r *Recorder) SlotConfigs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Clone(r.configs)
	slices.Reverse(out)
	return out
}
