package store

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Jobs and runs (seeds 000, 002, 004): connectors (one per provider
// account) own jobs; workers claim due jobs under a lease with a fencing
// token, commit each slice's cursor fenced by that token, and end the run
// with one of finish, fail, park (source pressure: no failure counted),
// defer (a budget ran out: a resumable gap record) or release.
//
// Every time is on the store clock, in whole microseconds; every params
// struct carries an optional Now that only tests set.

var (
	// ErrConnectorNotFound: no connector has that id.
	ErrConnectorNotFound = errors.New("store: no connector with that id")
	// ErrJobNotFound: no job has that id.
	ErrJobNotFound = errors.New("store: no job with that id")
	// ErrInvalidJob: a connector, job or operation parameter that can never
	// be stored; the wrapped message names the field.
	ErrInvalidJob = errors.New("store: invalid job record")
)

// Bounds of job records, the same on every backend.
const (
	// MaxJobIDLen bounds connector, job and group ids, in bytes.
	MaxJobIDLen = 256
	// MaxJobParams bounds a job's params and a cursor, in bytes.
	MaxJobParams = 1 << 16
	// MaxJobError bounds a stored error message, in bytes; longer ones are
	// cut.
	MaxJobError = 1024
	// MaxClaim is the most jobs one claim may take.
	MaxClaim = 1000
	// MaxJobInterval is the longest schedule interval and park or retry
	// delay.
	MaxJobInterval = 366 * 24 * time.Hour
	// MaxListLimit is the most records one list call returns.
	MaxListLimit = 1000
)

// ConnectorStatus is a connector's status. The zero value is invalid.
type ConnectorStatus string

const (
	// ConnectorActive connectors run their jobs.
	ConnectorActive ConnectorStatus = "active"
	// ConnectorPaused connectors run nothing until resumed.
	ConnectorPaused ConnectorStatus = "paused"
	// ConnectorDisabled connectors run nothing.
	ConnectorDisabled ConnectorStatus = "disabled"
)

// Valid reports whether s is one of the three statuses.
func (s ConnectorStatus) Valid() bool {
	return s == ConnectorActive || s == ConnectorPaused || s == ConnectorDisabled
}

// Connector is one provider account: a plain value.
type Connector struct {
	// ID names the connector ("binance"); upserts by ID never duplicate.
	ID string `json:"id"`
	// Status is active, paused or disabled. Empty on upsert means active
	// for a new connector and unchanged for an existing one.
	Status ConnectorStatus `json:"status"`
	// Policies name the limiter policies that pace every upstream call.
	Policies []string `json:"policies"`
	// Profile names the provider profile (outbound host grouping).
	Profile string `json:"profile,omitempty"`
	// Set by the store.
	CreatedAt time.Time `json:"created_at"`
	// PressureUntil is when the provider allows calls again after source
	// pressure parked one of its jobs; until then no job of the connector
	// is claimed. Zero: no pressure.
	PressureUntil time.Time `json:"pressure_until,omitzero"`
	// Derived on read from the jobs, so always true: the latest run start
	// of any of its jobs, how many jobs it has, and how many are enabled.
	LastJobRunTime  time.Time `json:"last_job_run_time,omitzero"`
	JobsCount       int64     `json:"jobs_count"`
	ActiveJobsCount int64     `json:"active_jobs_count"`
}

// Check validates the fields a caller sets.
func (c *Connector) Check() error {
	if err := checkID("connector id", c.ID); err != nil {
		return err
	}
	if c.Status != "" && !c.Status.Valid() {
		return fmt.Errorf("%w: connector %q: status must be active, paused or disabled, got %q", ErrInvalidJob, c.ID, c.Status)
	}
	for i, p := range c.Policies {
		if err := checkID(fmt.Sprintf("connector %q policies[%d]", c.ID, i), p); err != nil {
			return err
		}
	}
	if len(c.Profile) > MaxJobIDLen || !validText(c.Profile) {
		return fmt.Errorf("%w: connector %q: profile must be UTF-8 text of at most %d bytes", ErrInvalidJob, c.ID, MaxJobIDLen)
	}
	return nil
}

// checkID applies the identifier rule (CheckID) to a connector, job or
// group id, at most MaxJobIDLen bytes; the error matches both ErrInvalidJob
// and ErrInvalidID.
func checkID(what, id string) error {
	if err := CheckIDMax(what, id, MaxJobIDLen); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidJob, err)
	}
	return nil
}

