-- sluice_jobs_due (next_run_at, every enabled job) has had no query of its
-- own since 0009: the claim asks per group (sluice_jobs_group_due) and per
-- connector (sluice_jobs_connector_due). The planner still took it for the
-- claim's "has this group a due job" probes, reading every due job ahead
-- of the group's first (leased ones included) instead of one entry; and
-- every claim and finish wrote it (neither update can be HOT while an
-- index holds next_run_at). Dropped, the probes read their group's or
-- connector's index and each claim and finish writes one index less.
DROP INDEX sluice_jobs_due;
