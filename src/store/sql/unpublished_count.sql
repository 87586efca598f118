-- Records waiting to be published: outbox rows, and events past the cursor.
SELECT (SELECT count(*) FROM outbox) + (SELECT count(*) FROM unpublished_events)
