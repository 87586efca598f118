-- Indexes whose cost grew with every attempt ever run, or that nothing
-- reads any more (docs/BENCHMARKS.md, "Flat gauges, fewer index entries").
--
-- `attempts_status` held every attempt. It served the attempts gauge, which
-- counted every attempt by status every 15 s: a cost that grew with the
-- table. The gauge now counts only the attempts that have not ended (the
-- ended ones are `execplane_attempts_ended_total`), and this index holds
-- only those: as large as the work in flight, and an attempt's last write
-- adds no entry to it.
DROP INDEX IF EXISTS attempts_status;
CREATE INDEX attempts_live ON attempts (status)
    WHERE status IN ('queued', 'leased', 'running', 'cancel_requested');

-- Found an instance's lost leases when placement marked suspects by
-- scanning leases; `runner_instances.lost_lease_at` does that now, and
-- every read of leases by instance asks for active ones
-- (`leases_active_instance`). Two entries per attempt for nothing.
DROP INDEX IF EXISTS leases_instance;
