package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	isoduration "github.com/sosodev/duration"
)

// Slot scheduling (seed 003): events are given an execution time so that no
// window of a config's WindowSize holds more than MaxPerWindow of them.
// Windows are aligned to the window size from the Unix epoch; a window's
// counter is shared by every version of a config (seed decision 4).

var (
	// ErrExhausted: no window within the config's headroom had room for the
	// event. Retrying later, or with a larger headroom, may succeed.
	ErrExhausted = errors.New("store: no slot free within the headroom")
	// ErrConfigNotFound: no active slot config has that name.
	ErrConfigNotFound = errors.New("store: no active slot config of that name")
	// ErrSlotNotFound: no slot has been assigned to that event id.
	ErrSlotNotFound = errors.New("store: no slot for that event id")
	// ErrInvalidSlotConfig: a slot config that cannot be enforced; the
	// wrapped message says which field is wrong.
	ErrInvalidSlotConfig = errors.New("store: invalid slot config")
	// ErrInvalidEvent: an event without an id, with an id that is too long,
	// without a requested time, or with a jitter outside [0, 1).
	ErrInvalidEvent = errors.New("store: invalid slot event")
)

// Bounds of slot configs and events, so that every product and sum the
// backends compute fits in an int64 of microseconds.
const (
	// DefaultSlotHeadroom is the headroom (in windows) of a config that
	// gives none: how far past the first open window a search goes.
	DefaultSlotHeadroom = 100
	// MaxSlotsPerWindow is the largest MaxPerWindow.
	MaxSlotsPerWindow = 1_000_000
	// MaxSlotWindow is the longest WindowSize.
	MaxSlotWindow = 24 * time.Hour
	// MaxSlotHeadroom is the largest Headroom.
	MaxSlotHeadroom = 1_000_000
	// MaxEventIDLen is the longest event id, in bytes.
	MaxEventIDLen = 256
	// MaxConfigNameLen is the longest config name, in bytes.
	MaxConfigNameLen = 128
)

// SlotStatus says whether an assignment made a new slot or found the one
// the event already had. The zero value is SlotNew.
type SlotStatus uint8

const (
	// SlotNew: the event got a new slot in this call.
	SlotNew SlotStatus = iota
	// SlotExisting: the event already had a slot; it is returned unchanged.
	SlotExisting
)

// String returns NEW or EXISTING, as the API spells them.
func (s SlotStatus) String() string {
	switch s {
	case SlotNew:
		return "NEW"
	case SlotExisting:
		return "EXISTING"
	}
	return fmt.Sprintf("slot_status(%d)", uint8(s))
}

// SlotConfig is one version of a named slot config: a plain value, safe to
// copy and to share read-only between goroutines. The zero value is not
// valid; see Validate.
type SlotConfig struct {
	Name string
	// Version is set by the store: 1 for a name's first config, then one
	// more for each new config of the same name.
	Version int64
	// MaxPerWindow is the most events one window holds, 1 to
	// MaxSlotsPerWindow.
	MaxPerWindow int64
	// WindowSize is the window length: whole microseconds, from 1ms to
	// MaxSlotWindow. Windows start at multiples of it from the Unix epoch.
	// Every version of a name has the same WindowSize (the versions share
	// the window counters; see CheckKeepsWindowSize).
	WindowSize time.Duration
	// Headroom bounds a search: it fails with ErrExhausted once it has
	// looked Headroom windows past the first window it found held by
	// another transaction. Full windows are skipped through an index and
	// never count. Zero means DefaultSlotHeadroom.
	Headroom int64
	// Active is false once the config has been deactivated. Set by the
	// store.
	Active bool
	// CreatedAt is when this version was stored. Set by the store.
	CreatedAt time.Time
}

// EffectiveHeadroom returns Headroom with its default applied.
func (c *SlotConfig) EffectiveHeadroom() int64 {
	if c.Headroom == 0 {
		return DefaultSlotHeadroom
	}
	return c.Headroom
}