// validText reports whether s (a profile name, a cursor: opaque text, where
// control characters such as a newline may belong) is UTF-8 without NUL.
func validText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// JobSpec is what a caller says about a job: a plain value. Upserting the
// same spec again changes nothing.
type JobSpec struct {
	// ID names the job, such as "binance:BTC/USDT:1m:ohlcv".
	ID          string `json:"id"`
	ConnectorID string `json:"connector_id"`
	// Type is the handler that runs the job ("ohlcv").
	Type string `json:"type"`
	// Params is opaque JSON for the handler; empty means null.
	Params json.RawMessage `json:"params,omitempty"`
	// Disabled jobs are never claimed. The zero value is an enabled job.
	Disabled bool `json:"disabled,omitempty"`
	// Priority orders the due jobs of one group, highest first.
	Priority int `json:"priority"`
	// Interval is the schedule: a finished run is due again this long
	// (plus jitter) later. Zero means the job runs once, then waits for a
	// trigger. JSON carries it as interval_ms (see Job.MarshalJSON).
	// Interval and Cron are exclusive.
	Interval time.Duration `json:"-"`
	// Cron is the schedule as a cron expression (five fields, or a
	// descriptor such as @hourly; see ParseCron): a finished run is due
	// again at the expression's next time (plus jitter short of the time
	// after it). Empty means the schedule is Interval.
	Cron string `json:"cron,omitempty"`
	// TimeZone is the IANA time zone Cron is read in. Empty means UTC.
	TimeZone string `json:"time_zone,omitempty"`
	// GroupKey is the fairness group (a shop, an account). Empty means the
	// connector id.
	GroupKey string `json:"group_key,omitempty"`
}

// Check validates the spec.
func (s *JobSpec) Check() error {
	if err := checkID("job id", s.ID); err != nil {
		return err
	}
	if err := checkID(fmt.Sprintf("job %q connector_id", s.ID), s.ConnectorID); err != nil {
		return err
	}
	if err := checkID(fmt.Sprintf("job %q type", s.ID), s.Type); err != nil {
		return err
	}
	if s.GroupKey != "" {
		if err := checkID(fmt.Sprintf("job %q group_key", s.ID), s.GroupKey); err != nil {
			return err
		}
	}
	if len(s.Params) > MaxJobParams {
		return fmt.Errorf("%w: job %q: params longer than %d bytes", ErrInvalidJob, s.ID, MaxJobParams)
	}
	if len(s.Params) > 0 && !json.Valid(s.Params) {
		return fmt.Errorf("%w: job %q: params is not valid JSON", ErrInvalidJob, s.ID)
	}
	return s.checkSchedule()
}

// Group returns the fairness group: GroupKey, or the connector id.
func (s *JobSpec) Group() string {
	if s.GroupKey == "" {
		return s.ConnectorID
	}
	return s.GroupKey
}

// NormalParams returns Params with empty as null, as stored.
func (s *JobSpec) NormalParams() string {
	if len(s.Params) == 0 {
		return "null"
	}
	return string(s.Params)
}

// Job is a stored job: its spec and its state. A plain value.
type Job struct {
	JobSpec
	NextRunAt time.Time `json:"next_run_at"`
	// The lease: its holder, fencing token (strictly increasing per job)
	// and expiry. Holder is empty when no worker holds the job.
	LeaseHolder string    `json:"lease_holder,omitempty"`
	LeaseToken  int64     `json:"lease_token"`
	LeaseUntil  time.Time `json:"lease_until,omitzero"`
	// Cursor is the steady-state bookmark, CatchUpCursor the catch-up
	// (backfill) one: opaque strings, moved only by fenced commits.
	Cursor        string `json:"cursor"`
	CatchUpCursor string `json:"catch_up_cursor"`
	// Stats.
	Runs                int64     `json:"runs"`
	Failures            int64     `json:"failures"`
	ConsecutiveFailures int64     `json:"consecutive_failures"`
	LastRunAt           time.Time `json:"last_run_at,omitzero"`
	LastSuccessAt       time.Time `json:"last_success_at,omitzero"`
	LastError           string    `json:"last_error,omitempty"`
	// ParkedReason and ParkedUntil say why and until when the job was last
	// parked by source pressure; cleared by the next finish.
	ParkedReason string    `json:"parked_reason,omitempty"`
	ParkedUntil  time.Time `json:"parked_until,omitzero"`
}

