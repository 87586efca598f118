-- The log's next events to publish, in position order: positions become
-- visible in the order they were taken (migration 0018), so none is ever
-- passed over. None while the outbox still holds a row from before
-- migration 0018 (event records were copied there then): those go first.
--
-- An event that causes records besides its own (migration 0019) comes with
-- what they are made of that its row does not hold: its attempt's fixed
-- columns, its lease (the columns of `rows::LEASE_JOINED`), and for a
-- granted lease the spec.
--
-- The events are read first and alone (the planner takes the unpublished
-- range for a third of the log), and each is then looked up by key
-- (`LIMIT 1` keeps the lookup a lookup): the read costs what it returns,
-- whatever the size of the tables.
WITH next AS MATERIALIZED (
    SELECT position, event_id, attempt_id, seq, kind, occurred_at, payload, prev_hash, hash,
           traceparent, tracestate, schema_fingerprint
    FROM unpublished_events
    WHERE NOT EXISTS (
        SELECT 1 FROM outbox
        WHERE id <= (SELECT legacy_outbox_until FROM relay_state WHERE id = 1))
    ORDER BY position
    LIMIT $1
)
SELECT e.position, e.event_id, e.attempt_id, e.seq, e.kind, e.occurred_at, e.payload,
       e.prev_hash, e.hash, e.traceparent, e.tracestate, e.schema_fingerprint, f.*
FROM next e
LEFT JOIN LATERAL (
    SELECT a.job_id, a.command_id, a.attempt_no, a.tenant, a.operation,
           l.lease_id AS lease_lease_id, l.attempt_id AS lease_attempt_id,
           l.job_id AS lease_job_id, l.epoch AS lease_epoch,
           l.runner_instance AS lease_runner_instance, l.granted_at AS lease_granted_at,
           l.expires_at AS lease_expires_at, l.active AS lease_active,
           CASE WHEN e.kind = 'lease_granted'
                THEN (SELECT j.spec FROM jobs j WHERE j.job_id = a.job_id) END AS spec
    FROM attempts a
    LEFT JOIN leases l ON l.attempt_id = a.attempt_id
    WHERE a.attempt_id = e.attempt_id
      AND e.kind IN ('lease_granted', 'lease_extended', 'cancel_requested', 'finished', 'rejected')
      AND e.position > (SELECT derived_after FROM relay_state WHERE id = 1)
    LIMIT 1
) f ON true
ORDER BY e.position
