-- Slot scheduling (seed 003): the same tables as the PostgreSQL dialect.
-- Times are Unix microseconds; windows start at multiples of their size.
CREATE TABLE sluice_slot_configs (
    name           text    NOT NULL,
    version        integer NOT NULL,
    max_per_window integer NOT NULL CHECK (max_per_window > 0),
    window_us      integer NOT NULL CHECK (window_us > 0),
    headroom       integer NOT NULL CHECK (headroom > 0),
    active         integer NOT NULL DEFAULT 1,
    created_at     integer NOT NULL,
    PRIMARY KEY (name, version)
) WITHOUT ROWID;

-- One counter per (config name, window), shared by every version of the
-- config. CLOSED once full; the partial index finds the first OPEN window.
CREATE TABLE sluice_slot_windows (
    config_name  text    NOT NULL,
    window_start integer NOT NULL,
    slot_count   integer NOT NULL DEFAULT 0 CHECK (slot_count >= 0),
    status       text    NOT NULL DEFAULT 'OPEN' CHECK (status IN ('OPEN', 'CLOSED')),
    PRIMARY KEY (config_name, window_start)
) WITHOUT ROWID;

CREATE INDEX sluice_slot_windows_open ON sluice_slot_windows (config_name, window_start)
    WHERE status = 'OPEN';

-- One row per event id (idempotency: the primary key).
CREATE TABLE sluice_slots (
    event_id       text    NOT NULL PRIMARY KEY,
    config_name    text    NOT NULL,
    config_version integer NOT NULL,
    window_us      integer NOT NULL,
    requested_at   integer NOT NULL,
    window_start   integer NOT NULL,
    scheduled_at   integer NOT NULL
) WITHOUT ROWID;