// MarshalJSON writes the job with its interval as interval_ms, the unit
// the HTTP API takes.
func (j Job) MarshalJSON() ([]byte, error) {
	type plain Job // without this method
	return json.Marshal(struct {
		plain
		IntervalMs int64 `json:"interval_ms"`
	}{plain(j), j.Interval.Milliseconds()})
}

// Source-pressure reasons (park) and budget reasons (gap records): two
// disjoint sets, as seed 002 D9 asks.
const (
	PressureRateLimited = "rate_limited" // 429 or Retry-After
	PressureThrottled   = "throttled"    // e.g. GraphQL THROTTLED
	PressureBreakerOpen = "breaker_open"
	PressureOverloaded  = "overloaded" // 503
	PressureBanned      = "banned"
	PressureNoCapacity  = "no_capacity" // the connector's own limit has none

	GapRequestCap  = "request_cap"
	GapWallClock   = "wall_clock"
	GapRetryBudget = "retry_budget"
)

// IsPressureReason reports whether r is in the source-pressure set.
func IsPressureReason(r string) bool {
	switch r {
	case PressureRateLimited, PressureThrottled, PressureBreakerOpen, PressureOverloaded, PressureBanned, PressureNoCapacity:
		return true
	}
	return false
}

// IsGapReason reports whether r is in the budget set.
func IsGapReason(r string) bool {
	return r == GapRequestCap || r == GapWallClock || r == GapRetryBudget
}

// Run outcomes.
const (
	RunRunning   = "running"
	RunSucceeded = "succeeded"
	RunFailed    = "failed"
	RunParked    = "parked"
	RunDeferred  = "deferred"  // a budget ran out: see the gap record
	RunReleased  = "released"  // handed back (graceful shutdown)
	RunAbandoned = "abandoned" // the lease expired and another claim took it
)

// RunRecord is one execution of a job: a plain value.
type RunRecord struct {
	ID        int64     `json:"id"`
	JobID     string    `json:"job_id"`
	Token     int64     `json:"token"`
	Holder    string    `json:"holder"`
	StartedAt time.Time `json:"started_at"`
	EndedAt   time.Time `json:"ended_at,omitzero"`
	Outcome   string    `json:"outcome"`
	Requests  int64     `json:"requests"`
	Retries   int64     `json:"retries"`
	Slices    int64     `json:"slices"`
	Error     string    `json:"error,omitempty"`
}

// GapRecord is a resumable gap: a run stopped by a budget at a slice
// boundary. Cursor is the job's committed cursor at the stop point.
type GapRecord struct {
	ID        int64     `json:"id"`
	JobID     string    `json:"job_id"` // the stream
	RunID     int64     `json:"run_id"`
	CatchUp   bool      `json:"catch_up"`
	Cursor    string    `json:"cursor"`
	Reason    string    `json:"reason"`
	CreatedAt time.Time `json:"created_at"`
}

// BreakerTransition is one circuit breaker state change (seed 002 D6):
// counters only, never routes, bodies, record ids or credentials.
type BreakerTransition struct {
	ID          int64     `json:"id"`
	ConnectorID string    `json:"connector_id"`
	Key         string    `json:"key"`
	From        string    `json:"from"`
	To          string    `json:"to"`
	Reason      string    `json:"reason"`
	Requests    int64     `json:"requests"`
	Failures    int64     `json:"failures"`
	At          time.Time `json:"at"`
	Now         time.Time `json:"-"` // optional store time override (tests)
}

// Claim is one claimed job.
type Claim struct {
	Job Job // as claimed: LeaseToken is the fencing token
	// Connector is the job's connector as the claim saw it (status,
	// policies, profile; its derived counts are left zero).
	Connector Connector
	RunID     int64 // the run row opened by the claim
	// At is the store time of the claim.
	At time.Time
}

// Gate answers, for a connector, how long until it has capacity: 0 means
// now. It is called before claiming, outside any transaction, at most once
// per connector per claim.
type Gate func(ctx context.Context, connectorID string) (time.Duration, error)

