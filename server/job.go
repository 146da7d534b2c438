package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicerl/sluice/auth"
	"github.com/sluicerl/sluice/job"
	"github.com/sluicerl/sluice/store"
)

// Jobs API (seeds 000, 002, 004): connectors, jobs, runs, gap records and
// breaker transitions, and the worker protocol (claim, heartbeat, commit,
// finish, fail, park, defer, release) with the store's fencing rules, so
// that workers in any language can run jobs. Served when Config.Jobs is
// set. Job ids hold '/' (binance:BTC/USDT:1m:ohlcv): escape it as %2F in
// paths.

// Job problem types.
const (
	// TypeStaleToken: 409, a worker-protocol call whose fencing token no
	// longer holds the job (the lease was taken over, or the run ended).
	// Nothing was written.
	TypeStaleToken = "urn:sluice:problem:stale-token"
	// TypeJobNotFound: 404, no connector or job with that id.
	TypeJobNotFound = "urn:sluice:problem:job-not-found"
)

// Job routes, also the route labels of sluice_http_requests_total.
const (
	routeConnectors     = "/v1/connectors"
	routeConnector      = "/v1/connectors/{id}"
	routeConnectorPause = "/v1/connectors/{id}/pause"
	routeConnectorResum = "/v1/connectors/{id}/resume"
	routeJobs           = "/v1/jobs"
	routeJobsClaim      = "/v1/jobs/claim"
	routeJob            = "/v1/jobs/{id}"
	routeJobOp          = "/v1/jobs/{id}/{op}"
	routeRuns           = "/v1/runs"
	routeGaps           = "/v1/gaps"
	routeTransitions    = "/v1/breaker-transitions"
	routeGroups         = "/v1/job-groups"
	routeGroup          = "/v1/job-groups/{group}"
)

// jobRoutes are the job endpoints, when the server has a job store.
func (s *Server) jobRoutes() []route {
	if s.jobs == nil {
		return nil
	}
	return []route{
		{"GET", routeConnectors, s.listConnectors, auth.Read},
		{"GET", routeConnector, s.getConnector, auth.Read},
		{"PUT", routeConnector, s.putConnector, auth.Admin},
		{"POST", routeConnectorPause, s.connectorStatus(store.ConnectorPaused), auth.Admin},
		{"POST", routeConnectorResum, s.connectorStatus(store.ConnectorActive), auth.Admin},
		{"GET", routeJobs, s.listJobs, auth.Read},
		{"POST", routeJobsClaim, s.claimJobs, auth.Jobs},
		{"GET", routeJob, s.getJob, auth.Read},
		{"PUT", routeJob, s.putJob, auth.Admin},
		{"POST", routeJobOp, s.jobOp, auth.Jobs}, // the worker protocol, and trigger
		{"GET", routeRuns, s.listRuns, auth.Read},
		{"GET", routeGaps, s.listGaps, auth.Read},
		{"GET", routeTransitions, s.listTransitions, auth.Read},
		{"GET", routeGroups, s.listGroups, auth.Read},
		{"GET", routeGroup, s.getGroup, auth.Read},
		{"PUT", routeGroup, s.putGroup, auth.Admin},
	}
}

// jobError answers a job store error: the caller's fault (4xx) or the
// store's (503), never confused.
func (s *Server) jobError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, store.ErrInvalidJob):
		writeProblem(w, &problem{Type: TypeInvalidRequest, Status: http.StatusUnprocessableEntity, Detail: err.Error()})
	case errors.Is(err, store.ErrStaleToken):
		writeProblem(w, &problem{Type: TypeStaleToken, Status: http.StatusConflict,
			Detail: "the token no longer holds the job (its lease was taken over, or the run ended); nothing was written"})
	case errors.Is(err, store.ErrJobNotFound), errors.Is(err, store.ErrConnectorNotFound):
		writeProblem(w, &problem{Type: TypeJobNotFound, Status: http.StatusNotFound, Detail: err.Error()})
	case errors.Is(err, context.Canceled):
		s.log.Debug("server: job request cancelled by the client")
	default:
		s.log.Error("server: job store failed", "err", err)
		w.Header().Set("Retry-After", "1")
		writeProblem(w, &problem{Type: TypeStoreUnavailable, Title: "Job store unavailable", Status: http.StatusServiceUnavailable,
			Detail: "the job store could not answer; try again"})
	}
}

