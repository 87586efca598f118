-- Attempts without target keys only: those wait their turn per key and are
-- read through the keys they wait for (waited_keys.sql, key_board.sql).
SELECT a.attempt_id, a.runner_type, j.spec->'runner_requirements', a.available_at,
       j.spec->>'operation', a.target_keys
FROM attempts a JOIN jobs j ON j.job_id = a.job_id
WHERE a.status = 'queued' AND a.target_keys = '[]'::jsonb
  AND a.runner_type = $1 AND a.available_at <= $2
  AND (a.available_at, a.attempt_id) > ($3, $4)
ORDER BY a.available_at, a.attempt_id LIMIT $5