// ClaimParams claims due jobs.
type ClaimParams struct {
	Holder   string
	Limit    int           // 1 to MaxClaim; 0 means 1
	LeaseTTL time.Duration // MinLeaseTTL to MaxLeaseTTL
	// Gate, if set, is asked about every connector with due jobs; the due
	// jobs of a connector without capacity are not claimed and their
	// next_run_at moves to when it returns.
	Gate Gate
	// Types, if set, restricts the claim to jobs of these types.
	Types []string
	Now   time.Time
}

// Check validates the params and applies defaults.
func (p *ClaimParams) Check() error {
	if p.Limit == 0 {
		p.Limit = 1
	}
	if err := checkID("holder", p.Holder); err != nil {
		return err
	}
	if p.Limit < 1 || p.Limit > MaxClaim {
		return fmt.Errorf("%w: claim limit must be from 1 to %d, got %d", ErrInvalidJob, MaxClaim, p.Limit)
	}
	return checkTTL(p.LeaseTTL)
}

func checkTTL(d time.Duration) error {
	if d < MinLeaseTTL || d > MaxLeaseTTL {
		return fmt.Errorf("%w: lease TTL must be from %s to %s, got %s", ErrInvalidJob, MinLeaseTTL, MaxLeaseTTL, d)
	}
	return nil
}

// Fence names a held job: its id and the claim's token.
type Fence struct {
	JobID string
	Token int64
}

// HeartbeatParams extends a held lease to now + LeaseTTL.
type HeartbeatParams struct {
	Fence
	LeaseTTL time.Duration
	Now      time.Time
}

// CommitParams moves a held job's cursor after a slice was durably
// written: the steady-state cursor, or with CatchUp the catch-up one.
type CommitParams struct {
	Fence
	Cursor  string
	CatchUp bool
	Now     time.Time
}

// RunStats are a run's counters, reported when it ends.
type RunStats struct {
	Requests int64
	Retries  int64
}

// EndParams ends a held job's run.
type EndParams struct {
	Fence
	Stats RunStats
	// Delay is how long from now the job is due again: after a finish the
	// schedule (with jitter), after a failure the backoff, after a park
	// the provider's wait, after a defer "soon". Ignored by Release (due
	// now) and by a permanent failure.
	Delay time.Duration
	// Error is the failure's message (cut to MaxJobError bytes).
	Error string
	// Permanent failures disable the job: no more retries.
	Permanent bool
	// Reason is the park reason (pressure set) or the gap reason (budget
	// set).
	Reason string
	// CatchUp says which cursor a gap record quotes.
	CatchUp bool
	Now     time.Time
}

func (p *EndParams) checkDelay() error {
	if p.Delay < 0 || p.Delay > MaxJobInterval {
		return fmt.Errorf("%w: delay must be from 0 to %s, got %s", ErrInvalidJob, MaxJobInterval, p.Delay)
	}
	return nil
}

// ListParams pages through records: After is the last id of the previous
// page (a job or connector id, or a numeric record id as text for runs,
// gaps and transitions, which list newest first).
type ListParams struct {
	ConnectorID string
	JobID       string
	GroupKey    string
	After       string
	Limit       int // 0 means 100; at most MaxListLimit
}

// EffectiveLimit returns Limit with its default, or an error.
func (p *ListParams) EffectiveLimit() (int, error) {
	switch {
	case p.Limit == 0:
		return 100, nil
	case p.Limit < 0 || p.Limit > MaxListLimit:
		return 0, fmt.Errorf("%w: list limit must be from 1 to %d, got %d", ErrInvalidJob, MaxListLimit, p.Limit)
	}
	return p.Limit, nil
}

