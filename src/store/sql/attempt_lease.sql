SELECT a.job_id, a.tenant, a.runner_type, a.status, a.cancel_requested_at IS NOT NULL,
       l.epoch, l.runner_instance, l.expires_at, l.active, a.operation
FROM attempts a LEFT JOIN leases l USING (attempt_id)
WHERE a.attempt_id = $1
