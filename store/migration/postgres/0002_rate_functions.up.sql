-- The rate arithmetic of store.Eval, store.EvalSettle and store.EvalSync in
-- PL/pgSQL, so that every store operation is one statement and one round
-- trip. Every number is a bigint in Unix microseconds; integer division
-- truncates toward zero in PostgreSQL as in Go, and every division below has
-- a non-negative divisor and (where the sign matters) a non-negative
-- dividend, so the results equal Go's bit for bit.
--
-- fresh_at is an upper bound on when a row's state equals a fresh key's:
-- Cleanup deletes rows whose fresh_at has passed. Writes move it only when
-- the state's true fresh time passes it, and then a minute beyond, so that
-- most writes leave every indexed column alone and PostgreSQL can update the
-- row in place (a HOT update) instead of adding index entries each time.
--
-- A limit reaches SQL already validated by Go, as three numbers:
--   alg  0 gcra, 1 fixed window, 2 sliding window (store.Algorithm)
--   lim  the burst (gcra) or the window's limit
--   iv   the emission interval T (gcra) or the window length (microseconds)

-- sluice_rate_fresh_at mirrors store.FreshAt: when the state equals a fresh key.
CREATE FUNCTION sluice_rate_fresh_at(alg int, iv bigint, st_t bigint, st_count bigint, st_prev bigint)
RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE
        WHEN alg = 0 THEN st_t
        WHEN alg = 2 THEN CASE WHEN st_count = 0 AND st_prev = 0 THEN 0 ELSE st_t + iv END
        ELSE CASE WHEN st_count = 0 THEN 0 ELSE st_t END
    END
$$;

-- sluice_rate_eval mirrors store.Eval: the decision on a request of cost
-- units at now, and the state after it (unchanged when denied or a peek).
CREATE FUNCTION sluice_rate_eval(
    alg int, lim bigint, iv bigint,
    st_t bigint, st_count bigint, st_prev bigint,
    now bigint, cost bigint, max_delay bigint,
    OUT allowed boolean, OUT remaining bigint, OUT retry_after bigint,
    OUT reset_after bigint, OUT delay bigint,
    OUT t bigint, OUT count bigint, OUT prev bigint, OUT fresh_at bigint)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
    tau bigint; tat bigint; new_tat bigint; allow_at bigint;
    w_end bigint; cur bigint; cprev bigint; w_start bigint; elapsed bigint;
    est bigint; budget bigint; base bigint; at_ok bigint;
BEGIN
    t := st_t; count := st_count; prev := st_prev;
    retry_after := 0; reset_after := 0; delay := 0;
    IF alg = 0 THEN
        -- gcra.Params.Take
        tau := lim * iv;
        tat := greatest(st_t, now);
        new_tat := tat + cost * iv;
        allow_at := new_tat - tau;
        IF allow_at - now > greatest(max_delay, 0) THEN
            allowed := false;
            remaining := greatest((tau - (tat - now)) / iv, 0);
            retry_after := allow_at - now;
            reset_after := tat - now;
        ELSE
            allowed := true;
            remaining := greatest((tau - (new_tat - now)) / iv, 0);
            reset_after := new_tat - now;
            delay := greatest(allow_at - now, 0);
            IF cost <> 0 THEN
                t := new_tat;
            END IF;
        END IF;
        fresh_at := t;
        RETURN;
    END IF;

    -- window.current: roll the stored window forward to now.
    w_end := now - ((now % iv) + iv) % iv + iv;
    IF w_end < st_t THEN
        w_end := st_t; cur := st_count; cprev := st_prev;
    ELSIF w_end = st_t THEN
        cur := st_count; cprev := st_prev;
    ELSIF w_end = st_t + iv THEN
        cur := 0; cprev := st_count;
    ELSE
        cur := 0; cprev := 0;
    END IF;

    IF alg = 1 THEN
        -- window.FixedTake
        IF cur + cost > lim THEN
            allowed := false;
            remaining := greatest(lim - cur, 0);
            retry_after := w_end - now;
            reset_after := w_end - now;
        ELSE
            allowed := true;
            cur := cur + cost;
            remaining := lim - cur;
            IF cur > 0 THEN
                reset_after := w_end - now;
            END IF;
            IF cost <> 0 THEN
                t := w_end; count := cur; prev := 0;
            END IF;
        END IF;
        fresh_at := CASE WHEN count = 0 THEN 0 ELSE t END;
        RETURN;
    END IF;

    -- window.SlidingTake
    w_start := w_end - iv;
    elapsed := least(greatest(now - w_start, 0), iv);
    est := cur;
    IF cprev <> 0 AND elapsed < iv THEN
        est := est + (cprev * (iv - elapsed) + iv - 1) / iv;
    END IF;
    IF est + cost > lim THEN
        allowed := false;
        IF cur + cost <= lim THEN
            base := w_start; budget := lim - cur - cost; at_ok := cprev;
        ELSE
            base := w_end; budget := lim - cost; at_ok := cur;
        END IF;
        -- firstElapsed(at_ok, budget, iv)
        IF at_ok > budget THEN
            base := base + iv - budget * iv / at_ok;
        END IF;
        remaining := greatest(lim - est, 0);
        retry_after := greatest(base - now, 1);
    ELSE
        allowed := true;
        remaining := lim - est - cost;
        cur := cur + cost;
        IF cost <> 0 THEN
            t := w_end; count := cur; prev := cprev;
        END IF;
    END IF;
    -- window.slidingReset
    IF cur > 0 THEN
        reset_after := w_end + iv - now;
    ELSIF cprev > 0 THEN
        reset_after := w_end - now;
    END IF;
    fresh_at := CASE WHEN count = 0 AND prev = 0 THEN 0 ELSE t + iv END;
