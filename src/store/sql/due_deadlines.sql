SELECT d.attempt_id, d.kind, d.due_at FROM deadlines d
JOIN attempts a ON a.attempt_id = d.attempt_id
JOIN jobs j ON j.job_id = a.job_id
WHERE d.due_at <= $1
ORDER BY d.due_at LIMIT $2
FOR UPDATE OF j SKIP LOCKED
