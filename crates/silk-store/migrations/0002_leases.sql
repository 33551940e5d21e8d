-- silk-store schema, version 2: named leases (run ownership among hubs sharing a store, the
-- scheduler). Portable SQL like 0001. Times are ms since the epoch on the database's clock.

CREATE TABLE leases (
    name        TEXT   NOT NULL PRIMARY KEY,
    holder      TEXT   NOT NULL,
    expires_ms  BIGINT NOT NULL,
    acquired_ms BIGINT NOT NULL
);
CREATE INDEX leases_holder ON leases (holder);
