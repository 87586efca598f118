-- An event's log position is taken under the append lock (migration 0018,
-- docs/ARCHITECTURE.md "Relay") without a function call per row: a
-- per-row trigger took the lock, set the idle timeout and looked the
-- sequence up by name for every event, about 4.5 us of a 15 us insert.
--
-- The lock and the timeout are now taken once per statement, before the
-- statement produces its first row, so before any of its rows takes a
-- position. The position is an identity column generated always: an
-- insert that names a position is refused (SQLSTATE 428C9) rather than
-- renumbered, so still no insert can take one around the lock. The
-- identity's sequence continues where the old one stopped, one value at a
-- time.
DROP TRIGGER attempt_events_position ON attempt_events;
DROP FUNCTION execplane_take_position();

CREATE FUNCTION execplane_take_append_lock() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- "execappd": the append lock, held until the transaction ends.
    PERFORM pg_advisory_xact_lock(7311705472546926692);
    PERFORM set_config('idle_in_transaction_session_timeout', '10s', true);
    RETURN NULL;
END;
$$;
CREATE TRIGGER attempt_events_append_lock BEFORE INSERT ON attempt_events
    FOR EACH STATEMENT EXECUTE FUNCTION execplane_take_append_lock();

DO $$
DECLARE
    next_position bigint;
BEGIN
    SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END
        INTO next_position FROM attempt_events_position_seq;
    DROP SEQUENCE attempt_events_position_seq;
    EXECUTE format(
        'ALTER TABLE attempt_events ALTER COLUMN position ADD GENERATED ALWAYS AS IDENTITY '
        '(SEQUENCE NAME attempt_events_position_seq START WITH %s CACHE 1)',
        next_position);
END;
$$;
