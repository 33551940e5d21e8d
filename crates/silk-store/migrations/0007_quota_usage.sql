-- silk-store schema, version 7: quota counters. One row per scope (`tenant:NAME`,
-- `job:ID`) and period (a day in the tenant's time zone, `2026-11-28`): the pages and bytes
-- fetched, the pages reserved by slices handed to runs and not used yet, and the pages
-- fetched past what a slice covered (the overshoot). Several hubs share them. Portable SQL
-- like 0001.

CREATE TABLE quota_usage (
    scope       TEXT   NOT NULL,
    period      TEXT   NOT NULL,
    pages       BIGINT NOT NULL DEFAULT 0,
    bytes       BIGINT NOT NULL DEFAULT 0,
    reserved    BIGINT NOT NULL DEFAULT 0,
    overshoot   BIGINT NOT NULL DEFAULT 0,
    updated_ms  BIGINT NOT NULL,
    PRIMARY KEY (scope, period)
);
