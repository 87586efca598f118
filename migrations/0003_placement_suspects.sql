-- Placement avoids an instance that lost a lease to the heartbeat timer
-- until it announces itself again; this finds such leases quickly.
CREATE INDEX leases_instance ON leases (runner_instance);
