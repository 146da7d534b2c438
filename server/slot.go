package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicerl/sluice/auth"
	"github.com/sluicerl/sluice/slot"
	"github.com/sluicerl/sluice/store"
)

// Problem types of the slot API.
const (
	// TypeUnknownConfig: 422 (or 404 on GET), no active slot config of
	// that name.
	TypeUnknownConfig = "urn:sluice:problem:unknown-slot-config"
	// TypeSlotsExhausted: 409, no window within the config's headroom had
	// room for the event.
	TypeSlotsExhausted = "urn:sluice:problem:slots-exhausted"
	// TypeSlotNotFound: 404, no slot for that event id.
	TypeSlotNotFound = "urn:sluice:problem:slot-not-found"
)

// Slot routes (seed 003's paths), also the route labels of
// sluice_http_requests_total.
const (
	routeSlots          = "/api/v1/slots"
	routeSlotsBatch     = "/api/v1/slots/batch"
	routeSlot           = "/api/v1/slots/{eventId...}"
	routeSlotConfig     = "/admin/rate-limit/config"
	routeSlotConfigName = "/admin/rate-limit/config/{name}"
	routeSlotDeactivate = "/admin/rate-limit/config/{name}/deactivate"
	routeSlotFlush      = "/admin/rate-limit/cache/flush"
	routeSlotVerify     = "/admin/rate-limit/verify"
)

// slotMetrics count slot assignments. Labels are fixed words, never config
// names or event ids.
type slotMetrics struct {
	events   *prometheus.CounterVec   // status: new, existing, exhausted
	duration *prometheus.HistogramVec // op: assign, batch
}

func newSlotMetrics(reg prometheus.Registerer) (*slotMetrics, error) {
	m := &slotMetrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_slot_events_total",
			Help: "Events the slot API answered, by status: new (a slot was made), existing (the event had one), exhausted (no window within the headroom).",
		}, []string{"status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_slot_store_duration_seconds",
			Help:    "Time the slot store took per call, by op (assign: one event, batch: many).",
			Buckets: prometheus.ExponentialBuckets(50e-6, 4, 10),
		}, []string{"op"}),
	}
	for _, c := range []prometheus.Collector{m.events, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("server: register slot metrics: %w", err)
		}
	}
	for _, st := range []string{"new", "existing", "exhausted"} {
		m.events.WithLabelValues(st)
	}
	return m, nil
}

// slotRoutes returns the slot endpoints, or none without Config.Slots.
func (s *Server) slotRoutes() []route {
	if s.slots == nil {
		return nil
	}
	return []route{
		{http.MethodPost, routeSlots, s.assignSlot, auth.Slots},
		{http.MethodPost, routeSlotsBatch, s.assignSlots, auth.Slots},
		{http.MethodGet, routeSlot, s.getSlot, auth.Read},
		{http.MethodPost, routeSlotConfig, s.putSlotConfig, auth.Admin},
		{http.MethodGet, routeSlotConfigName, s.getSlotConfig, auth.Read},
		{http.MethodPost, routeSlotDeactivate, s.deactivateSlotConfig, auth.Admin},
		{http.MethodPost, routeSlotFlush, s.flushSlotConfigs, auth.Admin},
		{http.MethodGet, routeSlotVerify, s.verifySlots, auth.Admin},
	}
}

// slotJSON is a slot as the API spells it (the seed's camelCase names).
type slotJSON struct {
	EventID       string `json:"eventId"`
	ConfigName    string `json:"configName,omitempty"`
	ConfigVersion int64  `json:"configVersion,omitempty"`
	RequestedTime string `json:"requestedTime,omitempty"`
	WindowStart   string `json:"windowStart,omitempty"`
	ScheduledTime string `json:"scheduledTime,omitempty"`
	Status        string `json:"status"`
	Error         string `json:"error,omitempty"`
}

func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func toSlotJSON(sl slot.Slot) slotJSON {
	return slotJSON{
		EventID:       sl.EventID,
		ConfigName:    sl.ConfigName,
		ConfigVersion: sl.ConfigVersion,
		RequestedTime: formatTime(sl.RequestedTime),
		WindowStart:   formatTime(sl.WindowStart),
		ScheduledTime: formatTime(sl.ScheduledTime),
		Status:        sl.Status.String(),
	}
}

type slotConfigJSON struct {
	ConfigName   string `json:"configName"`
	Version      int64  `json:"version"`
	MaxPerWindow int64  `json:"maxPerWindow"`
	WindowSize   string `json:"windowSize"`
	Headroom     int64  `json:"headroom"`
	Active       bool   `json:"active"`
	CreatedAt    string `json:"createdAt"`
}

