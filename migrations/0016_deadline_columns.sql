-- An attempt's next armed timer is two columns of its row, written with
-- the row it belongs to, instead of a row per deadline deleted and
-- inserted again on every change of the attempt (docs/ARCHITECTURE.md,
-- "Timers"). The sweeper reads due attempts through the partial index;
-- terminal attempts have none and are not in it.
ALTER TABLE attempts
    ADD COLUMN next_deadline timestamptz,
    ADD COLUMN next_timer text;

UPDATE attempts a SET next_deadline = d.due_at, next_timer = d.kind
FROM (
    SELECT DISTINCT ON (attempt_id) attempt_id, kind, due_at
    FROM deadlines
    ORDER BY attempt_id, due_at, kind
) d
WHERE a.attempt_id = d.attempt_id;

CREATE INDEX attempts_next_deadline ON attempts (next_deadline)
    WHERE next_deadline IS NOT NULL;

DROP TABLE deadlines;
