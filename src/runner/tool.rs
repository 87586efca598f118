//! Tool processes: what every infrastructure runner starts (ansible-playbook,
//! helm, tofu, ssh, an operator's probe script) and must never lose control
//! of.
//!
//! - A program and an argument vector, never a shell string.
//! - A scrubbed environment: only what the runner passes ([`ToolCommand::env`]).
//! - A private 0700 working directory ([`Workdir`]), removed afterwards.
//! - Its own process group under a supervisor (`execplane tool-shim`,
//!   [`shim`]): a cancel, a self-fence or the start-to-close deadline sends
//!   SIGINT to the group, waits the runner's stop grace, then SIGKILLs the
//!   group and every descendant; if the runner dies, even by `kill -9`, the
//!   supervisor's stdin closes and it kills them all.
//! - stdout and stderr streamed as they come through the attempt's maskers to
//!   `exec.log-chunks.v1` (a secret split across two writes is still caught),
//!   bounded per tool.

pub mod shim;

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin};
use tracing::warn;

use super::ExecutionContext;
use crate::artifacts::inputs::{InputError, InputRef};
use crate::codec::LogStream;

/// Where tools run: the supervisor to start them under and the root of
/// their private working directories.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolSettings {
    /// The `execplane` binary (its `tool-shim` command supervises tools).
    pub shim: PathBuf,
    /// `EXECPLANE_RUNNER_WORK_DIR`: each tool gets a fresh 0700 directory here.
    pub work_root: PathBuf,
    /// The most output bytes (stdout and stderr together) the tools of one
    /// attempt may send to the log, all runs together; the rest is read
    /// and dropped, and the log says so.
    pub max_output_bytes: u64,
    /// The sandbox each tool runs in.
    pub sandbox: super::sandbox::SandboxSettings,
}

impl Default for ToolSettings {
    fn default() -> Self {
        Self {
            shim: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("execplane")),
            work_root: std::env::temp_dir().join("execplane-work"),
            max_output_bytes: MAX_OUTPUT_BYTES,
            sandbox: super::sandbox::SandboxSettings::default(),
        }
    }
}

/// The default of [`ToolSettings::max_output_bytes`]: 64 MiB an attempt.
pub const MAX_OUTPUT_BYTES: u64 = 64 * 1024 * 1024;

/// A private working directory (0700), removed with everything in it when
/// dropped. Inputs go in before the tool runs; outputs are read after.
#[derive(Debug)]
pub struct Workdir {
    path: PathBuf,
    /// The sandbox uid its tools run as; `None`: unsandboxed.
    identity: Option<super::sandbox::Identity>,
}

impl Workdir {
    /// A fresh directory under `root` (created 0700 if missing), for
    /// tools run unsandboxed.
    pub fn new(root: &Path) -> std::io::Result<Self> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(root)?;
        let path = root.join(uuid::Uuid::new_v4().simple().to_string());
        std::fs::DirBuilder::new().mode(0o700).create(&path)?;
        Ok(Self {
            path,
            identity: None,
        })
    }

    /// The working directory of an attempt's tools under `tools`' work
    /// root: with the sandbox on, a tmpfs of the disk limit owned by a uid
    /// of the pool, held until the directory is dropped; else as [`new`](Self::new).
    pub fn for_tools(tools: &ToolSettings) -> std::io::Result<Self> {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
        let sandbox = &tools.sandbox;
        if !sandbox.enabled {
            return Self::new(&tools.work_root);
        }
        let root = &tools.work_root;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o711)
            .create(root)?;
        // The root must be the runner's own, a directory (not a link) that
        // nobody else can write: entries are found by name only (0711).
        let metadata = std::fs::symlink_metadata(root)?;
        if !metadata.is_dir() || metadata.uid() != rustix::process::geteuid().as_raw() {
            return Err(std::io::Error::other(format!(
                "the work root {} is not a directory of this user's",
                root.display()
            )));
        }
        if metadata.permissions().mode() & 0o777 != 0o711 {
            std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o711))?;
        }
        let identity = super::sandbox::Identity::allocate(sandbox)?;
        let path = root.join(uuid::Uuid::new_v4().simple().to_string());
        std::fs::DirBuilder::new().mode(0o700).create(&path)?;
        if let Err(error) =
            super::sandbox::mount_workdir(&path, identity.uid(), sandbox.limits.disk_bytes)
        {
            let _ = std::fs::remove_dir(&path);
            return Err(std::io::Error::other(format!(
                "cannot mount the working directory's tmpfs: {error}"
            )));
        }
        Ok(Self {
            path,
            identity: Some(identity),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Holds the network of the tools run here next to `reach`, or lets
    /// it go with `None` ([`super::sandbox::Identity::hold_network`]);
    /// nothing to do unsandboxed.
    pub async fn hold_network(
        &self,
        reach: Option<&[super::sandbox::egress::Destination]>,
    ) -> Result<Option<Vec<String>>, String> {
        match &self.identity {
            Some(identity) => identity.hold_network(reach).await,
            None => Ok(None),
        }
    }

    /// Writes a resolved secret to a 0600 file in `secrets/` of the
    /// directory: the tool reads it by path, so it never sits in an
    /// argument vector, where `ps` shows it. The value is masked in the
    /// output like every value the attempt resolved.
    pub fn secret_file(&self, name: &str, value: &str) -> std::io::Result<PathBuf> {
        use std::io::Write;
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let dir = self.path.join("secrets");
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)?;
        let safe: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let path = dir.join(safe);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)?;
        file.write_all(value.as_bytes())?;
        Ok(path)
    }
}

