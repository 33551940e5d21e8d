-- silk-store schema, version 1. Portable SQL: it runs as is on SQLite and PostgreSQL.
-- Integers are BIGINT (i64 in Rust), booleans are BIGINT 0/1, JSON documents are TEXT,
-- ids are assigned by the store from seq_counters (no SERIAL / AUTOINCREMENT).

CREATE TABLE jobs (
    id           TEXT   NOT NULL PRIMARY KEY,
    name         TEXT   NOT NULL,
    enabled      BIGINT NOT NULL,
    spec         TEXT   NOT NULL,
    created_ms   BIGINT NOT NULL,
    updated_ms   BIGINT NOT NULL,
    next_fire_ms BIGINT,
    last_fire_ms BIGINT,
    queued       BIGINT NOT NULL
);
CREATE UNIQUE INDEX jobs_name ON jobs (name);
CREATE INDEX jobs_next_fire ON jobs (next_fire_ms);

CREATE TABLE runs (
    id          TEXT   NOT NULL PRIMARY KEY,
    job_id      TEXT,
    state       TEXT   NOT NULL,
    created_ms  BIGINT NOT NULL,
    finished_ms BIGINT,
    record      TEXT   NOT NULL
);
CREATE INDEX runs_created ON runs (created_ms, id);
CREATE INDEX runs_job ON runs (job_id, created_ms);
CREATE INDEX runs_state ON runs (state, created_ms);

CREATE TABLE agents (
    id         TEXT   NOT NULL PRIMARY KEY,
    register   TEXT   NOT NULL,
    sent_ms    BIGINT NOT NULL,
    updated_ms BIGINT NOT NULL
);

CREATE TABLE allocations (
    run_id       TEXT   NOT NULL,
    agent_id     TEXT   NOT NULL,
    confirmed_ms BIGINT NOT NULL,
    PRIMARY KEY (run_id, agent_id)
);

CREATE TABLE log_lines (
    id      BIGINT NOT NULL PRIMARY KEY,
    run_id  TEXT   NOT NULL,
    ts_ms   BIGINT NOT NULL,
    level   BIGINT NOT NULL,
    source  TEXT   NOT NULL,
    message TEXT   NOT NULL
);
CREATE INDEX log_lines_run ON log_lines (run_id, id);
CREATE INDEX log_lines_ts ON log_lines (ts_ms);

CREATE TABLE tokens (
    id           TEXT   NOT NULL PRIMARY KEY,
    name         TEXT   NOT NULL,
    hash         TEXT   NOT NULL,
    admin        BIGINT NOT NULL,
    created_ms   BIGINT NOT NULL,
    last_used_ms BIGINT
);

CREATE TABLE items (
    run_id   TEXT   NOT NULL,
    item_key TEXT   NOT NULL,
    seq      BIGINT NOT NULL,
    ts_ms    BIGINT NOT NULL,
    data     TEXT   NOT NULL,
    PRIMARY KEY (run_id, item_key)
);
CREATE UNIQUE INDEX items_seq ON items (run_id, seq);

CREATE TABLE seq_counters (
    name     TEXT   NOT NULL PRIMARY KEY,
    last_seq BIGINT NOT NULL
);
