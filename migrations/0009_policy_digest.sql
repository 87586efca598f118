-- The operator policy that admitted (or refused) each attempt's job, as
-- recorded in its first event: `sha256:<hex>` of the policy file.
-- Attempts created before 0.2 have none.
ALTER TABLE attempts ADD COLUMN policy_digest text;
