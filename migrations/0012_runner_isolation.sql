-- How each runner instance runs its tools, as its presence says
-- (`sandboxed`, `sandboxed, host network`, `unsandboxed`, `remote`;
-- `unknown` from releases before 0.3): an unsandboxed runner is visible to
-- the operator, in `/readyz` and here (docs/SECURITY.md).
ALTER TABLE runner_instances ADD COLUMN isolation text NOT NULL DEFAULT 'unknown';
