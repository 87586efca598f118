UPDATE callbacks c SET attempts = c.attempts + 1, next_attempt_at = now() + make_interval(secs => $2)
FROM (SELECT attempt_id, terminal_seq, channel FROM callbacks
      WHERE status = 'pending' AND next_attempt_at <= now()
        AND NOT (tenant = ANY($3))
      ORDER BY next_attempt_at LIMIT $1 FOR UPDATE SKIP LOCKED) due
WHERE c.attempt_id = due.attempt_id AND c.terminal_seq = due.terminal_seq AND c.channel = due.channel
RETURNING c.attempt_id, c.terminal_seq, c.url, c.idempotency_key, c.body, c.traceparent, c.attempts, c.channel, c.headers, c.payload,
          (SELECT a.tenant FROM attempts a WHERE a.attempt_id = c.attempt_id)
