-- Slot scheduling (seed 003). Times are bigint Unix microseconds; windows
-- start at multiples of their size from the epoch.
--
-- sluice_slot_configs: one row per version of a named config; the active
-- version of a name is its latest, while active.
CREATE TABLE sluice_slot_configs (
    name           text        NOT NULL,
    version        bigint      NOT NULL,
    max_per_window bigint      NOT NULL CHECK (max_per_window > 0),
    window_us      bigint      NOT NULL CHECK (window_us > 0),
    headroom       bigint      NOT NULL CHECK (headroom > 0),
    active         boolean     NOT NULL DEFAULT true,
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, version)
);

-- sluice_slot_windows: one counter per (config name, window), shared by
-- every version of the config (seed decision 4). A window is CLOSED once it
-- holds max_per_window slots; the partial index finds the first OPEN window
-- at or after a time in O(log n), so full windows are never walked.
CREATE TABLE sluice_slot_windows (
    config_name  text   NOT NULL,
    window_start bigint NOT NULL,
    slot_count   bigint NOT NULL DEFAULT 0 CHECK (slot_count >= 0),
    status       text   NOT NULL DEFAULT 'OPEN' CHECK (status IN ('OPEN', 'CLOSED')),
    PRIMARY KEY (config_name, window_start)
) WITH (fillfactor = 80);

CREATE INDEX sluice_slot_windows_open ON sluice_slot_windows (config_name, window_start)
    WHERE status = 'OPEN';

-- sluice_slots: one row per event id (idempotency: the primary key).
CREATE TABLE sluice_slots (
    event_id       text   PRIMARY KEY,
    config_name    text   NOT NULL,
    config_version bigint NOT NULL,
    window_us      bigint NOT NULL,
    requested_at   bigint NOT NULL,
    window_start   bigint NOT NULL,
    scheduled_at   bigint NOT NULL
);

-- sluice_slot_lock takes a window's lock for the rest of the transaction,
-- or returns false at once if another transaction holds it (the NOWAIT of
-- the seed). A transaction-level advisory lock, rather than a row lock, so
-- that a window without a row yet is locked the same way and creating its
-- row never waits on another transaction's insert. The key covers the
-- schema, so that schemas (tenants, tests) never share locks.
CREATE FUNCTION sluice_slot_lock(cfg text, ws bigint) RETURNS boolean
LANGUAGE sql VOLATILE
AS $$ SELECT pg_try_advisory_xact_lock(hashtextextended(current_schema() || ' slot ' || cfg, ws)) $$;

-- sluice_slot_check_isolation refuses to assign outside READ COMMITTED:
-- the count read right after taking a window's lock must see the previous
-- holder's commit, which a snapshot older than the lock would not.
CREATE FUNCTION sluice_slot_check_isolation() RETURNS void
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'sluice slots: assignments need READ COMMITTED isolation, not %',
            current_setting('transaction_isolation') USING ERRCODE = 'SL002';
    END IF;
END
$$;

