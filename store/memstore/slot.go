package memstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/sluicerl/sluice/clock"
	"github.com/sluicerl/sluice/store"
)

// Slots is an in-memory store.SlotStore: one process, nothing kept across
// a restart, memory growing with the slots it holds up to its byte bound
// (SlotsConfig.MaxBytes). It never forgets a slot: an event id must always
// get the same slot, so a new booking (or config version) past the bound
// fails with store.ErrTooManyKeys, while events already booked keep
// answering. It places events exactly as the SQL stores do, and is their
// reference in tests. It is safe for concurrent use; operations are
// serialized by one mutex. Build it with NewSlots or NewSlotsWith; the zero
// value is not usable.
type Slots struct {
	clk clock.Clock
	max int64 // the byte bound

	mu      sync.Mutex
	configs map[string][]store.SlotConfig // versions in order
	windows map[string]map[int64]*slotWindow
	slots   map[string]store.Slot
	nwin    int   // window counters held
	nconf   int   // config versions held
	bytes   int64 // what max counts for them
	refused int64 // bookings and config versions refused at the bound
}

// SlotsConfig configures Slots. The zero value is ready to use.
type SlotsConfig struct {
	// Clock times config versions. Nil means the real clock.
	Clock clock.Clock
	// MaxBytes bounds the memory the bookings take: each slot counts its
	// event id's length plus SlotOverhead, each window counter
	// WindowOverhead, each config version its name's length plus
	// ConfigOverhead. Zero means DefaultMaxBytes.
	MaxBytes int64
}

// What SlotsConfig.MaxBytes counts beyond an event id's or a config name's
// bytes. The slot and window figures are the live heap per entry measured
// over 200,000 bookings (2026-11-26, Go 1.26 on amd64: 189 and 48 bytes, map
// growth included), rounded up; the config one is an estimate (a
// store.SlotConfig and its slice slot: versions are few).
const (
	SlotOverhead   = 208 // a store.Slot in the event map
	WindowOverhead = 64  // a window counter in its config's map
	ConfigOverhead = 256 // a store.SlotConfig version
)

// SlotStats is a snapshot of a Slots' size and of what its bound did.
type SlotStats struct {
	Slots, Windows, Configs int   // slots booked, window counters, config versions
	Bytes, MaxBytes         int64 // what the bound counts, and the bound
	// Refused counts the bookings and config versions refused with
	// store.ErrTooManyKeys because the bound was reached.
	Refused int64
}

// slotBytes is what MaxBytes counts for the slot of an event id.
func slotBytes(eventID string) int64 { return int64(len(eventID)) + SlotOverhead }

// slotWindow is one window's counter. next, on a closed window, is a
// window at or before the first open one after it: nextOpen follows and
// shortens these links, so full windows are not walked one by one.
type slotWindow struct {
	count  int64
	closed bool
	next   int64
}

var _ store.SlotStore = (*Slots)(nil)

// NewSlots returns an empty Slots with the default byte bound. clk times
// config versions; nil means the real clock.
func NewSlots(clk clock.Clock) *Slots { return NewSlotsWith(SlotsConfig{Clock: clk}) }

// NewSlotsWith returns an empty Slots configured by cfg.
func NewSlotsWith(cfg SlotsConfig) *Slots {
	mx := cfg.MaxBytes
	if mx <= 0 {
		mx = DefaultMaxBytes
	}
	return &Slots{clk: clock.Or(cfg.Clock), max: mx, configs: map[string][]store.SlotConfig{},
		windows: map[string]map[int64]*slotWindow{}, slots: map[string]store.Slot{}}
}

// SlotStats returns the store's size and the count of its refusals.
func (m *Slots) SlotStats() SlotStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return SlotStats{Slots: len(m.slots), Windows: m.nwin, Configs: m.nconf,
		Bytes: m.bytes, MaxBytes: m.max, Refused: m.refused}
}

// full returns the error of a booking of n more bytes past the bound, or
// nil (and counts the refusal). m.mu is held.
func (m *Slots) full(n int64, what string) error {
	if m.bytes+n <= m.max {
		return nil
	}
	m.refused++
	return fmt.Errorf("%w: the in-memory slot store holds %d bytes of bookings, and %s of %d more would pass its bound of %d",
		store.ErrTooManyKeys, m.bytes, what, n, m.max)
}

