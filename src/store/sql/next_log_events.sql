-- The log's next events to publish, in position order: positions become
-- visible in the order they were taken (migration 0018), so none is ever
-- passed over. None while the outbox still holds a row from before
-- migration 0018 (event records were copied there then): those go first.
--
-- An event that causes records besides its own (migration 0019) comes with
-- what they are made of that its row does not hold: its attempt's fixed
-- columns, its lease's identity, and for a granted lease the spec.
SELECT e.position, e.event_id, e.attempt_id, e.seq, e.kind, e.occurred_at, e.payload,
       e.prev_hash, e.hash, e.traceparent, e.tracestate, e.schema_fingerprint,
       a.job_id, a.command_id, a.attempt_no, a.tenant, a.operation,
       l.lease_id, l.runner_instance, l.epoch, l.expires_at,
       CASE WHEN e.kind = 'lease_granted' THEN j.spec END
FROM unpublished_events e
LEFT JOIN attempts a
    ON a.attempt_id = e.attempt_id
    AND e.position > (SELECT derived_after FROM relay_state WHERE id = 1)
    AND e.kind IN ('lease_granted', 'lease_extended', 'cancel_requested', 'finished', 'rejected')
LEFT JOIN leases l ON l.attempt_id = a.attempt_id
LEFT JOIN jobs j ON j.job_id = a.job_id AND e.kind = 'lease_granted'
WHERE NOT EXISTS (
    SELECT 1 FROM outbox
    WHERE id <= (SELECT legacy_outbox_until FROM relay_state WHERE id = 1))
ORDER BY e.position
LIMIT $1
