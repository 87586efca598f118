use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::SshConfig;
use crate::artifacts::inputs::InputRef;
use crate::contract::ops::{
    SshCommandResult, SshFactsNode, SshFactsResult, SshNodeResult, SshServiceNode,
    SshServiceResult, SshTransferNode, SshTransferResult,
};
use crate::contract::ops::{SshInputs, SshInputs as I, Vars};
use crate::contract::{FailureCategory, RetentionClass, RunnerType, Target};
use crate::policy::ssh::{ArgKind, HostKey};
use crate::policy::{OperatorPolicy, SshTemplate, Sudo};
use crate::runner::kit::node::{self, Binding};
use crate::runner::kit::remote;
use crate::runner::tool::{self, StopCause, ToolCommand, ToolExit, Workdir};
use crate::runner::LogStream;
use crate::runner::{Assignment, ExecutionContext, ExecutionOutcome, Executor, Failure};

/// Where sudo is on a node.
const SUDO: &str = "/usr/bin/sudo";
/// The most of the client's own diagnostics a failure message quotes.
const MAX_DIAGNOSTICS: usize = 2048;
/// The most of a status or fact command's output kept.
const MAX_CAPTURE: usize = 4096;

/// How much of each stream of a command a node's logs keep: the first MiB
/// of its stdout, the last of its stderr.
const NODE_LOG_CAPTURE: usize = 1024 * 1024;
/// The largest file `ssh.file.download` takes (an output's bound).
const MAX_DOWNLOAD_BYTES: u64 = crate::contract::outputs::MAX_OUTPUT_BYTES;
/// The mode an uploaded file gets when the JobSpec names none.
const DEFAULT_MODE: &str = "0644";
/// The facts `ssh.system.fact.collect` knows, each uname's word for it, in
/// the order `uname -s -n -r -m` prints them.
const FACTS: [&str; 4] = ["os", "hostname", "kernel", "arch"];

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
    type Inputs = SshInputs;

    fn runner_type(&self) -> RunnerType {
        RunnerType::Ssh
    }

    async fn preflight(&self) -> Result<(), String> {
        // OpenSSH's client (KnownHostsCommand needs 8.5) and its sftp.
        let ssh = std::path::Path::new("ssh");
        crate::runner::preflight::tool_version("OpenSSH", ssh, &["-V"], &["OpenSSH_"], (8, 5), 100)
            .await?;
        crate::runner::preflight::on_path("sftp").map(|_| ())
    }

    fn capabilities(&self) -> Vec<String> {
        vec!["ssh".into(), "sftp".into()]
    }

    async fn execute(
        &self,
        assignment: Assignment,
        inputs: SshInputs,
        context: ExecutionContext,
    ) -> ExecutionOutcome {
        let spec = &assignment.spec;
        let plan = match Self::plan(context.policy(), &inputs, &spec.targets) {
            Ok(plan) => plan,
            Err(refusal) => return refusal.into(),
        };
        let workdir = match Workdir::for_tools(context.tools()) {
            Ok(workdir) => workdir,
            Err(error) => {
                return Failure::infrastructure(format!(
                    "no working directory for the ssh client: {error}"
                ))
                .into()
            }
        };
        self.run(plan, &workdir, &context).await
    }
}

/// Everything decided before anything connects.
struct Plan {
    template_id: String,
    /// The words the node runs (for a transfer: its SFTP server).
    argv: Vec<String>,
    sudo_as: Option<String>,
    user: String,
    private_key: String,
    nodes: Vec<Node>,
    work: Work,
}

/// What a plan does on each node.
enum Work {
    /// `ssh.command.run`: `argv`.
    Command,
    /// `ssh.file.upload`: the checked artifact to `path`, given `mode`.
    Upload {
        source: InputRef,
        path: String,
        mode: String,
    },
    /// `ssh.file.download`: `path` into an output of the attempt.
    Download { path: String },
    /// `ssh.service.restart`: `argv`, then `status_argv`.
    Restart {
        service: String,
        status_argv: Vec<String>,
    },
    /// `ssh.system.fact.collect`: `argv` (uname), the facts kept.
    Facts { wanted: Vec<String> },
}

/// One node binding: where to connect and the one host key accepted.
struct Node {
    target: String,
    binding: Binding,
}

/// A remote program that exited: its code, the first bytes of its
/// stdout and the last of its stderr (as many as asked).
struct Ran {
    code: i32,
    duration_ms: u64,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

/// The files one node's client reads and writes in the working directory.
struct Session<'a> {
    node: &'a Node,
    key_file: &'a Path,
    known_hosts: PathBuf,
    /// Where a node pinned by fingerprint has its pin.
    pins: PathBuf,
    /// The `execplane` binary (`known-host` checks a pinned key).
    execplane: PathBuf,
    diagnostics: PathBuf,
    destination: String,
}

