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

// Results (docs/OPERATIONS.md): what its executor reports.

/// The result of every `helm.*` operation: the release as helm reports it
/// after the operation, the objects of its rendered manifests (stored as
/// the output `rendered-manifests.yaml`) and its test hooks' last runs.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HelmResult {
    pub release: String,
    pub namespace: String,
    /// `<name>-<version>` of the chart used (install, upgrade, template).
    pub chart: Option<String>,
    /// The chart archive's digest, when pinned.
    pub chart_digest: Option<String>,
    /// The release's revision after the operation.
    pub revision: Option<u32>,
    /// `deployed`, `failed`, `uninstalled`, ...
    pub status: Option<String>,
    pub description: Option<String>,
    /// The chart's NOTES (at most 4 KiB).
    pub notes: Option<String>,
    pub objects: Vec<HelmObject>,
    /// The output holding the rendered manifests.
    pub manifests: Option<String>,
    /// The test hooks and how their last run ended.
    pub tests: Vec<HelmTestRun>,
}

/// One object of a release's rendered manifests.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HelmObject {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub namespace: Option<String>,
}

/// One test hook of a release.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HelmTestRun {
    pub name: String,
    /// `Succeeded`, `Failed`, `Running`; `None`: never run.
    pub phase: Option<String>,
    pub started_at: Option<String>,
    pub completed_at: Option<String>,
}
