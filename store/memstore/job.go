package memstore

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/sluicerl/sluice/clock"
	"github.com/sluicerl/sluice/store"
)

// JobConfig configures a JobStore. The zero value is ready to use.
type JobConfig struct {
	// Clock is the process clock the store clock is built on (clamped
	// never to run backwards). Nil means the real clock.
	Clock clock.Clock
}

// JobStore is a store.JobStore in process memory, for embedding and tests:
// the reference the SQL backends are checked against. It is safe for
// concurrent use; every operation holds one mutex. Build it with
// NewJobStore; the zero value is not usable.
type JobStore struct {
	clk *clock.Monotonic

	mu          sync.Mutex
	connectors  map[string]*store.Connector
	jobs        map[string]*memJob
	runs        []store.RunRecord
	gaps        []store.GapRecord
	transitions []store.BreakerTransition
	claimSeq    int64
	weights     map[string]int // fairness groups' weights; 0 (a group with jobs, never set) means 1
}

type memJob struct {
	store.Job
	claimSeq int64
}

var _ store.JobStore = (*JobStore)(nil)

// NewJobStore returns an empty JobStore.
func NewJobStore(cfg JobConfig) *JobStore {
	return &JobStore{clk: clock.NewMonotonic(cfg.Clock), connectors: map[string]*store.Connector{}, jobs: map[string]*memJob{},
		weights: map[string]int{}}
}

func (s *JobStore) now(override time.Time) int64 {
	if !override.IsZero() {
		return override.UnixMicro()
	}
	return s.clk.Now().UnixMicro()
}

