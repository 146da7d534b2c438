-- Leases: one row per held permit of (name, key). A row whose expires_at
-- (Unix microseconds, store clock) has passed holds nothing and is deleted
-- by the next operation on its key.
CREATE TABLE sluice_lease_holder (
    name       text   NOT NULL,
    key        text   NOT NULL,
    holder     text   NOT NULL,
    token      bigint NOT NULL,
    expires_at bigint NOT NULL,
    PRIMARY KEY (name, key, holder)
) WITHOUT ROWID;

CREATE INDEX sluice_lease_holder_expires_at ON sluice_lease_holder (expires_at);

-- The fencing token counter: one for the whole file, never reset, so tokens
-- strictly increase per key across holders, processes and restarts even
-- after a key's rows are gone.
CREATE TABLE sluice_lease_seq (
    id   integer PRIMARY KEY CHECK (id = 1),
    last bigint  NOT NULL
);

INSERT INTO sluice_lease_seq (id, last) VALUES (1, 0);

-- Fenced writes: the last value written to (name, key, field) and the token
-- that wrote it; a write with a smaller token is refused.
CREATE TABLE sluice_lease_fence (
    name  text   NOT NULL,
    key   text   NOT NULL,
    field text   NOT NULL,
    token bigint NOT NULL,
    value blob   NOT NULL,
    PRIMARY KEY (name, key, field)
) WITHOUT ROWID;