impl Workdir {
    /// Fetches a requester's input artifact into `inputs/` of the
    /// directory, read-only (0400), after checking its content against its
    /// digest and that it was stored for the attempt's tenant
    /// ([`ExecutionContext::fetch_input`]).
    pub async fn fetch_input(
        &self,
        context: &ExecutionContext,
        reference: &InputRef,
    ) -> Result<PathBuf, InputError> {
        let bytes = context.fetch_input(reference).await?;
        self.write_input(reference, &bytes)
    }

    /// [`Self::fetch_input`] of content the operator's policy approved by
    /// digest ([`ExecutionContext::fetch_approved`]).
    pub async fn fetch_approved(
        &self,
        context: &ExecutionContext,
        reference: &InputRef,
    ) -> Result<PathBuf, InputError> {
        let bytes = context.fetch_approved(reference).await?;
        self.write_input(reference, &bytes)
    }

    fn write_input(&self, reference: &InputRef, bytes: &[u8]) -> Result<PathBuf, InputError> {
        use std::io::Write;
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let local = |source: std::io::Error| InputError::Storage {
            reference: reference.clone(),
            source: source.into(),
        };
        let dir = self.path.join("inputs");
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(local)?;
        let path = dir.join(reference.to_string().replace(':', "-"));
        // A file of this name may be the tenant's by now (the directory is
        // its tools' once given to them): written again, never trusted.
        match std::fs::remove_file(&path) {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => return Err(local(error)),
            _ => {}
        }
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o400)
            .open(&path)
            .map_err(local)?;
        file.write_all(bytes).map_err(local)?;
        Ok(path)
    }

    /// Replaces every `{"artifact": "sha256:…"}` in `value` with the path
    /// of the fetched, checked file. On failure, the field path (under
    /// `path`) of the reference and why.
    pub async fn fetch_inputs(
        &self,
        context: &ExecutionContext,
        value: &mut serde_json::Value,
        path: &str,
    ) -> Result<(), (String, InputError)> {
        let mut references = Vec::new();
        crate::artifacts::inputs::references_in(value, path, &mut references);
        for (at, reference) in references {
            // Validated at intake; a work record produced past the
            // dispatcher is checked again here.
            let reference =
                reference.map_err(|message| (at.clone(), InputError::Malformed(message)))?;
            let file = self
                .fetch_input(context, &reference)
                .await
                .map_err(|error| (at.clone(), error))?;
            replace_reference(value, &reference, &file.to_string_lossy());
        }
        Ok(())
    }
}

/// Replaces each reference to `reference` in `value` with `path`.
fn replace_reference(value: &mut serde_json::Value, reference: &InputRef, path: &str) {
    if let Some(Ok(found)) = crate::artifacts::inputs::reference_in(value) {
        if &found == reference {
            *value = serde_json::Value::String(path.to_owned());
        }
        return;
    }
    match value {
        serde_json::Value::Object(object) => {
            for child in object.values_mut() {
                replace_reference(child, reference, path);
            }
        }
        serde_json::Value::Array(items) => {
            for child in items {
                replace_reference(child, reference, path);
            }
        }
        _ => {}
    }
}