impl SshRunner {
    /// The template, its argument vector, the login and every node's host
    /// key: a JobSpec that lacks one is refused before any connection is
    /// made. The template is the one the SDK checked the inputs against.
    fn plan(
        policy: &OperatorPolicy,
        inputs: &SshInputs,
        targets: &[Target],
    ) -> Result<Plan, Failure> {
        let (template_id, user, private_key) = match inputs {
            I::SshCommandRun(c) => (&c.template_id, &c.user, &c.private_key),
            I::SshFileUpload(u) => (&u.template_id, &u.user, &u.private_key),
            I::SshFileDownload(d) => (&d.template_id, &d.user, &d.private_key),
            I::SshServiceRestart(r) => (&r.template_id, &r.user, &r.private_key),
            I::SshSystemFactCollect(f) => (&f.template_id, &f.user, &f.private_key),
        };
        let Some(template) = policy.ssh_template(template_id) else {
            return Err(Failure::policy(format!(
                "inputs.template_id: `{template_id}` is not in the operator's ssh_templates"
            )));
        };
        let (argv, sudo_as, work) = work(template, inputs)?;
        let (user, private_key) = node::login(user.as_deref(), private_key.as_ref())?;
        let nodes = node::bindings(targets)?
            .into_iter()
            .zip(targets)
            .map(|(binding, target)| Node {
                target: target.id.clone(),
                binding,
            })
            .collect();
        Ok(Plan {
            template_id: template_id.clone(),
            argv,
            sudo_as,
            user,
            private_key,
            nodes,
            work,
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
                return Failure::infrastructure(format!("cannot write the key file: {error}"))
                    .into()
            }
        };
        let upload = match &plan.work {
            Work::Upload { source, .. } => match workdir.fetch_input(context, source).await {
                Ok(path) => Some(path),
                Err(error) => {
                    let message = format!("inputs.source_artifact: {error}");
                    return Failure::new(error.category(), message).into();
                }
            },
            _ => None,
        };
        let mut run = Run {
            config: &self.config,
            plan: &plan,
            workdir,
            context,
            report: Report::new(&plan),
        };
        let total = plan.nodes.len();
        for (index, node) in plan.nodes.iter().enumerate() {
            let sudo = plan
                .sudo_as
                .as_deref()
                .map_or(String::new(), |user| format!(" through sudo as {user}"));
            context.progress(
                format!(
                    "node {}/{total} {}: {} {}{sudo}",
                    index + 1,
                    node.target,
                    plan.work.verb(),
                    program_of(&plan.argv)
                ),
                u8::try_from(index * 100 / total).ok(),
            );
            let failure = match run.session(index, node, &key_file) {
                Ok(session) => run.on_node(&session, index, upload.as_deref()).await,
                Err(failure) => return failure.into(),
            };
            if let Some(failure) = failure {
                let message = format!("{}: {}", node.target, failure.message);
                return Failure::new(failure.category, message).outcome(Some(run.report.value()));
            }
        }
        ExecutionOutcome::succeeded(
            format!(
                "`{}`: {} on {total} node(s)",
                plan.template_id,
                plan.work.done()
            ),
            run.report.value(),
        )
    }
}

/// One attempt's work on its nodes, and its result as it grows.
struct Run<'a> {
    config: &'a SshConfig,
    plan: &'a Plan,
    workdir: &'a Workdir,
    context: &'a ExecutionContext,
    report: Report,
}

