ALTER TABLE sluice_jobs DROP COLUMN time_zone;
ALTER TABLE sluice_jobs DROP COLUMN cron;