// PutSlotConfig implements store.SlotStore.
func (m *Slots) PutSlotConfig(_ context.Context, cfg store.SlotConfig) (store.SlotConfig, error) {
	if err := cfg.Validate(); err != nil {
		return store.SlotConfig{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	vs := m.configs[cfg.Name]
	if len(vs) > 0 {
		if err := store.CheckKeepsWindowSize(&vs[len(vs)-1], &cfg); err != nil {
			return store.SlotConfig{}, err
		}
	}
	n := int64(len(cfg.Name)) + ConfigOverhead
	if err := m.full(n, "a config version"); err != nil {
		return store.SlotConfig{}, err
	}
	m.bytes += n
	m.nconf++
	for i := range vs {
		vs[i].Active = false
	}
	cfg.Headroom = cfg.EffectiveHeadroom()
	cfg.Version = int64(len(vs)) + 1
	cfg.Active = true
	cfg.CreatedAt = time.UnixMicro(m.clk.Now().UnixMicro()).UTC()
	m.configs[cfg.Name] = append(vs, cfg)
	return cfg, nil
}

// ActiveSlotConfig implements store.SlotStore.
func (m *Slots) ActiveSlotConfig(_ context.Context, name string) (store.SlotConfig, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	vs := m.configs[name]
	if len(vs) == 0 || !vs[len(vs)-1].Active {
		return store.SlotConfig{}, store.ErrConfigNotFound
	}
	return vs[len(vs)-1], nil
}

// DeactivateSlotConfig implements store.SlotStore.
func (m *Slots) DeactivateSlotConfig(_ context.Context, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	vs := m.configs[name]
	if len(vs) == 0 || !vs[len(vs)-1].Active {
		return store.ErrConfigNotFound
	}
	vs[len(vs)-1].Active = false
	return nil
}

// AssignSlot implements store.SlotStore.
func (m *Slots) AssignSlot(ctx context.Context, p store.AssignSlotParams) (store.Slot, error) {
	if err := p.Config.CheckStored(); err != nil {
		return store.Slot{}, err
	}
	if err := p.Event.Check(); err != nil {
		return store.Slot{}, err
	}
	out := make([]store.SlotResult, 1)
	m.assign(&p.Config, []store.SlotEvent{p.Event}, []int{0}, out)
	return out[0].Slot, out[0].Err
}

// AssignSlots implements store.SlotStore.
func (m *Slots) AssignSlots(ctx context.Context, p store.AssignSlotsParams) ([]store.SlotResult, error) {
	if err := p.Config.CheckStored(); err != nil {
		return nil, err
	}
	order, first, err := store.SlotBatchOrder(p.Events)
	if err != nil {
		return nil, err
	}
	out := make([]store.SlotResult, len(p.Events))
	m.assign(&p.Config, p.Events, order, out)
	store.FillRepeats(out, first)
	return out, nil
}

// assign places events[order...] (sorted by requested time) as the SQL
// stores' batch walk does; with no other writer, no window is ever held
// by someone else.
func (m *Slots) assign(cfg *store.SlotConfig, events []store.SlotEvent, order []int, out []store.SlotResult) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ws := m.windows[cfg.Name]
	if ws == nil {
		ws = map[int64]*slotWindow{}
		m.windows[cfg.Name] = ws
	}
	size, mx := cfg.WindowSize.Microseconds(), cfg.MaxPerWindow
	count := func(w int64) int64 {
		if sw := ws[w]; sw != nil {
			return sw.count
		}
		return 0
	}
	// bump counts a slot in window w; a window that fills closes and gives
	// its successor an entry, as the SQL stores give it a row.
	// bumpBytes is what bump(w) adds to m.bytes: the slot and the window
	// counters it creates.
	bumpBytes := func(w int64, eventID string) int64 {
		n := slotBytes(eventID)
		sw := ws[w]
		if sw == nil {
			n += WindowOverhead
		}
		if (sw == nil && mx <= 1 || sw != nil && sw.count+1 >= mx && !sw.closed) && ws[w+size] == nil {
			n += WindowOverhead
		}
		return n
	}
	newWindow := func(w int64) *slotWindow {
		sw := &slotWindow{}
		ws[w] = sw
		m.nwin++
		m.bytes += WindowOverhead
		return sw
	}
	bump := func(w int64) {
		sw := ws[w]
		if sw == nil {
			sw = newWindow(w)
		}
		sw.count++
		if sw.count >= mx && !sw.closed {
			sw.closed, sw.next = true, w+size
			if ws[w+size] == nil {
				newWindow(w + size)
			}
		}
	}
	lastWS, cur, lim := int64(-1), int64(-1), int64(0)
	for _, i := range order {
		e := &events[i]
		if sl, ok := m.slots[e.EventID]; ok {
			sl.Status = store.SlotExisting
			out[i] = store.SlotResult{Slot: sl}
			continue
		}
		p := store.PlanSlot(e.RequestedMicros(), size, mx)
		w, sched := int64(-1), int64(0)
		if p.FirstMax > 0 && count(p.WindowStart) < p.FirstMax {
			w, sched = p.WindowStart, p.WindowStart+store.SlotOffset(e.Jitter, p.Elapsed, size)
		} else {
			if p.WindowStart != lastWS {
				lastWS = p.WindowStart
				cur = max(cur, m.nextOpen(ws, p.WindowStart+size, size))
				lim = cur + cfg.EffectiveHeadroom()*size
			}
			for cur < lim {
				if count(cur) >= mx {
					cur = m.nextOpen(ws, cur+size, size)
					lim = cur + cfg.EffectiveHeadroom()*size
					continue
				}
				w, sched = cur, cur+store.SlotOffset(e.Jitter, 0, size)
				break
			}
		}
		if w < 0 {
			out[i] = store.SlotResult{Err: store.ErrExhausted}
			continue
		}
		if err := m.full(bumpBytes(w, e.EventID), "the slot of event "+strconv.Quote(truncateID(e.EventID))); err != nil {
			out[i] = store.SlotResult{Err: err}
			continue
		}
		bump(w)
		m.bytes += slotBytes(e.EventID)
		sl := store.Slot{EventID: e.EventID, ConfigName: cfg.Name, ConfigVersion: cfg.Version,
			RequestedTime: time.UnixMicro(p.Requested).UTC(), WindowStart: time.UnixMicro(w).UTC(),
			ScheduledTime: time.UnixMicro(sched).UTC(), Status: store.SlotNew}
		m.slots[e.EventID] = sl
		out[i] = store.SlotResult{Slot: sl}
	}
}

// nextOpen returns the first window at or after c that is not closed,
// following (and shortening) the links of closed windows.
func (m *Slots) nextOpen(ws map[int64]*slotWindow, c, size int64) int64 {
	var path []*slotWindow
	for {
		sw := ws[c]
		if sw == nil || !sw.closed {
			break
		}
		path = append(path, sw)
		c = sw.next
	}
	c += (size - c%size) % size // align to this config's windows
	for _, sw := range path {
		sw.next = c
	}
	return c
}

// GetSlot implements store.SlotStore.
func (m *Slots) GetSlot(_ context.Context, eventID string) (store.Slot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sl, ok := m.slots[eventID]
	if !ok {
		return store.Slot{}, store.ErrSlotNotFound
	}
	sl.Status = store.SlotExisting
	return sl, nil
}

// SlotWindows implements store.SlotStore.
func (m *Slots) SlotWindows(_ context.Context, name string, from, to time.Time, limit int) ([]store.SlotWindow, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.SlotWindow
	lo, hi := from.UnixMicro(), to.UnixMicro()
	for w, sw := range m.windows[name] {
		if w >= lo && w < hi {
			out = append(out, store.SlotWindow{Start: time.UnixMicro(w).UTC(), Count: sw.count, Closed: sw.closed})
		}
	}
	slices.SortFunc(out, func(a, b store.SlotWindow) int { return a.Start.Compare(b.Start) })
	if len(out) > limit {
		out = out[:max(limit, 0)]
	}
	return out, nil
}

// VerifySlots implements store.SlotStore with the checks of
// store.VerifySlotsSQL.
func (m *Slots) VerifySlots(_ context.Context) (store.SlotReport, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var rep store.SlotReport
	add := func(format string, args ...any) {
		if len(rep.Problems) < store.MaxReportedProblems {
			rep.Problems = append(rep.Problems, fmt.Sprintf(format, args...))
		}
	}
	us := func(v int64) string { return time.UnixMicro(v).UTC().Format(time.RFC3339Nano) }
	type key struct {
		cfg string
		ws  int64
	}
	rows := map[key]int64{}
	for id, sl := range m.slots {
		ws, sc, req := sl.WindowStart.UnixMicro(), sl.ScheduledTime.UnixMicro(), sl.RequestedTime.UnixMicro()
		rows[key{sl.ConfigName, ws}]++
		var size int64
		for _, v := range m.configs[sl.ConfigName] {
			if v.Version == sl.ConfigVersion {
				size = v.WindowSize.Microseconds()
			}
		}
		if size <= 0 || ws%size != 0 || sc < ws || sc >= ws+size || sc < req {
			add("event %q: scheduled %s is not inside its window %s (+%dµs) at or after its requested time %s", id, us(sc), us(ws), size, us(req))
		}
	}
	rep.Slots = int64(len(m.slots))
	for name, ws := range m.windows {
		var mx int64
		for _, v := range m.configs[name] {
			mx = max(mx, v.MaxPerWindow)
		}
		counted := false
		for w, sw := range ws {
			rep.Windows++
			counted = true
			if sw.count > mx {
				add("config %q window %s: counter %d is over the largest maxPerWindow %d", name, us(w), sw.count, mx)
			}
			if n := rows[key{name, w}]; n != sw.count {
				add("config %q window %s: counter says %d slots, %d rows", name, us(w), sw.count, n)
			}
			delete(rows, key{name, w})
		}
		if counted {
			rep.Configs++
		}
	}
	for k, n := range rows {
		add("config %q window %s: counter says 0 slots, %d rows", k.cfg, us(k.ws), n)
	}
	slices.SortFunc(rep.Problems, cmp.Compare)
	return rep, nil
}

// truncateID shortens an event id for an error message.
func truncateID(id string) string {
	if len(id) <= 64 {
		return id
	}
	return id[:64] + "..."
}