impl<'a> Run<'a> {
    /// The node's client files: its known_hosts and pins written.
    fn session(
        &self,
        index: usize,
        node: &'a Node,
        key_file: &'a Path,
    ) -> Result<Session<'a>, Failure> {
        let workdir = self.workdir.path();
        let session = Session {
            node,
            key_file,
            known_hosts: workdir.join(format!("known_hosts.{index}")),
            pins: workdir.join(format!("pins.{index}")),
            execplane: self.context.tools().shim.clone(),
            diagnostics: workdir.join(format!("ssh.{index}.log")),
            destination: format!(
                "{}@{}:{}",
                self.plan.user, node.binding.address, node.binding.port
            ),
        };
        let (known, pinned) = session.known_hosts_lines();
        std::fs::write(&session.known_hosts, known)
            .and_then(|()| std::fs::write(&session.pins, pinned))
            .map_err(|error| {
                Failure::infrastructure(format!("cannot write known_hosts: {error}"))
            })?;
        Ok(session)
    }

    /// The plan's work on one node.
    async fn on_node(
        &mut self,
        session: &Session<'_>,
        index: usize,
        upload: Option<&Path>,
    ) -> Option<Failure> {
        match &self.plan.work {
            Work::Command => self.command(session, index).await,
            Work::Upload { path, mode, .. } => {
                let local = upload.unwrap_or(Path::new("/nonexistent"));
                self.upload(session, index, local, path, mode).await
            }
            Work::Download { path } => self.download(session, index, path).await,
            Work::Restart { status_argv, .. } => self.restart(session, index, status_argv).await,
            Work::Facts { wanted } => self.facts(session, index, wanted).await,
        }
    }

    /// `ssh.command.run` on one node, its stdout and stderr stored as
    /// outputs of their own.
    async fn command(&mut self, session: &Session<'_>, index: usize) -> Option<Failure> {
        let ran = self
            .remote(session, &self.plan.argv, NODE_LOG_CAPTURE)
            .await;
        let mut node = SshNodeResult {
            target: session.node.target.clone(),
            destination: session.destination.clone(),
            exit_code: None,
            duration_ms: 0,
            error: None,
            stdout: None,
            stderr: None,
        };
        let failure = match ran {
            Ok(ran) => {
                node.exit_code = Some(ran.code);
                node.duration_ms = ran.duration_ms;
                node.stdout = self.node_log(index, "stdout", &ran.stdout).await;
                node.stderr = self.node_log(index, "stderr", &ran.stderr).await;
                exited_non_zero(&self.plan.argv, ran.code)
            }
            Err(failure) => Some(failure),
        };
        node.error = failure.as_ref().map(|failure| failure.message.clone());
        if let Report::Command(result) = &mut self.report {
            result.nodes.push(node);
        }
        failure
    }

    /// `bytes` of the `index`th node's `stream` stored as the output
    /// `node-<n>.<stream>.log` (masked as every output is): its name, or
    /// none when it could not be stored (the attempt's outputs ran out),
    /// which the log says.
    async fn node_log(&self, index: usize, stream: &str, bytes: &[u8]) -> Option<String> {
        let name = format!("node-{}.{stream}.log", index + 1);
        let path = self.workdir.path().join(&name);
        let stored = match std::fs::write(&path, bytes) {
            Ok(()) => self
                .context
                .store_output(&path, &name, RetentionClass::Logs)
                .await
                .map_err(|error| error.to_string()),
            Err(error) => Err(error.to_string()),
        };
        match stored {
            Ok(_) => Some(name),
            Err(reason) => {
                self.context.log(
                    LogStream::Stderr,
                    format!("execplane: the node's {stream} was not stored: {reason}\n"),
                );
                None
            }
        }
    }

    /// `ssh.service.restart` on one node: the restart (its stdout and
    /// stderr stored as outputs of their own), then the status.
    async fn restart(
        &mut self,
        session: &Session<'_>,
        index: usize,
        status_argv: &[String],
    ) -> Option<Failure> {
        let mut node = SshServiceNode {
            target: session.node.target.clone(),
            destination: session.destination.clone(),
            restart_exit_code: None,
            status_exit_code: None,
            status: None,
            active: false,
            duration_ms: 0,
            error: None,
            stdout: None,
            stderr: None,
        };
        let failure = async {
            let restarted = self
                .remote(session, &self.plan.argv, NODE_LOG_CAPTURE)
                .await?;
            node.restart_exit_code = Some(restarted.code);
            node.duration_ms = restarted.duration_ms;
            node.stdout = self.node_log(index, "stdout", &restarted.stdout).await;
            node.stderr = self.node_log(index, "stderr", &restarted.stderr).await;
            if let Some(failure) = exited_non_zero(&self.plan.argv, restarted.code) {
                return Err(failure);
            }
            let status = self.remote(session, status_argv, MAX_CAPTURE).await?;
            node.duration_ms += status.duration_ms;
            node.status_exit_code = Some(status.code);
            node.status = Some(
                String::from_utf8_lossy(&status.stdout)
                    .trim_end()
                    .to_owned(),
            );
            node.active = status.code == 0;
            if !node.active {
                return Err(Failure::new(
                    FailureCategory::RunnerError,
                    format!(
                        "restarted, but its status command exited with code {} (not active)",
                        status.code
                    ),
                ));
            }
            Ok(())
        }
        .await
        .err();
        node.error = failure.as_ref().map(|failure| failure.message.clone());
        if let Report::Service(result) = &mut self.report {
            result.nodes.push(node);
        }
        failure
    }

    /// `ssh.system.fact.collect` on one node: uname's four words, the
    /// asked ones kept; its stdout and stderr stored as outputs of their own.
    async fn facts(
        &mut self,
        session: &Session<'_>,
        index: usize,
        wanted: &[String],
    ) -> Option<Failure> {
        let mut node = SshFactsNode {
            target: session.node.target.clone(),
            destination: session.destination.clone(),
            facts: BTreeMap::new(),
            duration_ms: 0,
            error: None,
            stdout: None,
            stderr: None,
        };
        let failure = async {
            let ran = self.remote(session, &self.plan.argv, MAX_CAPTURE).await?;
            node.duration_ms = ran.duration_ms;
            node.stdout = self.node_log(index, "stdout", &ran.stdout).await;
            node.stderr = self.node_log(index, "stderr", &ran.stderr).await;
            if let Some(failure) = exited_non_zero(&self.plan.argv, ran.code) {
                return Err(failure);
            }
            let text = String::from_utf8_lossy(&ran.stdout);
            let words: Vec<&str> = text.split_whitespace().collect();
            if words.len() != FACTS.len() {
                return Err(Failure::new(
                    FailureCategory::RunnerError,
                    format!(
                        "`{}` printed {} words, not the {} of `uname -s -n -r -m`",
                        program_of(&self.plan.argv),
                        words.len(),
                        FACTS.len()
                    ),
                ));
            }
            for (fact, word) in FACTS.iter().zip(words) {
                if wanted.iter().any(|asked| asked == fact) {
                    node.facts.insert((*fact).to_owned(), word.to_owned());
                }
            }
            Ok(())
        }
        .await
        .err();
        node.error = failure.as_ref().map(|failure| failure.message.clone());
        if let Report::Facts(result) = &mut self.report {
            result.nodes.push(node);
        }
        failure
    }

    /// `ssh.file.upload` to one node: to a temporary name beside `path`,
    /// given its mode, then renamed onto `path` (atomic on the node: a
    /// reader sees the old file or the whole new one).
    async fn upload(
        &mut self,
        session: &Session<'_>,
        index: usize,
        local: &Path,
        path: &str,
        mode: &str,
    ) -> Option<Failure> {
        let (sha256, size) = match std::fs::read(local) {
            Ok(bytes) => (digest(&bytes), bytes.len() as u64),
            Err(error) => {
                return Some(Failure::new(
                    FailureCategory::Infrastructure,
                    format!("cannot read the fetched artifact: {error}"),
                ))
            }
        };
        let temporary = temporary_beside(path);
        let batch = format!(
            "put {} {temporary}\nchmod {mode} {temporary}\nrename {temporary} {path}\n",
            batch_word(&local.to_string_lossy()),
        );
        let moved = self.transfer(session, index, &batch, None).await;
        let mut node = SshTransferNode {
            target: session.node.target.clone(),
            destination: session.destination.clone(),
            sha256: None,
            size: None,
            mode: None,
            artifact: None,
            duration_ms: 0,
            error: None,
        };
        let failure = match moved {
            Ok(duration_ms) => {
                node.duration_ms = duration_ms;
                node.sha256 = Some(sha256);
                node.size = Some(size);
                node.mode = Some(mode.to_owned());
                None
            }
            Err(failure) => Some(failure),
        };
        node.error = failure.as_ref().map(|failure| failure.message.clone());
        if let Report::Transfer(result) = &mut self.report {
            result.nodes.push(node);
        }
        failure
    }

    /// `ssh.file.download` from one node into the attempt's output
    /// `download-<n>` (n: the node's place in `targets`, from 1).
    async fn download(
        &mut self,
        session: &Session<'_>,
        index: usize,
        path: &str,
    ) -> Option<Failure> {
        let local = self.workdir.path().join(format!("download.{index}"));
        let batch = format!("get {path} {}\n", batch_word(&local.to_string_lossy()));
        let moved = self.transfer(session, index, &batch, Some(&local)).await;
        let mut node = SshTransferNode {
            target: session.node.target.clone(),
            destination: session.destination.clone(),
            sha256: None,
            size: None,
            mode: None,
            artifact: None,
            duration_ms: 0,
            error: None,
        };
        let failure = async {
            node.duration_ms = moved?;
            // Checked before it is read: the watch samples, a fast
            // transfer can finish between two samples.
            let size = std::fs::metadata(&local).map_or(0, |meta| meta.len());
            if size > MAX_DOWNLOAD_BYTES {
                return Err(Failure::new(
                    FailureCategory::RunnerError,
                    format!("the file is {size} bytes, larger than {MAX_DOWNLOAD_BYTES}"),
                ));
            }
            let bytes = std::fs::read(&local).map_err(|error| {
                Failure::new(
                    FailureCategory::RunnerError,
                    format!("the downloaded file cannot be read: {error}"),
                )
            })?;
            node.sha256 = Some(digest(&bytes));
            node.size = Some(bytes.len() as u64);
            let name = format!("download-{}", index + 1);
            self.context
                .store_output(&local, &name, RetentionClass::Evidence)
                .await
                .map_err(|error| Failure::new(error.category(), error.to_string()))?;
            node.artifact = Some(name);
            Ok::<(), Failure>(())
        }
        .await
        .err();
        node.error = failure.as_ref().map(|failure| failure.message.clone());
        if let Report::Transfer(result) = &mut self.report {
            result.nodes.push(node);
        }
        failure
    }

    /// Runs `argv` on the session's node through the ssh client: how it
    /// exited, or why it did not.
    /// Runs `argv` on the node, keeping `capture` bytes of each stream.
    async fn remote(
        &self,
        session: &Session<'_>,
        argv: &[String],
        capture: usize,
    ) -> Result<Ran, Failure> {
        let mut args = self.options(session);
        args.extend([
            "-E".to_owned(),
            session.diagnostics.display().to_string(),
            "-p".to_owned(),
            session.node.binding.port.to_string(),
            "-l".to_owned(),
            self.plan.user.clone(),
            "--".to_owned(),
            session.node.binding.address.clone(),
            remote::command_line(argv),
        ]);
        let command = ToolCommand::new(PathBuf::from(&self.config.client))
            .base_env(self.workdir)
            .hold_stdin()
            .capture(capture)
            .args(args);
        let exit = tool::run(self.context, self.workdir, command)
            .await
            .map_err(|error| Failure::new(FailureCategory::Infrastructure, error.to_string()))?;
        stopped(&exit)?;
        let said = client_diagnostics(&std::fs::read(&session.diagnostics).unwrap_or_default());
        match exit.code {
            // 255 with words of its own: the client failed, not the command.
            Some(255) if !said.is_empty() => Err(client_failed(session, &said)),
            Some(code) => Ok(Ran {
                code,
                duration_ms: exit.duration_ms,
                stdout: exit.stdout,
                stderr: exit.stderr,
            }),
            None => Err(Failure::new(
                FailureCategory::RunnerError,
                format!(
                    "the ssh client ended by signal {}",
                    exit.signal.unwrap_or_default()
                ),
            )),
        }
    }

    /// Runs an sftp batch against the node's SFTP server (the template's
    /// program, through sudo when it says so): its duration, or why it
    /// failed. With `bounded`, the transfer is stopped once that local
    /// file grows past the download bound.
    async fn transfer(
        &self,
        session: &Session<'_>,
        index: usize,
        batch: &str,
        bounded: Option<&Path>,
    ) -> Result<u64, Failure> {
        let batch_file = self.workdir.path().join(format!("sftp.{index}.batch"));
        std::fs::write(&batch_file, batch).map_err(|error| {
            Failure::new(
                FailureCategory::Infrastructure,
                format!("cannot write the sftp batch: {error}"),
            )
        })?;
        let server = self
            .plan
            .argv
            .iter()
            .map(|word| remote::quote(word))
            .collect::<Vec<_>>()
            .join(" ");
        let mut args = self.options(session);
        let host = if session.node.binding.address.contains(':') {
            format!("[{}]", session.node.binding.address)
        } else {
            session.node.binding.address.clone()
        };
        args.extend([
            "-q".to_owned(),
            "-o".to_owned(),
            format!("User={}", self.plan.user),
            "-P".to_owned(),
            session.node.binding.port.to_string(),
            "-b".to_owned(),
            batch_file.display().to_string(),
            "-s".to_owned(),
            server,
            "--".to_owned(),
            host,
        ]);
        let command = ToolCommand::new(PathBuf::from(&self.config.sftp_client))
            .base_env(self.workdir)
            .capture(MAX_CAPTURE)
            .args(args);
        let (exit, too_big) = self.run_bounded(command, bounded).await;
        let exit =
            exit.map_err(|error| Failure::new(FailureCategory::Infrastructure, error.to_string()))?;
        if too_big {
            return Err(Failure::new(
                FailureCategory::RunnerError,
                format!("the file is larger than {MAX_DOWNLOAD_BYTES} bytes; stopped"),
            ));
        }
        stopped(&exit)?;
        if exit.success() {
            return Ok(exit.duration_ms);
        }
        Err(transfer_failed(session, &exit.stderr))
    }

    /// The client run; with `bounded`, stopped once that local file grows
    /// past the download bound (then `true`).
    async fn run_bounded(
        &self,
        command: ToolCommand,
        bounded: Option<&Path>,
    ) -> (Result<ToolExit, tool::ToolError>, bool) {
        let mut watched = self.context.clone();
        watched.cancel = self.context.cancel.child_token();
        let run = tool::run(&watched, self.workdir, command);
        tokio::pin!(run);
        let mut too_big = false;
        let exit = loop {
            tokio::select! {
                exit = &mut run => break exit,
                _ = tokio::time::sleep(Duration::from_millis(100)), if bounded.is_some() && !too_big => {
                    let size = bounded.and_then(|path| std::fs::metadata(path).ok()).map_or(0, |m| m.len());
                    if size > MAX_DOWNLOAD_BYTES {
                        too_big = true;
                        watched.cancel.cancel();
                    }
                }
            }
        };
        (exit, too_big)
    }

    /// The client's options, the same for ssh and sftp, set here and
    /// nowhere else: no config file, no agent, no forwarding, no
    /// multiplexing, only this key and this host key.
    fn options(&self, session: &Session<'_>) -> Vec<String> {
        let mut args: Vec<String> = vec!["-F".into(), "/dev/null".into()];
        for text in [
            "BatchMode=yes".to_owned(),
            "StrictHostKeyChecking=yes".to_owned(),
            format!("UserKnownHostsFile={}", session.known_hosts.display()),
            "GlobalKnownHostsFile=/dev/null".to_owned(),
            "UpdateHostKeys=no".to_owned(),
            "IdentitiesOnly=yes".to_owned(),
            "IdentityAgent=none".to_owned(),
            format!("IdentityFile={}", session.key_file.display()),
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
            args.extend(["-o".to_owned(), text]);
        }
        // A node pinned by fingerprint: the key it offers is accepted only
        // when it hashes to the pin (`execplane known-host`).
        if let HostKey::Fingerprint(_) = &session.node.binding.host_key {
            args.extend([
                "-o".to_owned(),
                format!(
                    "KnownHostsCommand={} known-host {} %H %t %K",
                    quote_config_word(&session.execplane.display().to_string()),
                    quote_config_word(&session.pins.display().to_string()),
                ),
            ]);
        }
        args
    }
}

