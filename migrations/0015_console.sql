-- The operator console (docs/INGRESS.md, "The console"): the attempts list
-- pages newest first by keyset over this index, whatever the table's size;
-- the approvals page reads the few plans that wait.
CREATE INDEX attempts_newest ON attempts (created_at DESC, attempt_id DESC);
CREATE INDEX attempts_plans_awaiting ON attempts (created_at DESC, attempt_id DESC)
    WHERE operation = 'opentofu.plan' AND status = 'succeeded' AND plan_approval IS NULL;