END
$$;

-- sluice_rate_settle_state mirrors store.EvalSettle: the state after a
-- reservation of reserved units (taken in the window ending at reserved_end)
-- turned out to cost actual. A charge that would run the debt past what the
-- arithmetic can hold raises SQLSTATE SL001 (store.ErrCostExceedsLimit).
CREATE FUNCTION sluice_rate_settle_state(
    alg int, lim bigint, iv bigint,
    st_t bigint, st_count bigint, st_prev bigint,
    now bigint, reserved bigint, actual bigint, reserved_end bigint,
    OUT t bigint, OUT count bigint, OUT prev bigint, OUT fresh_at bigint)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
    delta bigint := actual - reserved;
    w_end bigint; cur bigint; cprev bigint;
BEGIN
    IF alg = 0 THEN
        -- gcra.Settle; EvalSettle keeps only the TAT.
        t := st_t; count := 0; prev := 0;
        IF delta > 4611686018427387904 / iv OR -delta > 4611686018427387904 / iv THEN
            RAISE EXCEPTION USING ERRCODE = 'SL001', MESSAGE = 'sluice: settle difference too large';
        END IF;
        IF delta > 0 THEN
            t := greatest(st_t, now);
            IF delta > (4611686018427387904 - lim * iv - (t - now)) / iv THEN
                RAISE EXCEPTION USING ERRCODE = 'SL001', MESSAGE = 'sluice: settle difference too large';
            END IF;
            t := t + delta * iv;
        ELSIF delta < 0 THEN
            t := st_t + delta * iv;
        END IF;
        IF delta <> 0 AND t < now THEN
            t := now;
        END IF;
        fresh_at := t;
        RETURN;
    END IF;

    -- window.Settle
    t := st_t; count := st_count; prev := st_prev;
    w_end := now - ((now % iv) + iv) % iv + iv;
    IF w_end < st_t THEN
        w_end := st_t; cur := st_count; cprev := st_prev;
    ELSIF w_end = st_t THEN
        cur := st_count; cprev := st_prev;
    ELSIF w_end = st_t + iv THEN
        cur := 0; cprev := st_count;
    ELSE
        cur := 0; cprev := 0;
    END IF;
    IF delta > 0 THEN
        -- Debt stays below 2^53 / window so the sliding weighting is exact.
        IF delta > greatest(lim, 9007199254740992 / iv) - cur THEN
            RAISE EXCEPTION USING ERRCODE = 'SL001', MESSAGE = 'sluice: settle difference too large';
        END IF;
        cur := cur + delta;
    ELSIF delta < 0 THEN
        IF w_end <> reserved_end THEN
            IF alg = 2 AND w_end = reserved_end + iv THEN
                t := w_end; count := cur; prev := greatest(cprev + delta, 0);
            END IF;
            fresh_at := sluice_rate_fresh_at(alg, iv, t, count, prev);
            RETURN;
        END IF;
        cur := greatest(cur + delta, 0);
    ELSE
        fresh_at := sluice_rate_fresh_at(alg, iv, t, count, prev);
        RETURN;
    END IF;
    IF alg <> 2 THEN
        cprev := 0;
    END IF;
    t := w_end; count := cur; prev := cprev;
    fresh_at := sluice_rate_fresh_at(alg, iv, t, count, prev);
