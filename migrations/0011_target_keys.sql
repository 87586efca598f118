-- Per-target concurrency (docs/ARCHITECTURE.md, "Per-target concurrency").
-- The keys each attempt holds while leased, with their limits, as its
-- `created` event records them.
ALTER TABLE attempts ADD COLUMN target_keys jsonb NOT NULL DEFAULT '[]';

-- Placement pages through queued attempts without keys only; attempts with
-- keys are found through the keys they wait for.
DROP INDEX IF EXISTS attempts_queued;
CREATE INDEX attempts_queued ON attempts (runner_type, available_at, attempt_id)
    WHERE status = 'queued' AND target_keys = '[]'::jsonb;

-- One row per key of each live attempt: waiting (queued) or holding (leased
-- to its end); none for an ended attempt. A key's holders and the head of
-- its queue are each a short range of a partial index, whatever the
-- backlog; the grant transaction counts holders under the key's lock.
CREATE TABLE target_keys (
    key          text        NOT NULL,
    attempt_id   uuid        NOT NULL,
    key_limit    integer     NOT NULL CHECK (key_limit >= 1),
    holding      boolean     NOT NULL,
    available_at timestamptz NOT NULL,
    PRIMARY KEY (key, attempt_id)
);
CREATE INDEX target_keys_waiting ON target_keys (key, available_at, attempt_id) WHERE NOT holding;
CREATE INDEX target_keys_holding ON target_keys (key) WHERE holding;
CREATE INDEX target_keys_attempt ON target_keys (attempt_id);