// listParams reads ?after=&limit= and the filters.
func listParams(r *http.Request) (store.ListParams, *problem) {
	q := r.URL.Query()
	p := store.ListParams{ConnectorID: q.Get("connector"), JobID: q.Get("job"), GroupKey: q.Get("group"), After: q.Get("after")}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > store.MaxListLimit {
			return p, &problem{Type: TypeInvalidRequest, Status: http.StatusUnprocessableEntity,
				Detail: fmt.Sprintf("limit must be an integer from 1 to %d, got %q", store.MaxListLimit, truncate(v, 32))}
		}
		p.Limit = n
	}
	return p, nil
}

// list answers a list call: {"items": [...], "next": "<after>"}; next is
// empty on the last page.
func list[T any](s *Server, w http.ResponseWriter, r *http.Request, f func(context.Context, store.ListParams) ([]T, error), key func(T) string) {
	p, prob := listParams(r)
	if prob != nil {
		writeProblem(w, prob)
		return
	}
	items, err := f(r.Context(), p)
	if err != nil {
		s.jobError(w, err)
		return
	}
	limit, _ := p.EffectiveLimit()
	next := ""
	if len(items) == limit && limit > 0 {
		next = key(items[len(items)-1])
	}
	writeJSON(w, http.StatusOK, contentJSON, struct {
		Items []T    `json:"items"`
		Next  string `json:"next,omitempty"`
	}{items, next})
}

func (s *Server) listConnectors(w http.ResponseWriter, r *http.Request) {
	list(s, w, r, s.jobs.ListConnectors, func(c store.Connector) string { return c.ID })
}

func (s *Server) listJobs(w http.ResponseWriter, r *http.Request) {
	list(s, w, r, s.jobs.ListJobs, func(j store.Job) string { return j.ID })
}

func (s *Server) listRuns(w http.ResponseWriter, r *http.Request) {
	list(s, w, r, s.jobs.ListRuns, func(x store.RunRecord) string { return strconv.FormatInt(x.ID, 10) })
}

func (s *Server) listGaps(w http.ResponseWriter, r *http.Request) {
	list(s, w, r, s.jobs.ListGaps, func(x store.GapRecord) string { return strconv.FormatInt(x.ID, 10) })
}

func (s *Server) listTransitions(w http.ResponseWriter, r *http.Request) {
	list(s, w, r, s.jobs.ListBreakerTransitions, func(x store.BreakerTransition) string { return strconv.FormatInt(x.ID, 10) })
}

func (s *Server) listGroups(w http.ResponseWriter, r *http.Request) {
	list(s, w, r, s.jobs.ListGroups, func(g store.Group) string { return g.Key })
}

func (s *Server) getGroup(w http.ResponseWriter, r *http.Request) {
	g := r.PathValue("group")
	if err := store.CheckGroupWeight(g, 1); err != nil {
		s.jobError(w, err)
		return
	}
	weight, err := s.jobs.GroupWeight(r.Context(), g)
	if err != nil {
		s.jobError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, contentJSON, store.Group{Key: g, Weight: weight})
}

// groupBody is the body of PUT /v1/job-groups/{group}. Weight is read as
// any JSON value so that a wrong one (1.5, "3", null) is named, with the
// range, in a 422.
type groupBody struct {
	Weight any `json:"weight"`
}

func (s *Server) putGroup(w http.ResponseWriter, r *http.Request) {
	var b groupBody
	if p := s.readJSON(r, &b, "weight"); p != nil {
		writeProblem(w, p)
		return
	}
	f, ok := b.Weight.(float64)
	if !ok || f != math.Trunc(f) || f < 1 || f > store.MaxGroupWeight {
		got := "no weight (or null)"
		if b.Weight != nil {
			raw, _ := json.Marshal(b.Weight)
			got = truncate(string(raw), 32)
		}
		writeProblem(w, &problem{Type: TypeInvalidRequest, Status: http.StatusUnprocessableEntity,
			Detail: fmt.Sprintf("weight must be an integer from 1 to %d, got %s", store.MaxGroupWeight, got)})
		return
	}
	g := r.PathValue("group")
	if err := s.jobs.SetGroupWeight(r.Context(), g, int(f)); err != nil {
		s.jobError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, contentJSON, store.Group{Key: g, Weight: int(f)})
}

func (s *Server) getConnector(w http.ResponseWriter, r *http.Request) {
	c, err := s.jobs.GetConnector(r.Context(), r.PathValue("id"))
	if err != nil {
		s.jobError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, contentJSON, c)
}

