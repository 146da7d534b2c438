-- Cron schedules: a job's schedule is interval_us or a cron expression
-- (five fields or a descriptor such as @hourly) read in time_zone (an IANA
-- name; '' means UTC). '' cron means the schedule is interval_us. The
-- expression is validated by the application on upsert; workers compute
-- the next run from it.
ALTER TABLE sluice_jobs ADD COLUMN cron text NOT NULL DEFAULT '';
ALTER TABLE sluice_jobs ADD COLUMN time_zone text NOT NULL DEFAULT '';
