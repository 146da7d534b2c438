DROP TABLE sluice_breaker_transitions;
DROP TABLE sluice_job_gaps;
DROP TABLE sluice_job_runs;
DROP SEQUENCE sluice_job_claim_seq;
DROP TABLE sluice_jobs;
DROP TABLE sluice_job_connectors;
