use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{remote, SshConfig};
use crate::contract::inputs::{OperationInputs, SshCommand};
use crate::contract::results::{SshCommandResult, SshNodeResult};
use crate::contract::{FailureCategory, Operation, RunnerType, Target};
use crate::policy::ssh::{is_host, is_user_name};
use crate::policy::{SshTemplate, Sudo};
use crate::runner::tool::{self, StopCause, ToolCommand, Workdir};
use crate::runner::{Assignment, ExecutionContext, ExecutionOutcome, Executor};

/// Where sudo is on a node.
const SUDO: &str = "/usr/bin/sudo";
/// Key types a node binding's `host_key` may have.
const HOST_KEY_TYPES: [&str; 6] = [
    "ssh-ed25519",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "rsa-sha2-512",
    "ssh-rsa",
];
/// The most of the client's own diagnostics a failure message quotes.
const MAX_DIAGNOSTICS: usize = 2048;

/// The ssh runner's executor.
pub struct SshRunner {
    config: SshConfig,
}

impl SshRunner {
    pub fn new(config: SshConfig) -> Self {
        Self { config }
    }
}

impl Executor for SshRunner {
    fn runner_type(&self) -> RunnerType {
        RunnerType::Ssh
    }

    fn operations(&self) -> Vec<Operation> {
        vec![Operation::SshCommandRun]
    }

    fn capabilities(&self) -> Vec<String> {
        vec!["ssh".into()]
    }

    async fn execute(&self, assignment: Assignment, context: ExecutionContext) -> ExecutionOutcome {
        let spec = &assignment.spec;
        let command = match OperationInputs::parse(spec.operation, &spec.inputs) {
            Ok(OperationInputs::SshCommandRun(command)) => command,
            Ok(_) => return refuse(format!("{} is not run by this runner", spec.operation)),
            Err((path, message)) => return refuse(format!("inputs.{path}: {message}")),
        };
        let plan = match self.plan(&command, &spec.targets) {
            Ok(plan) => plan,
            Err(refusal) => return refusal,
        };
        let workdir = match Workdir::new(&context.tools().work_root) {
            Ok(workdir) => workdir,
            Err(error) => {
                return ExecutionOutcome::failed(
                    FailureCategory::Infrastructure,
                    format!("no working directory for the ssh client: {error}"),
                    None,
                )
            }
        };
        self.run(plan, &workdir, &context).await
    }
}

/// Everything decided before anything connects.
struct Plan {
    template_id: String,
    argv: Vec<String>,
    sudo_as: Option<String>,
    user: String,
    private_key: String,
    nodes: Vec<Node>,
}

/// One node binding: where to connect and the one host key accepted.
struct Node {
    target: String,
    host: String,
    port: u16,
    host_key: String,
}