impl Session<'_> {
    /// The node's known_hosts line (when its key is known) and its pin
    /// line (when its fingerprint is pinned); the other one is empty.
    fn known_hosts_lines(&self) -> (String, String) {
        let entry = self.node.binding.known_hosts_entry();
        match &self.node.binding.host_key {
            HostKey::Key(key) => (format!("{entry} {key}\n"), String::new()),
            HostKey::Fingerprint(pin) => (String::new(), format!("{entry} {pin}\n")),
        }
    }
}

/// A word of an OpenSSH option value: double-quoted when it holds a space
/// (the client splits the command on spaces and honours quotes).
fn quote_config_word(text: &str) -> String {
    if text.contains([' ', '"', '\'', '\\']) {
        format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
    } else {
        text.to_owned()
    }
}

impl Work {
    fn verb(&self) -> &'static str {
        match self {
            Work::Command => "run",
            Work::Upload { .. } => "upload through",
            Work::Download { .. } => "download through",
            Work::Restart { .. } => "restart with",
            Work::Facts { .. } => "facts from",
        }
    }

    fn done(&self) -> &'static str {
        match self {
            Work::Command => "exited 0",
            Work::Upload { .. } => "uploaded",
            Work::Download { .. } => "downloaded",
            Work::Restart { .. } => "restarted and active",
            Work::Facts { .. } => "facts collected",
        }
    }
}