func toSlotConfigJSON(c store.SlotConfig) slotConfigJSON {
	return slotConfigJSON{
		ConfigName:   c.Name,
		Version:      c.Version,
		MaxPerWindow: c.MaxPerWindow,
		WindowSize:   store.FormatWindowSize(c.WindowSize),
		Headroom:     c.EffectiveHeadroom(),
		Active:       c.Active,
		CreatedAt:    formatTime(c.CreatedAt),
	}
}

// parseRequested reads an RFC 3339 time; it adds an error and returns the
// zero time when it cannot.
func (f *fieldErrs) parseTime(raw string, path ...string) time.Time {
	if raw == "" {
		f.add(TypeInvalidRequest, path, "is required (RFC 3339, such as 2025-06-01T12:00:00Z)")
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, raw)
	if err != nil {
		f.add(TypeInvalidRequest, path, "must be an RFC 3339 time such as 2025-06-01T12:00:00Z, got %q", truncate(raw, 64))
		return time.Time{}
	}
	if t.Year() < 1970 || t.Year() > 9998 {
		f.add(TypeInvalidRequest, path, "must be between 1970 and 9998, got %q", truncate(raw, 64))
		return time.Time{}
	}
	return t
}

func (f *fieldErrs) eventID(id string, path ...string) {
	switch {
	case id == "":
		f.add(TypeInvalidRequest, path, "is required")
	case idReason(id, store.MaxEventIDLen) != "":
		f.add(TypeInvalidRequest, path, "%s", idReason(id, store.MaxEventIDLen))
	}
}

// nameProblem says what keeps a config name from being stored, or "".
func nameProblem(name string) string {
	switch {
	case name == "":
		return "is required"
	}
	return idReason(name, store.MaxConfigNameLen)
}

func (f *fieldErrs) configName(name string, path ...string) {
	if p := nameProblem(name); p != "" {
		f.add(TypeInvalidRequest, path, "%s", p)
	}
}

type assignBody struct {
	EventID       string `json:"eventId"`
	ConfigName    string `json:"configName"`
	RequestedTime string `json:"requestedTime"`
}

func (s *Server) assignSlot(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	var body assignBody
	if p := s.readJSON(r, &body, "eventId, configName and requestedTime"); p != nil {
		writeProblem(w, p)
		return
	}
	var errs fieldErrs
	errs.eventID(body.EventID, "eventId")
	errs.configName(body.ConfigName, "configName")
	at := errs.parseTime(body.RequestedTime, "requestedTime")
	if len(errs) > 0 {
		writeProblem(w, invalid(errs))
		return
	}
	start := time.Now()
	sl, err := s.slots.Assign(r.Context(), body.EventID, body.ConfigName, at)
	s.slotMetrics.duration.WithLabelValues("assign").Observe(time.Since(start).Seconds())
	switch {
	case err == nil && sl.Status == store.SlotNew:
		s.slotMetrics.events.WithLabelValues("new").Inc()
	case err == nil:
		s.slotMetrics.events.WithLabelValues("existing").Inc()
	case errors.Is(err, store.ErrExhausted):
		s.slotMetrics.events.WithLabelValues("exhausted").Inc()
	}
	if err != nil {
		s.slotError(w, err, body.ConfigName)
		return
	}
	s.observeSlotConfig(body.ConfigName)
	status := http.StatusOK
	if sl.Status == store.SlotNew {
		status = http.StatusCreated
	}
	writeJSON(w, status, contentJSON, toSlotJSON(sl))
}

type batchBody struct {
	ConfigName string            `json:"configName"`
	Events     []json.RawMessage `json:"events"`
}

type batchEvent struct {
	EventID       string `json:"eventId"`
	RequestedTime string `json:"requestedTime"`
}

type batchJSON struct {
	ConfigName string     `json:"configName"`
	Assigned   int        `json:"assigned"`
	Existing   int        `json:"existing"`
	Exhausted  int        `json:"exhausted"`
	Results    []slotJSON `json:"results"`
}

