-- Callbacks on a topic (docs/EVENTS.md, "Callbacks"): a JobSpec's
-- `callback.topic` gets its result record produced there by the callback
-- worker, retried and recorded like an HTTP callback, so a topic that
-- refuses the record holds up only its own callback, never the relay.
-- `channel` is `http` (url is the URL) or `kafka` (url is the topic, before
-- EXECPLANE_TOPIC_PREFIX; `headers` and `payload` are the exec.results.v1
-- record's, so the callback is the same record with the same ce_id).
ALTER TABLE callbacks ADD COLUMN channel text NOT NULL DEFAULT 'http';
ALTER TABLE callbacks ADD COLUMN headers jsonb;
ALTER TABLE callbacks ADD COLUMN payload bytea;
ALTER TABLE callbacks DROP CONSTRAINT callbacks_pkey;
ALTER TABLE callbacks ADD PRIMARY KEY (attempt_id, terminal_seq, channel);

-- Whether the topic's callback was produced (true) or given up (false),
-- beside `callback_delivered` (the URL's).
ALTER TABLE attempts ADD COLUMN callback_topic_delivered boolean;
