-- Records waiting to be published: outbox rows, and events past the cursor.
SELECT (SELECT count(*) FROM outbox)
     + (SELECT count(*) FROM attempt_events
        WHERE position > (SELECT published_position FROM relay_state WHERE id = 1))
