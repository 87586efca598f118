SELECT a.attempt_id, a.runner_type, j.spec->'runner_requirements', a.available_at,
       j.spec->>'operation', a.target_keys
FROM attempts a JOIN jobs j ON j.job_id = a.job_id
WHERE a.status = 'queued' AND a.attempt_id = ANY($1) AND a.available_at <= $2
ORDER BY a.available_at, a.attempt_id