// Validate reports whether the config can be enforced, naming the field
// that cannot.
func (c *SlotConfig) Validate() error {
	if err := checkIDAs(ErrInvalidSlotConfig, "name", c.Name, MaxConfigNameLen); err != nil {
		return err
	}
	switch {
	case c.MaxPerWindow < 1 || c.MaxPerWindow > MaxSlotsPerWindow:
		return fmt.Errorf("%w %q: maxPerWindow must be from 1 to %d, got %d", ErrInvalidSlotConfig, c.Name, MaxSlotsPerWindow, c.MaxPerWindow)
	case c.WindowSize < time.Millisecond || c.WindowSize > MaxSlotWindow:
		return fmt.Errorf("%w %q: windowSize must be from 1ms (PT0.001S) to 24h (PT24H), got %s", ErrInvalidSlotConfig, c.Name, c.WindowSize)
	case c.WindowSize%time.Microsecond != 0:
		return fmt.Errorf("%w %q: windowSize must be whole microseconds, got %s", ErrInvalidSlotConfig, c.Name, c.WindowSize)
	case c.Headroom < 0 || c.Headroom > MaxSlotHeadroom:
		return fmt.Errorf("%w %q: headroom must be from 0 (default %d) to %d windows, got %d", ErrInvalidSlotConfig, c.Name, DefaultSlotHeadroom, MaxSlotHeadroom, c.Headroom)
	}
	return nil
}

// CheckStored reports whether the config is valid and is a stored version
// (Version set), as assignments need.
func (c *SlotConfig) CheckStored() error {
	if err := c.Validate(); err != nil {
		return err
	}
	if c.Version < 1 {
		return fmt.Errorf("%w %q: version must be set (a stored config)", ErrInvalidSlotConfig, c.Name)
	}
	return nil
}

// CheckKeepsWindowSize reports whether next, a new version of a config
// whose latest stored version is prev, keeps its window size: the window
// counters are shared by every version of a name (seed decision 4), so
// windows of another size would overlap the counted ones and no counter
// would bound them. A different window size needs a new config name.
func CheckKeepsWindowSize(prev, next *SlotConfig) error {
	if prev.WindowSize != next.WindowSize {
		return fmt.Errorf("%w %q: windowSize cannot change from %s to %s: every version shares the window counters; use a new config name",
			ErrInvalidSlotConfig, next.Name, FormatWindowSize(prev.WindowSize), FormatWindowSize(next.WindowSize))
	}
	return nil
}

// ParseWindowSize parses an ISO-8601 duration such as PT4S, PT1M or P1D.
// Years, months and weeks are refused: they have no fixed length.
func ParseWindowSize(s string) (time.Duration, error) {
	d, err := isoduration.Parse(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not an ISO-8601 duration such as PT4S: %w", s, err)
	}
	if d.Years != 0 || d.Months != 0 || d.Weeks != 0 {
		return 0, fmt.Errorf("%q uses years, months or weeks, which have no fixed length; use days (P1D) or smaller", s)
	}
	if d.Negative {
		return 0, fmt.Errorf("%q is negative", s)
	}
	secs := d.Days*86400 + d.Hours*3600 + d.Minutes*60 + d.Seconds
	if math.IsNaN(secs) || secs > MaxSlotWindow.Seconds() {
		return 0, fmt.Errorf("%q is longer than 24h", s)
	}
	// Round to the microsecond (0.1 is not exact in binary), but refuse a
	// fraction of one rather than change the window silently.
	us := secs * 1e6
	if math.Abs(us-math.Round(us)) > 1e-3 {
		return 0, fmt.Errorf("%q has a fraction of a microsecond; window sizes are whole microseconds", s)
	}
	return time.Duration(math.Round(us)) * time.Microsecond, nil
}

// FormatWindowSize formats a window size as an ISO-8601 duration (PT4S).
func FormatWindowSize(d time.Duration) string {
	return isoduration.Format(d)
}

// SlotEvent is one event to schedule: a plain value. The zero value is not
// valid; see Check.
type SlotEvent struct {
	EventID string
	// RequestedTime is the earliest time the event may be scheduled at.
	RequestedTime time.Time
	// Jitter, in [0, 1), places the event inside its window: the scheduled
	// time is the window's start plus Jitter times the window (the part
	// of it after RequestedTime, in the requested window). Take it from a
	// random source; tests use a seeded one.
	Jitter float64
}