// connectorBody is the body of PUT /v1/connectors/{id}.
type connectorBody struct {
	Status   string   `json:"status"`
	Policies []string `json:"policies"`
	Profile  string   `json:"profile"`
}

func (s *Server) putConnector(w http.ResponseWriter, r *http.Request) {
	var b connectorBody
	if p := s.readJSON(r, &b, "status, policies, profile"); p != nil {
		writeProblem(w, p)
		return
	}
	c, created, err := s.jobs.UpsertConnector(r.Context(), store.Connector{ID: r.PathValue("id"), Status: store.ConnectorStatus(b.Status),
		Policies: b.Policies, Profile: b.Profile})
	if err != nil {
		s.jobError(w, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, contentJSON, c)
}

func (s *Server) connectorStatus(st store.ConnectorStatus) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := s.jobs.SetConnectorStatus(r.Context(), r.PathValue("id"), st); err != nil {
			s.jobError(w, err)
			return
		}
		s.getConnector(w, r)
	}
}

func (s *Server) getJob(w http.ResponseWriter, r *http.Request) {
	j, err := s.jobs.GetJob(r.Context(), r.PathValue("id"))
	if err != nil {
		s.jobError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, contentJSON, j)
}

// jobBody is the body of PUT /v1/jobs/{id}.
type jobBody struct {
	ConnectorID string          `json:"connector_id"`
	Type        string          `json:"type"`
	Params      json.RawMessage `json:"params"`
	Disabled    bool            `json:"disabled"`
	Priority    int             `json:"priority"`
	IntervalMs  int64           `json:"interval_ms"`
	Cron        string          `json:"cron"`
	TimeZone    string          `json:"time_zone"`
	GroupKey    string          `json:"group_key"`
}