impl Drop for Workdir {
    fn drop(&mut self) {
        // A sandboxed directory is a tmpfs: unmounted, its files are gone.
        if self.identity.is_some() {
            let _ = super::sandbox::unmount_workdir(&self.path);
        }
        // The supervisor of a dropped tool may have removed it already.
        if let Err(error) =
            std::fs::remove_dir_all(&self.path).or_else(|error| match error.kind() {
                std::io::ErrorKind::NotFound => Ok(()),
                _ => Err(error),
            })
        {
            warn!(path = %self.path.display(), %error, "tool working directory not removed");
        }
    }
}

/// A program to run: an absolute path, an argument vector and exactly the
/// environment given here.
#[derive(Clone, Debug)]
pub struct ToolCommand {
    program: PathBuf,
    args: Vec<OsString>,
    env: Vec<(String, String)>,
    hold_stdin: bool,
    capture: usize,
    /// stdout is data for the runner, not the attempt's log.
    stdout_unlogged: bool,
    /// The tool says why it failed on stdout.
    says_why_on_stdout: bool,
    /// What the tool sees of the host besides the system, sandboxed.
    view: super::sandbox::View,
}

impl ToolCommand {
    pub fn new(program: impl Into<PathBuf>) -> Self {
        Self {
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            hold_stdin: false,
            capture: 0,
            stdout_unlogged: false,
            says_why_on_stdout: false,
            view: super::sandbox::View::default(),
        }
    }

    /// A host path the sandboxed tool sees read-only at the same path (an
    /// interpreter's tree, a provider mirror). The program's own directory
    /// is seen without asking.
    pub fn read_only(mut self, path: impl Into<PathBuf>) -> Self {
        self.view.read_only.push(path.into());
        self
    }

    /// A host directory the sandboxed tool may write, at the same path
    /// (given to the attempt's uid for the run).
    pub fn writable(mut self, path: impl Into<PathBuf>) -> Self {
        self.view.writable.push(path.into());
        self
    }

    /// The tool starts in `directory` (a path it sees) rather than its
    /// working directory.
    pub fn current_dir(mut self, directory: impl Into<PathBuf>) -> Self {
        self.view.directory = Some(directory.into());
        self
    }

    /// The tool needs no network: sandboxed, it runs in a network
    /// namespace of its own with nothing but loopback.
    pub fn offline(mut self) -> Self {
        self.view.offline = true;
        self
    }

    /// The tool runs the tenant's code: with the network guarded, it
    /// reaches `destinations` (and the host's name servers) and nothing
    /// else (docs/SECURITY.md, "Network").
    pub fn reach(mut self, destinations: Vec<super::sandbox::egress::Destination>) -> Self {
        self.view.reach = Some(destinations);
        self
    }

    /// Also keeps the first `limit` bytes of stdout and the last `limit`
    /// bytes of stderr, as read (before masking), in [`ToolExit::stdout`]
    /// and [`ToolExit::stderr`]: what a runner parses (facts, a status) and
    /// the last words of a tool that failed (its error comes after its
    /// warnings).
    /// They are still logged as they come. Whatever the runner puts in its
    /// report from them is masked there, as every report is.
    pub fn capture(mut self, limit: usize) -> Self {
        self.capture = limit;
        self
    }

    /// stdout is the runner's data (a release's status, a rendered chart),
    /// captured up to `limit` and never written to the attempt's log: what
    /// it holds goes where the runner puts it, which it masks or redacts.
    /// stderr is still logged.
    pub fn stdout_as_data(mut self, limit: usize) -> Self {
        self.capture = limit;
        self.stdout_unlogged = true;
        self
    }

    /// [`Self::capture`], for a tool that says why it failed on stdout
    /// (`helm repo update`): [`run_judged`] quotes the head of its stdout
    /// before the tail of its stderr. Never with [`Self::stdout_as_data`]:
    /// data is not quoted.
    pub fn says_why_on_stdout(mut self, limit: usize) -> Self {
        self.capture = limit;
        self.stdout_unlogged = false;
        self.says_why_on_stdout = true;
        self
    }

