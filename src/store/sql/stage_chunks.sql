INSERT INTO artifact_chunks (attempt_id, stream, seq, lease_epoch, producer, text)
SELECT * FROM UNNEST($1::uuid[], $2::text[], $3::bigint[], $4::bigint[], $5::text[], $6::text[])
ON CONFLICT DO NOTHING
