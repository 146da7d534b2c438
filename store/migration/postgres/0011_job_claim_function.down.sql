DROP FUNCTION sluice_job_pick(bigint, text[], text[], bigint[], int);
