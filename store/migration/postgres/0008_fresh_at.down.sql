-- Back to 0007: the rate functions of 0002 and 0005, which read a stored
-- state as it is whatever its fresh time, and no exact_fresh_at.


CREATE OR REPLACE FUNCTION sluice_rate_take(
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

CREATE OR REPLACE FUNCTION sluice_rate_settle(
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

CREATE OR REPLACE FUNCTION sluice_rate_sync(
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
        -- A fresh state: zeros, unless the row holds it already
        -- (store.Kept); fresh_at may stay where it is (it only has to be
        -- no earlier than the true time).
        UPDATE sluice_rate_state r
           SET t = 0, count = 0, prev = 0
         WHERE r.name = p_name AND r.key = p_key
           AND (r.t, r.count, r.prev) IS DISTINCT FROM (s.t, s.count, s.prev);
    END IF;
    e := sluice_rate_eval(p_alg, p_lim, p_iv, s.t, s.count, s.prev, v_now, 0, 0);
    allowed := e.allowed; remaining := e.remaining; retry_after := e.retry_after;
    reset_after := e.reset_after; delay := e.delay; at := v_now;
END
$$;

CREATE OR REPLACE FUNCTION sluice_rate_take_all(
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
    created boolean[];
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
        e := sluice_rate_eval(p_algs[i], p_lims[i], p_ivs[i], st_t[j], st_c[j], st_p[j],
                              v_now, p_costs[i], p_max_delay);
        all_ok := all_ok AND e.allowed;
        IF e.t <> st_t[j] OR e.count <> st_c[j] OR e.prev <> st_p[j] THEN
            st_t[j] := e.t; st_c[j] := e.count; st_p[j] := e.prev;
            last_item[j] := i; -- its limit wrote the state
        END IF;
        r_ok[i] := e.allowed; r_rem[i] := e.remaining; r_retry[i] := e.retry_after;
        r_reset[i] := e.reset_after; r_delay[i] := e.delay;
    END LOOP;

    FOR j IN 1..m LOOP
        IF all_ok AND (st_t[j] <> o_t[j] OR st_c[j] <> o_c[j] OR st_p[j] <> o_p[j]) THEN
            -- The limit of the last item that changed the row decides
            -- when it is fresh; a state fresh already is stored as zeros
            -- (store.Kept).
            i := last_item[j];
            v_fresh := sluice_rate_fresh_at(p_algs[i], p_ivs[i], st_t[j], st_c[j], st_p[j]);
            IF v_fresh <= v_now THEN
                st_t[j] := 0; st_c[j] := 0; st_p[j] := 0;
            END IF;
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

DROP FUNCTION sluice_rate_live(bigint, bigint, bigint, bigint, bigint);

ALTER TABLE sluice_rate_state DROP COLUMN exact_fresh_at;
