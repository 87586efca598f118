-- A chunk is new unless it is staged already (the key) or its stream's
-- bundles already hold its seq (migration 0024).
INSERT INTO artifact_chunks (attempt_id, stream, seq, lease_epoch, producer, text)
SELECT u.* FROM UNNEST($1::uuid[], $2::text[], $3::bigint[], $4::bigint[], $5::text[], $6::text[])
    AS u(attempt_id, stream, seq, lease_epoch, producer, text)
WHERE NOT EXISTS (
    SELECT 1 FROM artifact_bundles b, jsonb_array_elements(b.seqs -> u.stream) r
    WHERE b.attempt_id = u.attempt_id
      AND u.seq BETWEEN (r ->> 0)::bigint AND (r ->> 1)::bigint)
ON CONFLICT DO NOTHING
