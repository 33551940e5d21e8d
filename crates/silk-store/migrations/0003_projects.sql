-- silk-store schema, version 3: projects from git, their versions (builds), webhook
-- deliveries seen, packed artifacts in chunks, store-wide settings. Portable SQL like 0001.
-- A version's build log lines are in log_lines under run_id 'build:' || build_id.

CREATE TABLE projects (
    name        TEXT   NOT NULL PRIMARY KEY,
    doc         TEXT   NOT NULL,
    created_ms  BIGINT NOT NULL,
    updated_ms  BIGINT NOT NULL
);

CREATE TABLE versions (
    project     TEXT   NOT NULL,
    version     TEXT   NOT NULL,
    build_id    TEXT   NOT NULL UNIQUE,
    state       TEXT   NOT NULL,
    created_ms  BIGINT NOT NULL,
    artifact    TEXT,
    doc         TEXT   NOT NULL,
    PRIMARY KEY (project, version)
);
CREATE INDEX versions_state ON versions (state, created_ms);
CREATE INDEX versions_artifact ON versions (artifact);

CREATE TABLE deliveries (
    project     TEXT   NOT NULL,
    delivery    TEXT   NOT NULL,
    received_ms BIGINT NOT NULL,
    PRIMARY KEY (project, delivery)
);
CREATE INDEX deliveries_received ON deliveries (received_ms);

-- Chunks of at most 1 MiB, base64 (TEXT is portable; BLOB and BYTEA are not).
CREATE TABLE artifact_chunks (
    sha256      TEXT   NOT NULL,
    seq         BIGINT NOT NULL,
    data        TEXT   NOT NULL,
    PRIMARY KEY (sha256, seq)
);

CREATE TABLE settings (
    name        TEXT   NOT NULL PRIMARY KEY,
    value       TEXT   NOT NULL
);
