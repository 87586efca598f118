//! Topic names of `topology/topics.yaml` (docs/ARCHITECTURE.md, "Topics"),
//! before `EXECPLANE_TOPIC_PREFIX`.

use super::RunnerType;

pub const COMMANDS: &str = "exec.commands.v1";
pub const RUNNER_EVENTS: &str = "exec.runner-events.v1";
pub const RUNNER_PRESENCE: &str = "exec.runner-presence.v1";
pub const LOG_CHUNKS: &str = "exec.log-chunks.v1";
pub const ATTEMPT_EVENTS: &str = "exec.attempt-events.v1";
pub const ARTIFACTS: &str = "exec.artifacts.v1";
pub const RESULTS: &str = "exec.results.v1";
pub const DLQ: &str = "exec.dlq.v1";

/// `exec.work.<type>.v1`: everything addressed to the instances of a type.
pub fn work(runner_type: RunnerType) -> String {
    format!("exec.work.{}.v1", runner_type.as_str())
}

/// Whether `topic` is one of execplane's own (no callback is produced
/// there, whatever the operator's prefixes say).
pub fn is_own(topic: &str) -> bool {
    [
        COMMANDS,
        RUNNER_EVENTS,
        RUNNER_PRESENCE,
        LOG_CHUNKS,
        ATTEMPT_EVENTS,
        ARTIFACTS,
        RESULTS,
        DLQ,
    ]
    .contains(&topic)
        || topic.starts_with("exec.work.")
}

/// Whether records of `topic` are placed by `hash(instance) % partitions`.
pub fn is_work(topic: &str) -> bool {
    topic.starts_with("exec.work.") && topic.ends_with(".v1")
}
