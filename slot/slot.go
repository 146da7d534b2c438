package slot

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sluicerl/sluice/clock"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

// Defaults for the zero fields of Config.
const (
	// DefaultCacheTTL is how long a config stays cached (seed decision 5).
	DefaultCacheTTL = 5 * time.Second
	// DefaultMaxBatch bounds the events of one AssignBatch.
	DefaultMaxBatch = 10_000
)

var (
	// ErrConfigNotFound: no active config has that name (never stored, or
	// deactivated).
	ErrConfigNotFound = store.ErrConfigNotFound
	// ErrBatchTooLarge: an AssignBatch with more events than
	// Config.MaxBatch.
	ErrBatchTooLarge = errors.New("slot: batch holds too many events")
)

// Slot is an event's assigned execution time.
type Slot = store.Slot

// Result is one event's outcome in a batch.
type Result = store.SlotResult

// Event is one event of a batch: its id and the earliest time it may run.
// A plain value; the zero value is refused (no id, no time).
type Event struct {
	EventID       string
	RequestedTime time.Time
}

// Config configures a Scheduler. Zero fields take the documented defaults.
type Config struct {
	// Store keeps configs, counters and slots. Nil means an in-memory
	// store (store/memstore.Slots) with its default byte bound: one
	// process, nothing kept across a restart.
	Store store.SlotStore
	// Clock times the config cache. Nil means the real clock.
	Clock clock.Clock
	// CacheTTL is how long a config read from the store is reused. Zero
	// means DefaultCacheTTL; negative turns the cache off.
	CacheTTL time.Duration
	// Jitter returns a number in [0, 1) that places an event inside its
	// window. It must be safe for concurrent use. Nil means math/rand/v2's
	// Float64; tests pass a seeded source.
	Jitter func() float64
	// MaxBatch bounds the events of one AssignBatch. Zero means
	// DefaultMaxBatch.
	MaxBatch int
}

// Scheduler assigns slots. It is safe for concurrent use. Build it with
// New; the zero value is not usable.
type Scheduler struct {
	st       store.SlotStore
	clk      clock.Clock
	ttl      time.Duration
	jitter   func() float64
	maxBatch int

	mu    sync.Mutex // guards cache
	cache map[string]cached
}

type cached struct {
	cfg     store.SlotConfig
	expires time.Time
}

// New returns a Scheduler for cfg.
func New(cfg Config) (*Scheduler, error) {
	if cfg.Store == nil {
		cfg.Store = memstore.NewSlots(cfg.Clock)
	}
	if cfg.MaxBatch < 0 {
		return nil, fmt.Errorf("slot: config: MaxBatch must be >= 0, got %d", cfg.MaxBatch)
	}
	s := &Scheduler{st: cfg.Store, clk: clock.Or(cfg.Clock), ttl: cfg.CacheTTL, jitter: cfg.Jitter,
		maxBatch: cfg.MaxBatch, cache: map[string]cached{}}
	if s.ttl == 0 {
		s.ttl = DefaultCacheTTL
	}
	if s.jitter == nil {
		s.jitter = rand.Float64
	}
	if s.maxBatch == 0 {
		s.maxBatch = DefaultMaxBatch
	}
	return s, nil
}

// MaxBatch is the most events one AssignBatch takes.
func (s *Scheduler) MaxBatch() int { return s.maxBatch }

// Store returns the slot store the scheduler books in (Config.Store, or
// the in-memory one New made).
func (s *Scheduler) Store() store.SlotStore { return s.st }

// PutConfig stores cfg as the next version of its name, makes it active,
// and caches it.
func (s *Scheduler) PutConfig(ctx context.Context, cfg store.SlotConfig) (store.SlotConfig, error) {
	out, err := s.st.PutSlotConfig(ctx, cfg)
	if err != nil {
		return store.SlotConfig{}, err
	}
	s.remember(out)
	return out, nil
}

func (s *Scheduler) remember(c store.SlotConfig) {
	if s.ttl < 0 {
		return
	}
	s.mu.Lock()
	s.cache[c.Name] = cached{cfg: c, expires: s.clk.Now().Add(s.ttl)}
	s.mu.Unlock()
}

