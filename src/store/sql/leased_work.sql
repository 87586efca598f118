SELECT l.attempt_id, a.job_id, a.attempt_no, l.lease_id, l.epoch, l.expires_at,
       a.operation, a.tenant, COALESCE(a.runner_type, ''), j.spec
FROM leases l
JOIN attempts a USING (attempt_id)
JOIN jobs j ON j.job_id = a.job_id
WHERE l.runner_instance = $1 AND l.active AND a.status = 'leased'
ORDER BY l.granted_at
