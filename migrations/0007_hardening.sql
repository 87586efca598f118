-- What an input id stood for when first seen (a command id names one job or
-- one cancel): a reused id is told apart from a redelivery and dead-lettered.
ALTER TABLE inbox ADD COLUMN subject text;

-- The relay's publication horizon: the active relay enqueues records only
-- before `active_until` (it moves it ahead while it holds the lock), so a
-- relay that takes the lock over waits until then before it publishes, and
-- two relays' publications never interleave.
CREATE TABLE relay_state (
    id           integer     PRIMARY KEY CHECK (id = 1),
    active_until timestamptz NOT NULL
);
INSERT INTO relay_state (id, active_until) VALUES (1, '-infinity');

-- How far each input partition has been decided, whichever dispatcher owns
-- it: the instant before which every record sent to it is decided. The
-- timer sweeper fires a deadline only when every runner-events partition
-- is decided past it, so a dispatcher never expires a lease whose
-- heartbeat waits on another dispatcher's partition.
CREATE TABLE intake_progress (
    topic         text        NOT NULL,
    partition     integer     NOT NULL,
    decided_until timestamptz NOT NULL,
    PRIMARY KEY (topic, partition)
);

-- Placement reads queued attempts of one runner type in (available_at,
-- attempt_id) order, a page at a time: this index serves that order, so a
-- placement round costs the same with 100 or 1,000,000 attempts queued.
DROP INDEX IF EXISTS attempts_queued;
CREATE INDEX attempts_queued ON attempts (runner_type, available_at, attempt_id) WHERE status = 'queued';

-- When the heartbeat timer last took a lease from an instance: it is
-- suspect (probably dead) until it announces itself after that. Set in the
-- transaction that expires the lease, so placement never scans leases.
ALTER TABLE runner_instances ADD COLUMN lost_lease_at timestamptz;

-- The hot tables grow from empty inside a run; analyse them early (the
-- dispatcher also analyses them itself when they changed a lot).
ALTER TABLE jobs SET (autovacuum_analyze_scale_factor = 0.02, autovacuum_analyze_threshold = 500);
ALTER TABLE attempts SET (autovacuum_analyze_scale_factor = 0.02, autovacuum_analyze_threshold = 500);
ALTER TABLE leases SET (autovacuum_analyze_scale_factor = 0.02, autovacuum_analyze_threshold = 500);
ALTER TABLE deadlines SET (autovacuum_analyze_scale_factor = 0.02, autovacuum_analyze_threshold = 500);
ALTER TABLE inbox SET (autovacuum_analyze_scale_factor = 0.02, autovacuum_analyze_threshold = 500);
