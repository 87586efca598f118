//! The inputs of the helm runner's operations, and their union: what the runner
//! SDK hands that runner's executor.

use serde::{Deserialize, Serialize};

use super::{ClusterRef, Vars};
use crate::contract::{Operation, PolicyFlags, Problem};

/// A chart from an approved source, pinned.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChartRef {
    pub repository: String,
    pub name: String,
    pub version: String,
    #[serde(default)]
    pub digest: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HelmRelease {
    pub cluster: ClusterRef,
    pub release: String,
    pub namespace: String,
    pub chart: ChartRef,
    #[serde(default)]
    pub values: Vars,
    /// helm's `--wait`: until the release's resources are ready.
    #[serde(default)]
    pub wait: bool,
    /// helm's `--atomic`: a failed install is uninstalled, a failed upgrade
    /// rolled back (implies `wait`).
    #[serde(default)]
    pub atomic: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HelmRollback {
    pub cluster: ClusterRef,
    pub release: String,
    pub namespace: String,
    pub revision: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HelmReleaseRef {
    pub cluster: ClusterRef,
    pub release: String,
    pub namespace: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HelmTemplate {
    pub release: String,
    pub namespace: String,
    pub chart: ChartRef,
    #[serde(default)]
    pub values: Vars,
}

super::runner_inputs! {
    /// The inputs of the helm runner's operations.
    HelmInputs {
    HelmInstall(HelmRelease),
    HelmUpgrade(HelmRelease),
    HelmRollback(HelmRollback),
    HelmUninstall(HelmReleaseRef),
    HelmTest(HelmReleaseRef),
    HelmTemplate(HelmTemplate),
    }
}

/// The contract's gate on a helm operation's flags: a rollback only as
/// an explicit command.
pub(super) fn flag_problems(operation: Operation, flags: &PolicyFlags) -> Vec<Problem> {
    match operation {
        Operation::HelmRollback if !flags.explicit_command => vec![Problem::new(
            "policy.explicit_command",
            "helm.rollback runs only as an explicit control-plane command (`policy.explicit_command: true`)",
        )],
        _ => Vec::new(),
    }
}
