-- Fewer indexes on the claim's and the finish's hot path: every finish
-- moves next_run_at, and each index on it is one more b-tree to update and
-- one more page to write to the WAL per job. sluice_jobs_due (next_run_at)
-- serves no query: the claim finds due jobs per group (sluice_jobs_group_due,
-- sluice_jobs_group_order) and per connector (sluice_jobs_connector_due).
DROP INDEX sluice_jobs_due;
