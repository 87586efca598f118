-- The console's attempts list for a principal of one tenant walks that
-- tenant's attempts newest first. Over `attempts_newest` alone it walked
-- every tenant's until it found a page of its own: the whole table for a
-- tenant with fewer attempts than a page (docs/SECURITY.md, "Principals").
CREATE INDEX attempts_by_tenant ON attempts (tenant, created_at DESC, attempt_id DESC);