// Check reports whether the event can be scheduled.
func (e *SlotEvent) Check() error {
	if err := checkIDAs(ErrInvalidEvent, "event id", e.EventID, MaxEventIDLen); err != nil {
		return err
	}
	switch {
	case e.RequestedTime.IsZero():
		return fmt.Errorf("%w %q: requested time is required", ErrInvalidEvent, e.EventID)
	case !(e.Jitter >= 0 && e.Jitter < 1):
		return fmt.Errorf("%w %q: jitter must be in [0, 1), got %v", ErrInvalidEvent, e.EventID, e.Jitter)
	}
	us := e.RequestedMicros()
	if us < 0 || us > maxSlotTime {
		return fmt.Errorf("%w %q: requested time %s is outside 1970-01-01 to 9999-12-31", ErrInvalidEvent, e.EventID, e.RequestedTime.UTC().Format(time.RFC3339))
	}
	return nil
}

// RequestedMicros returns RequestedTime in Unix microseconds, the unit
// backends schedule in, rounded up: a requested time between two
// microseconds becomes the later one, so that no event is scheduled before
// the time it asked for.
func (e *SlotEvent) RequestedMicros() int64 {
	us := e.RequestedTime.UnixMicro()
	if e.RequestedTime.Nanosecond()%1000 != 0 {
		us++
	}
	return us
}

// ValidSlotConfigName reports whether name could name a stored config (1
// to MaxConfigNameLen bytes by the identifier rule, ident.go): a lookup of
// any other name finds nothing.
func ValidSlotConfigName(name string) bool {
	return CheckIDMax("name", name, MaxConfigNameLen) == nil
}

// ValidEventID reports whether id could be a stored event id (1 to
// MaxEventIDLen bytes by the identifier rule, ident.go): a lookup of any
// other id finds nothing.
func ValidEventID(id string) bool {
	return CheckIDMax("event id", id, MaxEventIDLen) == nil
}

// maxSlotTime is 9999-12-31T00:00:00Z in Unix microseconds: far enough for
// any schedule, and far from int64 overflow when windows are added.
const maxSlotTime = 253402214400_000000

// AssignSlotParams asks for a slot for one event under Config (a stored,
// active version: Name and Version must be set).
type AssignSlotParams struct {
	Config SlotConfig
	Event  SlotEvent
}

// AssignSlotsParams asks for slots for many events under one config. The
// events may request different times and may repeat an id.
type AssignSlotsParams struct {
	Config SlotConfig
	Events []SlotEvent
}

// Slot is an event's assigned execution time, in UTC: a plain value. The
// zero value means no slot.
type Slot struct {
	EventID       string
	ConfigName    string
	ConfigVersion int64
	RequestedTime time.Time
	WindowStart   time.Time
	ScheduledTime time.Time
	Status        SlotStatus
}

// SlotResult is one event's outcome in a batch: a slot, or Err
// (ErrExhausted) when no window within the headroom had room. A plain
// value.
type SlotResult struct {
	Slot Slot
	Err  error
}

// SlotReport is what VerifySlots found: a plain value. Problems is empty
// when every invariant holds (as in the zero value).
type SlotReport struct {
	Configs  int64 // config names with at least one window
	Windows  int64 // window counter rows
	Slots    int64 // slot rows
	Problems []string
}

// MaxReportedProblems bounds SlotReport.Problems.
const MaxReportedProblems = 100

// SlotStore keeps slot configs, window counters and slots. Each method is
// one atomic operation (AssignSlots: a few transactions, each atomic for
// the events it covers). Implementations must be safe for concurrent use.
type SlotStore interface {
	// PutSlotConfig stores cfg as the next version of its name and makes it
	// the active one. It returns the stored config. A version whose
	// WindowSize differs from the name's earlier versions (active or not)
	// is refused with ErrInvalidSlotConfig (CheckKeepsWindowSize).
	PutSlotConfig(ctx context.Context, cfg SlotConfig) (SlotConfig, error)
	// ActiveSlotConfig returns the active (latest) version of a config, or
	// ErrConfigNotFound.
	ActiveSlotConfig(ctx context.Context, name string) (SlotConfig, error)
	// DeactivateSlotConfig deactivates every version of a config; assigning
	// under it fails with ErrConfigNotFound until a new version is put. It
	// returns ErrConfigNotFound if no version is active.
	DeactivateSlotConfig(ctx context.Context, name string) error
	// AssignSlot gives one event a slot, or returns the one it has.
	AssignSlot(ctx context.Context, p AssignSlotParams) (Slot, error)
	// AssignSlots gives every event a slot (or returns the one it has), one
	// result per event in order. A repeated id gets the same slot each time.
	AssignSlots(ctx context.Context, p AssignSlotsParams) ([]SlotResult, error)
	// GetSlot returns an event's slot (Status SlotExisting), or
	// ErrSlotNotFound.
	GetSlot(ctx context.Context, eventID string) (Slot, error)
	// VerifySlots checks the invariants over every window and slot: no
	// window over its maximum, counters equal to the rows, every slot inside
	// its window and not before its requested time, every CLOSED window
	// followed by a window row (the skip over full windows relies on it).
	VerifySlots(ctx context.Context) (SlotReport, error)
	// SlotWindows returns up to limit window counters of a config whose
	// start is in [from, to), in time order.
	SlotWindows(ctx context.Context, name string, from, to time.Time, limit int) ([]SlotWindow, error)
}

