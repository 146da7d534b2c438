-- A claim in one round trip. sluice_job_pick does what the claim's Go
-- code did in two to three round trips (store.PickClaims over the heads of
-- the groups): given the groups in fair order (store.OrderGroups, decided
-- by the caller from the groups' loads) and their weights, it locks the
-- heads of the groups (FOR UPDATE SKIP LOCKED), reading a batch of groups
-- at a time until the first round is full, reads again up to the limit
-- the groups that gave their whole share when the claim is short, and
-- returns the picks in claim order: rounds in which each group gives at
-- most its weight of jobs, groups in the given order, each group's jobs by
-- priority (highest first), next run, id (bytewise, as Go compares). The
-- claim statement leases the picks, opens their runs and reads their
-- connectors in the same statement, so that BEGIN, the finishes, the
-- gate's deferrals, the claim and COMMIT go out as one batch.
--
-- p_now is the claim's time, p_types the job types (empty: any), p_keys
-- and p_weights the groups with a claimable job in fair order, p_limit the
-- most jobs to pick (1 to store.MaxClaim).
CREATE FUNCTION sluice_job_pick(p_now bigint, p_types text[], p_keys text[], p_weights bigint[], p_limit int)
RETURNS TABLE (pid text, ord bigint)
LANGUAGE plpgsql VOLATILE
-- A claim takes a few jobs: planned as 1000 rows (the default), the
-- claim statement would join the picks to sluice_jobs and sluice_job_runs
-- by scanning them whole rather than by their indexes.
ROWS 10
AS $$
DECLARE
    n int := coalesce(cardinality(p_keys), 0);
    share int;       -- store.GroupShare's rounds
    i int := 1;      -- the next group to read
    first int := 0;  -- what the first round takes from the groups read
    b_end int;
    b_lims int[];
    cnts int[];
    full_keys text[] := '{}';
    c_id text[] := '{}';
    c_grp text[] := '{}';
    c_pri bigint[] := '{}';
    c_nra bigint[] := '{}';
    r record;
    lim int;
BEGIN
    IF n = 0 THEN
        RETURN;
    END IF;
    share := (p_limit + n - 1) / n;
    WHILE i <= n AND first < p_limit LOOP
        b_end := least(n, i + (p_limit - first) - 1);
        b_lims := ARRAY(SELECT least(share * greatest(p_weights[x], 1), p_limit)::int FROM generate_series(i, b_end) AS x ORDER BY x);
        cnts := array_fill(0, ARRAY[b_end - i + 1]);
        FOR r IN
            SELECT g.pos, h.id, h.group_key, h.priority, h.next_run_at
            FROM unnest(p_keys[i:b_end], b_lims) WITH ORDINALITY AS g(key, k, pos)
            CROSS JOIN LATERAL (
                SELECT j.id, j.group_key, j.priority, j.next_run_at
                FROM sluice_jobs j JOIN sluice_job_connectors c ON c.id = j.connector_id
                WHERE j.group_key = g.key AND NOT j.disabled AND j.next_run_at <= p_now
                    AND (j.lease_holder = '' OR j.lease_until <= p_now)
                    AND c.status = 'active' AND c.pressure_until <= p_now
                    AND (cardinality(p_types) = 0 OR j.type = ANY(p_types))
                ORDER BY j.priority DESC, j.next_run_at, j.id
                LIMIT g.k
                FOR UPDATE OF j SKIP LOCKED) h
        LOOP
            cnts[r.pos] := cnts[r.pos] + 1;
            c_id := c_id || r.id;
            c_grp := c_grp || r.group_key;
            c_pri := c_pri || r.priority;
            c_nra := c_nra || r.next_run_at;
        END LOOP;
        FOR x IN i..b_end LOOP
            lim := b_lims[x - i + 1];
            first := first + least(cnts[x - i + 1], greatest(p_weights[x], 1)::int);
            IF cnts[x - i + 1] = lim AND lim < p_limit THEN
                full_keys := full_keys || p_keys[x];
            END IF;
        END LOOP;
        i := b_end + 1;
    END LOOP;
    IF cardinality(c_id) < p_limit AND cardinality(full_keys) > 0 THEN
        -- Read each full group again up to the limit: its rows this
        -- transaction locked already are read again, not skipped.
        SELECT coalesce(array_agg(x.id ORDER BY x.o), '{}'), coalesce(array_agg(x.grp ORDER BY x.o), '{}'),
               coalesce(array_agg(x.pri ORDER BY x.o), '{}'), coalesce(array_agg(x.nra ORDER BY x.o), '{}')
          INTO c_id, c_grp, c_pri, c_nra
          FROM unnest(c_id, c_grp, c_pri, c_nra) WITH ORDINALITY AS x(id, grp, pri, nra, o)
         WHERE x.grp <> ALL(full_keys);
        FOR r IN
            SELECT h.id, h.group_key, h.priority, h.next_run_at
            FROM unnest(full_keys) AS g(key)
            CROSS JOIN LATERAL (
                SELECT j.id, j.group_key, j.priority, j.next_run_at
                FROM sluice_jobs j JOIN sluice_job_connectors c ON c.id = j.connector_id
                WHERE j.group_key = g.key AND NOT j.disabled AND j.next_run_at <= p_now
                    AND (j.lease_holder = '' OR j.lease_until <= p_now)
                    AND c.status = 'active' AND c.pressure_until <= p_now
                    AND (cardinality(p_types) = 0 OR j.type = ANY(p_types))
                ORDER BY j.priority DESC, j.next_run_at, j.id
                LIMIT p_limit
                FOR UPDATE OF j SKIP LOCKED) h
        LOOP
            c_id := c_id || r.id;
            c_grp := c_grp || r.group_key;
            c_pri := c_pri || r.priority;
            c_nra := c_nra || r.next_run_at;
        END LOOP;
    END IF;
    RETURN QUERY
        SELECT x.id, row_number() OVER (ORDER BY x.rk / x.w, x.gord, x.rk)
        FROM (
            SELECT c.id, g.gord, greatest(g.w, 1) AS w,
                   row_number() OVER (PARTITION BY c.grp ORDER BY c.pri DESC, c.nra, c.id COLLATE "C") - 1 AS rk
            FROM unnest(c_id, c_grp, c_pri, c_nra) AS c(id, grp, pri, nra)
            JOIN unnest(p_keys, p_weights) WITH ORDINALITY AS g(key, w, gord) ON g.key = c.grp) x
        ORDER BY x.rk / x.w, x.gord, x.rk
        LIMIT p_limit;
END
$$;
