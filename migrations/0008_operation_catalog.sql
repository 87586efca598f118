-- The operations each runner instance announces it runs: placement grants
-- an attempt only to an instance that lists the attempt's operation.
-- Instances of releases before 0.2 announce none and are granted nothing.
ALTER TABLE runner_instances ADD COLUMN operations jsonb NOT NULL DEFAULT '[]';
