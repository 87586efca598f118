-- The attempt store. `attempt_events` is the system of record; every other
-- table here except inbox/outbox is a projection of it, produced by the one
-- `apply` and checked by `execplane projection rebuild --verify`.

CREATE TABLE attempt_events (
    position           bigserial   PRIMARY KEY,           -- global append order
    event_id           uuid        NOT NULL UNIQUE,       -- derived from (attempt_id, seq)
    attempt_id         uuid        NOT NULL,
    job_id             text        NOT NULL,
    seq                bigint      NOT NULL CHECK (seq >= 1),
    kind               text        NOT NULL,
    terminal           boolean     NOT NULL,
    occurred_at        timestamptz NOT NULL,
    payload            bytea       NOT NULL,              -- Avro datum, schemas/attempt-events.avsc
    schema_fingerprint bigint      NOT NULL,              -- CRC-64-AVRO of the writer schema
    prev_hash          bytea       NOT NULL CHECK (length(prev_hash) = 32),
    hash               bytea       NOT NULL CHECK (length(hash) = 32), -- sha256(prev_hash || payload)
    recorded_at        timestamptz NOT NULL DEFAULT now(),
    UNIQUE (attempt_id, seq)
);
-- Invariant 3 in the database: one terminal event per attempt.
CREATE UNIQUE INDEX attempt_events_one_terminal ON attempt_events (attempt_id) WHERE terminal;
CREATE INDEX attempt_events_job ON attempt_events (job_id);

CREATE FUNCTION execplane_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'attempt_events is append-only: % refused', TG_OP
        USING ERRCODE = 'restrict_violation',
              HINT = 'history is never rewritten; append a new event instead';
END;
$$;
CREATE TRIGGER attempt_events_append_only
    BEFORE UPDATE OR DELETE ON attempt_events
    FOR EACH ROW EXECUTE FUNCTION execplane_refuse_change();
CREATE TRIGGER attempt_events_no_truncate
    BEFORE TRUNCATE ON attempt_events
    FOR EACH STATEMENT EXECUTE FUNCTION execplane_refuse_change();

CREATE TABLE jobs (
    job_id            text        PRIMARY KEY,
    command_id        uuid        NOT NULL UNIQUE,        -- invariant 1: one job per command
    tenant            text        NOT NULL,
    operation         text        NOT NULL,
    spec              jsonb,                              -- NULL for a rejected command
    attempts          integer     NOT NULL,
    latest_attempt_id uuid        NOT NULL,
    status            text        NOT NULL,               -- the latest attempt's status
    created_at        timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL
);

CREATE TABLE attempts (
    attempt_id            uuid        PRIMARY KEY,
    job_id                text        NOT NULL REFERENCES jobs (job_id),
    attempt_no            integer     NOT NULL CHECK (attempt_no >= 1),
    command_id            uuid        NOT NULL,
    tenant                text        NOT NULL,
    operation             text        NOT NULL,
    runner_type           text,
    status                text        NOT NULL,
    created_at            timestamptz NOT NULL,
    available_at          timestamptz NOT NULL,
    updated_at            timestamptz NOT NULL,
    previous_attempt_id   uuid,
    started_at            timestamptz,
    finished_at           timestamptz,
    cancel_reason         text,
    cancel_requested_by   text,
    cancel_requested_at   timestamptz,
    cancel_grace_deadline timestamptz,
    progress              text,
    progress_percent      smallint,
    outcome               text,
    failure_category      text,
    message               text,
    result_json           text,
    timer_fired           text,
    retry_attempt_id      uuid,
    fenced_reports        integer     NOT NULL,
    last_seq              bigint      NOT NULL,
    last_hash             bytea       NOT NULL,
    UNIQUE (job_id, attempt_no)                           -- invariant 1: attempt numbers
);
CREATE INDEX attempts_queued ON attempts (runner_type, available_at) WHERE status = 'queued';
CREATE INDEX attempts_status ON attempts (status);

-- One lease per attempt, ever (a lost lease ends the attempt; a retry is a
-- new attempt), so "at most one active lease" holds by construction, and a
-- second concurrent grant is refused here. Epochs increase per job.
CREATE TABLE leases (
    lease_id        uuid        PRIMARY KEY,
    attempt_id      uuid        NOT NULL UNIQUE REFERENCES attempts (attempt_id),
    job_id          text        NOT NULL,
    epoch           bigint      NOT NULL CHECK (epoch >= 1),
    runner_instance text        NOT NULL,
    granted_at      timestamptz NOT NULL,
    expires_at      timestamptz NOT NULL,
    active          boolean     NOT NULL,
    UNIQUE (job_id, epoch)
);
CREATE INDEX leases_active_instance ON leases (runner_instance) WHERE active;

-- Armed timers of live attempts; the sweeper claims due rows with
-- FOR UPDATE SKIP LOCKED.
CREATE TABLE deadlines (
    attempt_id uuid        NOT NULL REFERENCES attempts (attempt_id),
    kind       text        NOT NULL,
    due_at     timestamptz NOT NULL,
    PRIMARY KEY (attempt_id, kind)
);
CREATE INDEX deadlines_due ON deadlines (due_at);

-- Live runner instances, from presence heartbeats.
CREATE TABLE runner_instances (
    instance_id  text        PRIMARY KEY,
    runner_type  text        NOT NULL,
    version      text        NOT NULL,
    pool         jsonb       NOT NULL DEFAULT '{}',
    capabilities jsonb       NOT NULL DEFAULT '[]',
    capacity     integer     NOT NULL,
    in_flight    integer     NOT NULL DEFAULT 0,
    started_at   timestamptz NOT NULL,
    last_seen_at timestamptz NOT NULL
);
CREATE INDEX runner_instances_type ON runner_instances (runner_type, last_seen_at);

-- Processed input ids: redelivery is a no-op.
CREATE TABLE inbox (
    input_id     text        PRIMARY KEY,
    source       text        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now()
);

-- Records to publish, in id order per key, written in the same transaction
-- as the events that caused them.
CREATE TABLE outbox (
    id         bigserial   PRIMARY KEY,
    topic      text        NOT NULL,
    key        text        NOT NULL,
    headers    jsonb       NOT NULL,
    payload    bytea       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE FUNCTION execplane_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('execplane_outbox', '');
    RETURN NULL;
END;
$$;
CREATE TRIGGER outbox_notify AFTER INSERT ON outbox
    FOR EACH STATEMENT EXECUTE FUNCTION execplane_outbox_notify();