// SlotWindow is one window's counter: a plain value.
type SlotWindow struct {
	Start  time.Time
	Count  int64
	Closed bool // the window is full: searches skip it
}

// SlotPlan is the arithmetic of one event's placement, the same on every
// backend (the PostgreSQL functions compute it in SQL, bit for bit). Times
// are Unix microseconds. A plain value.
type SlotPlan struct {
	Requested   int64
	WindowStart int64 // the requested window
	Elapsed     int64 // Requested - WindowStart
	// FirstMax is floor(MaxPerWindow * remaining / WindowSize): the
	// requested window's capacity for this event.
	FirstMax int64
}

// PlanSlot computes the placement arithmetic for an event requesting
// requested (Unix µs) under a window of size µs holding max events.
func PlanSlot(requested, size, max int64) SlotPlan {
	ws := requested - requested%size // requested >= 0
	el := requested - ws
	return SlotPlan{Requested: requested, WindowStart: ws, Elapsed: el, FirstMax: max * (size - el) / size}
}

// SlotOffset is where in a window an event with jitter j lands: from is
// the first usable microsecond (Elapsed in the requested window, else 0),
// size the window. The result is in [from, size).
func SlotOffset(j float64, from, size int64) int64 {
	span := size - from
	off := int64(j * float64(span)) // j >= 0: truncation is floor
	return from + min(off, span-1)
}

// SlotBatchOrder checks a batch's events and returns the order backends
// place them in: the first occurrence of each id, sorted by requested time
// (stable, so equal times keep the caller's order). first[i] is the index
// of the first event with event i's id.
func SlotBatchOrder(events []SlotEvent) (order, first []int, err error) {
	seen := make(map[string]int, len(events))
	first = make([]int, len(events))
	order = make([]int, 0, len(events))
	for i := range events {
		e := &events[i]
		if err := e.Check(); err != nil {
			return nil, nil, fmt.Errorf("event %d: %w", i, err)
		}
		if j, ok := seen[e.EventID]; ok {
			first[i] = j
			continue
		}
		seen[e.EventID] = i
		first[i] = i
		order = append(order, i)
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return events[a].RequestedTime.Compare(events[b].RequestedTime)
	})
	return order, first, nil
}

// FillRepeats gives every repeated id of a batch the result of its first
// occurrence (see SlotBatchOrder); a slot that occurrence made is EXISTING
// for the repeats.
func FillRepeats(out []SlotResult, first []int) {
	for i, j := range first {
		if i != j {
			out[i] = out[j]
			out[i].Slot.Status = SlotExisting
		}
	}
}

// SlotQuerier runs a read-only query and calls scan once per row with a
// function that scans the row into dst. Backends adapt their drivers to it
// so that VerifySlotsSQL runs the same SQL on each.
type SlotQuerier interface {
	Query(ctx context.Context, sql string, scan func(row func(dst ...any) error) error) error
}

