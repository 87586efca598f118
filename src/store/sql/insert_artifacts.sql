INSERT INTO artifacts (artifact_id, attempt_id, name, media_type, size, sha256, producer, retention_class, storage_key)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT DO NOTHING