-- sluice_slot_try locks window ws and returns its count, creating its row
-- if needed; -1 when another transaction holds the window.
CREATE FUNCTION sluice_slot_try(cfg text, ws bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    cnt bigint;
BEGIN
    IF NOT sluice_slot_lock(cfg, ws) THEN
        RETURN -1;
    END IF;
    SELECT slot_count INTO cnt FROM sluice_slot_windows WHERE config_name = cfg AND window_start = ws;
    IF NOT FOUND THEN
        INSERT INTO sluice_slot_windows (config_name, window_start) VALUES (cfg, ws);
        cnt := 0;
    END IF;
    RETURN cnt;
END
$$;

-- sluice_slot_next_open returns the first window at or after c that is not
-- CLOSED: c itself when it has no row or an OPEN one, else the first OPEN
-- row after it through the partial index. A window closes only in the
-- transaction that gives its successor a row (sluice_slot_set,
-- sluice_slot_close), so a run of CLOSED rows always ends at an OPEN row
-- and there is no hole to miss.
CREATE FUNCTION sluice_slot_next_open(cfg text, c bigint, size bigint) RETURNS bigint
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    st text;
    o  bigint;
BEGIN
    SELECT status INTO st FROM sluice_slot_windows WHERE config_name = cfg AND window_start = c;
    IF NOT FOUND OR st = 'OPEN' THEN
        RETURN c;
    END IF;
    SELECT window_start INTO o FROM sluice_slot_windows
    WHERE config_name = cfg AND status = 'OPEN' AND window_start > c
    ORDER BY window_start LIMIT 1;
    IF o IS NULL THEN
        RETURN c + size;
    END IF;
    -- Align to this config's windows (rows of an older window size may not be).
    RETURN o + (size - o % size) % size;
END
$$;

-- sluice_slot_set stores a locked window's count, CLOSED once it reaches
-- max_pw. A window closes only together with a row for its successor, in
-- the same transaction: the skip query jumps from a CLOSED row to the next
-- OPEN one, so a CLOSED row whose successor had no row would hide that
-- window. When another transaction holds the successor (its row may be
-- rolled back with it), the full window stays OPEN; searches that meet it
-- close it later (sluice_slot_close).
CREATE FUNCTION sluice_slot_set(cfg text, ws bigint, size bigint, max_pw bigint, cnt bigint) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF cnt >= max_pw AND sluice_slot_lock(cfg, ws + size) THEN
        INSERT INTO sluice_slot_windows (config_name, window_start) VALUES (cfg, ws + size)
        ON CONFLICT DO NOTHING;
        UPDATE sluice_slot_windows SET slot_count = cnt, status = 'CLOSED'
        WHERE config_name = cfg AND window_start = ws;
    ELSE
        UPDATE sluice_slot_windows SET slot_count = cnt, status = 'OPEN'
        WHERE config_name = cfg AND window_start = ws;
    END IF;
END
$$;

-- sluice_slot_close closes a full window the caller holds that is still
-- OPEN (its successor was held when it filled), if it can now give the
-- successor a row.
CREATE FUNCTION sluice_slot_close(cfg text, ws bigint, size bigint) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM sluice_slot_windows WHERE config_name = cfg AND window_start = ws AND status = 'OPEN')
       AND sluice_slot_lock(cfg, ws + size) THEN
        INSERT INTO sluice_slot_windows (config_name, window_start) VALUES (cfg, ws + size)
        ON CONFLICT DO NOTHING;
        UPDATE sluice_slot_windows SET status = 'CLOSED' WHERE config_name = cfg AND window_start = ws;
    END IF;
END
$$;

