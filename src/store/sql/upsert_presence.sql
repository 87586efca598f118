INSERT INTO runner_instances (instance_id, runner_type, version, pool, capabilities, operations, capacity, in_flight, started_at, last_seen_at, status, work_partition, isolation)
SELECT instance_id, runner_type, version, pool, capabilities, operations, capacity, in_flight, started_at, last_seen_at, status, work_partition, isolation
FROM jsonb_populate_recordset(NULL::runner_instances, $1::jsonb)
ON CONFLICT (instance_id) DO UPDATE SET
    version = EXCLUDED.version, pool = EXCLUDED.pool, capabilities = EXCLUDED.capabilities,
    operations = EXCLUDED.operations,
    capacity = EXCLUDED.capacity, in_flight = EXCLUDED.in_flight, last_seen_at = EXCLUDED.last_seen_at,
    status = EXCLUDED.status, work_partition = EXCLUDED.work_partition,
    isolation = EXCLUDED.isolation
WHERE runner_instances.last_seen_at <= EXCLUDED.last_seen_at
