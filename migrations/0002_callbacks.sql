-- HTTP callbacks of terminal states: a work queue (not a projection),
-- written in the same transaction as the terminal event. The delivery
-- outcome itself is recorded as a `callback_recorded` event.
ALTER TABLE attempts ADD COLUMN callback_delivered boolean;

CREATE TABLE callbacks (
    attempt_id      uuid        NOT NULL REFERENCES attempts (attempt_id),
    terminal_seq    bigint      NOT NULL,
    url             text        NOT NULL,
    idempotency_key text        NOT NULL,       -- attempt_id:terminal_seq, stable across retries
    body            jsonb       NOT NULL,
    traceparent     text,
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL,
    status          text        NOT NULL DEFAULT 'pending', -- pending | delivered | failed
    last_status     integer,
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (attempt_id, terminal_seq)
);
CREATE INDEX callbacks_due ON callbacks (next_attempt_at) WHERE status = 'pending';

-- Presence details used by placement.
ALTER TABLE runner_instances ADD COLUMN status text NOT NULL DEFAULT 'ready';
ALTER TABLE runner_instances ADD COLUMN work_partition integer NOT NULL DEFAULT 0;
