-- silk-store schema, version 6: tenants. Every job, run and token belongs to a tenant (a
-- project's tenant is in its document); a token has a role in its tenant. What existed
-- before belongs to the tenant `default`; an admin token stays an admin. Job names are
-- unique within a tenant. Portable SQL like 0001.

CREATE TABLE tenants (
    name        TEXT   NOT NULL PRIMARY KEY,
    doc         TEXT   NOT NULL,
    created_ms  BIGINT NOT NULL,
    updated_ms  BIGINT NOT NULL
);
INSERT INTO tenants (name, doc, created_ms, updated_ms) VALUES ('default', '{}', 0, 0);

ALTER TABLE jobs ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';
DROP INDEX jobs_name;
CREATE UNIQUE INDEX jobs_tenant_name ON jobs (tenant, name);

ALTER TABLE runs ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';
CREATE INDEX runs_tenant ON runs (tenant, created_ms);

ALTER TABLE tokens ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';
ALTER TABLE tokens ADD COLUMN role TEXT NOT NULL DEFAULT 'member';
UPDATE tokens SET role = 'admin' WHERE admin = 1;