func (s *Server) assignSlots(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	var body batchBody
	if p := s.readJSON(r, &body, "configName and events"); p != nil {
		writeProblem(w, p)
		return
	}
	var errs fieldErrs
	errs.configName(body.ConfigName, "configName")
	switch {
	case len(body.Events) == 0:
		errs.add(TypeInvalidRequest, []string{"events"}, "must hold at least one event")
	case len(body.Events) > s.slots.MaxBatch():
		errs.add(TypeInvalidRequest, []string{"events"}, "holds %d events; at most %d are allowed", len(body.Events), s.slots.MaxBatch())
	}
	if len(errs) > 0 {
		writeProblem(w, invalid(errs))
		return
	}
	events := make([]slot.Event, len(body.Events))
	for i, raw := range body.Events {
		var e batchEvent
		if p := decodeJSON(raw, &e, []string{"events", strconv.Itoa(i)}, "eventId and requestedTime"); p != nil {
			writeProblem(w, p)
			return
		}
		errs.eventID(e.EventID, "events", strconv.Itoa(i), "eventId")
		events[i] = slot.Event{EventID: e.EventID, RequestedTime: errs.parseTime(e.RequestedTime, "events", strconv.Itoa(i), "requestedTime")}
		if len(errs) >= 20 {
			break // enough to fix the request
		}
	}
	if len(errs) > 0 {
		writeProblem(w, invalid(errs))
		return
	}
	start := time.Now()
	res, err := s.slots.AssignBatch(r.Context(), body.ConfigName, events)
	s.slotMetrics.duration.WithLabelValues("batch").Observe(time.Since(start).Seconds())
	if err != nil {
		s.slotError(w, err, body.ConfigName)
		return
	}
	s.observeSlotConfig(body.ConfigName)
	out := batchJSON{ConfigName: body.ConfigName, Results: make([]slotJSON, len(res))}
	for i, rs := range res {
		switch {
		case rs.Err != nil:
			out.Exhausted++
			out.Results[i] = slotJSON{EventID: events[i].EventID, Status: "EXHAUSTED", Error: rs.Err.Error()}
			continue
		case rs.Slot.Status == store.SlotNew:
			out.Assigned++
		default:
			out.Existing++
		}
		out.Results[i] = toSlotJSON(rs.Slot)
	}
	s.slotMetrics.events.WithLabelValues("new").Add(float64(out.Assigned))
	s.slotMetrics.events.WithLabelValues("existing").Add(float64(out.Existing))
	s.slotMetrics.events.WithLabelValues("exhausted").Add(float64(out.Exhausted))
	writeJSON(w, http.StatusOK, contentJSON, out)
}

func (s *Server) getSlot(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	id := r.PathValue("eventId")
	if p := paramProblem("path", "eventId", id, store.MaxEventIDLen); p != nil {
		writeProblem(w, p)
		return
	}
	sl, err := s.slots.Get(r.Context(), id)
	if err != nil {
		s.slotError(w, err, "")
		return
	}
	writeJSON(w, http.StatusOK, contentJSON, toSlotJSON(sl))
}

type configBody struct {
	ConfigName   string          `json:"configName"`
	MaxPerWindow json.RawMessage `json:"maxPerWindow"`
	WindowSize   string          `json:"windowSize"`
	Headroom     json.RawMessage `json:"headroom"`
}

func (s *Server) putSlotConfig(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	var body configBody
	if p := s.readJSON(r, &body, "configName, maxPerWindow, windowSize and headroom"); p != nil {
		writeProblem(w, p)
		return
	}
	var errs fieldErrs
	errs.configName(body.ConfigName, "configName")
	cfg := store.SlotConfig{Name: body.ConfigName}
	if body.MaxPerWindow == nil {
		errs.add(TypeInvalidRequest, []string{"maxPerWindow"}, "is required")
	} else if n, msg := parseCost(body.MaxPerWindow); msg != "" {
		errs.add(TypeInvalidRequest, []string{"maxPerWindow"}, "%s", msg)
	} else if n < 1 || n > store.MaxSlotsPerWindow {
		errs.add(TypeInvalidRequest, []string{"maxPerWindow"}, "must be from 1 to %d, got %d", store.MaxSlotsPerWindow, n)
	} else {
		cfg.MaxPerWindow = n
	}
	if body.WindowSize == "" {
		errs.add(TypeInvalidRequest, []string{"windowSize"}, "is required (an ISO-8601 duration such as PT4S)")
	} else if d, err := store.ParseWindowSize(body.WindowSize); err != nil {
		errs.add(TypeInvalidRequest, []string{"windowSize"}, "%v", err)
	} else {
		cfg.WindowSize = d
	}
	if body.Headroom != nil && string(body.Headroom) != "null" {
		if n, msg := parseCost(body.Headroom); msg != "" {
			errs.add(TypeInvalidRequest, []string{"headroom"}, "%s", msg)
		} else {
			cfg.Headroom = n
		}
	}
	if len(errs) == 0 {
		if err := cfg.Validate(); err != nil {
			errs = append(errs, fieldError{Pointer: pointer(), kind: TypeInvalidRequest, Detail: strings.TrimPrefix(err.Error(), "store: ")})
		}
	}
	if len(errs) > 0 {
		writeProblem(w, invalid(errs))
		return
	}
	out, err := s.slots.PutConfig(r.Context(), cfg)
	if err != nil {
		s.slotError(w, err, cfg.Name)
		return
	}
	s.observeSlotConfig(out.Name)
	writeJSON(w, http.StatusCreated, contentJSON, toSlotConfigJSON(out))
}

