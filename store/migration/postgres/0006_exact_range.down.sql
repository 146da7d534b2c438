-- Back to 0005: no range checks, and the 2^62 bound on settled debt.
DROP FUNCTION sluice_rate_sync_state(int, bigint, bigint, bigint, bigint, bigint);
ALTER FUNCTION sluice_rate_sync_state_0002(int, bigint, bigint, bigint, bigint, bigint)
    RENAME TO sluice_rate_sync_state;

DROP FUNCTION sluice_rate_settle_state(int, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint);
ALTER FUNCTION sluice_rate_settle_state_0005(int, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint)
    RENAME TO sluice_rate_settle_state;

DROP FUNCTION sluice_rate_eval(int, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint);
ALTER FUNCTION sluice_rate_eval_0002(int, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint)
    RENAME TO sluice_rate_eval;

DROP FUNCTION sluice_rate_in_range(bigint, bigint, bigint, bigint);

ALTER TABLE sluice_rate_state DROP CONSTRAINT sluice_rate_state_exact;