// JobStore keeps connectors, jobs, runs, gap records and breaker
// transitions. Every method is one atomic operation. Implementations are
// safe for concurrent use by many goroutines (and, for SQL backends, many
// processes).
type JobStore interface {
	// UpsertConnector creates the connector or updates its policies,
	// profile and (when set) status; created says which. Never a
	// duplicate.
	UpsertConnector(ctx context.Context, c Connector) (Connector, bool, error)
	GetConnector(ctx context.Context, id string) (Connector, error)
	ListConnectors(ctx context.Context, p ListParams) ([]Connector, error)
	// SetConnectorStatus pauses, resumes or disables a connector.
	SetConnectorStatus(ctx context.Context, id string, s ConnectorStatus) error

	// UpsertJob creates the job (due now) or updates its spec, keeping its
	// state (cursors, stats, lease, next run). The connector must exist.
	UpsertJob(ctx context.Context, s JobSpec, now time.Time) (Job, bool, error)
	GetJob(ctx context.Context, id string) (Job, error)
	ListJobs(ctx context.Context, p ListParams) ([]Job, error)
	// TriggerJob makes the job due now and clears its park.
	TriggerJob(ctx context.Context, id string, now time.Time) error

	// ClaimJobs claims up to Limit due jobs of active connectors without
	// pressure, each under a new lease and token, opening a run for each.
	// Fair between groups: jobs are taken in rounds, at most the group's
	// weight (default 1) per group per round, groups with fewer running
	// jobs per unit of weight and then the least recently claimed first;
	// within a group by priority (highest first), then next_run_at, then
	// id. Never two holders on one job.
	ClaimJobs(ctx context.Context, p ClaimParams) ([]Claim, error)
	// Heartbeat extends a held lease; ErrStaleToken if it is not held by
	// that token.
	Heartbeat(ctx context.Context, p HeartbeatParams) (time.Time, error)
	// CommitCursor moves a held job's cursor and counts a slice on its run;
	// ErrStaleToken (and nothing written) if the token no longer holds it.
	CommitCursor(ctx context.Context, p CommitParams) error
	// FinishJob ends the run as a success: due again after Delay.
	FinishJob(ctx context.Context, p EndParams) error
	// FailJob counts a failure: due again after Delay, or, if Permanent,
	// disabled.
	FailJob(ctx context.Context, p EndParams) error
	// ParkJob ends the run under source pressure (Reason in the pressure
	// set): no failure counted, due again after Delay, and the connector
	// claims nothing until then.
	ParkJob(ctx context.Context, p EndParams) error
	// DeferJob ends the run because a budget ran out (Reason in the budget
	// set): a gap record with the committed cursor, due again after Delay,
	// no failure and no pressure.
	DeferJob(ctx context.Context, p EndParams) error
	// ReleaseJob hands a held job back, due now, without counting anything.
	ReleaseJob(ctx context.Context, p EndParams) error

	// SetGroupWeight sets a fairness group's weight (1 to MaxGroupWeight;
	// a group never set weighs 1): per claim round the group may give up
	// to weight jobs, and groups are ordered by running jobs per unit of
	// weight. The group need not have jobs yet.
	SetGroupWeight(ctx context.Context, group string, weight int) error
	// GroupWeight returns a group's weight (1 for a group never set).
	GroupWeight(ctx context.Context, group string) (int, error)
	// ListGroups lists the fairness groups (every group a job was ever
	// upserted into, and every group given a weight) with their weights,
	// by key; ListParams.After is the last key of the previous page. The
	// filters are ignored.
	ListGroups(ctx context.Context, p ListParams) ([]Group, error)

	ListRuns(ctx context.Context, p ListParams) ([]RunRecord, error)
	ListGaps(ctx context.Context, p ListParams) ([]GapRecord, error)
	RecordBreakerTransition(ctx context.Context, t BreakerTransition) (BreakerTransition, error)
	ListBreakerTransitions(ctx context.Context, p ListParams) ([]BreakerTransition, error)
}

// CheckEnd validates end params for an operation (finish, fail, park,
// defer or release).
func CheckEnd(op string, p *EndParams) error {
	if err := checkID("job id", p.JobID); err != nil {
		return err
	}
	if p.Stats.Requests < 0 || p.Stats.Retries < 0 {
		return fmt.Errorf("%w: run stats must be >= 0", ErrInvalidJob)
	}
	if err := p.checkDelay(); err != nil {
		return err
	}
	switch op {
	case RunParked:
		if !IsPressureReason(p.Reason) {
			return fmt.Errorf("%w: park reason %q is not a source-pressure reason", ErrInvalidJob, p.Reason)
		}
	case RunDeferred:
		if !IsGapReason(p.Reason) {
			return fmt.Errorf("%w: gap reason %q must be request_cap, wall_clock or retry_budget", ErrInvalidJob, p.Reason)
		}
	}
	p.Error = CutError(p.Error)
	return nil
}

