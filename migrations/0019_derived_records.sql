-- The records an event causes besides its own (a runner's work item, lease
-- extension, revocation or cancel; the result) are derived by the relay
-- from the event's row and its attempt's fixed columns when it publishes
-- the event, instead of being written to `outbox` with it
-- (docs/ARCHITECTURE.md, "Relay"). Two rows, their index entries and two
-- deletes per attempt were spent on a copy of what the log already holds.
--
-- Events at or before `derived_after` had those records written to the
-- outbox: the relay derives nothing for them. The append lock is taken
-- first, so no transaction that holds a position and wrote outbox rows is
-- still open when the mark is read.
SELECT pg_advisory_xact_lock(7311705472546926692);
ALTER TABLE relay_state ADD COLUMN derived_after bigint NOT NULL DEFAULT 0;
UPDATE relay_state SET derived_after = (SELECT coalesce(max(position), 0) FROM attempt_events);
-- A dispatcher of an earlier release, still running once this migration
-- ran, would write those records to the outbox again, and the relay would
-- publish them twice. Its append is refused with SQLSTATE 55000, which
-- such a dispatcher retries (never dead-letters) until it is replaced.
CREATE OR REPLACE FUNCTION execplane_refuse_event_copies() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.topic = 'exec.attempt-events.v1' THEN
        RAISE EXCEPTION 'events are published from attempt_events since migration 0018: this dispatcher predates it; upgrade it'
            USING ERRCODE = '55000';
    END IF;
    IF NEW.topic = 'exec.results.v1' OR NEW.topic LIKE 'exec.work.%' THEN
        RAISE EXCEPTION 'work and result records are derived from attempt_events since migration 0019: this dispatcher predates it; upgrade it'
            USING ERRCODE = '55000';
    END IF;
    RETURN NEW;
END;
$$;
