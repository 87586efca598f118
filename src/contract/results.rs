//! Each operation's typed result: what a runner's `result_json` must be
//! (docs/OPERATIONS.md). The runner SDK checks a result against its
//! operation's type before it reports it, so a consumer of
//! `exec.results.v1` can rely on the documented shape.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{FailureCategory, Operation, RunnerType};

/// The result of every verification operation: the samples taken, whether
/// the last one passed, and the failure category the runner recommends.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerificationEvidence {
    pub operation: String,
    pub samples: Vec<EvidenceSample>,
    pub passed: bool,
    pub recommended_failure_category: Option<FailureCategory>,
}

/// One sample of a verification.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvidenceSample {
    /// 1, 2, ... in the order taken.
    pub n: u32,
    /// When it was taken (RFC 3339).
    pub at: String,
    pub latency_ms: u64,
    /// Something answered (false: refused, timed out, unresolvable).
    pub reached: bool,
    /// What the probe saw (per operation; see docs/OPERATIONS.md).
    pub observed: Value,
    pub assertions: Vec<EvidenceAssertion>,
    pub error: Option<String>,
    /// The operator's destination policy refused the connection.
    #[serde(default)]
    pub refused_by_policy: bool,
}

/// One assertion of a sample.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvidenceAssertion {
    pub name: String,
    pub expected: Value,
    pub actual: Value,
    pub passed: bool,
}

/// The result of `ssh.command.run`: what ran, as whom, and how it ended on
/// each node (its output is the attempt's stdout and stderr logs).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SshCommandResult {
    pub template_id: String,
    /// The program and its arguments as the node received them.
    pub argv: Vec<String>,
    /// The user it ran as through sudo; `None`: no sudo.
    pub sudo_as: Option<String>,
    pub nodes: Vec<SshNodeResult>,
}

/// How the command ended on one node.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SshNodeResult {
    /// The target's id.
    pub target: String,
    /// `user@host:port` as connected to.
    pub destination: String,
    /// The remote exit code; `None` when it did not exit (stopped,
    /// unreachable, host key refused).
    pub exit_code: Option<i32>,
    pub duration_ms: u64,
    pub error: Option<String>,
}

/// The result of `ssh.file.upload` and `ssh.file.download`: the file on
/// the nodes, and on each the bytes moved.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SshTransferResult {
    pub template_id: String,
    /// The file on the nodes.
    pub path: String,
    /// The user the node's SFTP server ran as through sudo; `None`: no sudo.
    pub sudo_as: Option<String>,
    pub nodes: Vec<SshTransferNode>,
}

/// One node's transfer.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SshTransferNode {
    pub target: String,
    pub destination: String,
    /// `sha256:<hex>` of the bytes sent (upload) or received (download).
    pub sha256: Option<String>,
    pub size: Option<u64>,
    /// Upload: the mode the file was given (`0644`).
    pub mode: Option<String>,
    /// Download: the attempt's output holding the bytes (masked when they
    /// held a secret the attempt resolved, so its digest then differs).
    pub artifact: Option<String>,
    pub duration_ms: u64,
    pub error: Option<String>,
}

/// The result of `ssh.service.restart`: the restart, then the status the
/// template's status command reported, on each node.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SshServiceResult {
    pub template_id: String,
    pub service: String,
    pub sudo_as: Option<String>,
    /// The restart command as the node received it.
    pub argv: Vec<String>,
    /// The status command as the node received it.
    pub status_argv: Vec<String>,
    pub nodes: Vec<SshServiceNode>,
}

/// One node's restart and status.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SshServiceNode {
    pub target: String,
    pub destination: String,
    pub restart_exit_code: Option<i32>,
    pub status_exit_code: Option<i32>,
    /// The status command's output (its first 4 KiB), the evidence.
    pub status: Option<String>,
    /// The status command exited 0.
    pub active: bool,
    pub duration_ms: u64,
    pub error: Option<String>,
}

/// The result of `ssh.system.fact.collect`: the facts of each node.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SshFactsResult {
    pub template_id: String,
    pub nodes: Vec<SshFactsNode>,
}