func (s *Server) putJob(w http.ResponseWriter, r *http.Request) {
	var b jobBody
	if p := s.readJSON(r, &b, "connector_id, type, params, disabled, priority, interval_ms, cron, time_zone, group_key"); p != nil {
		writeProblem(w, p)
		return
	}
	if b.IntervalMs < 0 || b.IntervalMs > store.MaxJobInterval.Milliseconds() {
		writeProblem(w, &problem{Type: TypeInvalidRequest, Status: http.StatusUnprocessableEntity,
			Detail: fmt.Sprintf("interval_ms must be from 0 to %d", store.MaxJobInterval.Milliseconds())})
		return
	}
	j, created, err := s.jobs.UpsertJob(r.Context(), store.JobSpec{ID: r.PathValue("id"), ConnectorID: b.ConnectorID, Type: b.Type,
		Params: b.Params, Disabled: b.Disabled, Priority: b.Priority, Interval: time.Duration(b.IntervalMs) * time.Millisecond,
		GroupKey: b.GroupKey, Cron: b.Cron, TimeZone: b.TimeZone}, time.Time{})
	if err != nil {
		s.jobError(w, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, contentJSON, j)
}

// claimBody is the body of POST /v1/jobs/claim.
type claimBody struct {
	Holder     string   `json:"holder"`
	Limit      int      `json:"limit"`
	LeaseTTLMs int64    `json:"lease_ttl_ms"`
	Types      []string `json:"types"`
}

// claimJSON is one claimed job: the job, its run and its fencing token.
type claimJSON struct {
	Job   store.Job `json:"job"`
	RunID int64     `json:"run_id"`
	Token int64     `json:"token"`
}

func (s *Server) claimJobs(w http.ResponseWriter, r *http.Request) {
	var b claimBody
	if p := s.readJSON(r, &b, "holder, limit, lease_ttl_ms, types"); p != nil {
		writeProblem(w, p)
		return
	}
	// Gate before claiming: a connector whose policies have no capacity
	// now has its due jobs moved to when it returns instead of claimed.
	// Policies this server's limiter does not hold are not asked.
	lim := s.live.Load().lim
	cs, err := s.jobs.ClaimJobs(r.Context(), store.ClaimParams{Holder: b.Holder, Limit: b.Limit, Types: b.Types,
		LeaseTTL: msDuration(b.LeaseTTLMs), Gate: job.CapacityGate(lim, job.KnownPolicies(lim, s.connPolicies))})
	if err != nil {
		s.jobError(w, err)
		return
	}
	out := make([]claimJSON, 0, len(cs))
	for _, c := range cs {
		out = append(out, claimJSON{Job: c.Job, RunID: c.RunID, Token: c.Job.LeaseToken})
	}
	writeJSON(w, http.StatusOK, contentJSON, struct {
		Claims []claimJSON `json:"claims"`
	}{out})
}

// scheduleDelay is how long after now (on the server's clock) a job
// finished with "schedule": true is due again: its interval plus jitter,
// or its next cron time plus jitter short of the cron time after it, as a
// job.Worker with the default jitter (0.1) schedules it.
func (s *Server) scheduleDelay(ctx context.Context, id string) (time.Duration, error) {
	j, err := s.jobs.GetJob(ctx, id)
	if err != nil {
		return 0, err
	}
	return store.ScheduleDelay(&j.JobSpec, s.clk.Now().Truncate(time.Microsecond), rand.Float64(), 0.1)
}

// msDuration converts client milliseconds, saturating instead of
// overflowing (the store then refuses the value by name).
func msDuration(ms int64) time.Duration {
	const most = int64(1<<63-1) / int64(time.Millisecond)
	if ms > most || ms < -most {
		return time.Duration(1<<63 - 1)
	}
	return time.Duration(ms) * time.Millisecond
}

// opBody is the body of the worker-protocol calls on one job.
type opBody struct {
	Token      int64  `json:"token"`
	LeaseTTLMs int64  `json:"lease_ttl_ms"` // heartbeat
	Cursor     string `json:"cursor"`       // commit
	CatchUp    bool   `json:"catch_up"`     // commit, defer
	DelayMs    int64  `json:"delay_ms"`     // finish, fail, park, defer
	Reason     string `json:"reason"`       // park, defer
	Error      string `json:"error"`        // fail
	Permanent  bool   `json:"permanent"`    // fail
	Schedule   bool   `json:"schedule"`     // finish: due again by the job's schedule
	Requests   int64  `json:"requests"`     // ends
	Retries    int64  `json:"retries"`      // ends
}

// jobOp serves POST /v1/jobs/{id}/{op}: trigger, and the worker protocol.
func (s *Server) jobOp(w http.ResponseWriter, r *http.Request) {
	id, op := r.PathValue("id"), r.PathValue("op")
	ctx := r.Context()
	if op == "trigger" {
		if err := s.jobs.TriggerJob(ctx, id, time.Time{}); err != nil {
			s.jobError(w, err)
			return
		}
		s.getJob(w, r)
		return
	}
	var b opBody
	if p := s.readJSON(r, &b, "token, lease_ttl_ms, cursor, catch_up, delay_ms, reason, error, permanent, schedule, requests, retries"); p != nil {
		writeProblem(w, p)
		return
	}
	f := store.Fence{JobID: id, Token: b.Token}
	end := store.EndParams{Fence: f, Stats: store.RunStats{Requests: b.Requests, Retries: b.Retries}, Delay: msDuration(b.DelayMs),
		Error: b.Error, Permanent: b.Permanent, Reason: b.Reason, CatchUp: b.CatchUp}
	var err error
	switch op {
	case "heartbeat":
		var until time.Time
		until, err = s.jobs.Heartbeat(ctx, store.HeartbeatParams{Fence: f, LeaseTTL: msDuration(b.LeaseTTLMs)})
		if err == nil {
			writeJSON(w, http.StatusOK, contentJSON, struct {
				LeaseUntil time.Time `json:"lease_until"`
			}{until})
			return
		}
	case "commit":
		err = s.jobs.CommitCursor(ctx, store.CommitParams{Fence: f, Cursor: b.Cursor, CatchUp: b.CatchUp})
	case "finish":
		if b.Schedule {
			if b.DelayMs != 0 {
				writeProblem(w, &problem{Type: TypeInvalidRequest, Status: http.StatusUnprocessableEntity,
					Detail: "give delay_ms or schedule, not both"})
				return
			}
			if end.Delay, err = s.scheduleDelay(ctx, id); err != nil {
				break
			}
		}
		err = s.jobs.FinishJob(ctx, end)
	case "fail":
		err = s.jobs.FailJob(ctx, end)
	case "park":
		err = s.jobs.ParkJob(ctx, end)
	case "defer":
		err = s.jobs.DeferJob(ctx, end)
	case "release":
		err = s.jobs.ReleaseJob(ctx, end)
	default:
		writeProblem(w, &problem{Type: typeBlank, Status: http.StatusNotFound,
			Detail: "no such job operation; want trigger, heartbeat, commit, finish, fail, park, defer or release"})
		return
	}
	if err != nil {
		s.jobError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