/// The typed result being built, one per operation.
enum Report {
    Command(SshCommandResult),
    Transfer(SshTransferResult),
    Service(SshServiceResult),
    Facts(SshFactsResult),
}

impl Report {
    fn new(plan: &Plan) -> Self {
        let template_id = plan.template_id.clone();
        match &plan.work {
            Work::Command => Report::Command(SshCommandResult {
                template_id,
                argv: plan.argv.clone(),
                sudo_as: plan.sudo_as.clone(),
                nodes: Vec::new(),
            }),
            Work::Upload { path, .. } | Work::Download { path } => {
                Report::Transfer(SshTransferResult {
                    template_id,
                    path: path.clone(),
                    sudo_as: plan.sudo_as.clone(),
                    nodes: Vec::new(),
                })
            }
            Work::Restart {
                service,
                status_argv,
            } => Report::Service(SshServiceResult {
                template_id,
                service: service.clone(),
                sudo_as: plan.sudo_as.clone(),
                argv: plan.argv.clone(),
                status_argv: status_argv.clone(),
                nodes: Vec::new(),
            }),
            Work::Facts { .. } => Report::Facts(SshFactsResult {
                template_id,
                nodes: Vec::new(),
            }),
        }
    }

    fn value(&self) -> Value {
        match self {
            Report::Command(result) => serde_json::to_value(result),
            Report::Transfer(result) => serde_json::to_value(result),
            Report::Service(result) => serde_json::to_value(result),
            Report::Facts(result) => serde_json::to_value(result),
        }
        .unwrap_or(Value::Null)
    }
}