END
$$;

-- sluice_rate_sync_state mirrors store.EvalSync: the state a provider's
-- report (remaining units now; when 0, nothing until reset_after) implies.
CREATE FUNCTION sluice_rate_sync_state(
    alg int, lim bigint, iv bigint, now bigint, remaining bigint, reset_after bigint,
    OUT t bigint, OUT count bigint, OUT prev bigint, OUT fresh_at bigint)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
    r bigint := least(greatest(remaining, 0), lim);
    x bigint;
BEGIN
    count := 0; prev := 0;
    IF alg = 0 THEN
        -- gcra.Sync
        IF r = 0 AND reset_after > 0 THEN
            t := now + reset_after + (lim - 1) * iv;
        ELSE
            t := now + (lim - r) * iv;
        END IF;
    ELSE
        -- window.Sync
        t := now - ((now % iv) + iv) % iv + iv;
        IF r = 0 AND now + reset_after > t THEN
            x := now + reset_after - 1;
            t := x - ((x % iv) + iv) % iv + iv;
        END IF;
        count := lim - r;
    END IF;
    fresh_at := sluice_rate_fresh_at(alg, iv, t, count, prev);
END
$$;

-- sluice_rate_now is the store clock: the database's wall clock in Unix
-- microseconds, read when called (not at transaction start).
CREATE FUNCTION sluice_rate_now()
RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
    SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint
$$;

-- sluice_rate_take is store.RateStore.Take. A request that would change the
-- state is first tried as one conditional UPDATE, which locks the row and,
-- when another transaction changed it meanwhile, re-evaluates the condition
-- and the new state on the latest version: there is no read-then-write race.
-- (GCRA, the common case, is written out inline: no function call while the
-- row is locked.) Denials and peeks read without locking and write nothing.
-- A missing row is inserted with ON CONFLICT DO NOTHING; losing that race
-- retries.
CREATE FUNCTION sluice_rate_take(
    p_name text, p_key text, p_alg int, p_lim bigint, p_iv bigint,
    p_cost bigint, p_max_delay bigint, p_now bigint,
    OUT allowed boolean, OUT remaining bigint, OUT retry_after bigint,
    OUT reset_after bigint, OUT delay bigint, OUT at bigint)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_now bigint;
    tau bigint := CASE WHEN p_alg = 0 THEN p_lim * p_iv END; -- gcra only
    s record;
    e record;