// CheckCommit validates commit params.
func CheckCommit(p *CommitParams) error {
	if err := checkID("job id", p.JobID); err != nil {
		return err
	}
	if len(p.Cursor) > MaxJobParams || !validText(p.Cursor) {
		return fmt.Errorf("%w: cursor must be UTF-8 text of at most %d bytes", ErrInvalidJob, MaxJobParams)
	}
	return nil
}

// CheckHeartbeat validates heartbeat params.
func CheckHeartbeat(p *HeartbeatParams) error {
	if err := checkID("job id", p.JobID); err != nil {
		return err
	}
	return checkTTL(p.LeaseTTL)
}

// CutError cuts an error message to MaxJobError bytes on a rune boundary.
func CutError(s string) string {
	if len(s) <= MaxJobError {
		return s
	}
	i := MaxJobError
	for i > 0 && s[i]&0xC0 == 0x80 {
		i--
	}
	return s[:i]
}

// ClaimCandidate is a due job as the claim sees it, for PickClaims.
type ClaimCandidate struct {
	ID          string
	ConnectorID string
	GroupKey    string
	Priority    int
	NextRunAt   int64
}

// GroupLoad is a group's state for PickClaims: its jobs currently held,
// its weight (0 means 1) and LastClaim: the claim sequence number of its
// weight-th most recent claim as its jobs record it (each job keeps its
// latest), 0 if it has fewer. With weight 1 that is its latest claim, so
// one-at-a-time claims go round-robin; with weight w a group is served w
// times per turn of the others.
type GroupLoad struct {
	Running   int64
	LastClaim int64
	Weight    int64
}

// Group is a fairness group and its weight: a plain value.
type Group struct {
	Key    string `json:"group"`
	Weight int    `json:"weight"`
}

// MaxGroupWeight bounds a group's weight.
const MaxGroupWeight = 1000

func (l GroupLoad) weight() int64 { return max(l.Weight, 1) }

// CompareGroups orders groups for a claim: fewer running jobs per unit of
// weight first, then the least recently claimed, then by key.
func CompareGroups(a, b string, x, y GroupLoad) int {
	return cmp.Or(cmp.Compare(x.Running*y.weight(), y.Running*x.weight()), cmp.Compare(x.LastClaim, y.LastClaim), cmp.Compare(a, b))
}

// OrderGroups sorts keys in claim order (CompareGroups) by their loads.
func OrderGroups(keys []string, loads map[string]GroupLoad) {
	slices.SortFunc(keys, func(a, b string) int { return CompareGroups(a, b, loads[a], loads[b]) })
}

// GroupShare is how many heads a claim of limit jobs may take from each of
// n groups of at most weight w when every group has enough due jobs: a
// backend that reads only the heads of each group reads this many (plus
// slack) first, and more only from groups that had that many.
func GroupShare(limit, n int, w int64) int {
	if n < 1 {
		n = 1
	}
	rounds := (limit + n - 1) / n
	return int(min(int64(rounds)*max(w, 1), int64(limit)))
}

// PickClaims returns up to limit candidates in claim order (indexes into
// cands): rounds in which each group gives at most its weight (default 1)
// of jobs, groups in OrderGroups order; each group's jobs by priority
// (highest first), next run, id. Every backend uses it, so they all claim
// in the same order; a backend may pass only the heads of each group (at
// least the most the rounds can take from it) instead of every due job.
func PickClaims(cands []ClaimCandidate, loads map[string]GroupLoad, limit int) []int {
	byGroup := map[string][]int{}
	var groups []string
	for i := range cands {
		g := cands[i].GroupKey
		if _, ok := byGroup[g]; !ok {
			groups = append(groups, g)
		}
		byGroup[g] = append(byGroup[g], i)
	}
	order := func(a, b int) int {
		x, y := &cands[a], &cands[b]
		return cmp.Or(cmp.Compare(y.Priority, x.Priority), cmp.Compare(x.NextRunAt, y.NextRunAt), cmp.Compare(x.ID, y.ID))
	}
	for g, idx := range byGroup {
		byGroup[g] = headsOf(idx, limit, order)
	}
	OrderGroups(groups, loads)
	var out []int
	for round := 0; len(out) < limit; round++ {
		took := false
		for _, g := range groups {
			idx := byGroup[g]
			w := int(loads[g].weight())
			for k := round * w; k < (round+1)*w && k < len(idx) && len(out) < limit; k++ {
				out = append(out, idx[k])
				took = true
			}
			if len(out) == limit {
				break
			}
		}
		if !took {
			break
		}
	}
	return out
}

