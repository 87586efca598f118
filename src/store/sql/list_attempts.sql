SELECT attempt_id, job_id, attempt_no, operation, status, failure_category, updated_at
FROM attempts
WHERE ($1::text IS NULL OR status = $1)
  AND ($2::text IS NULL OR job_id = $2)
ORDER BY updated_at DESC
LIMIT $3
