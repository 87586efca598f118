SELECT a.attempt_id, a.next_timer, a.next_deadline FROM attempts a
JOIN jobs j ON j.job_id = a.job_id
WHERE a.next_deadline <= $1
  -- Timers the store refused lately (`SweepOutcome::refused`).
  AND NOT (a.attempt_id = ANY($3))
ORDER BY a.next_deadline LIMIT $2
FOR UPDATE OF j SKIP LOCKED