    /// The tool's stdin: a pipe that reaches end of file only when its
    /// supervisor is gone (the runner stopped it, or died), instead of
    /// /dev/null. What a remote side watches to stop with its runner.
    pub fn hold_stdin(mut self) -> Self {
        self.hold_stdin = true;
        self
    }

    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    pub fn args<I: IntoIterator<Item = S>, S: Into<OsString>>(mut self, args: I) -> Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// One variable of the tool's environment (nothing else is inherited).
    /// A resolved secret may be passed this way: it is masked in the output
    /// like every value the attempt resolved (a file, [`Workdir::secret_file`],
    /// keeps it out of `/proc/<pid>/environ` too).
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// `PATH` (the system directories), `HOME` and `TMPDIR` (the working
    /// directory) and `LANG=C.UTF-8`: a minimal environment most tools need.
    pub fn base_env(self, workdir: &Workdir) -> Self {
        let home = workdir.path().to_string_lossy().into_owned();
        self.env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", home.clone())
            .env("TMPDIR", home)
            .env("LANG", "C.UTF-8")
    }
}

/// Why the runner stopped a tool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopCause {
    /// A cancel, a self-fence or the instance's shutdown.
    Stopped,
    /// The JobSpec's start-to-close deadline.
    Deadline,
}

/// How a tool ended.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ToolExit {
    /// The exit code, when it exited.
    pub code: Option<i32>,
    /// The signal that ended it, when one did.
    pub signal: Option<i32>,
    /// Whether (and why) the runner stopped it.
    pub stopped: Option<StopCause>,
    /// Whether it outlived the grace after SIGINT and was killed.
    pub killed: bool,
    /// Output bytes read but not logged (over the attempt's output bound),
    /// all runs of the attempt so far.
    pub output_dropped: u64,
    /// The sandbox limit the tool reached, if it reached one.
    pub limit: Option<super::sandbox::LimitHit>,
    pub duration_ms: u64,
    /// The first bytes of stdout, when [`ToolCommand::capture`] asked.
    pub stdout: Vec<u8>,
    /// The last bytes of stderr, when [`ToolCommand::capture`] asked.
    pub stderr: Vec<u8>,
}

impl ToolExit {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("tool program `{0}` must be an absolute path")]
    NotAbsolute(String),
    #[error("tool program `{path}` cannot be run: {reason}")]
    NotRunnable { path: String, reason: String },
    #[error("cannot start the tool supervisor {shim}: {source}")]
    Supervisor {
        shim: String,
        source: std::io::Error,
    },
    #[error("waiting for the tool: {0}")]
    Wait(std::io::Error),
    #[error("cannot prepare the tool's sandbox: {0}")]
    Sandbox(std::io::Error),
}

/// The most of a failed tool's own words a failure message quotes.
pub const MAX_DIAGNOSTICS: usize = 2048;

/// [`run`], judged as a CLI runner judges it: a tool that could not start
/// is `infrastructure`, a stop `cancelled`, the deadline `timeout`; a
/// non-zero exit is the category `classify` gives the last
/// [`MAX_DIAGNOSTICS`] bytes of its stderr (keep some with
/// [`ToolCommand::capture`]), quoted in the message after `what`; a
/// sandbox limit it reached is `policy` (the operator's bound); data
/// ([`ToolCommand::stdout_as_data`]) that filled its bound is
/// `runner_error`, never read as if it were whole.
pub async fn run_judged(
    context: &ExecutionContext,
    workdir: &Workdir,
    what: &str,
    command: ToolCommand,
    classify: impl FnOnce(&str) -> crate::contract::FailureCategory,
) -> Result<ToolExit, super::Failure> {
    use crate::contract::FailureCategory;
    let data_bound = command.stdout_unlogged.then_some(command.capture);
    let says_why_on_stdout = command.says_why_on_stdout;
    let exit = run(context, workdir, command).await.map_err(|error| {
        super::Failure::new(FailureCategory::Infrastructure, format!("{what}: {error}"))
    })?;
    match exit.stopped {
        Some(StopCause::Stopped) => {
            return Err(super::Failure::new(
                FailureCategory::Cancelled,
                format!("{what}: stopped"),
            ))
        }
        Some(StopCause::Deadline) => {
            return Err(super::Failure::new(
                FailureCategory::Timeout,
                format!("{what}: the attempt's start_to_close passed"),
            ))
        }
        None => {}
    }
    if let Some(limit) = exit.limit {
        return Err(super::Failure::new(
            FailureCategory::Policy,
            format!("{what}: {limit}"),
        ));
    }
    if exit.success() {
        if let Some(bound) = data_bound.filter(|bound| exit.stdout.len() >= *bound) {
            return Err(super::Failure::new(
                FailureCategory::RunnerError,
                format!("{what}: over {} MiB of output", bound / (1024 * 1024)),
            ));
        }
        return Ok(exit);
    }
    let mut said = String::from_utf8_lossy(&exit.stderr).into_owned();
    if says_why_on_stdout {
        said = format!("{}\n{said}", String::from_utf8_lossy(&exit.stdout).trim());
    }
    // Marked where it was cut, so the masker knows a secret's end there.
    let said = crate::contract::limits::shortened_tail(said.trim(), MAX_DIAGNOSTICS);
    let code = exit
        .code
        .map_or("no exit code".into(), |code| format!("exit {code}"));
    Err(super::Failure::new(
        classify(&said),
        format!("{what} failed ({code}): {said}"),
    ))
}