BEGIN
    LOOP
        v_now := coalesce(p_now, sluice_rate_now());
        IF p_cost > 0 AND p_alg = 0 THEN
            UPDATE sluice_rate_state r
               SET t = greatest(r.t, v_now) + p_cost * p_iv,
                   fresh_at = CASE WHEN greatest(r.t, v_now) + p_cost * p_iv > r.fresh_at
                                   THEN greatest(r.t, v_now) + p_cost * p_iv + 60000000
                                   ELSE r.fresh_at END
             WHERE r.name = p_name AND r.key = p_key
               AND greatest(r.t, v_now) + p_cost * p_iv - tau - v_now <= greatest(p_max_delay, 0)
            RETURNING true, greatest((tau - (r.t - v_now)) / p_iv, 0), 0, r.t - v_now,
                      greatest(r.t - tau - v_now, 0), v_now
                 INTO allowed, remaining, retry_after, reset_after, delay, at;
            IF FOUND THEN
                RETURN;
            END IF;
        ELSIF p_cost > 0 THEN
            UPDATE sluice_rate_state r
               SET (t, count, prev, fresh_at) = (
                       SELECT x.t, x.count, x.prev,
                              CASE WHEN x.fresh_at > r.fresh_at THEN x.fresh_at + 60000000 ELSE r.fresh_at END
                         FROM sluice_rate_eval(p_alg, p_lim, p_iv, r.t, r.count, r.prev,
                                               v_now, p_cost, p_max_delay) x)
             WHERE r.name = p_name AND r.key = p_key
               AND (sluice_rate_eval(p_alg, p_lim, p_iv, r.t, r.count, r.prev,
                                     v_now, p_cost, p_max_delay)).allowed
            RETURNING r.t, r.count, r.prev INTO s;
            IF FOUND THEN
                -- An allowed take's result equals a peek at the state it left.
                e := sluice_rate_eval(p_alg, p_lim, p_iv, s.t, s.count, s.prev, v_now, 0, p_max_delay);
                allowed := true; remaining := e.remaining; retry_after := 0;
                reset_after := e.reset_after; delay := e.delay; at := v_now;
                RETURN;
            END IF;
        END IF;
        SELECT r.t, r.count, r.prev INTO s
          FROM sluice_rate_state r
         WHERE r.name = p_name AND r.key = p_key;
        IF FOUND THEN
            e := sluice_rate_eval(p_alg, p_lim, p_iv, s.t, s.count, s.prev, v_now, p_cost, p_max_delay);
            IF e.allowed AND p_cost > 0 THEN
                CONTINUE; -- changed since the UPDATE looked: try again
            END IF;
        ELSE
            e := sluice_rate_eval(p_alg, p_lim, p_iv, 0, 0, 0, v_now, p_cost, p_max_delay);
            IF e.allowed AND p_cost > 0 AND e.fresh_at > v_now THEN
                INSERT INTO sluice_rate_state (name, key, t, count, prev, fresh_at)
                VALUES (p_name, p_key, e.t, e.count, e.prev, e.fresh_at + 60000000)
                ON CONFLICT (name, key) DO NOTHING;
                IF NOT FOUND THEN
                    CONTINUE; -- another transaction created the key first
                END IF;
            END IF;
        END IF;
        allowed := e.allowed; remaining := e.remaining; retry_after := e.retry_after;
        reset_after := e.reset_after; delay := e.delay; at := v_now;
        RETURN;
    END LOOP;
END
$$;

-- sluice_rate_settle is store.RateStore.Settle: one locking UPDATE (or an
-- INSERT for a key that holds no state), then a peek.
CREATE FUNCTION sluice_rate_settle(
    p_name text, p_key text, p_alg int, p_lim bigint, p_iv bigint,
    p_reserved bigint, p_actual bigint, p_reserved_end bigint, p_now bigint,
    OUT allowed boolean, OUT remaining bigint, OUT retry_after bigint,
    OUT reset_after bigint, OUT delay bigint, OUT at bigint)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_now bigint;
    s record;
    e record;
BEGIN
    LOOP
        v_now := coalesce(p_now, sluice_rate_now());
        UPDATE sluice_rate_state r
           SET (t, count, prev, fresh_at) = (
                   SELECT x.t, x.count, x.prev,
                          CASE WHEN x.fresh_at > r.fresh_at THEN x.fresh_at + 60000000 ELSE r.fresh_at END
                     FROM sluice_rate_settle_state(p_alg, p_lim, p_iv, r.t, r.count, r.prev,
                                                   v_now, p_reserved, p_actual, p_reserved_end) x)
         WHERE r.name = p_name AND r.key = p_key
        RETURNING r.t, r.count, r.prev INTO s;
        IF NOT FOUND THEN
            s := sluice_rate_settle_state(p_alg, p_lim, p_iv, 0, 0, 0, v_now, p_reserved, p_actual, p_reserved_end);
            IF s.fresh_at > v_now THEN
                INSERT INTO sluice_rate_state (name, key, t, count, prev, fresh_at)
                VALUES (p_name, p_key, s.t, s.count, s.prev, s.fresh_at + 60000000)
                ON CONFLICT (name, key) DO NOTHING;
                IF NOT FOUND THEN
                    CONTINUE;
                END IF;
            END IF;
        END IF;
        e := sluice_rate_eval(p_alg, p_lim, p_iv, s.t, s.count, s.prev, v_now, 0, 0);
        allowed := e.allowed; remaining := e.remaining; retry_after := e.retry_after;
        reset_after := e.reset_after; delay := e.delay; at := v_now;
        RETURN;
    END LOOP;