// UpsertConnector implements store.JobStore.
func (s *JobStore) UpsertConnector(ctx context.Context, c store.Connector) (store.Connector, bool, error) {
	if err := c.Check(); err != nil {
		return store.Connector{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.connectors[c.ID]
	if ok {
		if c.Status != "" {
			cur.Status = c.Status
		}
		cur.Policies, cur.Profile = slices.Clone(c.Policies), c.Profile
	} else {
		if c.Status == "" {
			c.Status = store.ConnectorActive
		}
		n := store.Connector{ID: c.ID, Status: c.Status, Policies: slices.Clone(c.Policies), Profile: c.Profile,
			CreatedAt: store.FromMicros(s.now(time.Time{}))}
		cur = &n
		s.connectors[c.ID] = cur
	}
	return s.connectorLocked(cur), !ok, nil
}

func (s *JobStore) connectorLocked(c *store.Connector) store.Connector {
	out := *c
	out.Policies = slices.Clone(c.Policies)
	if out.Policies == nil {
		out.Policies = []string{}
	}
	for _, j := range s.jobs {
		if j.ConnectorID != c.ID {
			continue
		}
		out.JobsCount++
		if !j.Disabled {
			out.ActiveJobsCount++
		}
		if j.LastRunAt.After(out.LastJobRunTime) {
			out.LastJobRunTime = j.LastRunAt
		}
	}
	return out
}

// GetConnector implements store.JobStore.
func (s *JobStore) GetConnector(ctx context.Context, id string) (store.Connector, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.connectors[id]
	if !ok {
		return store.Connector{}, store.ErrConnectorNotFound
	}
	return s.connectorLocked(c), nil
}

// ListConnectors implements store.JobStore.
func (s *JobStore) ListConnectors(ctx context.Context, p store.ListParams) ([]store.Connector, error) {
	limit, err := p.EffectiveLimit()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.connectors))
	for id := range s.connectors {
		if id > p.After {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	out := []store.Connector{}
	for _, id := range ids[:min(limit, len(ids))] {
		out = append(out, s.connectorLocked(s.connectors[id]))
	}
	return out, nil
}

// SetConnectorStatus implements store.JobStore.
func (s *JobStore) SetConnectorStatus(ctx context.Context, id string, st store.ConnectorStatus) error {
	if !st.Valid() {
		return store.CheckStatus(st)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.connectors[id]
	if !ok {
		return store.ErrConnectorNotFound
	}
	c.Status = st
	return nil
}

// UpsertJob implements store.JobStore.
func (s *JobStore) UpsertJob(ctx context.Context, spec store.JobSpec, now time.Time) (store.Job, bool, error) {
	if err := spec.Check(); err != nil {
		return store.Job{}, false, err
	}
	spec.Params = []byte(spec.NormalParams())
	spec.GroupKey = spec.Group()
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.connectors[spec.ConnectorID]; !ok {
		return store.Job{}, false, store.ErrConnectorNotFound
	}
	if _, ok := s.weights[spec.GroupKey]; !ok {
		s.weights[spec.GroupKey] = 0 // listed by ListGroups, weighing 1
	}
	j, ok := s.jobs[spec.ID]
	if ok {
		j.JobSpec = spec
	} else {
		j = &memJob{Job: store.Job{JobSpec: spec, NextRunAt: store.FromMicros(s.now(now))}}
		s.jobs[spec.ID] = j
	}
	return j.Job, !ok, nil
}

// GetJob implements store.JobStore.
func (s *JobStore) GetJob(ctx context.Context, id string) (store.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[id]
	if !ok {
		return store.Job{}, store.ErrJobNotFound
	}
	return j.Job, nil
}

// ListJobs implements store.JobStore.
func (s *JobStore) ListJobs(ctx context.Context, p store.ListParams) ([]store.Job, error) {
	limit, err := p.EffectiveLimit()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for id, j := range s.jobs {
		if id > p.After && (p.ConnectorID == "" || j.ConnectorID == p.ConnectorID) && (p.GroupKey == "" || j.GroupKey == p.GroupKey) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	out := []store.Job{}
	for _, id := range ids[:min(limit, len(ids))] {
		out = append(out, s.jobs[id].Job)
	}
	return out, nil
}

// TriggerJob implements store.JobStore.
func (s *JobStore) TriggerJob(ctx context.Context, id string, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[id]
	if !ok {
		return store.ErrJobNotFound
	}
	j.NextRunAt = store.FromMicros(s.now(now))
	j.ParkedReason, j.ParkedUntil = "", time.Time{}
	return nil
}

// ClaimJobs implements store.JobStore.
func (s *JobStore) ClaimJobs(ctx context.Context, p store.ClaimParams) ([]store.Claim, error) {
	if err := p.Check(); err != nil {
		return nil, err
	}
	// Ask the gate outside the lock, about the connectors with due jobs.
	var waits map[string]time.Duration
	if p.Gate != nil {
		s.mu.Lock()
		conns := s.dueConnectorsLocked(s.now(p.Now), p.Types)
		s.mu.Unlock()
		var err error
		if waits, err = store.AskGate(ctx, p.Gate, conns); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now(p.Now)
	for id, w := range waits {
		at := store.FromMicros(now + w.Microseconds())
		for _, j := range s.jobs {
			if j.ConnectorID == id && s.dueLocked(j, now, p.Types) && j.NextRunAt.Before(at) {
				j.NextRunAt = at
			}
		}
	}
	var cands []store.ClaimCandidate
	for _, j := range s.jobs {
		if s.dueLocked(j, now, p.Types) {
			cands = append(cands, store.ClaimCandidate{ID: j.ID, ConnectorID: j.ConnectorID, GroupKey: j.GroupKey,
				Priority: j.Priority, NextRunAt: j.NextRunAt.UnixMicro()})
		}
	}
	loads := map[string]store.GroupLoad{}
	seqs := map[string][]int64{} // weighted groups' claim sequences
	for _, j := range s.jobs {
		l := loads[j.GroupKey]
		l.Weight = int64(s.weights[j.GroupKey])
		if j.LeaseHolder != "" && j.LeaseUntil.UnixMicro() > now {
			l.Running++
		}
		if l.Weight > 1 {
			seqs[j.GroupKey] = append(seqs[j.GroupKey], j.claimSeq)
		} else {
			l.LastClaim = max(l.LastClaim, j.claimSeq)
		}
		loads[j.GroupKey] = l
	}
	for g, q := range seqs {
		// The weight-th most recent claim, 0 if fewer.
		slices.Sort(q)
		l := loads[g]
		if k := len(q) - int(l.Weight); k >= 0 {
			l.LastClaim = q[k]
		}
		loads[g] = l
	}
	var out []store.Claim
	for _, i := range store.PickClaims(cands, loads, p.Limit) {
		j := s.jobs[cands[i].ID]
		if j.LeaseHolder != "" {
			s.endRunLocked(j.ID, j.LeaseToken, now, store.RunAbandoned, store.RunStats{}, "")
		}
		s.claimSeq++
		j.claimSeq = s.claimSeq
		j.LeaseHolder, j.LeaseToken, j.LeaseUntil = p.Holder, j.LeaseToken+1, store.FromMicros(now+p.LeaseTTL.Microseconds())
		j.Runs++
		j.LastRunAt = store.FromMicros(now)
		r := store.RunRecord{ID: int64(len(s.runs) + 1), JobID: j.ID, Token: j.LeaseToken, Holder: p.Holder,
			StartedAt: store.FromMicros(now), Outcome: store.RunRunning}
		s.runs = append(s.runs, r)
		c := *s.connectors[j.ConnectorID]
		c.Policies = slices.Clone(c.Policies)
		if c.Policies == nil {
			c.Policies = []string{}
		}
		out = append(out, store.Claim{Job: j.Job, Connector: c, RunID: r.ID, At: store.FromMicros(now)})
	}
	return out, nil
}

// SetGroupWeight implements store.JobStore.
func (s *JobStore) SetGroupWeight(ctx context.Context, group string, weight int) error {
	if err := store.CheckGroupWeight(group, weight); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.weights[group] = weight
	return nil
}

// GroupWeight implements store.JobStore.
func (s *JobStore) GroupWeight(ctx context.Context, group string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return max(s.weights[group], 1), nil
}

// ListGroups implements store.JobStore.
func (s *JobStore) ListGroups(ctx context.Context, p store.ListParams) ([]store.Group, error) {
	limit, err := p.EffectiveLimit()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var keys []string
	for g := range s.weights {
		if g > p.After {
			keys = append(keys, g)
		}
	}
	slices.Sort(keys)
	out := []store.Group{}
	for _, g := range keys[:min(limit, len(keys))] {
		out = append(out, store.Group{Key: g, Weight: max(s.weights[g], 1)})
	}
	return out, nil
}

func (s *JobStore) dueLocked(j *memJob, now int64, types []string) bool {
	c := s.connectors[j.ConnectorID]
	return !j.Disabled && c != nil && c.Status == store.ConnectorActive && store.Micros(c.PressureUntil) <= now &&
		j.NextRunAt.UnixMicro() <= now && (j.LeaseHolder == "" || j.LeaseUntil.UnixMicro() <= now) &&
		(len(types) == 0 || slices.Contains(types, j.Type))
}

func (s *JobStore) dueConnectorsLocked(now int64, types []string) []string {
	var out []string
	for _, j := range s.jobs {
		if s.dueLocked(j, now, types) && !slices.Contains(out, j.ConnectorID) {
			out = append(out, j.ConnectorID)
		}
	}
	slices.Sort(out)
	return out
}

// held returns the job held by f, or ErrStaleToken / ErrJobNotFound.
func (s *JobStore) heldLocked(f store.Fence) (*memJob, error) {
	j, ok := s.jobs[f.JobID]
	if !ok {
		return nil, store.ErrJobNotFound
	}
	if j.LeaseHolder == "" || j.LeaseToken != f.Token {
		return nil, store.ErrStaleToken
	}
	return j, nil
}

func (s *JobStore) runLocked(jobID string, token int64) *store.RunRecord {
	for i := len(s.runs) - 1; i >= 0; i-- {
		if r := &s.runs[i]; r.JobID == jobID && r.Token == token {
			return r
		}
	}
	return nil
}

func (s *JobStore) endRunLocked(jobID string, token, now int64, outcome string, st store.RunStats, msg string) int64 {
	r := s.runLocked(jobID, token)
	if r == nil || r.Outcome != store.RunRunning {
		return 0
	}
	r.EndedAt, r.Outcome, r.Requests, r.Retries, r.Error = store.FromMicros(now), outcome, st.Requests, st.Retries, msg
	return r.ID
}

// Heartbeat implements store.JobStore.
func (s *JobStore) Heartbeat(ctx context.Context, p store.HeartbeatParams) (time.Time, error) {
	if err := store.CheckHeartbeat(&p); err != nil {
		return time.Time{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	j, err := s.heldLocked(p.Fence)
	if err != nil {
		return time.Time{}, err
	}
	j.LeaseUntil = store.FromMicros(s.now(p.Now) + p.LeaseTTL.Microseconds())
	return j.LeaseUntil, nil
}

// CommitCursor implements store.JobStore.
func (s *JobStore) CommitCursor(ctx context.Context, p store.CommitParams) error {
	if err := store.CheckCommit(&p); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	j, err := s.heldLocked(p.Fence)
	if err != nil {
		return err
	}
	if p.CatchUp {
		j.CatchUpCursor = p.Cursor
	} else {
		j.Cursor = p.Cursor
	}
	if r := s.runLocked(j.ID, p.Token); r != nil {
		r.Slices++
	}
	return nil
}

func (s *JobStore) end(op string, p store.EndParams, f func(j *memJob, now, runID int64)) error {
	if err := store.CheckEnd(op, &p); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	j, err := s.heldLocked(p.Fence)
	if err != nil {
		return err
	}
	now := s.now(p.Now)
	runID := s.endRunLocked(j.ID, p.Token, now, op, p.Stats, p.Error)
	j.LeaseHolder, j.LeaseUntil = "", time.Time{}
	j.NextRunAt = store.FromMicros(now + p.Delay.Microseconds())
	f(j, now, runID)
	return nil
}

// FinishJob implements store.JobStore.
func (s *JobStore) FinishJob(ctx context.Context, p store.EndParams) error {
	return s.end(store.RunSucceeded, p, func(j *memJob, now, _ int64) {
		j.LastSuccessAt = store.FromMicros(now)
		j.ConsecutiveFailures = 0
		j.ParkedReason, j.ParkedUntil = "", time.Time{}
	})
}

// FailJob implements store.JobStore.
func (s *JobStore) FailJob(ctx context.Context, p store.EndParams) error {
	return s.end(store.RunFailed, p, func(j *memJob, now, _ int64) {
		j.Failures++
		j.ConsecutiveFailures++
		j.LastError = store.CutError(p.Error)
		if p.Permanent {
			j.Disabled = true
		}
	})
}

// ParkJob implements store.JobStore.
func (s *JobStore) ParkJob(ctx context.Context, p store.EndParams) error {
	return s.end(store.RunParked, p, func(j *memJob, now, _ int64) {
		j.ParkedReason, j.ParkedUntil = p.Reason, j.NextRunAt
		if c := s.connectors[j.ConnectorID]; c != nil && c.PressureUntil.Before(j.NextRunAt) {
			c.PressureUntil = j.NextRunAt
		}
	})
}

// DeferJob implements store.JobStore.
func (s *JobStore) DeferJob(ctx context.Context, p store.EndParams) error {
	return s.end(store.RunDeferred, p, func(j *memJob, now, runID int64) {
		cur := j.Cursor
		if p.CatchUp {
			cur = j.CatchUpCursor
		}
		s.gaps = append(s.gaps, store.GapRecord{ID: int64(len(s.gaps) + 1), JobID: j.ID, RunID: runID, CatchUp: p.CatchUp,
			Cursor: cur, Reason: p.Reason, CreatedAt: store.FromMicros(now)})
	})
}

// ReleaseJob implements store.JobStore.
func (s *JobStore) ReleaseJob(ctx context.Context, p store.EndParams) error {
	p.Delay = 0
	return s.end(store.RunReleased, p, func(*memJob, int64, int64) {})
}

func newestFirst[T any](items []T, id func(*T) int64, keep func(*T) bool, p store.ListParams) ([]T, error) {
	limit, err := p.EffectiveLimit()
	if err != nil {
		return nil, err
	}
	before, err := store.ParseAfterID(p.After)
	if err != nil {
		return nil, err
	}
	out := []T{}
	for i := len(items) - 1; i >= 0 && len(out) < limit; i-- {
		it := &items[i]
		if (before == 0 || id(it) < before) && keep(it) {
			out = append(out, *it)
		}
	}
	return out, nil
}

// ListRuns implements store.JobStore.
func (s *JobStore) ListRuns(ctx context.Context, p store.ListParams) ([]store.RunRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return newestFirst(s.runs, func(r *store.RunRecord) int64 { return r.ID }, func(r *store.RunRecord) bool {
		return (p.JobID == "" || r.JobID == p.JobID) && (p.ConnectorID == "" || s.jobConnector(r.JobID) == p.ConnectorID)
	}, p)
}

func (s *JobStore) jobConnector(id string) string {
	if j, ok := s.jobs[id]; ok {
		return j.ConnectorID
	}
	return ""
}

// ListGaps implements store.JobStore.
func (s *JobStore) ListGaps(ctx context.Context, p store.ListParams) ([]store.GapRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return newestFirst(s.gaps, func(r *store.GapRecord) int64 { return r.ID }, func(r *store.GapRecord) bool {
		return (p.JobID == "" || r.JobID == p.JobID) && (p.ConnectorID == "" || s.jobConnector(r.JobID) == p.ConnectorID)
	}, p)
}

// RecordBreakerTransition implements store.JobStore.
func (s *JobStore) RecordBreakerTransition(ctx context.Context, t store.BreakerTransition) (store.BreakerTransition, error) {
	if err := t.Check(); err != nil {
		return store.BreakerTransition{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t.ID = int64(len(s.transitions) + 1)
	t.At = store.FromMicros(s.now(t.Now))
	t.Now = time.Time{}
	s.transitions = append(s.transitions, t)
	return t, nil
}

// ListBreakerTransitions implements store.JobStore.
func (s *JobStore) ListBreakerTransitions(ctx context.Context, p store.ListParams) ([]store.BreakerTransition, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return newestFirst(s.transitions, func(r *store.BreakerTransition) int64 { return r.ID }, func(r *store.BreakerTransition) bool {
		return p.ConnectorID == "" || r.ConnectorID == p.ConnectorID
	}, p)
}

var _ store.JobFinisher = (*JobStore)(nil)

// FinishJobs implements store.JobFinisher: each finish as FinishJob does
// it (memory needs no shared commit).
func (s *JobStore) FinishJobs(ctx context.Context, ps []store.EndParams) ([]error, error) {
	if err := store.CheckFinishes(ps); err != nil {
		return nil, err
	}
	errs := make([]error, len(ps))
	for i, p := range ps {
		errs[i] = s.FinishJob(ctx, p)
	}
	return errs, nil
}