func (s *Server) getSlotConfig(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	name := r.PathValue("name")
	if p := paramProblem("path", "name", name, store.MaxConfigNameLen); p != nil {
		writeProblem(w, p)
		return
	}
	c, err := s.slots.Config(r.Context(), name)
	if errors.Is(err, store.ErrConfigNotFound) {
		writeProblem(w, &problem{Type: TypeUnknownConfig, Title: "Unknown slot config", Status: http.StatusNotFound,
			Detail: fmt.Sprintf("no active slot config named %q", truncate(name, 64))})
		return
	}
	if err != nil {
		s.slotError(w, err, name)
		return
	}
	writeJSON(w, http.StatusOK, contentJSON, toSlotConfigJSON(c))
}

func (s *Server) deactivateSlotConfig(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if p := paramProblem("path", "name", name, store.MaxConfigNameLen); p != nil {
		writeProblem(w, p)
		return
	}
	err := s.slots.Deactivate(r.Context(), name)
	if errors.Is(err, store.ErrConfigNotFound) {
		writeProblem(w, &problem{Type: TypeUnknownConfig, Title: "Unknown slot config", Status: http.StatusNotFound,
			Detail: fmt.Sprintf("no active slot config named %q", truncate(name, 64))})
		return
	}
	if err != nil {
		s.slotError(w, err, name)
		return
	}
	writeJSON(w, http.StatusOK, contentJSON, map[string]any{"configName": name, "active": false})
}

// flushSlotConfigs drops cached configs: the one named by ?configName=,
// or every one.
func (s *Server) flushSlotConfigs(w http.ResponseWriter, r *http.Request) {
	names := r.URL.Query()["configName"]
	for _, n := range names {
		if p := paramProblem("query", "configName", n, store.MaxConfigNameLen); p != nil {
			writeProblem(w, p)
			return
		}
	}
	s.slots.Flush(names...)
	writeJSON(w, http.StatusOK, contentJSON, map[string]any{"flushed": true})
}

// verifySlots checks the slot invariants over the whole records database
// (slot.Scheduler.Verify: a full scan, hence scope admin) and answers the
// counts and the problems found, ok when there are none.
func (s *Server) verifySlots(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	rep, err := s.slots.Verify(r.Context())
	if err != nil {
		s.slotError(w, err, "")
		return
	}
	problems := rep.Problems
	if problems == nil {
		problems = []string{}
	}
	writeJSON(w, http.StatusOK, contentJSON, map[string]any{
		"ok": len(problems) == 0, "configs": rep.Configs, "windows": rep.Windows, "slots": rep.Slots, "problems": problems,
	})
}

// slotError answers an error of the slot scheduler.
func (s *Server) slotError(w http.ResponseWriter, err error, config string) {
	switch {
	case errors.Is(err, store.ErrConfigNotFound):
		var errs fieldErrs
		errs.add(TypeUnknownConfig, []string{"configName"}, "names no active slot config %q; create it with POST %s", truncate(config, 64), routeSlotConfig)
		writeProblem(w, &problem{Type: TypeUnknownConfig, Title: "Unknown slot config", Status: http.StatusUnprocessableEntity,
			Detail: joinDetails(errs), Errors: errs})
	case errors.Is(err, store.ErrSlotNotFound):
		writeProblem(w, &problem{Type: TypeSlotNotFound, Title: "Slot not found", Status: http.StatusNotFound,
			Detail: "no slot has been assigned to that event id"})
	case errors.Is(err, store.ErrExhausted):
		writeProblem(w, &problem{Type: TypeSlotsExhausted, Title: "No slot free", Status: http.StatusConflict,
			Detail: "no window within the config's headroom had room for the event; retry later or raise the headroom"})
	case errors.Is(err, store.ErrInvalidEvent), errors.Is(err, store.ErrInvalidSlotConfig), errors.Is(err, slot.ErrBatchTooLarge):
		writeProblem(w, &problem{Type: TypeInvalidRequest, Title: "Invalid request", Status: http.StatusUnprocessableEntity,
			Detail: strings.TrimPrefix(err.Error(), "store: ")})
	case errors.Is(err, store.ErrTooManyKeys):
		// An in-memory slot store at its byte bound: it never forgets a
		// booking to make room.
		s.log.Warn("server: slot store full", "err", err)
		w.Header().Set("Retry-After", "1")
		writeProblem(w, &problem{Type: TypeStoreUnavailable, Title: "Slot store unavailable",
			Status: http.StatusServiceUnavailable, Detail: "the slot store is full of bookings it must keep; no new event can be booked"})
	default:
		if errors.Is(err, context.Canceled) {
			s.log.Debug("server: slot request cancelled by the client")
		} else {
			s.log.Error("server: slot store failed", "err", err)
		}
		w.Header().Set("Retry-After", "1")
		writeProblem(w, &problem{Type: TypeStoreUnavailable, Title: "Slot store unavailable",
			Status: http.StatusServiceUnavailable, Detail: "the slot store could not answer; try again"})
	}
}
