-- Every backend refuses the same extremes (store.ErrOutOfRange,
-- store.ErrCostExceedsLimit), as Redis must:
--
-- * A write that would leave a state whose time, or the time it becomes
--   fresh (store.FreshAt), is at or beyond 2^53 microseconds (store.MaxTime,
--   the year 2255) raises SQLSTATE SL003 (store.ErrOutOfRange) and writes
--   nothing. The GCRA take written out inline in sluice_rate_take is held
--   to it by the constraint sluice_rate_state_exact (a GCRA state's fresh
--   time is its TAT); every other write goes through sluice_rate_eval,
--   sluice_rate_settle_state or sluice_rate_sync_state, wrapped here.
-- * A state a fixed window left whose window would end at 2^53 or later
--   when a sliding window of the same name reads it is out of range too.
-- * gcra.Settle bounds a debt at gcra.MaxSpan (2^52 microseconds), not the
--   2^62 of sluice_rate_settle_state_0002.

ALTER TABLE sluice_rate_state ADD CONSTRAINT sluice_rate_state_exact
    CHECK (t < 9007199254740992 AND t > -9007199254740992) NOT VALID;

-- sluice_rate_in_range mirrors store.InRange.
CREATE FUNCTION sluice_rate_in_range(t bigint, count bigint, prev bigint, fresh_at bigint)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT fresh_at < 9007199254740992 AND t < 9007199254740992 AND t > -9007199254740992
       AND count < 9007199254740992 AND prev < 9007199254740992
$$;

ALTER FUNCTION sluice_rate_eval(int, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint)
    RENAME TO sluice_rate_eval_0002;

CREATE FUNCTION sluice_rate_eval(
    alg int, lim bigint, iv bigint,
    st_t bigint, st_count bigint, st_prev bigint,
    now bigint, cost bigint, max_delay bigint,
    OUT allowed boolean, OUT remaining bigint, OUT retry_after bigint,
    OUT reset_after bigint, OUT delay bigint,
    OUT t bigint, OUT count bigint, OUT prev bigint, OUT fresh_at bigint)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
    -- A state whose window would end at 2^53 or later under a sliding
    -- limit (a fixed window of the same name left it) is out of range.
    IF alg = 2 AND (st_count <> 0 OR st_prev <> 0) AND st_t >= 9007199254740992 - iv THEN
        RAISE EXCEPTION USING ERRCODE = 'SL003', MESSAGE = 'sluice: state beyond 2^53';
    END IF;
    SELECT * INTO allowed, remaining, retry_after, reset_after, delay, t, count, prev, fresh_at
      FROM sluice_rate_eval_0002(alg, lim, iv, st_t, st_count, st_prev, now, cost, max_delay);
    IF (t, count, prev) IS DISTINCT FROM (st_t, st_count, st_prev)
       AND NOT sluice_rate_in_range(t, count, prev, fresh_at) THEN
        RAISE EXCEPTION USING ERRCODE = 'SL003', MESSAGE = 'sluice: state beyond 2^53';
    END IF;
END
$$;

ALTER FUNCTION sluice_rate_settle_state(int, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint)
    RENAME TO sluice_rate_settle_state_0005;

CREATE FUNCTION sluice_rate_settle_state(
    alg int, lim bigint, iv bigint,
    st_t bigint, st_count bigint, st_prev bigint,
    now bigint, reserved bigint, actual bigint, reserved_end bigint,
    OUT t bigint, OUT count bigint, OUT prev bigint, OUT fresh_at bigint)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
    delta bigint := actual - reserved;
BEGIN
    -- gcra.Settle's bounds, at gcra.MaxSpan = 2^52.
    IF alg = 0 AND (delta > 4503599627370496 / iv OR -delta > 4503599627370496 / iv
                    OR (delta > 0 AND delta > (4503599627370496 - lim * iv - (greatest(st_t, now) - now)) / iv)) THEN
        RAISE EXCEPTION USING ERRCODE = 'SL001', MESSAGE = 'sluice: settle difference too large';
    END IF;
    SELECT * INTO t, count, prev, fresh_at
      FROM sluice_rate_settle_state_0005(alg, lim, iv, st_t, st_count, st_prev, now, reserved, actual, reserved_end);
    IF (t, count, prev) IS DISTINCT FROM (st_t, st_count, st_prev)
       AND NOT sluice_rate_in_range(t, count, prev, fresh_at) THEN
        RAISE EXCEPTION USING ERRCODE = 'SL003', MESSAGE = 'sluice: state beyond 2^53';
    END IF;
END
$$;

ALTER FUNCTION sluice_rate_sync_state(int, bigint, bigint, bigint, bigint, bigint)
    RENAME TO sluice_rate_sync_state_0002;

CREATE FUNCTION sluice_rate_sync_state(
    alg int, lim bigint, iv bigint, now bigint, remaining bigint, reset_after bigint,
    OUT t bigint, OUT count bigint, OUT prev bigint, OUT fresh_at bigint)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
    SELECT * INTO t, count, prev, fresh_at
      FROM sluice_rate_sync_state_0002(alg, lim, iv, now, remaining, reset_after);
    IF NOT sluice_rate_in_range(t, count, prev, fresh_at) THEN
        RAISE EXCEPTION USING ERRCODE = 'SL003', MESSAGE = 'sluice: state beyond 2^53';
    END IF;
END
$$;