/// One node's facts: `hostname`, `kernel` (the release), `os` (the kernel
/// name), `arch` (the machine), those asked for.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SshFactsNode {
    pub target: String,
    pub destination: String,
    pub facts: std::collections::BTreeMap<String, String>,
    pub duration_ms: u64,
    pub error: Option<String>,
}

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

/// The result of every `kubernetes.*` operation: the objects touched, what
/// happened to each, the cluster's events about them and, for `wait` and
/// `rollout.status`, the history of what was waited for.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesResult {
    /// The cluster's name in the operator's catalogue.
    pub cluster: String,
    /// The API server's dry run: nothing was persisted.
    pub dry_run: bool,
    pub objects: Vec<KubernetesObjectResult>,
    /// The cluster's events about the objects, oldest first (at most 20 each).
    pub events: Vec<KubernetesEvent>,
    /// `kubernetes.wait` and `kubernetes.rollout.status`: the evidence.
    pub wait: Option<KubernetesWaitEvidence>,
}

/// One object as the API server answered for it.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesObjectResult {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    /// `None`: a cluster-scoped object.
    pub namespace: Option<String>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub generation: Option<i64>,
    /// `created`, `configured`, `unchanged`, `patched`, `deleted`,
    /// `absent` (nothing to delete), `read` or `waited` (the object a wait
    /// or rollout watched, as last seen).
    pub action: String,
    /// The diff summary: paths of the fields the call changed (status and
    /// the server's bookkeeping left out), at most 100.
    pub changed_fields: Vec<String>,
    pub changed_fields_truncated: bool,
    /// `resource.read`: the object as served, without `managedFields`
    /// (`None` when over 128 KiB).
    pub object: Option<Value>,
}

/// One Kubernetes event about an object.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesEvent {
    /// `Kind/name` of the object it is about.
    pub object: String,
    /// `Normal` or `Warning`.
    pub event_type: Option<String>,
    pub reason: Option<String>,
    pub message: Option<String>,
    pub count: Option<i32>,
    /// RFC 3339.
    pub last_seen: Option<String>,
}

/// What was waited for and every change seen on the way.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesWaitEvidence {
    /// `Type=Status`, or `rollout` for `rollout.status`.
    pub condition: String,
    pub met: bool,
    /// One entry per change (the first look and the last always), at most 100.
    pub history: Vec<ConditionObservation>,
}

/// One look at the object that differed from the look before.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConditionObservation {
    /// RFC 3339.
    pub at: String,
    pub generation: Option<i64>,
    pub observed_generation: Option<i64>,
    /// The condition's status (`True`, ...), or the rollout's state
    /// (`Progressing`, `Complete`, `Failed`); `None`: not reported yet.
    pub status: Option<String>,
    pub reason: Option<String>,
    pub message: Option<String>,
    /// Rollouts: the replica counts judged.
    pub detail: Option<Value>,
    pub met: bool,
}

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

/// The result of every `opentofu.*` operation: what the CLI reports of the
/// module's plan, outputs and state after the operation.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TofuResult {
    /// `<name>@<version>` of the module package.
    pub module: String,
    pub workspace: String,
    /// The backend type the state lives in.
    pub backend: String,
    /// The CLI's own version (`terraform_version` of its JSON).
    pub cli_version: Option<String>,
    /// `opentofu.plan`: the saved plan (and an apply without one: the plan
    /// it made and applied).
    pub plan: Option<TofuPlan>,
    /// The root module's outputs; a sensitive output's value is `null`.
    pub outputs: BTreeMap<String, TofuOutput>,
    /// The state version after the operation.
    pub state: Option<TofuStateVersion>,
    /// The managed resources in the state, with the ids their providers
    /// gave them (at most 1000).
    pub resources: Vec<TofuResource>,
}

