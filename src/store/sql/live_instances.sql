SELECT r.instance_id, r.runner_type, r.pool, r.capabilities, r.capacity,
       (SELECT count(*) FROM leases l WHERE l.runner_instance = r.instance_id AND l.active),
       r.operations
FROM runner_instances r
WHERE r.last_seen_at >= $1 AND r.status = 'ready'
  -- An instance whose lease expired without a heartbeat after its
  -- last presence is suspect (probably dead) until it speaks again.
  AND (r.lost_lease_at IS NULL OR r.lost_lease_at < r.last_seen_at)
