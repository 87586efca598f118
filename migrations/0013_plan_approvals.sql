-- Plan approvals (docs/ARCHITECTURE.md, "Plan approvals"): an opentofu.plan
-- attempt's `plan_approved` events, folded into the attempt: the saved
-- plan's digest and who approved it. An apply naming an approved digest is
-- admitted only when an approval of its tenant is here, found by digest.
ALTER TABLE attempts ADD COLUMN plan_approval jsonb;
CREATE INDEX attempts_plan_approval ON attempts ((plan_approval->>'digest'))
    WHERE plan_approval IS NOT NULL;