END
$$;

-- sluice_rate_sync is store.RateStore.Sync: the new state does not depend
-- on the old one, so it is one upsert (or, when the report leaves the key
-- fresh, an update of an existing row only), then a peek.
CREATE FUNCTION sluice_rate_sync(
    p_name text, p_key text, p_alg int, p_lim bigint, p_iv bigint,
    p_remaining bigint, p_reset_after bigint, p_now bigint,
    OUT allowed boolean, OUT remaining bigint, OUT retry_after bigint,
    OUT reset_after bigint, OUT delay bigint, OUT at bigint)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_now bigint := coalesce(p_now, sluice_rate_now());
    s record;
    e record;
BEGIN
    s := sluice_rate_sync_state(p_alg, p_lim, p_iv, v_now, p_remaining, p_reset_after);
    IF s.fresh_at > v_now THEN
        INSERT INTO sluice_rate_state AS r (name, key, t, count, prev, fresh_at)
        VALUES (p_name, p_key, s.t, s.count, s.prev, s.fresh_at + 60000000)
        ON CONFLICT (name, key) DO UPDATE
           SET t = excluded.t, count = excluded.count, prev = excluded.prev,
               fresh_at = CASE WHEN s.fresh_at > r.fresh_at THEN excluded.fresh_at ELSE r.fresh_at END;
    ELSE
        -- A fresh state: fresh_at may stay where it is (it only has to be
        -- no earlier than the true time).
        UPDATE sluice_rate_state r
           SET t = s.t, count = s.count, prev = s.prev
         WHERE r.name = p_name AND r.key = p_key;
    END IF;
    e := sluice_rate_eval(p_alg, p_lim, p_iv, s.t, s.count, s.prev, v_now, 0, 0);
    allowed := e.allowed; remaining := e.remaining; retry_after := e.retry_after;
    reset_after := e.reset_after; delay := e.delay; at := v_now;
END
$$;

