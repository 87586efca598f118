-- The ingress (DESIGN §7). Neither table is a projection of the attempt log:
-- the catalog is operator configuration, the audit table is the ingress's
-- own record of the reports it refused from authenticated executors.

-- Executors that may report through the ingress: the runner types each may
-- serve and the tenants whose attempts it may run (empty = every tenant).
CREATE TABLE executors (
    executor_id  text        PRIMARY KEY CHECK (executor_id ~ '^[A-Za-z0-9_-]{1,64}$'),
    runner_types text[]      NOT NULL,
    tenants      text[]      NOT NULL DEFAULT '{}',
    enabled      boolean     NOT NULL DEFAULT true,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- Refusals of authenticated requests by policy (unknown or disabled
-- executor, a runner type or tenant outside its grant, an instance that is
-- not its own). Append-only, like the attempt log.
CREATE TABLE ingress_audit (
    id          bigserial   PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    executor_id text        NOT NULL,
    client      inet        NOT NULL,
    transport   text        NOT NULL,  -- http | tcp
    route       text        NOT NULL,
    reason      text        NOT NULL,
    attempt_id  uuid
);
CREATE INDEX ingress_audit_at ON ingress_audit (at);
CREATE TRIGGER ingress_audit_append_only
    BEFORE UPDATE OR DELETE ON ingress_audit
    FOR EACH ROW EXECUTE FUNCTION execplane_refuse_change();