// Config returns the active version of a config, from the cache while it
// is fresh. Another process's new version or deactivation is seen once the
// cached entry expires, or at once after Flush.
func (s *Scheduler) Config(ctx context.Context, name string) (store.SlotConfig, error) {
	if err := store.CheckIDMax("config name", name, store.MaxConfigNameLen); err != nil {
		return store.SlotConfig{}, fmt.Errorf("%w: %w", ErrConfigNotFound, err)
	}
	s.mu.Lock()
	c, ok := s.cache[name]
	s.mu.Unlock()
	if ok && s.clk.Now().Before(c.expires) {
		return c.cfg, nil
	}
	cfg, err := s.st.ActiveSlotConfig(ctx, name)
	if err != nil {
		if errors.Is(err, store.ErrConfigNotFound) {
			s.Flush(name)
		}
		return store.SlotConfig{}, err
	}
	s.remember(cfg)
	return cfg, nil
}

// Flush drops the cached configs named, or every cached config when no
// name is given.
func (s *Scheduler) Flush(names ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(names) == 0 {
		clear(s.cache)
		return
	}
	for _, n := range names {
		delete(s.cache, n)
	}
}

// Deactivate deactivates every version of a config and drops it from the
// cache. Assignments under it fail with ErrConfigNotFound until a new
// version is put.
func (s *Scheduler) Deactivate(ctx context.Context, name string) error {
	if err := store.CheckIDMax("config name", name, store.MaxConfigNameLen); err != nil {
		return fmt.Errorf("%w: %w", ErrConfigNotFound, err)
	}
	err := s.st.DeactivateSlotConfig(ctx, name)
	s.Flush(name)
	return err
}

// Assign gives the event a slot under the active version of configName, or
// returns the slot the event already has (Status SlotExisting), whatever
// the config and time asked now.
func (s *Scheduler) Assign(ctx context.Context, eventID, configName string, requested time.Time) (Slot, error) {
	ev := store.SlotEvent{EventID: eventID, RequestedTime: requested, Jitter: s.jitter()}
	if err := ev.Check(); err != nil {
		return Slot{}, err
	}
	cfg, err := s.Config(ctx, configName)
	if err != nil {
		return Slot{}, err
	}
	return s.st.AssignSlot(ctx, store.AssignSlotParams{Config: cfg, Event: ev})
}

// AssignBatch assigns every event under the active version of configName
// and returns one result per event, in order: a slot (NEW or EXISTING), or
// Err store.ErrExhausted for an event no window within the headroom had
// room for. A repeated id gets the same slot each time. An invalid event
// fails the whole batch before anything is assigned.
func (s *Scheduler) AssignBatch(ctx context.Context, configName string, events []Event) ([]Result, error) {
	if len(events) > s.maxBatch {
		return nil, fmt.Errorf("%w: %d events, at most %d", ErrBatchTooLarge, len(events), s.maxBatch)
	}
	evs := make([]store.SlotEvent, len(events))
	for i, e := range events {
		evs[i] = store.SlotEvent{EventID: e.EventID, RequestedTime: e.RequestedTime, Jitter: s.jitter()}
		if err := evs[i].Check(); err != nil {
			return nil, fmt.Errorf("event %d: %w", i, err)
		}
	}
	cfg, err := s.Config(ctx, configName)
	if err != nil {
		return nil, err
	}
	return s.st.AssignSlots(ctx, store.AssignSlotsParams{Config: cfg, Events: evs})
}

// Get returns an event's slot, or store.ErrSlotNotFound.
func (s *Scheduler) Get(ctx context.Context, eventID string) (Slot, error) {
	if err := store.CheckIDMax("event id", eventID, store.MaxEventIDLen); err != nil {
		return Slot{}, fmt.Errorf("%w: %w", store.ErrSlotNotFound, err)
	}
	return s.st.GetSlot(ctx, eventID)
}

// Verify checks the invariants over every window and slot.
func (s *Scheduler) Verify(ctx context.Context) (store.SlotReport, error) {
	return s.st.VerifySlots(ctx)
}

// Windows returns up to limit window counters of a config starting in
// [from, to).
func (s *Scheduler) Windows(ctx context.Context, name string, from, to time.Time, limit int) ([]store.SlotWindow, error) {
	return s.st.SlotWindows(ctx, name, from, to, limit)
}
