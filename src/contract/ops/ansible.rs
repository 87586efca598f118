//! The inputs of the ansible runner's operations, and their union: what the runner
//! SDK hands that runner's executor.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::OperationInputs;
use super::{PackageRef, Vars};
use crate::contract::Problem;

/// An inventory: an artifact reference, or generated from the job's targets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InventoryRef {
    #[serde(default)]
    pub artifact: Option<String>,
    #[serde(default)]
    pub from_targets: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnsiblePlaybook {
    pub package: PackageRef,
    /// Relative to the package root; never absolute, never `..`.
    pub playbook: String,
    #[serde(default)]
    pub inventory: Option<InventoryRef>,
    #[serde(default)]
    pub extra_vars: Vars,
    #[serde(default)]
    pub limit: Option<String>,
    #[serde(default)]
    pub tags: Vec<String>,
    /// The account on the nodes (required to connect).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// A `{"$secret": ...}` reference to its OpenSSH private key (required
    /// to connect; a literal is refused by name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_key: Option<Value>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnsibleRole {
    pub package: PackageRef,
    pub role: String,
    #[serde(default)]
    pub inventory: Option<InventoryRef>,
    #[serde(default)]
    pub vars: Vars,
    /// The account on the nodes (required to connect).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// A `{"$secret": ...}` reference to its OpenSSH private key (required
    /// to connect; a literal is refused by name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_key: Option<Value>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnsibleInventoryValidate {
    pub inventory: InventoryRef,
    #[serde(default)]
    pub package: Option<PackageRef>,
    /// The account on the nodes (required to connect).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// A `{"$secret": ...}` reference to its OpenSSH private key (required
    /// to connect; a literal is refused by name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_key: Option<Value>,
}

super::runner_inputs! {
    /// The inputs of the ansible runner's operations.
    AnsibleInputs {
    AnsiblePlaybookRun(AnsiblePlaybook),
    AnsibleRoleRun(AnsibleRole),
    AnsibleInventoryValidate(AnsibleInventoryValidate),
    AnsibleCheckModeRun(AnsiblePlaybook),
    }
}

/// What intake checks of an ansible operation's inputs beyond their
/// shape: the playbook, or the role, is a relative path of the package.
pub(super) fn problems_of(inputs: &OperationInputs) -> Vec<Problem> {
    use OperationInputs as I;
    let (path, value) = match inputs {
        I::AnsiblePlaybookRun(playbook) | I::AnsibleCheckModeRun(playbook) => {
            ("inputs.playbook", &playbook.playbook)
        }
        I::AnsibleRoleRun(role) => ("inputs.role", &role.role),
        _ => return Vec::new(),
    };
    match crate::contract::limits::is_safe_relative(value) {
        Ok(()) => Vec::new(),
        Err(message) => vec![Problem::new(path, message)],
    }
}
