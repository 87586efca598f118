-- The artifact worker looks for ended attempts without a bundle, oldest
-- first; this keeps that from scanning every attempt.
CREATE INDEX attempts_finished ON attempts (finished_at) WHERE finished_at IS NOT NULL;