// headsOf returns the first limit of idx in order, sorted: a group never
// gives more than limit jobs to one claim, so the rest need no sort.
func headsOf(idx []int, limit int, order func(a, b int) int) []int {
	if len(idx) <= 2*limit {
		slices.SortFunc(idx, order)
		return idx[:min(len(idx), limit)]
	}
	// A sorted buffer of the best limit seen; most of the rest lose to
	// its last element at once.
	buf := make([]int, 0, limit)
	for _, i := range idx {
		if len(buf) == limit {
			if order(i, buf[limit-1]) >= 0 {
				continue
			}
			buf = buf[:limit-1]
		}
		at, _ := slices.BinarySearchFunc(buf, i, order)
		buf = slices.Insert(buf, at, i)
	}
	return buf
}

// CheckGroupWeight validates SetGroupWeight's arguments.
func CheckGroupWeight(group string, weight int) error {
	if err := checkID("group key", group); err != nil {
		return err
	}
	if weight < 1 || weight > MaxGroupWeight {
		return fmt.Errorf("%w: group %q: weight must be from 1 to %d, got %d", ErrInvalidJob, group, MaxGroupWeight, weight)
	}
	return nil
}

// Micros returns t in Unix microseconds, or 0 for the zero time.
func Micros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

// FromMicros returns the time of Unix microseconds us, or the zero time
// for 0.
func FromMicros(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(us).UTC()
}

// CheckStatus returns an error naming a status that is not one of the
// three.
func CheckStatus(s ConnectorStatus) error {
	if s.Valid() {
		return nil
	}
	return fmt.Errorf("%w: status must be active, paused or disabled, got %q", ErrInvalidJob, s)
}

// Check validates a transition before it is recorded.
func (t *BreakerTransition) Check() error {
	if err := checkID("breaker transition connector_id", t.ConnectorID); err != nil {
		return err
	}
	for _, f := range []struct{ name, v string }{{"key", t.Key}, {"from", t.From}, {"to", t.To}, {"reason", t.Reason}} {
		if len(f.v) > MaxJobIDLen || !validText(f.v) {
			return fmt.Errorf("%w: breaker transition %s must be UTF-8 text of at most %d bytes", ErrInvalidJob, f.name, MaxJobIDLen)
		}
	}
	if t.From == "" || t.To == "" {
		return fmt.Errorf("%w: breaker transition needs from and to states", ErrInvalidJob)
	}
	if t.Requests < 0 || t.Failures < 0 {
		return fmt.Errorf("%w: breaker transition counters must be >= 0", ErrInvalidJob)
	}
	return nil
}

// AskGate asks gate about each connector and returns those without
// capacity now, with how long until they have it.
func AskGate(ctx context.Context, gate Gate, connectors []string) (map[string]time.Duration, error) {
	waits := map[string]time.Duration{}
	for _, id := range connectors {
		w, err := gate(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("store: claim gate for connector %q: %w", id, err)
		}
		if w > 0 {
			waits[id] = min(w, MaxJobInterval)
		}
	}
	return waits, nil
}

// ParseAfterID parses the After of a list of numbered records: empty is
// 0 (from the newest).
func ParseAfterID(after string) (int64, error) {
	if after == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(after, 10, 64)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%w: after must be a record id (a positive integer), got %q", ErrInvalidJob, after)
	}
	return n, nil
}

// JobColumns is the column list ScanJob reads, for the SQL backends.
const JobColumns = `id, connector_id, type, params, disabled, priority, interval_us, group_key, next_run_at,
lease_holder, lease_token, lease_until, cursor, catch_up_cursor, runs, failures, consecutive_failures,
last_run_at, last_success_at, last_error, parked_reason, parked_until, cron, time_zone`