-- sluice_slot_offset mirrors store.SlotOffset: where jitter j in [0, 1)
-- places an event in a window of size, from its first usable microsecond.
CREATE FUNCTION sluice_slot_offset(j float8, from_us bigint, size bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT from_us + least(floor(j * (size - from_us)::float8)::bigint, size - from_us - 1) $$;

-- sluice_slot_assign gives one event a slot in one round trip (seed 003's
-- PL/SQL block): the idempotency check; phase 1, the requested window with
-- its proportional capacity floor(max * remaining / size) and a jitter in
-- [elapsed, size); phase 2, from the first open window after it, each with
-- the full capacity and a uniform jitter. A window another transaction
-- holds is skipped, never waited on; the search gives up (EXHAUSTED)
-- headroom windows past the first such window. status is NEW, EXISTING or
-- EXHAUSTED.
CREATE FUNCTION sluice_slot_assign(
    cfg text, ver bigint, max_pw bigint, size bigint, headroom bigint,
    eid text, req bigint, jit float8,
    OUT status text, OUT o_cfg text, OUT o_ver bigint, OUT o_req bigint, OUT o_ws bigint, OUT o_sched bigint)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    ws bigint; el bigint; first_max bigint; c bigint; lim bigint; cnt bigint; n int;
BEGIN
    PERFORM sluice_slot_check_isolation();
    SELECT s.config_name, s.config_version, s.requested_at, s.window_start, s.scheduled_at
    INTO o_cfg, o_ver, o_req, o_ws, o_sched
    FROM sluice_slots s WHERE s.event_id = eid;
    IF FOUND THEN
        status := 'EXISTING';
        RETURN;
    END IF;
    ws := req - req % size;
    el := req - ws;
    first_max := max_pw * (size - el) / size;
    o_cfg := cfg; o_ver := ver; o_req := req;
    IF first_max > 0 THEN
        cnt := sluice_slot_try(cfg, ws);
        IF cnt >= 0 AND cnt < first_max THEN
            o_ws := ws;
            o_sched := ws + sluice_slot_offset(jit, el, size);
        END IF;
    END IF;
    IF o_ws IS NULL THEN
        -- The headroom counts from the first window found held by another
        -- transaction (lim), or else from c: windows that turn out full
        -- are jumped over through the index, never counted.
        c := sluice_slot_next_open(cfg, ws + size, size);
        WHILE c < coalesce(lim, c) + headroom * size LOOP
            cnt := sluice_slot_try(cfg, c);
            IF cnt < 0 THEN
                lim := coalesce(lim, c);
                c := c + size;
            ELSIF cnt >= max_pw THEN
                PERFORM sluice_slot_close(cfg, c, size);
                c := sluice_slot_next_open(cfg, c + size, size);
            ELSE
                o_ws := c;
                o_sched := c + sluice_slot_offset(jit, 0, size);
                EXIT;
            END IF;
        END LOOP;
        IF o_ws IS NULL THEN
            -- A concurrent assignment of the same id may have held the
            -- windows: its slot, if it committed one, is the answer.
            SELECT s.config_name, s.config_version, s.requested_at, s.window_start, s.scheduled_at
            INTO o_cfg, o_ver, o_req, o_ws, o_sched
            FROM sluice_slots s WHERE s.event_id = eid;
            status := CASE WHEN FOUND THEN 'EXISTING' ELSE 'EXHAUSTED' END;
            RETURN;
        END IF;
    END IF;
    INSERT INTO sluice_slots (event_id, config_name, config_version, window_us, requested_at, window_start, scheduled_at)
    VALUES (eid, cfg, ver, size, req, o_ws, o_sched)
    ON CONFLICT (event_id) DO NOTHING;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n = 0 THEN
        -- A concurrent assignment of the same id committed first: its slot.
        SELECT s.config_name, s.config_version, s.requested_at, s.window_start, s.scheduled_at
        INTO o_cfg, o_ver, o_req, o_ws, o_sched
        FROM sluice_slots s WHERE s.event_id = eid;
        status := 'EXISTING';
        RETURN;
    END IF;
    PERFORM sluice_slot_set(cfg, o_ws, size, max_pw, cnt + 1);
    status := 'NEW';
END
$$;

-- sluice_slot_assign_batch assigns many events in one call with the same
-- rules, set-based: one lookup for the ids that already have slots, a walk
-- over windows (not events) that locks each window once, one INSERT for
-- every new slot and one UPDATE for every counter. The caller sorts the
-- events by requested time and removes repeated ids. Rows come back with
-- the event's 1-based position; an event without a window within the
-- headroom comes back EXHAUSTED.
CREATE FUNCTION sluice_slot_assign_batch(
    cfg text, ver bigint, max_pw bigint, size bigint, headroom bigint,
    eids text[], reqs bigint[], jits float8[])
RETURNS TABLE (idx int, status text, o_cfg text, o_ver bigint, o_req bigint, o_ws bigint, o_sched bigint)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    pend int[];
    held_ws bigint[] := '{}';   -- windows this call has tried, in order
    held_cnt bigint[] := '{}';  -- their counts (-1: held by another transaction)
    out_i int[] := '{}';
    out_ws bigint[] := '{}';
    out_sched bigint[] := '{}';
    exh int[] := '{}';
    lost int[] := '{}';
    ins_ids text[];
    ex_i int[]; ex_cfg text[]; ex_ver bigint[]; ex_req bigint[]; ex_ws bigint[]; ex_sched bigint[];
    k int; i int; h int; np int;
    req bigint; ws bigint; el bigint; first_max bigint;
    last_ws bigint := -1; s_lim bigint; pin bigint;
    cur bigint := -1; cur_h int;
    cnt bigint; placed boolean; n int;
BEGIN
    PERFORM sluice_slot_check_isolation();
    -- The events that have slots and those still pending, in one statement
    -- (one snapshot): a slot committed meanwhile must leave its event in
    -- exactly one of the two (pending: the INSERT below finds it).
    SELECT coalesce(array_agg(u.ord::int ORDER BY u.ord) FILTER (WHERE s.event_id IS NULL), '{}'),
           coalesce(array_agg(u.ord::int) FILTER (WHERE s.event_id IS NOT NULL), '{}'),
           array_agg(s.config_name) FILTER (WHERE s.event_id IS NOT NULL),
           array_agg(s.config_version) FILTER (WHERE s.event_id IS NOT NULL),
           array_agg(s.requested_at) FILTER (WHERE s.event_id IS NOT NULL),
           array_agg(s.window_start) FILTER (WHERE s.event_id IS NOT NULL),
           array_agg(s.scheduled_at) FILTER (WHERE s.event_id IS NOT NULL)
    INTO pend, ex_i, ex_cfg, ex_ver, ex_req, ex_ws, ex_sched
    FROM unnest(eids) WITH ORDINALITY AS u(id, ord)
    LEFT JOIN sluice_slots s ON s.event_id = u.id;
    np := cardinality(pend);

    RETURN QUERY
    SELECT x.i, 'EXISTING'::text, x.c, x.v, x.r, x.w, x.s
    FROM unnest(ex_i, ex_cfg, ex_ver, ex_req, ex_ws, ex_sched) AS x(i, c, v, r, w, s);

    FOR k IN 1 .. np LOOP
        i := pend[k];
        req := reqs[i];
        ws := req - req % size;
        el := req - ws;
        first_max := max_pw * (size - el) / size;
        placed := false;
        -- Phase 1: the requested window, proportional capacity.
        IF first_max > 0 THEN
            h := array_position(held_ws, ws);
            IF h IS NULL THEN
                held_ws := held_ws || ws;
                held_cnt := held_cnt || sluice_slot_try(cfg, ws);
                h := cardinality(held_ws);
            END IF;
            IF held_cnt[h] >= 0 AND held_cnt[h] < first_max THEN
                held_cnt[h] := held_cnt[h] + 1;
                out_i := out_i || i;
                out_ws := out_ws || ws;
                out_sched := out_sched || (ws + sluice_slot_offset(jits[i], el, size));
                placed := true;
                IF held_cnt[h] >= max_pw THEN
                    PERFORM sluice_slot_set(cfg, ws, size, max_pw, held_cnt[h]);
                END IF;
            END IF;
        END IF;
        CONTINUE WHEN placed;
        -- Phase 2: from the first open window after the requested one, up
        -- to headroom windows past it. Every window before cur is full
        -- unless another transaction held it: the first such window (pin)
        -- is where a single assignment's search would start, so the
        -- headroom counts from pin if there is one, else from cur.
        IF ws <> last_ws THEN
            last_ws := ws;
            s_lim := sluice_slot_next_open(cfg, ws + size, size);
            pin := NULL;
            IF cur < s_lim THEN
                cur := s_lim;
                cur_h := NULL;
            ELSIF s_lim < cur THEN
                pin := s_lim;
            END IF;
        END IF;
        WHILE cur < coalesce(pin, cur) + headroom * size LOOP
            IF cur_h IS NULL THEN
                cur_h := array_position(held_ws, cur);
                IF cur_h IS NULL THEN
                    held_ws := held_ws || cur;
                    held_cnt := held_cnt || sluice_slot_try(cfg, cur);
                    cur_h := cardinality(held_ws);
                END IF;
            END IF;
            cnt := held_cnt[cur_h];
            IF cnt < 0 THEN
                pin := coalesce(pin, cur);
                cur := cur + size;
                cur_h := NULL;
            ELSIF cnt >= max_pw THEN
                PERFORM sluice_slot_close(cfg, cur, size);
                cur := sluice_slot_next_open(cfg, cur + size, size);
                cur_h := NULL;
            ELSE
                held_cnt[cur_h] := cnt + 1;
                out_i := out_i || i;
                out_ws := out_ws || cur;
                out_sched := out_sched || (cur + sluice_slot_offset(jits[i], 0, size));
                placed := true;
                IF cnt + 1 >= max_pw THEN
                    PERFORM sluice_slot_set(cfg, cur, size, max_pw, cnt + 1);
                END IF;
                EXIT;
            END IF;
        END LOOP;
        IF NOT placed THEN
            exh := exh || i;
        END IF;
    END LOOP;

    -- Every new slot in one statement, in id order so that two calls
    -- inserting the same ids cannot deadlock. A plain INSERT first (a
    -- third cheaper than ON CONFLICT); only if an id got a slot from a
    -- concurrent call since the lookup, again with ON CONFLICT DO NOTHING.
    BEGIN
        INSERT INTO sluice_slots (event_id, config_name, config_version, window_us, requested_at, window_start, scheduled_at)
        SELECT e.id, cfg, ver, size, e.req, x.ws, x.sched
        FROM unnest(out_i, out_ws, out_sched) AS x(i, ws, sched)
        JOIN unnest(eids, reqs) WITH ORDINALITY AS e(id, req, ord) ON e.ord = x.i
        ORDER BY e.id;
        GET DIAGNOSTICS n = ROW_COUNT;
    EXCEPTION WHEN unique_violation THEN
        WITH ins AS (
            INSERT INTO sluice_slots (event_id, config_name, config_version, window_us, requested_at, window_start, scheduled_at)
            SELECT e.id, cfg, ver, size, e.req, x.ws, x.sched
            FROM unnest(out_i, out_ws, out_sched) AS x(i, ws, sched)
            JOIN unnest(eids, reqs) WITH ORDINALITY AS e(id, req, ord) ON e.ord = x.i
            ORDER BY e.id
            ON CONFLICT (event_id) DO NOTHING
            RETURNING event_id)
        SELECT coalesce(array_agg(event_id), '{}') INTO ins_ids FROM ins;
        n := cardinality(ins_ids);
    END;
    IF n < cardinality(out_i) THEN
        -- Ids a concurrent call gave a slot after our lookup: theirs stand,
        -- and our windows do not count them. Such a slot may even lie in a
        -- window we hold (committed before we took it, so its count already
        -- has it): what tells ours from theirs is what our INSERT returned,
        -- never where the slot is.
        FOR i, ws, o_cfg, o_ver, o_req, o_ws, o_sched IN
            SELECT x.i, x.ws, s.config_name, s.config_version, s.requested_at, s.window_start, s.scheduled_at
            FROM unnest(out_i, out_ws) AS x(i, ws)
            JOIN unnest(eids) WITH ORDINALITY AS e(id, ord) ON e.ord = x.i
            JOIN sluice_slots s ON s.event_id = e.id
            WHERE NOT EXISTS (SELECT 1 FROM unnest(ins_ids) AS y(id) WHERE y.id = e.id)
        LOOP
            h := array_position(held_ws, ws);
            held_cnt[h] := held_cnt[h] - 1;
            lost := lost || i;
            idx := i;
            status := 'EXISTING';
            RETURN NEXT;
        END LOOP;
    END IF;

    -- Every counter this call holds, in one statement. A full window keeps
    -- the status sluice_slot_set gave it (CLOSED only with its successor's
    -- row); one below max (a slot lost to a concurrent call) is OPEN.
    UPDATE sluice_slot_windows w
    SET slot_count = x.cnt, status = CASE WHEN x.cnt >= max_pw THEN w.status ELSE 'OPEN' END
    FROM unnest(held_ws, held_cnt) AS x(ws, cnt)
    WHERE x.cnt >= 0 AND w.config_name = cfg AND w.window_start = x.ws
      AND (w.slot_count <> x.cnt OR (x.cnt < max_pw AND w.status <> 'OPEN'));

    RETURN QUERY
    SELECT x.i, 'NEW'::text, cfg, ver, reqs[x.i], x.ws, x.sched
    FROM unnest(out_i, out_ws, out_sched) AS x(i, ws, sched)
    WHERE NOT EXISTS (SELECT 1 FROM unnest(lost) AS l(i) WHERE l.i = x.i);
    RETURN QUERY
    -- An event left without a window may have got a slot from a
    -- concurrent call meanwhile: that slot is its answer.
    SELECT x.i, CASE WHEN s.event_id IS NULL THEN 'EXHAUSTED' ELSE 'EXISTING' END,
           coalesce(s.config_name, cfg), coalesce(s.config_version, ver), coalesce(s.requested_at, reqs[x.i]),
           s.window_start, s.scheduled_at
    FROM unnest(exh) AS x(i)
    LEFT JOIN sluice_slots s ON s.event_id = eids[x.i];
END
$$;
