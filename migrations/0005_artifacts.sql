-- The artifact worker (DESIGN §6). Not part of the attempt projection:
-- chunks are a staging buffer, artifacts are refs to stored bundles.

-- Log chunks taken from exec.log-chunks.v1, ordered and deduplicated by
-- (attempt, stream, seq), kept until their attempt's bundle is stored.
CREATE TABLE artifact_chunks (
    attempt_id  uuid        NOT NULL,
    stream      text        NOT NULL,
    seq         bigint      NOT NULL,
    lease_epoch bigint      NOT NULL,
    producer    text        NOT NULL,
    text        text        NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (attempt_id, stream, seq)
);

-- One row per stored artifact; (attempt, name) is unique, so a bundle
-- written twice (a worker killed after storing, before committing) is
-- recorded once.
CREATE TABLE artifacts (
    artifact_id     uuid        PRIMARY KEY,
    attempt_id      uuid        NOT NULL,
    name            text        NOT NULL,
    media_type      text        NOT NULL,
    size            bigint      NOT NULL,
    sha256          text        NOT NULL,
    producer        text        NOT NULL,
    retention_class text        NOT NULL CHECK (retention_class IN ('logs', 'rendered', 'evidence')),
    storage_key     text        NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (attempt_id, name)
);
CREATE INDEX artifacts_class_created ON artifacts (retention_class, created_at);

-- Attempts whose artifacts are stored: the worker's progress.
CREATE TABLE artifact_bundles (
    attempt_id uuid        PRIMARY KEY,
    bundled_at timestamptz NOT NULL DEFAULT now()
);

-- What the worker's detectors caught in output the runner had not masked.
CREATE TABLE artifact_detections (
    id          bigserial   PRIMARY KEY,
    attempt_id  uuid        NOT NULL,
    name        text        NOT NULL,
    detector    text        NOT NULL,
    occurrences integer     NOT NULL,
    at          timestamptz NOT NULL DEFAULT now()
);
