CREATE INDEX sluice_jobs_due ON sluice_jobs (next_run_at) WHERE disabled = 0;
