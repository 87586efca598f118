//! The inputs of the ansible runner's operations, and their union: what the runner
//! SDK hands that runner's executor.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::OperationInputs;
use super::{Governed, KeyKind};
use super::{PackageRef, Vars};
use crate::contract::Operation;
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

impl super::Vocabulary for AnsibleInputs {
    /// An inventory artifact's hosts are unknown until it is read: the
    /// artifact itself is the key (inventories built from `targets` add
    /// nothing here).
    fn target_keys(&self, _tenant: &str) -> Vec<(KeyKind, String)> {
        let inventory = match self {
            Self::AnsiblePlaybookRun(run) | Self::AnsibleCheckModeRun(run) => {
                run.inventory.as_ref()
            }
            Self::AnsibleRoleRun(run) => run.inventory.as_ref(),
            Self::AnsibleInventoryValidate(run) => Some(&run.inventory),
        };
        inventory
            .and_then(|inventory| inventory.artifact.clone())
            .map(|artifact| vec![(KeyKind::Inventory, artifact)])
            .unwrap_or_default()
    }

    fn governed(&self) -> Vec<Governed<'_>> {
        match self {
            Self::AnsiblePlaybookRun(playbook) | Self::AnsibleCheckModeRun(playbook) => {
                vec![Governed::AnsiblePlaybook(playbook)]
            }
            Self::AnsibleRoleRun(role) => vec![Governed::AnsibleRole(role)],
            Self::AnsibleInventoryValidate(validate) => validate
                .package
                .iter()
                .map(Governed::AnsiblePackage)
                .collect(),
        }
    }

    fn result_problem(_: Operation, result: &Value) -> Result<(), String> {
        super::shaped::<AnsibleResult>(result)
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

// Results (docs/OPERATIONS.md): what its executor reports.

/// The result of every `ansible.*` operation: how ansible-playbook ended,
/// the recap of each host, who changed and who failed, the facts the run
/// set, the assertions it verified, and the event stream's artifact.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnsibleResult {
    pub operation: String,
    /// `sha256:<hex>` of the package run from (none for a validation
    /// without one).
    pub package: Option<String>,
    pub playbook: Option<String>,
    pub role: Option<String>,
    /// Ran with `--check`: nothing was changed on the hosts.
    pub check_mode: bool,
    /// ansible-playbook's exit code (`None`: it did not exit).
    pub exit_code: Option<i32>,
    /// The play recap, by host.
    pub recap: std::collections::BTreeMap<String, HostRecap>,
    /// Hosts with at least one change (in check mode: that would change).
    pub changed_hosts: Vec<String>,
    /// Hosts with at least one failed task.
    pub failed_hosts: Vec<String>,
    pub unreachable_hosts: Vec<String>,
    /// Per host, the facts `set_fact` set and a few gathered ones
    /// (`ansible_hostname`, `ansible_kernel`, ...).
    pub facts: std::collections::BTreeMap<String, std::collections::BTreeMap<String, Value>>,
    /// Verified postconditions: each `assert` task's outcome on each host,
    /// with the line of the event stream that records it.
    pub evidence: Vec<AnsibleEvidence>,
    /// The attempt's output holding the event stream (JSON lines).
    pub events_artifact: Option<String>,
    /// Tasks started.
    pub tasks: u32,
    /// `ansible.inventory.validate`: the inventory as ansible read it.
    pub inventory: Option<InventoryReport>,
    /// `ansible.inventory.validate`: what is wrong with it, each naming
    /// its group or host.
    pub problems: Vec<String>,
}

/// One host's line of the play recap.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostRecap {
    pub ok: u32,
    pub changed: u32,
    pub failed: u32,
    pub unreachable: u32,
    pub skipped: u32,
    pub rescued: u32,
    pub ignored: u32,
}

/// One verified postcondition.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnsibleEvidence {
    pub host: String,
    pub task: String,
    pub passed: bool,
    /// The line (from 1) of the event stream artifact.
    pub event_line: u64,
}

/// An inventory as ansible read it.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InventoryReport {
    pub hosts: Vec<String>,
    /// Each group's hosts (through its children too).
    pub groups: std::collections::BTreeMap<String, Vec<String>>,
}
