INSERT INTO callbacks (attempt_id, terminal_seq, url, idempotency_key, body, traceparent, next_attempt_at)
SELECT * FROM jsonb_to_recordset($1::jsonb) AS c(attempt_id uuid, terminal_seq bigint, url text, idempotency_key text, body jsonb, traceparent text, next_attempt_at timestamptz)
ON CONFLICT DO NOTHING
