//! The inputs of the ssh runner's operations, and their union: what the runner
//! SDK hands that runner's executor.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::OperationInputs;
use super::Vars;
use crate::contract::Problem;

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
