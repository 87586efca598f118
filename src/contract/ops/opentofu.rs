//! The inputs of the opentofu runner's operations, and their union: what the runner
//! SDK hands that runner's executor.

use serde::{Deserialize, Serialize};

use super::{PackageRef, Vars};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TofuModule {
    pub package: PackageRef,
    /// Relative to the package root.
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub workspace: Option<String>,
    /// Input variables: plain values only (a variable's value is written
    /// into the plan file and the state, so a secret never goes here).
    #[serde(default)]
    pub variables: Vars,
    /// `type` (`local` when absent; the operator's `opentofu.backends`)
    /// and its settings; for `pg`, `conn_str` may be a secret reference.
    #[serde(default)]
    pub backend: Vars,
    /// Environment variables for the providers (their credentials, as
    /// secret references): only names the operator's `opentofu.env` lists.
    #[serde(default)]
    pub env: Vars,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TofuApply {
    #[serde(flatten)]
    pub module: TofuModule,
    /// The plan artifact to apply; its digest must equal the policy's
    /// `approved_plan_digest`.
    #[serde(default)]
    pub plan_artifact: Option<String>,
}

super::runner_inputs! {
    /// The inputs of the opentofu runner's operations.
    TofuInputs {
    OpentofuPlan(TofuModule),
    OpentofuApply(TofuApply),
    OpentofuDestroy(TofuModule),
    OpentofuOutput(TofuModule),
    OpentofuStateInspect(TofuModule),
    }
}