impl SshRunner {
    /// The template's argument vector, the login and every node's host key:
    /// a JobSpec that lacks one is refused before any connection is made.
    fn plan(&self, command: &SshCommand, targets: &[Target]) -> Result<Plan, ExecutionOutcome> {
        let policy = self.config.policy.current();
        let Some(template) = policy.ssh_template(&command.template_id) else {
            return Err(ExecutionOutcome::failed(
                FailureCategory::Policy,
                format!(
                    "inputs.template_id: `{}` is not in the operator's ssh_templates",
                    command.template_id
                ),
                None,
            ));
        };
        // The runner SDK checked the values against the policy; checked
        // again here, where they become words, so nothing unchecked does.
        let problems = template.check_args(&command.args);
        if !problems.is_empty() {
            return Err(ExecutionOutcome::failed(
                FailureCategory::Policy,
                format!("inputs.args: {}", problems.join("; ")),
                None,
            ));
        }
        let (argv, sudo_as) = argv(template, &command.args);
        let user = match command.user.as_deref() {
            Some(user) if is_user_name(user) => user.to_owned(),
            Some(user) => return Err(refuse(format!("inputs.user: `{user}` is not a user name"))),
            None => return Err(refuse("inputs.user: the account on the nodes is required")),
        };
        let private_key = match &command.private_key {
            Some(Value::String(key)) if !key.trim().is_empty() => {
                let mut key = key.clone();
                if !key.ends_with('\n') {
                    key.push('\n');
                }
                key
            }
            _ => {
                return Err(refuse(
                    "inputs.private_key: a {\"$secret\": ...} reference to the account's OpenSSH private key is required",
                ))
            }
        };
        if targets.is_empty() {
            return Err(refuse("targets: the nodes to run on are required"));
        }
        let nodes = targets
            .iter()
            .enumerate()
            .map(|(index, target)| node(index, target))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Plan {
            template_id: command.template_id.clone(),
            argv,
            sudo_as,
            user,
            private_key,
            nodes,
        })
    }

    /// Runs the plan on each node in turn; the first node that fails ends
    /// it (the rest are not touched).
    async fn run(
        &self,
        plan: Plan,
        workdir: &Workdir,
        context: &ExecutionContext,
    ) -> ExecutionOutcome {
        let key_file = match workdir.secret_file("identity", &plan.private_key) {
            Ok(path) => path,
            Err(error) => {
                return ExecutionOutcome::failed(
                    FailureCategory::Infrastructure,
                    format!("cannot write the key file: {error}"),
                    None,
                )
            }
        };
        let mut result = SshCommandResult {
            template_id: plan.template_id.clone(),
            argv: plan.argv.clone(),
            sudo_as: plan.sudo_as.clone(),
            nodes: Vec::new(),
        };
        let total = plan.nodes.len();
        for (index, node) in plan.nodes.iter().enumerate() {
            let sudo = plan
                .sudo_as
                .as_deref()
                .map_or(String::new(), |user| format!(" through sudo as {user}"));
            context.progress(
                format!(
                    "node {}/{total} {}: {}{sudo}",
                    index + 1,
                    node.target,
                    plan.argv[0]
                ),
                u8::try_from(index * 100 / total).ok(),
            );
            let (outcome, node_result) = self
                .run_on(&plan, node, index, &key_file, workdir, context)
                .await;
            result.nodes.push(node_result);
            if let Some((category, message)) = outcome {
                return ExecutionOutcome::failed(
                    category,
                    message,
                    serde_json::to_value(&result).ok(),
                );
            }
        }
        let value = serde_json::to_value(&result).unwrap_or(Value::Null);
        ExecutionOutcome::succeeded(
            format!("`{}` exited 0 on {total} node(s)", plan.template_id),
            value,
        )
    }

    /// One node: how it ended, and why it failed (if it did).
    async fn run_on(
        &self,
        plan: &Plan,
        node: &Node,
        index: usize,
        key_file: &Path,
        workdir: &Workdir,
        context: &ExecutionContext,
    ) -> (Option<(FailureCategory, String)>, SshNodeResult) {
        let destination = format!("{}@{}:{}", plan.user, node.host, node.port);
        let mut node_result = SshNodeResult {
            target: node.target.clone(),
            destination: destination.clone(),
            exit_code: None,
            duration_ms: 0,
            error: None,
        };
        let known_hosts = workdir.path().join(format!("known_hosts.{index}"));
        let diagnostics = workdir.path().join(format!("ssh.{index}.log"));
        let host_entry = if node.port == 22 {
            node.host.clone()
        } else {
            format!("[{}]:{}", node.host, node.port)
        };
        let failure = |category, message: String, result: &mut SshNodeResult| {
            result.error = Some(message.clone());
            Some((category, format!("{}: {message}", node.target)))
        };
        if let Err(error) =
            std::fs::write(&known_hosts, format!("{host_entry} {}\n", node.host_key))
        {
            let message = format!("cannot write known_hosts: {error}");
            return (
                failure(FailureCategory::Infrastructure, message, &mut node_result),
                node_result,
            );
        }
        let command =
            self.client_command(plan, node, key_file, &known_hosts, &diagnostics, workdir);
        let exit = match tool::run(context, workdir, command).await {
            Ok(exit) => exit,
            Err(error) => {
                return (
                    failure(
                        FailureCategory::Infrastructure,
                        error.to_string(),
                        &mut node_result,
                    ),
                    node_result,
                )
            }
        };
        node_result.duration_ms = exit.duration_ms;
        if let Some(cause) = exit.stopped {
            let (category, message) = match cause {
                StopCause::Stopped => (FailureCategory::Cancelled, "stopped".to_owned()),
                StopCause::Deadline => (
                    FailureCategory::Timeout,
                    "stopped at the start-to-close deadline".to_owned(),
                ),
            };
            return (failure(category, message, &mut node_result), node_result);
        }
        let said = client_diagnostics(&diagnostics);
        match exit.code {
            Some(0) => {
                node_result.exit_code = Some(0);
                (None, node_result)
            }
            // 255 with words of its own: the client failed, not the command.
            Some(255) if !said.is_empty() => {
                let category = if said.contains("Host key verification failed")
                    || said.contains("REMOTE HOST IDENTIFICATION HAS CHANGED")
                {
                    FailureCategory::Contract
                } else {
                    FailureCategory::TargetUnreachable
                };
                let message = format!("ssh to {destination} failed: {said}");
                (failure(category, message, &mut node_result), node_result)
            }
            Some(code) => {
                node_result.exit_code = Some(code);
                let message = format!("`{}` exited with code {code}", plan.argv[0]);
                (
                    failure(FailureCategory::RunnerError, message, &mut node_result),
                    node_result,
                )
            }
            None => {
                let message = format!(
                    "the ssh client ended by signal {}",
                    exit.signal.unwrap_or_default()
                );
                (
                    failure(FailureCategory::RunnerError, message, &mut node_result),
                    node_result,
                )
            }
        }
    }

    /// The OpenSSH client, configured here and nowhere else: no config
    /// file, no agent, no forwarding, no multiplexing, only this key and
    /// this host key.
    fn client_command(
        &self,
        plan: &Plan,
        node: &Node,
        key_file: &Path,
        known_hosts: &Path,
        diagnostics: &Path,
        workdir: &Workdir,
    ) -> ToolCommand {
        let option = |text: String| ["-o".to_owned(), text];
        let mut args: Vec<String> = vec!["-F".into(), "/dev/null".into()];
        for text in [
            "BatchMode=yes".to_owned(),
            "StrictHostKeyChecking=yes".to_owned(),
            format!("UserKnownHostsFile={}", known_hosts.display()),
            "GlobalKnownHostsFile=/dev/null".to_owned(),
            "UpdateHostKeys=no".to_owned(),
            "IdentitiesOnly=yes".to_owned(),
            "IdentityAgent=none".to_owned(),
            format!(
                "ConnectTimeout={}",
                self.config.connect_timeout.as_secs().max(1)
            ),
            "ServerAliveInterval=5".to_owned(),
            "ServerAliveCountMax=3".to_owned(),
            "ControlMaster=no".to_owned(),
            "ControlPath=none".to_owned(),
            "ForwardAgent=no".to_owned(),
            "ForwardX11=no".to_owned(),
            "ClearAllForwardings=yes".to_owned(),
            // No terminal: stdout and stderr stay apart. Under sudo the
            // watchdog's signal reaches sudo (it keeps the login user's
            // real uid) and sudo passes it on to the command.
            "RequestTTY=no".to_owned(),
            "PermitLocalCommand=no".to_owned(),
            "LogLevel=ERROR".to_owned(),
        ] {
            args.extend(option(text));
        }
        args.extend([
            "-E".to_owned(),
            diagnostics.display().to_string(),
            "-i".to_owned(),
            key_file.display().to_string(),
            "-p".to_owned(),
            node.port.to_string(),
            "-l".to_owned(),
            plan.user.clone(),
            "--".to_owned(),
            node.host.clone(),
            remote::command_line(&plan.argv),
        ]);
        ToolCommand::new(PathBuf::from(&self.config.client))
            .base_env(workdir)
            .hold_stdin()
            .args(args)
    }
}