/// What the operation does with the template: its argument vector (sudo
/// first when the template says so), the sudo user, and the work. The
/// values were checked against the template's types by the runner SDK
/// (`docs/POLICY.md`); what is checked here is the runner's own: a field
/// is a template argument of the type the operation needs, a mode is a
/// plain one, a fact one this runner collects.
fn work(
    template: &SshTemplate,
    inputs: &SshInputs,
) -> Result<(Vec<String>, Option<String>, Work), Failure> {
    let policy = Failure::policy;
    let one = |name: &str, value: &str| Vars::from([(name.to_owned(), Value::from(value))]);
    // A transfer's or service's field is the template's argument of its name.
    let field = |name: &str, kind: ArgKind| {
        match template.arg(name) {
        Some(spec) if spec.kind == kind => Ok(()),
        _ => Err(policy(format!(
            "inputs.template_id: the template declares no `{name}` argument of type {kind:?} for inputs.{name}",
        ))),
    }
    };
    Ok(match inputs {
        I::SshCommandRun(command) => {
            let (argv, sudo_as) = argv(template, &template.fixed_args, &command.args);
            (argv, sudo_as, Work::Command)
        }
        I::SshFileUpload(upload) => {
            field("destination", ArgKind::Path)?;
            let source = InputRef::parse(&upload.source_artifact).map_err(|message| {
                Failure::contract(format!("inputs.source_artifact: {message}"))
            })?;
            let mode = file_mode(upload.mode.as_deref())?;
            let (argv, sudo_as) = argv(template, &template.fixed_args, &Vars::new());
            let path = upload.destination.clone();
            (argv, sudo_as, Work::Upload { source, path, mode })
        }
        I::SshFileDownload(download) => {
            field("path", ArgKind::Path)?;
            let (argv, sudo_as) = argv(template, &template.fixed_args, &Vars::new());
            let path = download.path.clone();
            (argv, sudo_as, Work::Download { path })
        }
        I::SshServiceRestart(restart) => {
            field("service", ArgKind::Enum)?;
            if template.status_args.is_empty() {
                return Err(policy(format!(
                    "inputs.template_id: template `{}` has no `status_args`: a restart reports the service's status",
                    restart.template_id
                )));
            }
            let values = one("service", &restart.service);
            let (restart_argv, sudo_as) = argv(template, &template.fixed_args, &values);
            let (status_argv, _) = argv(template, &template.status_args, &values);
            let service = restart.service.clone();
            (
                restart_argv,
                sudo_as,
                Work::Restart {
                    service,
                    status_argv,
                },
            )
        }
        I::SshSystemFactCollect(facts) => {
            let wanted = wanted_facts(template, &facts.facts)?;
            let uname = ["-s", "-n", "-r", "-m"].map(str::to_owned);
            let (argv, sudo_as) = argv(template, &uname, &Vars::new());
            (argv, sudo_as, Work::Facts { wanted })
        }
    })
}

