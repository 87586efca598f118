INSERT INTO intake_progress (topic, partition, decided_until)
SELECT * FROM UNNEST($1::text[], $2::int4[], $3::timestamptz[])
ON CONFLICT (topic, partition) DO UPDATE
SET decided_until = greatest(intake_progress.decided_until, EXCLUDED.decided_until)
