-- Two unique indexes that a unique index beside them already implied
-- (docs/BENCHMARKS.md, "Keys the log already holds"). Every entry cost an
-- insert into a b-tree on each event and each lease written.
--
-- An event's id is derived from its attempt and seq (`event_id_for`), and
-- the append path refuses an event whose id is not (`Folded::fold`);
-- `(attempt_id, seq)` is unique, so ids are too. Nothing looks an event up
-- by id.
ALTER TABLE attempt_events DROP CONSTRAINT attempt_events_event_id_key;

-- An attempt has at most one lease, ever (migration 0001), and the lease's
-- id is derived from the attempt and epoch (`lease_id_for`): the attempt's
-- id is the lease row's key, in place of its unique constraint.
ALTER TABLE leases
    DROP CONSTRAINT leases_pkey,
    DROP CONSTRAINT leases_attempt_id_key,
    ADD CONSTRAINT leases_pkey PRIMARY KEY (attempt_id);
