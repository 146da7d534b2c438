-- The store clock's high-water mark: the latest decision time (Unix
-- microseconds) that changed state. After a restart, or in another process
-- sharing the file, the clock never reads below it.
CREATE TABLE sluice_clock (
    id integer PRIMARY KEY CHECK (id = 1),
    at bigint  NOT NULL
);

INSERT INTO sluice_clock (id, at) VALUES (1, 0);
