-- A claim that costs O(groups + claimed jobs), not O(due jobs).
--
-- sluice_job_groups: one row per fairness group that ever had a job (a job's
-- upsert adds its group). A claim walks the groups, keeps those with a
-- claimable job (one index probe each), orders them fairly and then reads
-- only the heads of the groups it takes from. weight is the group's share in
-- weighted fair share: per round a group may give up to weight jobs, and
-- groups are ordered by running jobs per unit of weight.
CREATE TABLE sluice_job_groups (
    group_key text   PRIMARY KEY,
    weight    bigint NOT NULL DEFAULT 1 CHECK (weight BETWEEN 1 AND 1000)
);

INSERT INTO sluice_job_groups (group_key) SELECT DISTINCT group_key FROM sluice_jobs;

-- Does a group have a due job: its enabled jobs by next run.
CREATE INDEX sluice_jobs_group_due ON sluice_jobs (group_key, next_run_at) WHERE NOT disabled;
-- A group's heads in claim order.
CREATE INDEX sluice_jobs_group_order ON sluice_jobs (group_key, priority DESC, next_run_at, id) WHERE NOT disabled;
-- A group's running jobs.
CREATE INDEX sluice_jobs_group_held ON sluice_jobs (group_key) WHERE lease_holder <> '';
-- Does a connector have a due job (the claim's gate).
CREATE INDEX sluice_jobs_connector_due ON sluice_jobs (connector_id, next_run_at) WHERE NOT disabled;