// ScanJob reads a row of JobColumns through scan (a database/sql or pgx
// row's Scan).
func ScanJob(scan func(dest ...any) error) (Job, error) {
	var j Job
	var params string
	var interval, next, until, lastRun, lastOK, parked int64
	err := scan(&j.ID, &j.ConnectorID, &j.Type, &params, &j.Disabled, &j.Priority, &interval, &j.GroupKey, &next,
		&j.LeaseHolder, &j.LeaseToken, &until, &j.Cursor, &j.CatchUpCursor, &j.Runs, &j.Failures, &j.ConsecutiveFailures,
		&lastRun, &lastOK, &j.LastError, &j.ParkedReason, &parked, &j.Cron, &j.TimeZone)
	if err != nil {
		return Job{}, err
	}
	j.Params = json.RawMessage(params)
	j.Interval = time.Duration(interval) * time.Microsecond
	j.NextRunAt = time.UnixMicro(next).UTC()
	j.LeaseUntil, j.LastRunAt, j.LastSuccessAt, j.ParkedUntil = FromMicros(until), FromMicros(lastRun), FromMicros(lastOK), FromMicros(parked)
	return j, nil
}

// RunColumns is the column list ScanRun reads.
const RunColumns = `id, job_id, token, holder, started_at, ended_at, outcome, requests, retries, slices, error`

// ScanRun reads a row of RunColumns.
func ScanRun(scan func(dest ...any) error) (RunRecord, error) {
	var r RunRecord
	var start, end int64
	if err := scan(&r.ID, &r.JobID, &r.Token, &r.Holder, &start, &end, &r.Outcome, &r.Requests, &r.Retries, &r.Slices, &r.Error); err != nil {
		return RunRecord{}, err
	}
	r.StartedAt, r.EndedAt = time.UnixMicro(start).UTC(), FromMicros(end)
	return r, nil
}

// GapColumns is the column list ScanGap reads.
const GapColumns = `id, job_id, run_id, catch_up, cursor, reason, created_at`

// ScanGap reads a row of GapColumns.
func ScanGap(scan func(dest ...any) error) (GapRecord, error) {
	var g GapRecord
	var created int64
	if err := scan(&g.ID, &g.JobID, &g.RunID, &g.CatchUp, &g.Cursor, &g.Reason, &created); err != nil {
		return GapRecord{}, err
	}
	g.CreatedAt = time.UnixMicro(created).UTC()
	return g, nil
}

// TransitionColumns is the column list ScanTransition reads.
const TransitionColumns = `id, connector_id, key, from_state, to_state, reason, requests, failures, at`

// ScanTransition reads a row of TransitionColumns.
func ScanTransition(scan func(dest ...any) error) (BreakerTransition, error) {
	var t BreakerTransition
	var at int64
	if err := scan(&t.ID, &t.ConnectorID, &t.Key, &t.From, &t.To, &t.Reason, &t.Requests, &t.Failures, &at); err != nil {
		return BreakerTransition{}, err
	}
	t.At = time.UnixMicro(at).UTC()
	return t, nil
}

// ConnectorColumns is the column list ScanConnector reads: the row and
// its derived counts (see ConnectorSelect).
const ConnectorColumns = `c.id, c.status, c.policies, c.profile, c.created_at, c.pressure_until,
coalesce((SELECT max(j.last_run_at) FROM sluice_jobs j WHERE j.connector_id = c.id), 0),
(SELECT count(*) FROM sluice_jobs j WHERE j.connector_id = c.id),
(SELECT count(*) FROM sluice_jobs j WHERE j.connector_id = c.id AND NOT j.disabled)`

// ConnectorRowColumns reads a connector for ScanConnector without its
// derived counts (zero), for a claim.
const ConnectorRowColumns = `c.id, c.status, c.policies, c.profile, c.created_at, c.pressure_until, 0, 0, 0`

// ScanConnector reads a row of ConnectorColumns.
func ScanConnector(scan func(dest ...any) error) (Connector, error) {
	var c Connector
	var policies string
	var created, pressure, lastRun int64
	if err := scan(&c.ID, &c.Status, &policies, &c.Profile, &created, &pressure, &lastRun, &c.JobsCount, &c.ActiveJobsCount); err != nil {
		return Connector{}, err
	}
	if err := json.Unmarshal([]byte(policies), &c.Policies); err != nil {
		return Connector{}, fmt.Errorf("store: connector %q: stored policies: %w", c.ID, err)
	}
	if c.Policies == nil {
		c.Policies = []string{}
	}
	c.CreatedAt, c.PressureUntil, c.LastJobRunTime = time.UnixMicro(created).UTC(), FromMicros(pressure), FromMicros(lastRun)
	return c, nil
}
