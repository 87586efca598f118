use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{DurationMs, Operation};

/// A request to run one operation once (plus infra retries), as the control
/// plane writes it. Build one with [`super::validate_jobspec`]: a `JobSpec`
/// that exists has passed contract validation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    /// The idempotency key: one command id yields at most one job.
    pub command_id: Uuid,
    /// The control plane's identity for the job.
    pub job_id: String,
    pub tenant: String,
    pub requested_by: String,
    pub operation: Operation,
    /// Operation-specific inputs; their shape is checked against
    /// [`super::OperationInputs`] for `operation`.
    pub inputs: serde_json::Value,
    #[serde(default)]
    pub runner_requirements: RunnerRequirements,
    #[serde(default)]
    pub targets: Vec<Target>,
    #[serde(default)]
    pub secret_refs: Vec<SecretRef>,
    #[serde(default)]
    pub timeouts: Timeouts,
    #[serde(default)]
    pub retry: RetryPolicy,
    #[serde(default)]
    pub policy: PolicyFlags,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callback: Option<Callback>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceContext>,
}

/// Where a job may run: pool labels every candidate runner must carry, and
/// capabilities it must offer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunnerRequirements {
    #[serde(default)]
    pub pool: BTreeMap<String, String>,
    #[serde(default)]
    pub capabilities: Vec<String>,
}

/// A `key = value` pair; the Avro form of a string map (Avro maps have no
/// stable order, and the event log hashes its bytes).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Label {
    pub key: String,
    pub value: String,
}

/// A resource the job acts on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Target {
    pub kind: String,
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    #[serde(default)]
    pub attributes: BTreeMap<String, String>,
}

/// A reference to one value in Vault's KV v2 store. Never a value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretRef {
    /// The name inputs use in `{"$secret": "<name>"}`.
    pub name: String,
    pub mount: String,
    pub path: String,
    pub key: String,
    /// When the secret has no `key` yet, the runner creates it: a random
    /// value written there (check-and-set: one value, however many
    /// attempts race), then resolved like any other.
    #[serde(default)]
    pub generate: Option<GenerateSecret>,
}

/// How a generated secret is made: `length` characters of `[A-Za-z0-9]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerateSecret {
    #[serde(default = "GenerateSecret::default_length")]
    pub length: u16,
}

impl GenerateSecret {
    /// The shortest and longest generated value.
    pub const LENGTHS: std::ops::RangeInclusive<u16> = 16..=256;

    fn default_length() -> u16 {
        32
    }
}

/// The four timeouts (Temporal's set). Defaults are documented in the README.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Timeouts {
    /// Queued or leased without the runner starting.
    #[serde(default = "Timeouts::default_schedule_to_start")]
    pub schedule_to_start: DurationMs,
    /// From the runner's start to its finish.
    #[serde(default = "Timeouts::default_start_to_close")]
    pub start_to_close: DurationMs,
    /// Longest silence between heartbeats; also the lease TTL.
    #[serde(default = "Timeouts::default_heartbeat")]
    pub heartbeat: DurationMs,
    /// The whole attempt, from creation to a terminal state.
    #[serde(default = "Timeouts::default_schedule_to_close")]
    pub schedule_to_close: DurationMs,
}

impl Timeouts {
    pub const MIN: DurationMs = DurationMs(1_000);
    pub const MAX: DurationMs = DurationMs(7 * 24 * 3_600_000);
    pub const MAX_HEARTBEAT: DurationMs = DurationMs(3_600_000);
    fn default_schedule_to_start() -> DurationMs {
        DurationMs::from_secs(60)
    }
    fn default_start_to_close() -> DurationMs {
        DurationMs::from_secs(600)
    }
    fn default_heartbeat() -> DurationMs {
        DurationMs::from_secs(30)
    }
    fn default_schedule_to_close() -> DurationMs {
        DurationMs::from_secs(900)
    }
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            schedule_to_start: Self::default_schedule_to_start(),
            start_to_close: Self::default_start_to_close(),
            heartbeat: Self::default_heartbeat(),
            schedule_to_close: Self::default_schedule_to_close(),
        }
    }
}

/// Infra retries only: `lease_lost` and `infrastructure` failures get a new
/// attempt while `max_attempts` allows. Business failures are never retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryPolicy {
    /// Attempts in all, the first included. 1 means no retry.
    #[serde(default = "RetryPolicy::default_max_attempts")]
    pub max_attempts: u32,
    #[serde(default = "RetryPolicy::default_initial_backoff")]
    pub initial_backoff: DurationMs,
    #[serde(default = "RetryPolicy::default_max_backoff")]
    pub max_backoff: DurationMs,
}

impl RetryPolicy {
    pub const MAX_ATTEMPTS: u32 = 100;
    fn default_max_attempts() -> u32 {
        3
    }
    fn default_initial_backoff() -> DurationMs {
        DurationMs::from_secs(1)
    }
    fn default_max_backoff() -> DurationMs {
        DurationMs::from_secs(60)
    }

    /// Delay before attempt `next_attempt_no` (2 or more): doubling from the
    /// initial backoff, capped. Deterministic: jitter, if any, belongs to the
    /// caller that passes ids and clocks in.
    pub fn backoff_before(&self, next_attempt_no: u32) -> DurationMs {
        let doublings = next_attempt_no.saturating_sub(2).min(40);
        let delay = self.initial_backoff.0.saturating_mul(1u64 << doublings);
        DurationMs(delay.min(self.max_backoff.0))
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: Self::default_max_attempts(),
            initial_backoff: Self::default_initial_backoff(),
            max_backoff: Self::default_max_backoff(),
        }
    }
}

/// Policy flags the control plane sets explicitly.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyFlags {
    #[serde(default)]
    pub destructive: bool,
    #[serde(default)]
    pub elevated: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_plan_digest: Option<String>,
    #[serde(default)]
    pub explicit_command: bool,
}

/// Where the terminal result goes besides `exec.results.v1`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Callback {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
}

/// W3C trace context, carried into every record the job causes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceContext {
    pub traceparent: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        let policy = RetryPolicy {
            max_attempts: 10,
            initial_backoff: DurationMs(1_000),
            max_backoff: DurationMs(5_000),
        };
        assert_eq!(policy.backoff_before(2), DurationMs(1_000));
        assert_eq!(policy.backoff_before(3), DurationMs(2_000));
        assert_eq!(policy.backoff_before(4), DurationMs(4_000));
        assert_eq!(policy.backoff_before(5), DurationMs(5_000));
        assert_eq!(policy.backoff_before(99), DurationMs(5_000));
    }
}
