-- The attempts that have not ended are exactly those with a deadline
-- armed: every one has its schedule-to-close deadline until it ends, and
-- none has one after (the state machine's property test checks it). So
-- `attempts_next_deadline`, which the sweeper reads, finds them too, and
-- `attempts_live` took three index entries of every attempt (at its
-- creation, its lease and its start) for nothing another index did not
-- hold (docs/BENCHMARKS.md, "An index the deadlines already keep").
DROP INDEX IF EXISTS attempts_live;