/// `reach` for the attempt's log: the first few, and how many more.
fn shown(reach: &[super::sandbox::egress::Destination]) -> String {
    const SHOWN: usize = 16;
    if reach.is_empty() {
        return "no destination".to_owned();
    }
    let mut said: Vec<String> = reach.iter().take(SHOWN).map(ToString::to_string).collect();
    if reach.len() > SHOWN {
        said.push(format!("{} more", reach.len() - SHOWN));
    }
    said.join(", ")
}

/// Runs `command` in `workdir` under the attempt's context: output to the
/// log as it comes, stopped on cancel or at the deadline. Returns how it
/// ended; every process it started is gone when this returns (or when the
/// future is dropped: the supervisor then kills them).
pub async fn run(
    context: &ExecutionContext,
    workdir: &Workdir,
    command: ToolCommand,
) -> Result<ToolExit, ToolError> {
    check_program(&command.program)?;
    let settings = context.tools();
    let started = tokio::time::Instant::now();
    let mut shim = tokio::process::Command::new(&settings.shim);
    shim.arg("tool-shim")
        .arg("--workdir")
        .arg(workdir.path())
        .args(command.hold_stdin.then_some("--hold-stdin"));
    // An offline tool has no network to hold, and leaves the hold as it is.
    if !command.view.offline {
        let held = workdir
            .hold_network(command.view.reach.as_deref())
            .await
            .map_err(|error| {
                ToolError::Sandbox(std::io::Error::other(format!(
                    "cannot hold the tool's network to its destinations: {error}"
                )))
            })?;
        if let (Some(unresolved), Some(reach)) = (held, &command.view.reach) {
            let mut said = format!(
                "the tool's network: {} and the host's name servers, nothing else\n",
                shown(reach)
            );
            for name in unresolved {
                said += &format!("{name}: out of its reach (the name did not resolve)\n");
            }
            context.log(LogStream::Stderr, said);
        }
    }
    // The sandbox's cgroups live as long as this run.
    let cgroups = match (&workdir.identity, settings.sandbox.enabled) {
        (Some(identity), true) => {
            let accounts = hand_over(workdir, identity, &command).await?;
            Some(sandboxed(
                &mut shim, settings, workdir, identity, &command, &accounts,
            )?)
        }
        (None, true) => {
            return Err(ToolError::Sandbox(std::io::Error::other(
                "the working directory was not made for the sandbox (Workdir::for_tools)",
            )))
        }
        (_, false) => {
            shim.arg("--").arg(&command.program);
            None
        }
    };
    let mut child = shim
        .args(&command.args)
        .env_clear()
        .envs(command.env.iter().map(|(key, value)| (key, value)))
        .current_dir(command.view.directory.as_deref().unwrap_or(workdir.path()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| ToolError::Supervisor {
            shim: settings.shim.display().to_string(),
            source,
        })?;
    let budget = context.output_budget();
    let dropped_before = budget.dropped();
    let captures = [
        Capture::new(command.capture, false),
        Capture::new(command.capture, true),
    ];
    let pumps = [
        child.stdout.take().map(|out| {
            tokio::spawn(pump(
                out,
                (!command.stdout_unlogged).then_some(LogStream::Stdout),
                context.clone(),
                budget.clone(),
                captures[0].clone(),
            ))
        }),
        child.stderr.take().map(|err| {
            tokio::spawn(pump(
                err,
                Some(LogStream::Stderr),
                context.clone(),
                budget.clone(),
                captures[1].clone(),
            ))
        }),
    ];
    let orders = child.stdin.take();
    let (status, stopped, killed) = supervise(&mut child, orders, context).await?;
    for pump in pumps.into_iter().flatten() {
        // The supervisor killed every holder of the pipes before it exited.
        let _ = tokio::time::timeout(Duration::from_secs(2), pump).await;
    }
    let limit = cgroups
        .as_ref()
        .and_then(|cgroups| cgroups.hit())
        .or_else(|| {
            (status.code() != Some(0)
                && workdir.identity.is_some()
                && super::sandbox::is_full(workdir.path()))
            .then_some(super::sandbox::LimitHit::Disk(
                settings.sandbox.limits.disk_bytes,
            ))
        });
    Ok(ToolExit {
        code: status.code(),
        signal: status.signal(),
        stopped,
        killed,
        output_dropped: budget.dropped().saturating_sub(dropped_before),
        limit,
        duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        stdout: captures[0].taken(),
        stderr: captures[1].taken(),
    })
}

/// The working directory (and the command's writable paths) given to the
/// attempt's uid, and its accounts written: off the runtime's threads, as
/// the walk is as long as the files the attempt's earlier tools left
/// (up to one a 4 KiB page of the disk limit).
async fn hand_over(
    workdir: &Workdir,
    identity: &super::sandbox::Identity,
    command: &ToolCommand,
) -> Result<(PathBuf, PathBuf), ToolError> {
    use super::sandbox;
    let uid = identity.uid();
    let path = workdir.path().to_owned();
    let writable = command.view.writable.clone();
    tokio::task::spawn_blocking(move || {
        let accounts = sandbox::write_accounts(&path, uid)?;
        sandbox::give(&path, uid)?;
        for path in &writable {
            sandbox::give(path, uid)?;
        }
        Ok(accounts)
    })
    .await
    .map_err(|error| ToolError::Sandbox(std::io::Error::other(error)))?
    .map_err(ToolError::Sandbox)
}

/// Readies a sandboxed run once [`hand_over`] is done: the run's cgroups,
/// then the supervisor's arguments up to the program's own:
/// `--uid U --cgroup ... -- prlimit ... -- bwrap ... -- PROGRAM`.
fn sandboxed(
    shim: &mut tokio::process::Command,
    settings: &ToolSettings,
    workdir: &Workdir,
    identity: &super::sandbox::Identity,
    command: &ToolCommand,
    accounts: &(PathBuf, PathBuf),
) -> Result<super::sandbox::Cgroups, ToolError> {
    use super::sandbox;
    let uid = identity.uid();
    let mut view = command.view.clone();
    // The program's directory (and, for a link, its target's), this very
    // binary (ssh's KnownHostsCommand), and the operator's extra paths.
    let mut programs = vec![command.program.clone(), settings.shim.clone()];
    if let Ok(real) = std::fs::canonicalize(&command.program) {
        programs.push(real);
    }
    for program in programs {
        if let Some(dir) = program.parent().filter(|dir| !dir.starts_with("/usr")) {
            if dir.is_dir() && !view.read_only.iter().any(|seen| dir.starts_with(seen)) {
                view.read_only.push(dir.to_owned());
            }
        }
    }
    view.read_only
        .extend(settings.sandbox.read_only.iter().cloned());
    let name = workdir
        .path()
        .file_name()
        .map(|name| {
            format!(
                "{}-{}",
                name.to_string_lossy(),
                uuid::Uuid::new_v4().simple()
            )
        })
        .unwrap_or_default();
    let cgroups = sandbox::Cgroups::create(&name, &settings.sandbox.limits)
        .map_err(ToolError::Sandbox)?
        .watched_by(identity.lingering());
    shim.arg("--uid").arg(uid.to_string());
    for dir in cgroups.dirs() {
        shim.arg("--cgroup").arg(dir);
    }
    shim.arg("--")
        .arg(&settings.sandbox.prlimit)
        .args(sandbox::prlimit_args(&settings.sandbox.limits))
        .arg(&settings.sandbox.bwrap)
        .args(sandbox::bwrap_args(workdir.path(), accounts, &view))
        .arg(&command.program);
    Ok(cgroups)
}

/// The first (or, with `tail`, the last) bytes of one stream, kept for
/// the runner.
#[derive(Clone)]
struct Capture {
    limit: usize,
    tail: bool,
    bytes: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
}

impl Capture {
    fn new(limit: usize, tail: bool) -> Self {
        Self {
            limit,
            tail,
            bytes: std::sync::Arc::default(),
        }
    }

    fn keep(&self, read: &[u8]) {
        if self.limit == 0 {
            return;
        }
        let mut bytes = self
            .bytes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if self.tail {
            bytes.extend_from_slice(read);
            let over = bytes.len().saturating_sub(self.limit);
            bytes.drain(..over);
        } else {
            let room = self.limit.saturating_sub(bytes.len());
            bytes.extend_from_slice(&read[..room.min(read.len())]);
        }
    }

    fn taken(&self) -> Vec<u8> {
        std::mem::take(
            &mut *self
                .bytes
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        )
    }
}

/// Waits for the supervisor; on cancel or at the deadline orders SIGINT,
/// then after the grace SIGKILL.
async fn supervise(
    child: &mut Child,
    mut orders: Option<ChildStdin>,
    context: &ExecutionContext,
) -> Result<(std::process::ExitStatus, Option<StopCause>, bool), ToolError> {
    let deadline = context.deadline();
    let mut stopped: Option<StopCause> = None;
    let mut kill_at: Option<tokio::time::Instant> = None;
    let mut killed = false;
    loop {
        let cause = tokio::select! {
            status = child.wait() => {
                return status.map(|status| (status, stopped, killed)).map_err(ToolError::Wait);
            }
            _ = context.cancel.cancelled(), if stopped.is_none() => StopCause::Stopped,
            _ = sleep_until(deadline), if stopped.is_none() && deadline.is_some() => StopCause::Deadline,
            _ = sleep_until(kill_at), if kill_at.is_some() && !killed => {
                order(&mut orders, b'k').await;
                killed = true;
                continue;
            }
        };
        order(&mut orders, b'i').await;
        stopped = Some(cause);
        kill_at = Some(tokio::time::Instant::now() + context.stop_grace());
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Tells the supervisor `i` (interrupt) or `k` (kill); a supervisor that
/// is already gone needs no order.
async fn order(orders: &mut Option<ChildStdin>, byte: u8) {
    if let Some(pipe) = orders.as_mut() {
        if pipe.write_all(&[byte]).await.is_err() || pipe.flush().await.is_err() {
            *orders = None;
        }
    }
}

fn check_program(program: &Path) -> Result<(), ToolError> {
    use std::os::unix::fs::PermissionsExt;
    if !program.is_absolute() {
        return Err(ToolError::NotAbsolute(program.display().to_string()));
    }
    let not_runnable = |reason: String| ToolError::NotRunnable {
        path: program.display().to_string(),
        reason,
    };
    let metadata = std::fs::metadata(program).map_err(|error| not_runnable(error.to_string()))?;
    if !metadata.is_file() {
        return Err(not_runnable("not a regular file".into()));
    }
    if metadata.permissions().mode() & 0o111 == 0 {
        return Err(not_runnable("not executable".into()));
    }
    Ok(())
}

/// The output bytes an attempt's tools may still log.
#[derive(Debug)]
pub(crate) struct OutputBudget {
    left: std::sync::atomic::AtomicU64,
    dropped: std::sync::atomic::AtomicU64,
}

impl OutputBudget {
    pub(crate) fn new(limit: u64) -> Self {
        Self {
            left: limit.into(),
            dropped: 0.into(),
        }
    }

    /// How many of `wanted` bytes may be logged (the rest is counted as dropped).
    fn take(&self, wanted: usize) -> usize {
        use std::sync::atomic::Ordering;
        let wanted = wanted as u64;
        let granted = self
            .left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                Some(left.saturating_sub(wanted))
            })
            .map_or(0, |left| left.min(wanted));
        self.dropped.fetch_add(wanted - granted, Ordering::SeqCst);
        usize::try_from(granted).unwrap_or(usize::MAX)
    }

    fn dropped(&self) -> u64 {
        self.dropped.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Copies one output stream to the attempt's log as it comes (`None`: only
/// captured). Bytes are cut into text at character boundaries (a character
/// split across two reads is carried over); invalid UTF-8 is replaced.
async fn pump(
    mut reader: impl AsyncRead + Unpin,
    stream: Option<LogStream>,
    context: ExecutionContext,
    budget: std::sync::Arc<OutputBudget>,
    capture: Capture,
) {
    let mut buffer = vec![0_u8; 16 * 1024];
    let mut carry: Vec<u8> = Vec::new();
    let mut told = false;
    loop {
        let read = match reader.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        capture.keep(&buffer[..read]);
        let Some(stream) = stream else {
            continue;
        };
        let granted = budget.take(read);
        carry.extend_from_slice(&buffer[..granted]);
        let text = take_text(&mut carry);
        if !text.is_empty() {
            context.log(stream, text);
        }
        // Said on the runner's own stream, after the last bytes logged: the
        // cut stream ends there, so its masker masks a value cut in two
        // rather than releasing its head (`StreamMasker::finish`).
        if granted < read && !told {
            told = true;
            context.log(
                LogStream::Runner,
                format!(
                    "[execplane: {} output over the attempt's bound is dropped from here]\n",
                    format!("{stream:?}").to_lowercase()
                ),
            );
        }
    }
    if let (Some(stream), false) = (stream, carry.is_empty()) {
        context.log(stream, String::from_utf8_lossy(&carry).into_owned());
    }
}

/// The text of `bytes` up to the last complete character; the incomplete
/// tail (at most 3 bytes) stays in `bytes`.
fn take_text(bytes: &mut Vec<u8>) -> String {
    let complete = match std::str::from_utf8(bytes) {
        Ok(_) => bytes.len(),
        Err(error) if error.error_len().is_none() => error.valid_up_to(),
        // Invalid in the middle: replaced, nothing carried.
        Err(_) => bytes.len(),
    };
    let text = String::from_utf8_lossy(&bytes[..complete]).into_owned();
    bytes.drain(..complete);
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_character_split_across_reads_is_carried_over() {
        let euro = "€".as_bytes();
        let mut bytes = b"price: ".to_vec();
        bytes.extend_from_slice(&euro[..2]);
        assert_eq!(take_text(&mut bytes), "price: ");
        assert_eq!(bytes, &euro[..2]);
        bytes.extend_from_slice(&euro[2..]);
        bytes.extend_from_slice(b"5");
        assert_eq!(take_text(&mut bytes), "€5");
        assert!(bytes.is_empty());
        let mut invalid = vec![b'a', 0xff, b'b'];
        assert_eq!(take_text(&mut invalid), "a\u{fffd}b");
    }

    #[test]
    fn a_capture_keeps_the_head_of_one_stream_and_the_tail_of_the_other() {
        let (head, tail) = (Capture::new(4, false), Capture::new(4, true));
        for read in [&b"abc"[..], b"defg", b"h"] {
            head.keep(read);
            tail.keep(read);
        }
        assert_eq!(
            (head.taken(), tail.taken()),
            (b"abcd".to_vec(), b"efgh".to_vec())
        );
        let off = Capture::new(0, true);
        off.keep(b"abc");
        assert!(off.taken().is_empty());
    }

    #[test]
    fn the_output_budget_grants_up_to_its_bound_and_counts_the_rest() {
        let budget = OutputBudget::new(10);
        assert_eq!(budget.take(6), 6);
        assert_eq!(budget.take(6), 4);
        assert_eq!(budget.take(6), 0);
        assert_eq!(budget.dropped(), 8);
    }

    #[test]
    fn a_workdir_is_private_and_removed_with_its_secret_files() {
        use std::os::unix::fs::PermissionsExt;
        let root =
            std::env::temp_dir().join(format!("execplane-tool-test-{}", uuid::Uuid::new_v4()));
        let workdir = Workdir::new(&root).unwrap();
        let mode = std::fs::metadata(workdir.path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        let file = workdir.secret_file("db/password", "hunter2").unwrap();
        assert_eq!(file.parent().unwrap(), workdir.path().join("secrets"));
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "hunter2");
        assert_eq!(
            std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let path = workdir.path().to_owned();
        drop(workdir);
        assert!(!path.exists() && !file.exists());
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn only_an_absolute_executable_file_is_a_program() {
        assert!(matches!(
            check_program(Path::new("sh")),
            Err(ToolError::NotAbsolute(_))
        ));
        assert!(check_program(Path::new("/bin/sh")).is_ok());
        assert!(matches!(
            check_program(Path::new("/etc/passwd")),
            Err(ToolError::NotRunnable { .. })
        ));
        assert!(matches!(
            check_program(Path::new("/nonexistent/tool")),
            Err(ToolError::NotRunnable { .. })
        ));
    }
}
