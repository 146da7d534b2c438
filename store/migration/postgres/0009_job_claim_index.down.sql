DROP INDEX sluice_jobs_connector_due;
DROP INDEX sluice_jobs_group_held;
DROP INDEX sluice_jobs_group_order;
DROP INDEX sluice_jobs_group_due;
DROP TABLE sluice_job_groups;