/// The words the node runs: sudo first when the template says so, then the
/// program, its fixed arguments and the typed ones in the template's order.
fn argv(
    template: &SshTemplate,
    values: &crate::contract::inputs::Vars,
) -> (Vec<String>, Option<String>) {
    let mut argv = Vec::new();
    let sudo_as = match &template.sudo {
        Sudo::None => None,
        Sudo::As(user) => {
            argv.extend([
                SUDO.to_owned(),
                "-n".into(),
                "-u".into(),
                user.clone(),
                "--".into(),
            ]);
            Some(user.clone())
        }
    };
    argv.push(template.program.clone());
    argv.extend(template.fixed_args.iter().cloned());
    for spec in &template.args {
        match values.get(&spec.name) {
            Some(Value::String(text)) => argv.push(text.clone()),
            Some(Value::Number(number)) => argv.push(number.to_string()),
            Some(other) => argv.push(other.to_string()),
            None => {}
        }
    }
    (argv, sudo_as)
}

/// A node binding: the target's address (else its id) as the host, its
/// `port` attribute (22), and its `host_key`: without one, nothing connects.
fn node(index: usize, target: &Target) -> Result<Node, ExecutionOutcome> {
    let field = format!("targets[{index}]");
    let host = target.address.clone().unwrap_or_else(|| target.id.clone());
    if !is_host(&host) {
        return Err(refuse(format!(
            "{field}.address: `{host}` is not a host name or an IP address"
        )));
    }
    let port = match target.attributes.get("port") {
        None => 22,
        Some(port) => match port.parse::<u16>() {
            Ok(port) if port > 0 => port,
            _ => {
                return Err(refuse(format!(
                    "{field}.attributes.port: `{port}` is not a port"
                )))
            }
        },
    };
    let Some(host_key) = target.attributes.get("host_key") else {
        return Err(refuse(format!(
            "{field}: node `{}` has no known host key; set attributes.host_key to its known_hosts key (`ssh-ed25519 AAAA...`): unknown host keys are refused",
            target.id
        )));
    };
    let words: Vec<&str> = host_key.split_whitespace().collect();
    let valid = matches!(words.as_slice(), [kind, blob] | [kind, blob, _]
        if HOST_KEY_TYPES.contains(kind)
            && blob.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=')));
    if !valid {
        return Err(refuse(format!(
            "{field}.attributes.host_key: not a known_hosts key (`<type> <base64>`, type one of {})",
            HOST_KEY_TYPES.join(", ")
        )));
    }
    Ok(Node {
        target: target.id.clone(),
        host,
        port,
        host_key: format!("{} {}", words[0], words[1]),
    })
}

/// The client's own words about why it failed, bounded, on one line.
fn client_diagnostics(path: &Path) -> String {
    let text = std::fs::read(path).unwrap_or_default();
    let start = text.len().saturating_sub(MAX_DIAGNOSTICS);
    String::from_utf8_lossy(&text[start..])
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

fn refuse(message: impl Into<String>) -> ExecutionOutcome {
    ExecutionOutcome::failed(FailureCategory::Contract, message, None)
}