// VerifySlotsSQL checks the slot invariants with SQL that PostgreSQL and
// SQLite both run (the schema of migration slots), adding what it finds to
// rep. Run it inside one read transaction.
func VerifySlotsSQL(ctx context.Context, q SlotQuerier, rep *SlotReport) error {
	add := func(format string, args ...any) {
		if len(rep.Problems) < MaxReportedProblems {
			rep.Problems = append(rep.Problems, fmt.Sprintf(format, args...))
		}
	}
	us := func(v int64) string { return time.UnixMicro(v).UTC().Format(time.RFC3339Nano) }
	if err := q.Query(ctx, `SELECT count(DISTINCT config_name), count(*) FROM sluice_slot_windows`,
		func(row func(...any) error) error { return row(&rep.Configs, &rep.Windows) }); err != nil {
		return err
	}
	if err := q.Query(ctx, `SELECT count(*) FROM sluice_slots`,
		func(row func(...any) error) error { return row(&rep.Slots) }); err != nil {
		return err
	}
	checks := []struct {
		sql  string
		scan func(row func(...any) error) error
	}{
		{`SELECT w.config_name, w.window_start, w.slot_count, m.mx
FROM sluice_slot_windows w
JOIN (SELECT name, max(max_per_window) AS mx FROM sluice_slot_configs GROUP BY name) m ON m.name = w.config_name
WHERE w.slot_count > m.mx ORDER BY 1, 2 LIMIT 100`, func(row func(...any) error) error {
			var cfg string
			var ws, n, mx int64
			if err := row(&cfg, &ws, &n, &mx); err != nil {
				return err
			}
			add("config %q window %s: counter %d is over the largest maxPerWindow %d", cfg, us(ws), n, mx)
			return nil
		}},
		{`SELECT r.config_name, r.window_start, r.n, m.mx
FROM (SELECT config_name, window_start, count(*) AS n FROM sluice_slots GROUP BY config_name, window_start) r
LEFT JOIN (SELECT name, max(max_per_window) AS mx FROM sluice_slot_configs GROUP BY name) m ON m.name = r.config_name
WHERE m.mx IS NULL OR r.n > m.mx ORDER BY 1, 2 LIMIT 100`, func(row func(...any) error) error {
			var cfg string
			var ws, n int64
			var mx *int64
			if err := row(&cfg, &ws, &n, &mx); err != nil {
				return err
			}
			if mx == nil {
				add("config %q window %s: %d slots under a config that was never stored", cfg, us(ws), n)
			} else {
				add("config %q window %s: %d slots, over the largest maxPerWindow %d", cfg, us(ws), n, *mx)
			}
			return nil
		}},
		{`SELECT coalesce(w.config_name, r.config_name), coalesce(w.window_start, r.window_start),
       coalesce(w.slot_count, 0), coalesce(r.n, 0)
FROM sluice_slot_windows w
FULL JOIN (SELECT config_name, window_start, count(*) AS n FROM sluice_slots GROUP BY config_name, window_start) r
  ON r.config_name = w.config_name AND r.window_start = w.window_start
WHERE coalesce(w.slot_count, 0) <> coalesce(r.n, 0) ORDER BY 1, 2 LIMIT 100`, func(row func(...any) error) error {
			var cfg string
			var ws, c, n int64
			if err := row(&cfg, &ws, &c, &n); err != nil {
				return err
			}
			add("config %q window %s: counter says %d slots, %d rows", cfg, us(ws), c, n)
			return nil
		}},
		{`SELECT w.config_name, w.window_start FROM sluice_slot_windows w
JOIN (SELECT name, max(window_us) AS us FROM sluice_slot_configs GROUP BY name) c ON c.name = w.config_name
WHERE w.status = 'CLOSED' AND NOT EXISTS (SELECT 1 FROM sluice_slot_windows n
    WHERE n.config_name = w.config_name AND n.window_start = w.window_start + c.us)
ORDER BY 1, 2 LIMIT 100`, func(row func(...any) error) error {
			var cfg string
			var ws int64
			if err := row(&cfg, &ws); err != nil {
				return err
			}
			add("config %q window %s: CLOSED but the next window has no row, so searches skip past it", cfg, us(ws))
			return nil
		}},
		{`SELECT event_id, requested_at, window_start, scheduled_at, window_us FROM sluice_slots
WHERE window_us <= 0 OR window_start % window_us <> 0 OR scheduled_at < window_start
   OR scheduled_at >= window_start + window_us OR scheduled_at < requested_at
ORDER BY 1 LIMIT 100`, func(row func(...any) error) error {
			var id string
			var req, ws, sc, w int64
			if err := row(&id, &req, &ws, &sc, &w); err != nil {
				return err
			}
			add("event %q: scheduled %s is not inside its window %s (+%dµs) at or after its requested time %s", id, us(sc), us(ws), w, us(req))
			return nil
		}},
	}
	for _, c := range checks {
		if err := q.Query(ctx, c.sql, c.scan); err != nil {
			return err
		}
	}
	return nil
}
