//! Why an attempt did not succeed: a leaf of the contract, named by events,
//! results and runners alike.

use serde::{Deserialize, Serialize};

/// Why an attempt did not succeed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureCategory {
    Contract,
    Policy,
    RunnerError,
    TargetUnreachable,
    VerificationFailed,
    LeaseLost,
    Infrastructure,
    Timeout,
    Cancelled,
}

impl FailureCategory {
    pub const ALL: [FailureCategory; 9] = [
        FailureCategory::Contract,
        FailureCategory::Policy,
        FailureCategory::RunnerError,
        FailureCategory::TargetUnreachable,
        FailureCategory::VerificationFailed,
        FailureCategory::LeaseLost,
        FailureCategory::Infrastructure,
        FailureCategory::Timeout,
        FailureCategory::Cancelled,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            FailureCategory::Contract => "contract",
            FailureCategory::Policy => "policy",
            FailureCategory::RunnerError => "runner_error",
            FailureCategory::TargetUnreachable => "target_unreachable",
            FailureCategory::VerificationFailed => "verification_failed",
            FailureCategory::LeaseLost => "lease_lost",
            FailureCategory::Infrastructure => "infrastructure",
            FailureCategory::Timeout => "timeout",
            FailureCategory::Cancelled => "cancelled",
        }
    }

    /// Only these are retried here; every other failure is the control plane's.
    pub const fn is_infra(self) -> bool {
        matches!(
            self,
            FailureCategory::LeaseLost | FailureCategory::Infrastructure
        )
    }
}