/// The words the node runs: sudo first when the template says so, then the
/// program, `fixed` and the typed values in the template's order.
fn argv(template: &SshTemplate, fixed: &[String], values: &Vars) -> (Vec<String>, Option<String>) {
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
    argv.extend(fixed.iter().cloned());
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

/// `644` or `0644`: permission bits only.
fn is_plain_mode(mode: &str) -> bool {
    let digits = mode
        .strip_prefix('0')
        .filter(|rest| rest.len() == 3)
        .unwrap_or(mode);
    digits.len() == 3 && digits.bytes().all(|b| (b'0'..=b'7').contains(&b))
}

/// A name beside `path` (same directory, so the rename is atomic) that no
/// other upload picks.
fn temporary_beside(path: &str) -> String {
    let (directory, name) = path.rsplit_once('/').unwrap_or(("", path));
    format!(
        "{directory}/.{name}.execplane-{}",
        uuid::Uuid::new_v4().simple()
    )
}

/// A local path as one word of an sftp batch: double-quoted, `\` and `"`
/// escaped (sftp then takes glob characters in it literally too).
fn batch_word(text: &str) -> String {
    let mut word = String::from("\"");
    for character in text.chars() {
        if matches!(character, '"' | '\\') {
            word.push('\\');
        }
        word.push(character);
    }
    word.push('"');
    word
}

fn digest(bytes: &[u8]) -> String {
    use sha2::Digest;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

/// Stopped by the runner: cancelled, or at the deadline.
fn stopped(exit: &ToolExit) -> Result<(), Failure> {
    match exit.stopped {
        None => Ok(()),
        Some(StopCause::Stopped) => Err(Failure::new(FailureCategory::Cancelled, "stopped")),
        Some(StopCause::Deadline) => Err(Failure::new(
            FailureCategory::Timeout,
            "stopped at the start-to-close deadline",
        )),
    }
}

/// A non-zero exit of `argv`'s program is `runner_error` with the code.
/// A transfer that failed: on the node (a server command sudo refused, a
/// file the server cannot write; sftp may then say "Connection closed"
/// too), or the client's own failure to get there.
fn transfer_failed(session: &Session<'_>, stderr: &[u8]) -> Failure {
    let said = client_diagnostics(stderr);
    let unreachable = [
        "ssh: ",
        "Permission denied (",
        "Host key verification failed",
        "REMOTE HOST IDENTIFICATION HAS CHANGED",
    ]
    .iter()
    .any(|words| said.contains(words));
    if unreachable {
        client_failed(session, &said)
    } else {
        Failure::new(
            FailureCategory::RunnerError,
            format!("the transfer failed on the node: {said}"),
        )
    }
}

/// An upload's mode: three octal digits (`0644` when none is given), no
/// setuid, setgid or sticky bit.
fn file_mode(mode: Option<&str>) -> Result<String, Failure> {
    match mode {
        None => Ok(DEFAULT_MODE.to_owned()),
        Some(mode) if is_plain_mode(mode) => Ok(format!("{:0>4}", mode)),
        Some(mode) => Err(Failure::contract(format!(
            "inputs.mode: `{mode}` is not a file mode of three octal digits (`0644`; no setuid, setgid or sticky bit)"
        ))),
    }
}

/// The facts to collect: those asked for, else the template's `facts`
/// values, else all; each one this runner collects.
fn wanted_facts(template: &SshTemplate, asked: &[String]) -> Result<Vec<String>, Failure> {
    let wanted: Vec<String> = match (asked.is_empty(), template.arg("facts")) {
        (false, _) => asked.to_vec(),
        (true, Some(spec)) => spec.values.clone(),
        (true, None) => FACTS.iter().map(|fact| (*fact).to_owned()).collect(),
    };
    if let Some(fact) = wanted.iter().find(|fact| !FACTS.contains(&fact.as_str())) {
        return Err(Failure::contract(format!(
            "inputs.facts: `{fact}` is not a fact this runner collects ({})",
            FACTS.join(", ")
        )));
    }
    Ok(wanted)
}

fn exited_non_zero(argv: &[String], code: i32) -> Option<Failure> {
    (code != 0).then(|| {
        Failure::new(
            FailureCategory::RunnerError,
            format!("`{}` exited with code {code}", program_of(argv)),
        )
    })
}

/// The template's program in `argv` (after sudo's words when it runs
/// through sudo).
fn program_of(argv: &[String]) -> &str {
    let at = if argv.first().map(String::as_str) == Some(SUDO) {
        5
    } else {
        0
    };
    argv.get(at).map_or("", String::as_str)
}

/// The client could not do its part: a refused host key is the JobSpec's
/// (`contract`), anything else the node's reachability.
fn client_failed(session: &Session<'_>, said: &str) -> Failure {
    let category = if said.contains("Host key verification failed")
        || said.contains("REMOTE HOST IDENTIFICATION HAS CHANGED")
    {
        FailureCategory::Contract
    } else {
        FailureCategory::TargetUnreachable
    };
    Failure::new(
        category,
        format!("ssh to {} failed: {said}", session.destination),
    )
}

/// The client's own words about why it failed, bounded, on one line.
fn client_diagnostics(text: &[u8]) -> String {
    let start = text.len().saturating_sub(MAX_DIAGNOSTICS);
    String::from_utf8_lossy(&text[start..])
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mode_is_permission_bits_only() {
        for good in ["644", "0644", "0600", "755", "000"] {
            assert!(is_plain_mode(good), "{good}");
        }
        for bad in [
            "4755", "1777", "0", "64", "0o644", "rwx", "06444", "-644", "888",
        ] {
            assert!(!is_plain_mode(bad), "{bad}");
        }
    }

    #[test]
    fn the_temporary_name_is_beside_the_file() {
        let temporary = temporary_beside("/srv/drop/app.conf");
        assert!(temporary.starts_with("/srv/drop/.app.conf.execplane-"));
        assert!(!temporary[1..].contains("//"));
    }

    #[test]
    fn a_batch_word_quotes_what_sftp_would_read() {
        assert_eq!(batch_word("/tmp/a b"), "\"/tmp/a b\"");
        assert_eq!(batch_word("/tmp/x\"y\\z"), "\"/tmp/x\\\"y\\\\z\"");
    }
}
