-- silk-store schema, version 9: the archive of finished requests (seed 002's "finish →
-- archive"). One row per request of a run that reached its final outcome: its canonical URL,
-- the outcome (`done`, `failed`, `dropped`), HTTP status, error code, attempts, the agent,
-- when, and the rest of the facts as a JSON document; `requeued_ms` once it was queued
-- again. `key` is unique within the run (a hash of the URL and its dedup salt), so an
-- outcome written twice (a hub killed before its ack) is one row. Portable SQL like 0001.

CREATE TABLE run_requests (
    run         TEXT   NOT NULL,
    key         TEXT   NOT NULL,
    time_ms     BIGINT NOT NULL,
    outcome     TEXT   NOT NULL,
    url         TEXT   NOT NULL,
    status      BIGINT,
    error_code  TEXT,
    attempts    BIGINT NOT NULL,
    agent       TEXT,
    doc         TEXT   NOT NULL,
    requeued_ms BIGINT,
    PRIMARY KEY (run, key)
);
CREATE INDEX run_requests_order ON run_requests (run, time_ms, key);
CREATE INDEX run_requests_outcome ON run_requests (run, outcome, time_ms, key);
CREATE INDEX run_requests_time ON run_requests (time_ms);
