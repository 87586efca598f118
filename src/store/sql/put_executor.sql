INSERT INTO executors (executor_id, runner_types, tenants, enabled) VALUES ($1, $2, $3, $4)
ON CONFLICT (executor_id) DO UPDATE
SET runner_types = EXCLUDED.runner_types, tenants = EXCLUDED.tenants,
    enabled = EXCLUDED.enabled, updated_at = now()
