//! The inputs of the ssh runner's operations, and their union: what the runner
//! SDK hands that runner's executor.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::OperationInputs;
use super::Vars;
use super::{Governed, KeyKind};
use crate::contract::{Operation, Problem};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SshCommand {
    /// An allowlisted command template; there is no generic shell.
    pub template_id: String,
    #[serde(default)]
    pub args: Vars,
    #[serde(default)]
    pub sudo: bool,
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
pub struct SshUpload {
    pub template_id: String,
    pub source_artifact: String,
    pub destination: String,
    #[serde(default)]
    pub mode: Option<String>,
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
pub struct SshDownload {
    pub template_id: String,
    pub path: String,
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
pub struct SshServiceRestart {
    pub template_id: String,
    pub service: String,
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
pub struct SshFacts {
    pub template_id: String,
    #[serde(default)]
    pub facts: Vec<String>,
    /// The account on the nodes (required to connect).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// A `{"$secret": ...}` reference to its OpenSSH private key (required
    /// to connect; a literal is refused by name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_key: Option<Value>,
}

super::runner_inputs! {
    /// The inputs of the ssh runner's operations.
    SshInputs {
    SshCommandRun(SshCommand),
    SshFileUpload(SshUpload),
    SshFileDownload(SshDownload),
    SshServiceRestart(SshServiceRestart),
    SshSystemFactCollect(SshFacts),
    }
}

impl super::Vocabulary for SshInputs {
    /// Nothing besides its targets.
    fn target_keys(&self, _tenant: &str) -> Vec<(KeyKind, String)> {
        Vec::new()
    }

    /// Its template, and the template's fields it fills.
    fn governed(&self) -> Vec<Governed<'_>> {
        fn field<'a>(template: &'a str, field: &'static str, value: &str) -> Governed<'a> {
            Governed::SshField {
                template,
                field,
                value: value.into(),
            }
        }
        vec![match self {
            Self::SshCommandRun(command) => Governed::SshCommand(command),
            Self::SshFileUpload(upload) => {
                field(&upload.template_id, "destination", &upload.destination)
            }
            Self::SshFileDownload(download) => field(&download.template_id, "path", &download.path),
            Self::SshServiceRestart(restart) => {
                field(&restart.template_id, "service", &restart.service)
            }
            Self::SshSystemFactCollect(facts) => Governed::SshFacts(facts),
        }]
    }

    fn result_problem(operation: Operation, result: &Value) -> Result<(), String> {
        result_problem(operation, result)
    }
}

/// What intake checks of an ssh operation's inputs beyond their shape:
/// it names an allowlisted template.
pub(super) fn problems_of(inputs: &OperationInputs) -> Vec<Problem> {
    use OperationInputs as I;
    let template_id = match inputs {
        I::SshCommandRun(command) => &command.template_id,
        I::SshFileUpload(upload) => &upload.template_id,
        I::SshFileDownload(download) => &download.template_id,
        I::SshServiceRestart(restart) => &restart.template_id,
        I::SshSystemFactCollect(facts) => &facts.template_id,
        _ => return Vec::new(),
    };
    let valid = !template_id.is_empty()
        && template_id.chars().all(|character| {
            character.is_ascii_alphanumeric() || matches!(character, '.' | '_' | '-')
        });
    if valid {
        return Vec::new();
    }
    vec![Problem::new(
        "inputs.template_id",
        "ssh operations run allowlisted command templates only: `template_id` is required ([A-Za-z0-9._-]+)",
    )]
}

// Results (docs/OPERATIONS.md): what its executor reports.

/// The result of `ssh.command.run`: what ran, as whom, and how it ended on
/// each node, with each node's stdout and stderr as outputs of their own
/// (the attempt's stdout and stderr logs hold every node's, interleaved).
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
    /// The output holding the command's stdout on this node (its first
    /// MiB); `None` when it did not run, or the attempt's outputs ran out.
    #[serde(default)]
    pub stdout: Option<String>,
    /// The output holding its stderr (its last MiB).
    #[serde(default)]
    pub stderr: Option<String>,
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
    /// The output holding the restart command's stdout on this node (its
    /// first MiB); `None` when it did not run, or the attempt's outputs ran
    /// out.
    #[serde(default)]
    pub stdout: Option<String>,
    /// The output holding its stderr (its last MiB).
    #[serde(default)]
    pub stderr: Option<String>,
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
    /// The output holding the fact command's stdout on this node; `None`
    /// when it did not run, or the attempt's outputs ran out.
    #[serde(default)]
    pub stdout: Option<String>,
    /// The output holding its stderr.
    #[serde(default)]
    pub stderr: Option<String>,
}
/// Whether `result` is a result of `operation`; the problem when not.
pub(super) fn result_problem(operation: Operation, result: &Value) -> Result<(), String> {
    match operation {
        Operation::SshCommandRun => super::shaped::<SshCommandResult>(result),
        Operation::SshFileUpload | Operation::SshFileDownload => {
            super::shaped::<SshTransferResult>(result)
        }
        Operation::SshServiceRestart => super::shaped::<SshServiceResult>(result),
        _ => super::shaped::<SshFactsResult>(result),
    }
}
