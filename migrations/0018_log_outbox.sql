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
-- positions are committed in the order they were taken. A trigger assigns
-- every row's position, whatever the insert says, so no insert can take
-- one around the lock; the sequence hands out one value at a time.
--
-- The lock is held from a batch's event insert (its last statement) to its
-- commit. So that a client that stalls in between (a partition, a paused
-- process) cannot hold every other append back for long, the transaction
-- that takes it is ended by the server after 10 s idle.
CREATE FUNCTION execplane_take_position() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- "execappd": the append lock. Taken again by the same transaction for
    -- each row, which only counts it again.
    PERFORM pg_advisory_xact_lock(7311705472546926692);
    PERFORM set_config('idle_in_transaction_session_timeout', '10s', true);
    NEW.position := nextval(format('%I.attempt_events_position_seq', TG_TABLE_SCHEMA));
    RETURN NEW;
END;
$$;
ALTER TABLE attempt_events ALTER COLUMN position DROP DEFAULT;
ALTER SEQUENCE attempt_events_position_seq CACHE 1;
CREATE TRIGGER attempt_events_position BEFORE INSERT ON attempt_events
    FOR EACH ROW EXECUTE FUNCTION execplane_take_position();

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

-- The events not yet published, wherever that is asked.
CREATE VIEW unpublished_events AS
    SELECT * FROM attempt_events
    WHERE position > (SELECT published_position FROM relay_state WHERE id = 1);

-- An appended event wakes the relay as an outbox row does.
CREATE TRIGGER attempt_events_notify AFTER INSERT ON attempt_events
    FOR EACH STATEMENT EXECUTE FUNCTION execplane_outbox_notify();

-- A dispatcher of an earlier release, still running once this migration
-- ran, would copy events to the outbox again, after events the log has
-- published: an attempt's order on the topic would break. Its append is
-- refused with SQLSTATE 55000, which such a dispatcher retries (never
-- dead-letters) until it is replaced.
CREATE FUNCTION execplane_refuse_event_copies() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.topic = 'exec.attempt-events.v1' THEN
        RAISE EXCEPTION 'events are published from attempt_events since migration 0018: this dispatcher predates it; upgrade it'
            USING ERRCODE = '55000';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER outbox_no_event_copies BEFORE INSERT ON outbox
    FOR EACH ROW EXECUTE FUNCTION execplane_refuse_event_copies();
