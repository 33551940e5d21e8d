-- silk-store schema, version 4: alerts. Notification rules, the outbox of their deliveries
-- (one row per rule and event, its id unique so an event noticed twice is sent once), and
-- which ended runs the alerts have looked at. Portable SQL like 0001.

CREATE TABLE alert_rules (
    name        TEXT   NOT NULL PRIMARY KEY,
    doc         TEXT   NOT NULL,
    created_ms  BIGINT NOT NULL,
    updated_ms  BIGINT NOT NULL
);

-- state: pending (due at due_ms), or final (sent, failed, suppressed, dropped) since due_ms.
-- counted: 1 if it counts against its rule's rate limit (admitted, not a test).
CREATE TABLE alerts (
    id          TEXT   NOT NULL PRIMARY KEY,
    rule        TEXT   NOT NULL,
    state       TEXT   NOT NULL,
    created_ms  BIGINT NOT NULL,
    due_ms      BIGINT NOT NULL,
    counted     BIGINT NOT NULL,
    doc         TEXT   NOT NULL
);
CREATE INDEX alerts_due ON alerts (state, due_ms);
CREATE INDEX alerts_rule ON alerts (rule, created_ms);
CREATE INDEX alerts_created ON alerts (created_ms);

-- 1 once the alerts have looked at the ended run. Runs that ended before this migration
-- are marked looked at: no alert for history.
ALTER TABLE runs ADD COLUMN noticed BIGINT NOT NULL DEFAULT 0;
UPDATE runs SET noticed = 1 WHERE finished_ms IS NOT NULL;
CREATE INDEX runs_unnoticed ON runs (noticed, finished_ms);
