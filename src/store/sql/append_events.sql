-- The events of one appended batch, one array per column. `position` is
-- the identity's next value, taken under the append lock the statement's
-- trigger took first (migrations 0018, 0021).
INSERT INTO attempt_events (event_id, attempt_id, job_id, seq, kind, terminal, occurred_at, payload, schema_fingerprint, prev_hash, hash, traceparent, tracestate)
SELECT * FROM UNNEST($1::uuid[], $2::uuid[], $3::text[], $4::int8[], $5::text[], $6::bool[], $7::timestamptz[], $8::bytea[], $9::int8[], $10::bytea[], $11::bytea[], $12::text[], $13::text[])
