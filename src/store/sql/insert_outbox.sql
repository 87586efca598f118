-- The outbox rows of one appended batch, one array per column.
INSERT INTO outbox (topic, key, headers, payload)
SELECT t, k, h::jsonb, p
FROM UNNEST($1::text[], $2::text[], $3::text[], $4::bytea[]) AS u(t, k, h, p)
