-- The event log is the relay's source for `exec.attempt-events.v1`: the
-- relay tails `attempt_events` by `position` from a cursor instead of
-- reading a copy of every event from `outbox` (docs/ARCHITECTURE.md,
-- "Relay"). A copy was two writes of every event's bytes and a delete.
--
-- A cursor is only safe if positions become visible in order: a position
-- taken by a transaction that commits after a later position has been read
-- would be skipped. So every position is taken under one transaction-scoped
-- advisory lock, held until the taking transaction ends: no transaction
-- takes a position while another that took one is still open, and
-- positions are committed in the order they were taken. The lock is held
-- only from a batch's event insert (its last statement) to its commit.
CREATE FUNCTION execplane_next_position(sequence regclass) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    -- "execappd": the append lock. Taken again by the same transaction for
    -- each row, which only counts it again.
    PERFORM pg_advisory_xact_lock(7311705472546926692);
    RETURN nextval(sequence);
END;
$$;
ALTER TABLE attempt_events ALTER COLUMN position
    SET DEFAULT execplane_next_position('attempt_events_position_seq'::regclass);

-- What a published record carries beyond the event's datum and links: the
-- trace of the attempt's spec (NULL without one), so the record is built
-- from its row alone.
ALTER TABLE attempt_events ADD COLUMN traceparent text, ADD COLUMN tracestate text;

-- How far the log has been published: every event at or before this
-- position is on the topic. The events appended before this migration had
-- their records copied to `outbox`: the log waits until the outbox holds
-- no row from before it (`legacy_outbox_until`), so an attempt's events
-- keep their order across the upgrade.
ALTER TABLE relay_state
    ADD COLUMN published_position bigint NOT NULL DEFAULT 0,
    ADD COLUMN legacy_outbox_until bigint NOT NULL DEFAULT 0;
UPDATE relay_state SET
    published_position = (SELECT coalesce(max(position), 0) FROM attempt_events),
    legacy_outbox_until = (SELECT coalesce(max(id), 0) FROM outbox);

-- An appended event wakes the relay as an outbox row does.
CREATE TRIGGER attempt_events_notify AFTER INSERT ON attempt_events
    FOR EACH STATEMENT EXECUTE FUNCTION execplane_outbox_notify();
