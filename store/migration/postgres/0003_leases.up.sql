-- Leases: one row per held permit of (name, key). A row whose expires_at
-- (Unix microseconds, store clock) has passed holds nothing; the next
-- acquire of its key deletes it.
CREATE TABLE sluice_lease_holder (
    name       text   NOT NULL,
    key        text   NOT NULL,
    holder     text   NOT NULL,
    token      bigint NOT NULL,
    expires_at bigint NOT NULL,
    contended  boolean NOT NULL DEFAULT false, -- an acquire was refused while it held
    PRIMARY KEY (name, key, holder)
);

CREATE INDEX sluice_lease_holder_expires_at ON sluice_lease_holder (expires_at);

-- Fencing tokens come from one sequence: never reset, never reused, durable
-- across restarts, and drawn while the key's advisory lock is held, so they
-- strictly increase per key even after a key's rows are gone.
CREATE SEQUENCE sluice_lease_token;

-- Fenced writes: the last value written to (name, key, field) and the token
-- that wrote it.
CREATE TABLE sluice_lease_fence (
    name  text   NOT NULL,
    key   text   NOT NULL,
    field text   NOT NULL,
    token bigint NOT NULL,
    value bytea  NOT NULL,
    PRIMARY KEY (name, key, field)
);

-- sluice_lease_acquire is store.LeaseStore.Acquire: one of p_permits
-- permits of (p_name, p_key) for p_holder, for p_ttl microseconds. Acquires
-- of one key are serialised by a transaction-scoped advisory lock.
CREATE FUNCTION sluice_lease_acquire(
    p_name text, p_key text, p_holder text, p_permits bigint, p_ttl bigint, p_now bigint,
    OUT acquired boolean, OUT token bigint, OUT expires_at bigint,
    OUT held bigint, OUT retry_after bigint, OUT at bigint, OUT renewed boolean)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_now bigint;
    v_first bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(p_name || chr(31) || p_key, 7));
    v_now := coalesce(p_now, sluice_rate_now());
    at := v_now;
    retry_after := 0;
    renewed := false;
    DELETE FROM sluice_lease_holder h
     WHERE h.name = p_name AND h.key = p_key AND h.expires_at <= v_now;
    UPDATE sluice_lease_holder h SET expires_at = v_now + p_ttl
     WHERE h.name = p_name AND h.key = p_key AND h.holder = p_holder
    RETURNING h.token, h.expires_at INTO token, expires_at;
    SELECT count(*), min(h.expires_at) INTO held, v_first
      FROM sluice_lease_holder h WHERE h.name = p_name AND h.key = p_key;
    IF token IS NOT NULL THEN
        acquired := true;
        renewed := true;
        RETURN;
    END IF;
    IF held >= p_permits THEN
        acquired := false; token := 0; expires_at := 0;
        retry_after := v_first - v_now;
        -- Someone may wait for a permit: the next release announces itself.
        UPDATE sluice_lease_holder h SET contended = true
         WHERE h.name = p_name AND h.key = p_key AND NOT h.contended;
        RETURN;
    END IF;
    token := nextval('sluice_lease_token');
    expires_at := v_now + p_ttl;
    INSERT INTO sluice_lease_holder (name, key, holder, token, expires_at)
    VALUES (p_name, p_key, p_holder, token, expires_at);
    acquired := true;
    held := held + 1;
END
$$;

-- sluice_lease_renew is store.LeaseStore.Renew: the new expiry, or NULL
-- when (p_holder, p_token) holds no live permit.
CREATE FUNCTION sluice_lease_renew(
    p_name text, p_key text, p_holder text, p_token bigint, p_ttl bigint, p_now bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_now bigint := coalesce(p_now, sluice_rate_now());
    v_exp bigint;
BEGIN
    UPDATE sluice_lease_holder h SET expires_at = v_now + p_ttl
     WHERE h.name = p_name AND h.key = p_key AND h.holder = p_holder
       AND h.token = p_token AND h.expires_at > v_now
    RETURNING h.expires_at INTO v_exp;
    RETURN v_exp;
END
$$;

-- sluice_lease_release is store.LeaseStore.Release: true if (p_holder,
-- p_token) held a live permit, which is now free. If an acquire was refused
-- while it was held, the release is announced on channel sluice_lease with
-- md5(name || chr(31) || key) as payload: only then can a waiter be
-- waiting for it. (A waiter refused and woken by nothing else retries when
-- the first lease would expire.) Announcing only then keeps NOTIFY, which
-- serialises committing transactions, off the uncontended path.
CREATE FUNCTION sluice_lease_release(
    p_name text, p_key text, p_holder text, p_token bigint, p_now bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_now bigint := coalesce(p_now, sluice_rate_now());
    v_contended boolean;
BEGIN
    -- As acquires do: a release never slips between an acquire's count and
    -- its marking the holders contended.
    PERFORM pg_advisory_xact_lock(hashtextextended(p_name || chr(31) || p_key, 7));
    DELETE FROM sluice_lease_holder h
     WHERE h.name = p_name AND h.key = p_key AND h.holder = p_holder
       AND h.token = p_token AND h.expires_at > v_now
    RETURNING h.contended INTO v_contended;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF v_contended THEN
        PERFORM pg_notify('sluice_lease', md5(p_name || chr(31) || p_key));
    END IF;
    RETURN true;
END
$$;

-- sluice_lease_fence is the fencing check for your own SQL: call it in your
-- transaction before the write a lease guards,
--
--     SELECT sluice_lease_fence('bulk-ops', 'shop-1', $token);
--     UPDATE ...;
--     COMMIT;
--
-- It raises SQLSTATE SL002 (and your transaction fails) unless p_token holds
-- a live permit of (p_name, p_key) on the database clock, and it locks that
-- permit's row FOR KEY SHARE: no successor can take the permit over (that
-- deletes the row) until your transaction ends, so a write it guards
-- commits before any newer token is issued for the permit, or not at all.
-- The lock is the weakest that does so: the holder's renewals and refused
-- acquires (which update the row) go on meanwhile.
CREATE FUNCTION sluice_lease_fence(p_name text, p_key text, p_token bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM 1 FROM sluice_lease_holder h
     WHERE h.name = p_name AND h.key = p_key AND h.token = p_token
       AND h.expires_at > sluice_rate_now()
       FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'SL002',
            MESSAGE = format('sluice: stale fencing token %s for lease %s/%s', p_token, p_name, p_key);
    END IF;
END
$$;

-- sluice_lease_fenced_write is store.LeaseStore.FencedWrite: true if
-- written, false if the token is stale.
CREATE FUNCTION sluice_lease_fenced_write(
    p_name text, p_key text, p_token bigint, p_field text, p_value bytea, p_now bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_now bigint := coalesce(p_now, sluice_rate_now());
BEGIN
    PERFORM 1 FROM sluice_lease_holder h
     WHERE h.name = p_name AND h.key = p_key AND h.token = p_token
       AND h.expires_at > v_now
       FOR KEY SHARE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO sluice_lease_fence AS f (name, key, field, token, value)
    VALUES (p_name, p_key, p_field, p_token, p_value)
    ON CONFLICT (name, key, field) DO UPDATE
       SET token = excluded.token, value = excluded.value
     WHERE f.token <= excluded.token;
    RETURN FOUND;
END
$$;
