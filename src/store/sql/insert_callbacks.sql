INSERT INTO callbacks (attempt_id, terminal_seq, url, idempotency_key, body, traceparent, next_attempt_at, channel, headers, payload)
SELECT c.attempt_id, c.terminal_seq, c.url, c.idempotency_key, c.body, c.traceparent, c.next_attempt_at, c.channel, c.headers, decode(c.payload, 'hex')
FROM jsonb_to_recordset($1::jsonb) AS c(attempt_id uuid, terminal_seq bigint, url text, idempotency_key text, body jsonb, traceparent text, next_attempt_at timestamptz, channel text, headers jsonb, payload text)
ON CONFLICT DO NOTHING
