-- A claim that costs O(groups + claimed jobs), not O(due jobs): the same
-- groups table and indexes as the PostgreSQL dialect (sluice_jobs_group_order
-- exists since 0005).
--
-- sluice_job_groups: one row per fairness group that ever had a job (a job's
-- upsert adds its group). weight is the group's share in weighted fair
-- share: per round a group may give up to weight jobs, and groups are
-- ordered by running jobs per unit of weight.
CREATE TABLE sluice_job_groups (
    group_key text    PRIMARY KEY,
    weight    integer NOT NULL DEFAULT 1 CHECK (weight BETWEEN 1 AND 1000)
);

INSERT INTO sluice_job_groups (group_key) SELECT DISTINCT group_key FROM sluice_jobs;

CREATE INDEX sluice_jobs_group_due ON sluice_jobs (group_key, next_run_at) WHERE disabled = 0;
CREATE INDEX sluice_jobs_group_held ON sluice_jobs (group_key) WHERE lease_holder <> '';
CREATE INDEX sluice_jobs_connector_due ON sluice_jobs (connector_id, next_run_at) WHERE disabled = 0;
