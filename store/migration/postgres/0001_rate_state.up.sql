-- Rate state: one row per (limit name, key), the three numbers of
-- store.State in Unix microseconds, and the time at which the row equals a
-- fresh key (safe to delete). The same shape as the SQLite dialect.
CREATE TABLE sluice_rate_state (
    name     text   NOT NULL,
    key      text   NOT NULL,
    t        bigint NOT NULL,
    count    bigint NOT NULL DEFAULT 0,
    prev     bigint NOT NULL DEFAULT 0,
    fresh_at bigint NOT NULL,
    PRIMARY KEY (name, key)
) WITH (fillfactor = 80); -- room on each page for in-place (HOT) updates

CREATE INDEX sluice_rate_state_fresh_at ON sluice_rate_state (fresh_at);
