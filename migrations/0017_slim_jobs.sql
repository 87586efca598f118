-- A job's row is written when the job is created and when it gets another
-- attempt, never on a change of an attempt: its state and its last change
-- are its latest attempt's, read through `latest_attempt_id`
-- (docs/ARCHITECTURE.md, "Projection"). Rewritten on every event before,
-- the row and its spec were a third of the projection's writes.
ALTER TABLE jobs DROP COLUMN status, DROP COLUMN updated_at;
