-- Two foreign keys whose check ran on every attempt and lease written,
-- and an index of the log that only a timeline read
-- (docs/BENCHMARKS.md, "Attempts inserted or updated, not upserted").
-- Each insert of an attempt looked its job up and locked it (`FOR KEY
-- SHARE`), each insert of a lease its attempt: 8-9 us a row, a sixth of a
-- batch of commands' write.
--
-- Both rows are written by one statement, from one fold of the batch's
-- events (`ProjectionRows`): the job and its attempt together, the lease
-- with the attempt it belongs to, and nothing deletes a job or an attempt.
-- `projection rebuild --verify` compares every table with the rows the log
-- rebuilds, so a row without its parent is reported there.
ALTER TABLE attempts DROP CONSTRAINT attempts_job_id_fkey;
ALTER TABLE leases DROP CONSTRAINT leases_attempt_id_fkey;

-- The log by job: an entry for every event, read only by `audit replay
-- --job`, which now finds the job's attempts through `attempts (job_id,
-- attempt_no)` and reads their events by attempt (docs/EVENTS.md). About
-- 5 us an event.
DROP INDEX attempt_events_job;
