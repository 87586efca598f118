-- A topic callback's tenant, in its body as an HTTP callback's is: the
-- worker checks the topic against the tenant's `callback_topics` in the
-- policy in force before each try (a reload may have taken the prefix
-- away; docs/EVENTS.md, "Callbacks"). Topic callbacks still take no
-- share of their tenant's deliveries in flight (`claim_callbacks`).
UPDATE callbacks c SET body = jsonb_build_object('tenant', a.tenant)
FROM attempts a
WHERE c.channel = 'kafka' AND c.status = 'pending' AND a.attempt_id = c.attempt_id;
