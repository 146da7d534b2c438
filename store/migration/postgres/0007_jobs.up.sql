-- Jobs and runs (seeds 000, 002, 004). Times are bigint Unix microseconds
-- on the store clock; 0 means "never" / "none".
--
-- sluice_job_connectors: one row per provider account. Counts and the last
-- run time are derived from sluice_jobs on read, so they are always true.
-- pressure_until: no job of the connector is claimed before it (a job was
-- parked by source pressure).
CREATE TABLE sluice_job_connectors (
    id             text   PRIMARY KEY,
    status         text   NOT NULL CHECK (status IN ('active', 'paused', 'disabled')),
    policies       text   NOT NULL DEFAULT '[]',
    profile        text   NOT NULL DEFAULT '',
    created_at     bigint NOT NULL,
    pressure_until bigint NOT NULL DEFAULT 0
);

-- sluice_jobs: spec and state of every job. lease_token strictly increases
-- per job (the fencing token); lease_holder is '' when nobody holds it.
-- claim_seq is the global claim order, for round-robin between groups.
CREATE TABLE sluice_jobs (
    id                   text    PRIMARY KEY,
    connector_id         text    NOT NULL REFERENCES sluice_job_connectors (id),
    type                 text    NOT NULL,
    params               text    NOT NULL DEFAULT 'null',
    disabled             boolean NOT NULL DEFAULT false,
    priority             bigint  NOT NULL DEFAULT 0,
    interval_us          bigint  NOT NULL DEFAULT 0,
    group_key            text    NOT NULL,
    next_run_at          bigint  NOT NULL,
    lease_holder         text    NOT NULL DEFAULT '',
    lease_token          bigint  NOT NULL DEFAULT 0,
    lease_until          bigint  NOT NULL DEFAULT 0,
    claim_seq            bigint  NOT NULL DEFAULT 0,
    cursor               text    NOT NULL DEFAULT '',
    catch_up_cursor      text    NOT NULL DEFAULT '',
    runs                 bigint  NOT NULL DEFAULT 0,
    failures             bigint  NOT NULL DEFAULT 0,
    consecutive_failures bigint  NOT NULL DEFAULT 0,
    last_run_at          bigint  NOT NULL DEFAULT 0,
    last_success_at      bigint  NOT NULL DEFAULT 0,
    last_error           text    NOT NULL DEFAULT '',
    parked_reason        text    NOT NULL DEFAULT '',
    parked_until         bigint  NOT NULL DEFAULT 0
);

CREATE INDEX sluice_jobs_due ON sluice_jobs (next_run_at) WHERE NOT disabled;
CREATE INDEX sluice_jobs_connector ON sluice_jobs (connector_id);
CREATE INDEX sluice_jobs_group ON sluice_jobs (group_key, claim_seq);

CREATE SEQUENCE sluice_job_claim_seq;

-- sluice_job_runs: one row per claim (execution).
CREATE TABLE sluice_job_runs (
    id         bigserial PRIMARY KEY,
    job_id     text   NOT NULL,
    token      bigint NOT NULL,
    holder     text   NOT NULL,
    started_at bigint NOT NULL,
    ended_at   bigint NOT NULL DEFAULT 0,
    outcome    text   NOT NULL DEFAULT 'running',
    requests   bigint NOT NULL DEFAULT 0,
    retries    bigint NOT NULL DEFAULT 0,
    slices     bigint NOT NULL DEFAULT 0,
    error      text   NOT NULL DEFAULT ''
);

CREATE INDEX sluice_job_runs_job ON sluice_job_runs (job_id, token);

-- sluice_job_gaps: resumable gap records (a budget ran out).
CREATE TABLE sluice_job_gaps (
    id         bigserial PRIMARY KEY,
    job_id     text    NOT NULL,
    run_id     bigint  NOT NULL,
    catch_up   boolean NOT NULL,
    cursor     text    NOT NULL,
    reason     text    NOT NULL CHECK (reason IN ('request_cap', 'wall_clock', 'retry_budget')),
    created_at bigint  NOT NULL
);

CREATE INDEX sluice_job_gaps_job ON sluice_job_gaps (job_id, id);

-- sluice_breaker_transitions: circuit breaker state changes, counters only.
CREATE TABLE sluice_breaker_transitions (
    id           bigserial PRIMARY KEY,
    connector_id text   NOT NULL,
    key          text   NOT NULL,
    from_state   text   NOT NULL,
    to_state     text   NOT NULL,
    reason       text   NOT NULL,
    requests     bigint NOT NULL,
    failures     bigint NOT NULL,
    at           bigint NOT NULL
);

CREATE INDEX sluice_breaker_transitions_connector ON sluice_breaker_transitions (connector_id, id);
