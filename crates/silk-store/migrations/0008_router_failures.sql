-- silk-store schema, version 8: the router's failure records (design §6), when the router
-- runs in the hub. One row per task that ended as failed: what the router knew then, and
-- when it was last replayed. Portable SQL like 0001.

CREATE TABLE router_failures (
    id          TEXT   NOT NULL PRIMARY KEY,
    time_ms     BIGINT NOT NULL,
    project     TEXT   NOT NULL,
    inbound     TEXT,
    outbound    TEXT,
    reason      TEXT   NOT NULL,
    why         TEXT   NOT NULL,
    task        TEXT,
    raw         TEXT,
    replayed_ms BIGINT
);
CREATE INDEX router_failures_time ON router_failures (time_ms);
CREATE INDEX router_failures_outbound ON router_failures (outbound, time_ms);
CREATE INDEX router_failures_reason ON router_failures (reason, time_ms);