-- sluice_rate_take_all is store.RateStore.TakeAll: item i is
-- (p_names[i], p_keys[i]) under limit (p_algs[i], p_lims[i], p_ivs[i]) at
-- cost p_costs[i]. It locks every distinct row in (name, key) order (byte
-- order, so every caller agrees and no two deadlock), creating missing rows
-- as it goes, reads the clock once, decides the items in order (items on
-- the same row see each other's charges) and writes only if all are
-- allowed. It returns one row per item, numbered by ord.
CREATE FUNCTION sluice_rate_take_all(
    p_names text[], p_keys text[], p_algs int[], p_lims bigint[], p_ivs bigint[],
    p_costs bigint[], p_max_delay bigint, p_now bigint)
RETURNS TABLE (ord int, allowed boolean, remaining bigint, retry_after bigint,
               reset_after bigint, delay bigint, at bigint)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    n int := coalesce(array_length(p_names, 1), 0);
    u_names text[]; u_keys text[];
    o_t bigint[]; o_c bigint[]; o_p bigint[];   -- stored states, locked
    st_t bigint[]; st_c bigint[]; st_p bigint[]; -- states with the charges so far
    created boolean[]; changed boolean[];
    idx int[]; last_item int[];
    r_ok boolean[]; r_rem bigint[]; r_retry bigint[]; r_reset bigint[]; r_delay bigint[];
    m int; i int; j int;
    v_now bigint;
    v_fresh bigint;
    all_ok boolean := true;
    s record;
    e record;
BEGIN
    SELECT coalesce(array_agg(d.n ORDER BY d.n COLLATE "C", d.k COLLATE "C"), '{}'),
           coalesce(array_agg(d.k ORDER BY d.n COLLATE "C", d.k COLLATE "C"), '{}')
      INTO u_names, u_keys
      FROM (SELECT DISTINCT u.n, u.k FROM unnest(p_names, p_keys) AS u(n, k)) d;
    m := coalesce(array_length(u_names, 1), 0);
    FOR j IN 1..m LOOP
        LOOP
            SELECT r.t, r.count, r.prev INTO s
              FROM sluice_rate_state r
             WHERE r.name = u_names[j] AND r.key = u_keys[j]
               FOR NO KEY UPDATE;
            IF FOUND THEN
                o_t[j] := s.t; o_c[j] := s.count; o_p[j] := s.prev; created[j] := false;
                EXIT;
            END IF;
            INSERT INTO sluice_rate_state (name, key, t, count, prev, fresh_at)
            VALUES (u_names[j], u_keys[j], 0, 0, 0, 0)
            ON CONFLICT (name, key) DO NOTHING;
            IF FOUND THEN
                o_t[j] := 0; o_c[j] := 0; o_p[j] := 0; created[j] := true;
                EXIT;
            END IF;
        END LOOP;
        st_t[j] := o_t[j]; st_c[j] := o_c[j]; st_p[j] := o_p[j];
        changed[j] := false;
    END LOOP;

    v_now := coalesce(p_now, sluice_rate_now());
    FOR i IN 1..n LOOP
        FOR j IN 1..m LOOP
            IF u_names[j] = p_names[i] AND u_keys[j] = p_keys[i] THEN
                idx[i] := j;
                EXIT;
            END IF;
        END LOOP;
        j := idx[i];
        last_item[j] := i;
        e := sluice_rate_eval(p_algs[i], p_lims[i], p_ivs[i], st_t[j], st_c[j], st_p[j],
                              v_now, p_costs[i], p_max_delay);
        all_ok := all_ok AND e.allowed;
        IF e.t <> st_t[j] OR e.count <> st_c[j] OR e.prev <> st_p[j] THEN
            st_t[j] := e.t; st_c[j] := e.count; st_p[j] := e.prev; changed[j] := true;
        END IF;
        r_ok[i] := e.allowed; r_rem[i] := e.remaining; r_retry[i] := e.retry_after;
        r_reset[i] := e.reset_after; r_delay[i] := e.delay;
    END LOOP;

    FOR j IN 1..m LOOP
        IF all_ok AND changed[j] THEN
            -- The row's last item's limit decides when it is fresh.
            i := last_item[j];
            v_fresh := sluice_rate_fresh_at(p_algs[i], p_ivs[i], st_t[j], st_c[j], st_p[j]);
            UPDATE sluice_rate_state r
               SET t = st_t[j], count = st_c[j], prev = st_p[j],
                   fresh_at = CASE WHEN v_fresh > r.fresh_at THEN v_fresh + 60000000 ELSE r.fresh_at END
             WHERE r.name = u_names[j] AND r.key = u_keys[j];
        ELSIF created[j] THEN
            -- An untouched placeholder: a fresh key needs no row.
            DELETE FROM sluice_rate_state r WHERE r.name = u_names[j] AND r.key = u_keys[j];
        END IF;
    END LOOP;

    FOR i IN 1..n LOOP
        IF NOT all_ok AND r_ok[i] THEN
            -- Nothing was charged: an item that had room on its own says
            -- what it has now, a peek at its stored state.
            j := idx[i];
            e := sluice_rate_eval(p_algs[i], p_lims[i], p_ivs[i], o_t[j], o_c[j], o_p[j], v_now, 0, 0);
            r_ok[i] := e.allowed; r_rem[i] := e.remaining; r_retry[i] := e.retry_after;
            r_reset[i] := e.reset_after; r_delay[i] := e.delay;
        END IF;
        ord := i; allowed := r_ok[i]; remaining := r_rem[i]; retry_after := r_retry[i];
        reset_after := r_reset[i]; delay := r_delay[i]; at := v_now;
        RETURN NEXT;
    END LOOP;
END
$$;
