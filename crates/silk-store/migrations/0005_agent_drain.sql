-- silk-store schema, version 5: an agent's drain (`silk agents drain`) in its own column, so
-- that a hub storing an agent's registration never overwrites a drain another hub just set.
-- Portable SQL like 0001.

ALTER TABLE agents ADD COLUMN drained BIGINT NOT NULL DEFAULT 0;

-- A drain set before this version lived in the registration document (compact JSON).
UPDATE agents SET drained = 1 WHERE register LIKE '%"drained":true%';
