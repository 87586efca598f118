-- The log's next events to publish, in position order: positions become
-- visible in the order they were taken (migration 0018), so none is ever
-- passed over. None while the outbox still holds a row from before
-- migration 0018 (event records were copied there then): those go first.
SELECT position, event_id, attempt_id, seq, kind, occurred_at, payload, prev_hash, hash,
       traceparent, tracestate, schema_fingerprint
FROM unpublished_events
WHERE NOT EXISTS (
    SELECT 1 FROM outbox
    WHERE id <= (SELECT legacy_outbox_until FROM relay_state WHERE id = 1))
ORDER BY position
LIMIT $1