/// A saved plan: its artifact (the reference an apply names and a control
/// plane approves) and what it changes.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TofuPlan {
    /// `sha256:<hex>` of the plan file, stored as an input artifact (and as
    /// the output `plan.tfplan`).
    pub artifact: Option<String>,
    /// Counted as the CLI counts: a replacement adds one and destroys one.
    pub add: u32,
    pub change: u32,
    pub destroy: u32,
    /// Each resource the plan acts on and its actions (at most 1000).
    pub changes: Vec<TofuChange>,
    /// Whether the plan changes anything (resources or outputs).
    pub has_changes: bool,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TofuChange {
    pub address: String,
    /// `create`, `update`, `delete`, `read`, `no-op`, in the CLI's order.
    pub actions: Vec<String>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TofuOutput {
    pub sensitive: bool,
    /// `null` when sensitive.
    pub value: Value,
}

/// A state version: which state (lineage) and which write of it (serial),
/// and the digest of its content (never the content).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TofuStateVersion {
    pub lineage: String,
    pub serial: u64,
    pub sha256: String,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TofuResource {
    pub address: String,
    #[serde(rename = "type")]
    pub kind: String,
    /// The provider's id of the object (`None`: the resource has none).
    pub id: Option<String>,
}

/// Whether `result` is a result of `operation`; the problem when it is not.
/// Operations whose runner has not landed have no documented result yet.
pub fn check_result(operation: Operation, result: &Value) -> Result<(), String> {
    match operation.runner_type() {
        RunnerType::Verification => {
            let evidence: VerificationEvidence = serde_path_to_error::deserialize(result)
                .map_err(|error| format!("{}: {}", error.path(), error.inner()))?;
            if evidence.operation != operation.as_str() {
                return Err(format!(
                    "operation: `{}`, not `{operation}`",
                    evidence.operation
                ));
            }
            if evidence.passed == evidence.recommended_failure_category.is_some() {
                return Err(
                    "recommended_failure_category: set exactly when the verification did not pass"
                        .into(),
                );
            }
            Ok(())
        }
        RunnerType::Ssh => match operation {
            Operation::SshCommandRun => shaped::<SshCommandResult>(result),
            Operation::SshFileUpload | Operation::SshFileDownload => {
                shaped::<SshTransferResult>(result)
            }
            Operation::SshServiceRestart => shaped::<SshServiceResult>(result),
            _ => shaped::<SshFactsResult>(result),
        },
        RunnerType::Ansible => shaped::<AnsibleResult>(result),
        RunnerType::Kubernetes => shaped::<KubernetesResult>(result),
        RunnerType::Helm => shaped::<HelmResult>(result),
        RunnerType::Opentofu => shaped::<TofuResult>(result),
    }
}

/// Whether `result` reads as a `T`; the path and reason when it does not.
fn shaped<T: serde::de::DeserializeOwned>(result: &Value) -> Result<(), String> {
    serde_path_to_error::deserialize::<_, T>(result)
        .map(drop)
        .map_err(|error| format!("{}: {}", error.path(), error.inner()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn evidence(passed: bool, recommended: Value) -> Value {
        json!({
            "operation": "verify.tcp.connect", "passed": passed,
            "recommended_failure_category": recommended,
            "samples": [{"n": 1, "at": "2026-12-01T00:00:00Z", "latency_ms": 3, "reached": true,
                         "observed": {"peer": "127.0.0.1:5432"}, "assertions": [], "error": null}]
        })
    }

    #[test]
    fn a_verification_result_has_the_documented_shape() {
        let op = Operation::VerifyTcpConnect;
        assert_eq!(check_result(op, &evidence(true, Value::Null)), Ok(()));
        assert_eq!(
            check_result(op, &evidence(false, json!("target_unreachable"))),
            Ok(())
        );
        assert!(check_result(op, &evidence(false, Value::Null)).is_err());
        assert!(
            check_result(Operation::VerifyHttpEndpoint, &evidence(true, Value::Null))
                .unwrap_err()
                .contains("operation")
        );
        let mut extra = evidence(true, Value::Null);
        extra["samples"][0]["surprise"] = json!(1);
        assert!(check_result(op, &extra).unwrap_err().contains("samples[0]"));
        assert!(check_result(op, &json!({"ok": true})).is_err());
    }
}
