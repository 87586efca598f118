use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::TofuConfig;
use crate::artifacts::inputs::InputRef;
use crate::contract::ops::opentofu::backend_type;
use crate::contract::ops::{
    SecretLocation, TofuInputs, TofuInputs as I, TofuModule, TofuOutputSecret,
};
use crate::contract::ops::{
    TofuChange, TofuOutput, TofuPlan, TofuResource, TofuResult, TofuStateVersion,
};
use crate::contract::{FailureCategory, Operation, RetentionClass, RunnerType};
use crate::runner::kit::package;
use crate::runner::sandbox::egress::Destination;
use crate::runner::tool::{self, ToolCommand, ToolExit, Workdir};
use crate::runner::{Assignment, ExecutionContext, ExecutionOutcome, Executor, Failure};

/// The most of the CLI's JSON kept to read (a plan, a state).
const MAX_CAPTURE: usize = 32 * 1024 * 1024;
/// The most that JSON may hold once read (`runner::yaml::json`): the
/// tenant's module and variables write it. A plan's JSON costs about 2.3
/// times its text there, JSON of numbers and booleans about 4 times: the
/// capture's whole size passes, `[[],[],…]` (over 5 times) does not.
const MAX_EXPANDED: usize = 4 * MAX_CAPTURE;
/// What is kept of a logged command's stderr for a failure message.
const MAX_DIAGNOSTICS_CAPTURE: usize = 64 * 1024;
/// The most resources or changes a result lists.
const MAX_LISTED: usize = 1000;
/// What the CLI's lock wait leaves of the attempt's time, to report in.
const REPORT_MARGIN: Duration = Duration::from_secs(5);
/// The saved plan's file name (and output name).
const PLAN_FILE: &str = "plan.tfplan";
/// Where the CLI's temporary files go: the CLI and its providers talk over
/// Unix sockets made there, whose paths may not pass 107 bytes, so not in
/// the working directory, whose path is the operator's to make long.
const SOCKET_ROOT: &str = "/tmp/execplane-tofu";
/// The backend override the runner writes into the module's directory.
const BACKEND_OVERRIDE: &str = "zz_execplane_backend_override.tf.json";
/// What no file of a module's may start with.
const OVERRIDE_STEM: &str = "zz_execplane";
/// The pg backend's `conn_str` as the CLI sees it: nothing of the real
/// one, which reaches libpq as `PG*` variables (the CLI writes `conn_str`
/// into every plan file).
const PG_CONN_STR: &str = "fallback_application_name=execplane";

/// The opentofu runner's executor.
pub struct TofuRunner {
    config: TofuConfig,
}

impl TofuRunner {
    pub fn new(config: TofuConfig) -> Self {
        Self { config }
    }
}

impl Executor for TofuRunner {
    type Inputs = TofuInputs;

    fn runner_type(&self) -> RunnerType {
        RunnerType::Opentofu
    }

    async fn preflight(&self) -> Result<(), String> {
        // OpenTofu, or Terraform (the same CLI), 1.x.
        let markers = ["OpenTofu ", "Terraform "];
        let cli = &self.config.cli;
        crate::runner::preflight::tool_version("the CLI", cli, &["version"], &markers, (1, 0), 2)
            .await
            .map(|_| ())
    }

    fn capabilities(&self) -> Vec<String> {
        vec!["opentofu".into()]
    }

    async fn execute(
        &self,
        assignment: Assignment,
        inputs: TofuInputs,
        context: ExecutionContext,
    ) -> ExecutionOutcome {
        let spec = &assignment.spec;
        let module = match with_backend_config(inputs.module(), &context, &spec.tenant).await {
            Ok(module) => module,
            Err(failure) => return failure.into(),
        };
        let module = &module;
        let plan_artifact = match &inputs {
            I::OpentofuApply(apply) => apply.plan_artifact.as_ref(),
            _ => None,
        };
        let (workdir, sockets) = match directories(&context) {
            Ok(directories) => directories,
            Err(failure) => return failure.into(),
        };
        let egress = context
            .policy()
            .tenant(&spec.tenant)
            .operations
            .opentofu
            .egress
            .clone();
        let mut run = Run {
            config: &self.config,
            egress,
            workdir: &workdir,
            sockets: sockets.as_ref(),
            state_dir: None,
            context: &context,
            module_dir: PathBuf::new(),
            var_files: Vec::new(),
            env: Vec::new(),
            sensitive_outputs_to: module.sensitive_outputs_to.as_ref(),
            report: TofuResult {
                module: format!("{}@{}", module.package.name, module.package.version),
                workspace: module.workspace.clone().unwrap_or_else(|| "default".into()),
                backend: backend_type(module).to_owned(),
                ..TofuResult::default()
            },
        };
        let done = async {
            if let Some(reference) = &plan_artifact {
                // Before anything runs: the approved plan must be one this
                // runner made for this tenant, module, workspace and backend.
                run.check_provenance(reference, &spec.tenant, module)
                    .await?;
            }
            run.prepare(&spec.tenant, module, spec.operation).await?;
            match &inputs {
                I::OpentofuPlan(_) => run.plan(&spec.tenant, module).await,
                I::OpentofuApply(_) => run.apply(plan_artifact, spec.policy.elevated).await,
                I::OpentofuDestroy(_) => run.destroy().await,
                I::OpentofuOutput(_) | I::OpentofuStateInspect(_) => {
                    run.inspect(spec.operation).await
                }
            }
        }
        .await;
        let report = serde_json::to_value(&run.report).unwrap_or(Value::Null);
        match done {
            Ok(message) => ExecutionOutcome::succeeded(message, report),
            Err(failure) => failure.outcome(Some(report)),
        }
    }
}

/// The largest backend settings artifact, in bytes.
const MAX_BACKEND_CONFIG_BYTES: usize = 64 * 1024;

/// The module with its backend settings by reference read in: the
/// artifact's JSON object under the inline `backend`, checked together as
/// intake checks inline settings (a reference in the artifact is never
/// resolved, so it holds none), and the type held to the tenant's
/// `opentofu.backends` again, since the artifact may name it.
async fn with_backend_config(
    module: &TofuModule,
    context: &ExecutionContext,
    tenant: &str,
) -> Result<TofuModule, Failure> {
    let mut module = module.clone();
    let Some(reference) = &module.backend_config else {
        return Ok(module);
    };
    let contract = |message: String| {
        Failure::new(
            FailureCategory::Contract,
            format!("inputs.backend_config: {message}"),
        )
    };
    let bytes = context.fetch_input(reference).await.map_err(|error| {
        Failure::new(error.category(), format!("inputs.backend_config: {error}"))
    })?;
    if bytes.len() > MAX_BACKEND_CONFIG_BYTES {
        return Err(contract(format!(
            "{} bytes; at most {MAX_BACKEND_CONFIG_BYTES}",
            bytes.len()
        )));
    }
    let mut settings: crate::contract::ops::Vars = serde_json::from_slice(&bytes)
        .map_err(|error| contract(format!("not a JSON object of settings: {error}")))?;
    // No secret by reference (it would never be resolved) nor by value
    // (it would be written into the plan file): a secret goes inline.
    let secret = settings.iter().find(|(name, value)| {
        value.is_object()
            || value.as_str().is_some_and(|text| {
                (crate::contract::looks_secret(name) && !text.is_empty())
                    || crate::contract::literal_secret(text).is_some()
            })
    });
    if let Some((name, _)) = secret {
        return Err(contract(format!(
            "`{}` holds a secret or a reference: a secret goes in `inputs.backend`, as a reference",
            crate::contract::limits::loggable(name)
        )));
    }
    let inline_conn_str = module.backend.contains_key("conn_str");
    settings.extend(module.backend.clone());
    let mut problems = Vec::new();
    crate::contract::ops::opentofu::backend_problems(
        "inputs.backend_config",
        &settings,
        true,
        &mut problems,
    );
    if !problems.is_empty() {
        return Err(Failure::new(
            FailureCategory::Contract,
            crate::contract::Problems(problems).to_string(),
        ));
    }
    module.backend = settings;
    let kind = backend_type(&module);
    if !context
        .policy()
        .tenant(tenant)
        .operations
        .opentofu
        .allows_backend(kind)
    {
        return Err(Failure::policy(format!(
            "inputs.backend_config: backend `{kind}` is not allowed (operator policy rule tenants.{tenant}.opentofu.backends)"
        )));
    }
    // Intake let an inline secret `conn_str` wait for the type: only pg's
    // may be one.
    if inline_conn_str && kind != "pg" {
        return Err(contract(format!(
            "the {kind} backend takes no `conn_str` (only the pg backend's may be a secret)"
        )));
    }
    Ok(module)
}

/// The attempt's working directory, and (unsandboxed) a directory for the
/// CLI's sockets; sandboxed, the CLI's /tmp is its own and its path short.
fn directories(context: &ExecutionContext) -> Result<(Workdir, Option<Workdir>), Failure> {
    let workdir = Workdir::for_tools(context.tools()).map_err(|error| {
        Failure::infrastructure(format!("no working directory for the CLI: {error}"))
    })?;
    if context.tools().sandbox.enabled {
        return Ok((workdir, None));
    }
    let sockets = socket_dir().map_err(|error| {
        Failure::infrastructure(format!("no temporary directory for the CLI: {error}"))
    })?;
    Ok((workdir, Some(sockets)))
}

/// A fresh 0700 directory under [`SOCKET_ROOT`], once the root is checked
/// to be this user's own directory, closed to others (not a link another
/// local user made first).
fn socket_dir() -> std::io::Result<Workdir> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let root = std::path::Path::new(SOCKET_ROOT);
    let workdir = Workdir::new(root)?;
    let metadata = std::fs::symlink_metadata(root)?;
    let own = metadata.is_dir()
        && metadata.uid() == rustix::process::geteuid().as_raw()
        && metadata.permissions().mode() & 0o077 == 0;
    if !own {
        return Err(std::io::Error::other(format!(
            "{SOCKET_ROOT} is not a 0700 directory of this user's"
        )));
    }
    Ok(workdir)
}

/// The `PG*` variables libpq reads, from a connection string (a
/// `postgres://` URL or `key=value` pairs). No error quotes the string.
fn pg_environment(conn_str: &str) -> Result<Vec<(String, String)>, String> {
    let variable = |key: &str| -> Option<&'static str> {
        Some(match key {
            "host" => "PGHOST",
            "port" => "PGPORT",
            "user" => "PGUSER",
            "password" => "PGPASSWORD",
            "dbname" => "PGDATABASE",
            "sslmode" => "PGSSLMODE",
            "connect_timeout" => "PGCONNECT_TIMEOUT",
            "application_name" => "PGAPPNAME",
            _ => return None,
        })
    };
    let mut pairs: Vec<(String, String)> = Vec::new();
    let text = conn_str.trim();
    if text.starts_with("postgres://") || text.starts_with("postgresql://") {
        let url = url::Url::parse(text)
            .map_err(|error| format!("backend.conn_str is not a postgres URL ({error})"))?;
        let decoded = |part: &str| {
            percent_encoding::percent_decode_str(part)
                .decode_utf8()
                .map(|text| text.into_owned())
                .map_err(|_| "backend.conn_str: a part of the URL is not UTF-8".to_owned())
        };
        if !url.username().is_empty() {
            pairs.push(("user".into(), decoded(url.username())?));
        }
        if let Some(password) = url.password() {
            pairs.push(("password".into(), decoded(password)?));
        }
        if let Some(host) = url.host_str() {
            pairs.push(("host".into(), host.trim_matches(['[', ']']).to_owned()));
        }
        if let Some(port) = url.port() {
            pairs.push(("port".into(), port.to_string()));
        }
        let database = url.path().trim_start_matches('/');
        if !database.is_empty() {
            pairs.push(("dbname".into(), decoded(database)?));
        }
        pairs.extend(
            url.query_pairs()
                .map(|(k, v)| (k.into_owned(), v.into_owned())),
        );
    } else {
        for pair in text.split_whitespace() {
            let Some((key, value)) = pair.split_once('=') else {
                return Err(
                    "backend.conn_str: expected a postgres:// URL or key=value pairs".into(),
                );
            };
            if value.contains(['\'', '\\']) {
                return Err(
                    "backend.conn_str: quoted key=value pairs are not supported (use a postgres:// URL)"
                        .into(),
                );
            }
            pairs.push((key.to_owned(), value.to_owned()));
        }
    }
    pairs
        .into_iter()
        .map(|(key, value)| match variable(&key) {
            Some(name) => Ok((name.to_owned(), value)),
            // The key is not quoted: in a malformed string it may be a
            // piece of the password.
            None => Err(
                "backend.conn_str: a parameter is not supported (only host, port, user, password, dbname, sslmode, connect_timeout, application_name)"
                    .to_owned(),
            ),
        })
        .collect()
}

/// One attempt's CLI invocations.
struct Run<'a> {
    config: &'a TofuConfig,
    /// All the CLI, its providers and the module's code may reach: the
    /// operator's `opentofu.egress` for the tenant.
    egress: Vec<Destination>,
    workdir: &'a Workdir,
    /// The CLI's `TMPDIR` (a short path, for its plugins' sockets), when
    /// unsandboxed; sandboxed, its own `/tmp`.
    sockets: Option<&'a Workdir>,
    /// The `local` backend's state directory, which the CLI writes.
    state_dir: Option<PathBuf>,
    context: &'a ExecutionContext,
    /// The module's directory inside the unpacked package.
    module_dir: PathBuf,
    /// Every `-var-file=` the CLI is given, in order: the JobSpec's
    /// variable files, then its `variables`.
    var_files: Vec<String>,
    /// The tenant's provider variables and the backend's `PG*` ones.
    env: Vec<(String, String)>,
    /// Where the sensitive outputs' values are written, if anywhere.
    sensitive_outputs_to: Option<&'a SecretLocation>,
    report: TofuResult,
}

impl Run<'_> {
    /// Fetches and unpacks the module, writes the runner's CLI
    /// configuration and backend override, initialises the working
    /// directory and selects the workspace.
    async fn prepare(
        &mut self,
        tenant: &str,
        module: &TofuModule,
        operation: Operation,
    ) -> Result<(), Failure> {
        let digest = module.package.digest.as_deref().unwrap_or_default();
        let reference = InputRef::parse(digest).map_err(|message| {
            Failure::new(
                FailureCategory::Contract,
                format!("inputs.package.digest: {message}"),
            )
        })?;
        let root = self.workdir.path().join("module");
        package::fetch_and_unpack(self.context, &reference, &root).await?;
        self.module_dir = match module.path.as_deref() {
            Some(path) => root.join(path),
            None => root.clone(),
        };
        if !self.module_dir.is_dir() {
            return Err(Failure::new(
                FailureCategory::Contract,
                format!(
                    "inputs.path: `{}` is not a directory of the package",
                    module.path.as_deref().unwrap_or(".")
                ),
            ));
        }
        if let Some(name) = override_file_in(&self.module_dir) {
            return Err(Failure::new(
                FailureCategory::Contract,
                format!(
                    "inputs.package: the module's directory holds the override file `{name}`; \
                     the runner's backend override must be the only one (where the state lives \
                     is the JobSpec's and the operator's, not the module's)"
                ),
            ));
        }
        self.write_cli_config()?;
        self.write_backend(tenant, module)?;
        for (name, value) in &module.env {
            if let Some(value) = value.as_str() {
                self.env.push((name.clone(), value.to_owned()));
            }
        }
        self.write_var_files(module).await?;
        self.context.progress("tofu init", None);
        self.install_modules(&root).await?;
        // -reconfigure: a `.terraform` the package brought is not the
        // backend this run uses. -get=false: the modules are the ones
        // installed and checked above, nothing fetched now.
        self.cli(
            "init",
            &[
                "init",
                "-input=false",
                "-no-color",
                "-reconfigure",
                "-get=false",
            ],
        )
        .await?;
        self.select_workspace(operation).await
    }

    /// The JobSpec's workspace selected, made first when missing (never
    /// for a read: reading a workspace never makes one).
    async fn select_workspace(&mut self, operation: Operation) -> Result<(), Failure> {
        let workspace = self.report.workspace.clone();
        if workspace != "default" {
            let selected = self
                .cli(
                    "workspace select",
                    &["workspace", "select", "-no-color", &workspace],
                )
                .await;
            if let Err(failure) = selected {
                let missing = failure.message.contains("doesn't exist")
                    || failure.message.contains("does not exist");
                // Reading a workspace never makes one.
                let reads = matches!(
                    operation,
                    Operation::OpentofuOutput | Operation::OpentofuStateInspect
                );
                if !missing || reads {
                    return Err(failure);
                }
                self.cli(
                    "workspace new",
                    &["workspace", "new", "-no-color", &workspace],
                )
                .await?;
            }
        }
        Ok(())
    }

    /// The CLI configuration: providers from the operator's mirror only,
    /// when one is configured; nothing of the host's.
    fn write_cli_config(&self) -> Result<(), Failure> {
        let text = match &self.config.provider_mirror {
            Some(mirror) => format!(
                "provider_installation {{\n  filesystem_mirror {{\n    path = {}\n  }}\n  direct {{\n    exclude = [\"*/*/*\"]\n  }}\n}}\n",
                json!(mirror.display().to_string())
            ),
            None => String::new(),
        };
        std::fs::write(self.workdir.path().join("cli.tfrc"), text).map_err(|error| {
            Failure::infrastructure(format!("cannot write the CLI configuration: {error}"))
        })
    }

    /// The backend override: the JobSpec's backend (allowed by the
    /// operator), never the module's own.
    fn write_backend(&mut self, tenant: &str, module: &TofuModule) -> Result<(), Failure> {
        let kind = backend_type(module).to_owned();
        let mut settings = serde_json::Map::new();
        if kind == "local" {
            // One directory per tenant and module: a tenant never names
            // another's state.
            let identity = format!(
                "{tenant}\0{}\0{}",
                module.package.name,
                module.path.as_deref().unwrap_or(".")
            );
            let key = hex::encode(&Sha256::digest(identity.as_bytes())[..16]);
            let dir = self.config.state_dir.join(key);
            use std::os::unix::fs::DirBuilderExt;
            // The root is found through by name only (0711): a sandboxed
            // tool reaches its own module's directory (given to its uid
            // for the run) and lists nothing.
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o711)
                .create(&self.config.state_dir)
                .and_then(|()| std::fs::DirBuilder::new().mode(0o700).create(&dir))
                .or_else(|error| match error.kind() {
                    std::io::ErrorKind::AlreadyExists if dir.is_dir() => Ok(()),
                    _ => Err(error),
                })
                .map_err(|error| {
                    Failure::infrastructure(format!("cannot create the state directory: {error}"))
                })?;
            settings.insert("path".into(), json!(dir.join("terraform.tfstate")));
            settings.insert("workspace_dir".into(), json!(dir.join("workspaces")));
            self.state_dir = Some(dir);
        } else {
            for (name, value) in module.backend.iter().filter(|(name, _)| *name != "type") {
                if kind == "pg" && name == "conn_str" {
                    let conn_str = value.as_str().unwrap_or_default();
                    let env = pg_environment(conn_str).map_err(|message| {
                        Failure::new(FailureCategory::Contract, format!("inputs.{message}"))
                    })?;
                    self.env.extend(env);
                    settings.insert(name.clone(), json!(PG_CONN_STR));
                } else {
                    settings.insert(name.clone(), value.clone());
                }
            }
        }
        let text = json!({"terraform": {"backend": {kind: settings}}}).to_string();
        std::fs::write(self.module_dir.join(BACKEND_OVERRIDE), text).map_err(|error| {
            Failure::infrastructure(format!("cannot write the backend override: {error}"))
        })
    }

    /// The CLI in the module's directory with exactly the runner's
    /// environment: the tenant's provider variables and the backend's,
    /// then the runner's own (which no tenant may set).
    fn command(&self, args: &[&str]) -> ToolCommand {
        // The module, its providers and provisioners are the tenant's code.
        let mut command = ToolCommand::new(&self.config.cli)
            .base_env(self.workdir)
            .reach(self.egress.clone());
        for (name, value) in &self.env {
            command = command.env(name.clone(), value.clone());
        }
        if let Some(mirror) = &self.config.provider_mirror {
            command = command.read_only(mirror);
        }
        if let Some(state) = &self.state_dir {
            command = command.writable(state);
        }
        let tmp = self
            .sockets
            .map_or_else(|| "/tmp".to_owned(), |dir| dir.path().display().to_string());
        command
            .env(
                "TF_CLI_CONFIG_FILE",
                self.workdir.path().join("cli.tfrc").display().to_string(),
            )
            .env("TMPDIR", tmp)
            .env("CHECKPOINT_DISABLE", "1")
            .env("TF_IN_AUTOMATION", "1")
            // The CLI's own data (backend, providers, selected workspace)
            // is the run's, never a `.terraform` the package brought.
            .env(
                "TF_DATA_DIR",
                self.workdir.path().join("tfdata").display().to_string(),
            )
            .env("TF_INPUT", "0")
            .arg(format!("-chdir={}", self.module_dir.display()))
            .args(args.iter().copied())
    }

    /// Child modules come only from inside the approved package (whose
    /// digest is what was approved): the CLI installs them with no network
    /// and no backend, so a registry, git or HTTP source cannot be
    /// fetched, then every module its manifest records must have a local
    /// source (`./`, `../`) and a directory inside the package.
    async fn install_modules(&self, package_root: &std::path::Path) -> Result<(), Failure> {
        // A configuration that never says `module` calls none: nothing to
        // install (and an `init` the fewer, a third of a small apply).
        if !mentions_module(package_root) {
            return Ok(());
        }
        let command = self
            .command(&["init", "-backend=false", "-input=false", "-no-color"])
            .capture(MAX_DIAGNOSTICS_CAPTURE)
            .offline();
        if let Err(failure) = self.run_cli("init (modules)", command).await {
            let remote = [
                "remote module registry",
                "Failed to download module",
                "Could not download module",
                "Failed to retrieve available versions for module",
            ];
            if remote.iter().any(|words| failure.message.contains(words)) {
                return Err(Failure::new(
                    FailureCategory::Policy,
                    format!("inputs.package: child modules come only from inside the approved package (a `./` or `../` source), never fetched: {}", failure.message),
                ));
            }
            return Err(failure);
        }
        let manifest = self.workdir.path().join("tfdata/modules/modules.json");
        let modules = match crate::runner::sandbox::read_regular(
            &manifest,
            crate::contract::outputs::MAX_OUTPUT_BYTES,
        ) {
            Ok(bytes) => crate::runner::yaml::json(&bytes, MAX_EXPANDED).map_err(|error| {
                Failure::new(
                    FailureCategory::RunnerError,
                    format!("the CLI's module manifest: {error}"),
                )
            })?,
            // No module calls, no manifest.
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(error) => {
                return Err(Failure::infrastructure(format!(
                    "cannot read the CLI's module manifest: {error}"
                )))
            }
        };
        let root = package_root.canonicalize().map_err(|error| {
            Failure::infrastructure(format!("the package's directory: {error}"))
        })?;
        for entry in modules["Modules"].as_array().into_iter().flatten() {
            let key = entry["Key"].as_str().unwrap_or_default();
            if key.is_empty() {
                continue;
            }
            let source = entry["Source"].as_str().unwrap_or_default();
            let dir = self
                .module_dir
                .join(entry["Dir"].as_str().unwrap_or_default());
            let inside = dir.canonicalize().is_ok_and(|dir| dir.starts_with(&root));
            if !(source.starts_with("./") || source.starts_with("../")) || !inside {
                return Err(Failure::new(
                    FailureCategory::Policy,
                    format!(
                        "inputs.package: module `{}` comes from `{}`, not from inside the approved package (a `./` or `../` source)",
                        crate::contract::limits::loggable(key),
                        crate::contract::limits::loggable(source)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Runs the CLI, its output logged.
    async fn cli(&self, what: &str, args: &[&str]) -> Result<ToolExit, Failure> {
        let command = self.command(args).capture(MAX_DIAGNOSTICS_CAPTURE);
        self.run_cli(what, command).await
    }

    /// Runs the CLI for data (a plan's or a state's JSON, which may hold
    /// any value of the state): captured, never logged.
    async fn cli_data(&self, what: &str, args: &[&str]) -> Result<Vec<u8>, Failure> {
        let command = self.command(args).stdout_as_data(MAX_CAPTURE);
        Ok(self.run_cli(what, command).await?.stdout)
    }

    async fn run_cli(&self, what: &str, command: ToolCommand) -> Result<ToolExit, Failure> {
        tool::run_judged(self.context, self.workdir, what, command, |said| {
            if said.contains("Error acquiring the state lock") {
                FailureCategory::Infrastructure
            } else if said.contains("connection refused")
                || said.contains("no such host")
                || said.contains("i/o timeout")
            {
                FailureCategory::TargetUnreachable
            } else if said.contains("Saved plan is stale")
                || said.contains("doesn't exist")
                || said.contains("No value for required variable")
                || said.contains("Unsupported argument")
                || said.contains("Invalid value for")
                || said.contains("Failed to query available provider packages")
            {
                FailureCategory::Contract
            } else {
                FailureCategory::RunnerError
            }
        })
        .await
    }

    /// How long the CLI waits for the state's lock: what is left of the
    /// attempt, less a margin to report in.
    fn lock_timeout(&self) -> String {
        format!(
            "-lock-timeout={}s",
            self.context.seconds_left(REPORT_MARGIN)
        )
    }

    /// The JobSpec's variable files fetched (each checked against its
    /// digest and tenant) and written where the CLI reads them, named by
    /// their form, then its `variables` as a last one.
    async fn write_var_files(&mut self, module: &TofuModule) -> Result<(), Failure> {
        let written = |error: std::io::Error| {
            Failure::infrastructure(format!("cannot write the variables: {error}"))
        };
        for (index, reference) in module.var_files.iter().enumerate() {
            let bytes = self.context.fetch_input(reference).await.map_err(|error| {
                Failure::new(
                    error.category(),
                    format!("inputs.var_files[{index}]: {error}"),
                )
            })?;
            let json = bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
            let name = format!("var-file-{index}.tfvars{}", if json { ".json" } else { "" });
            let path = self.workdir.path().join(name);
            std::fs::write(&path, bytes).map_err(written)?;
            self.var_files.push(format!("-var-file={}", path.display()));
        }
        let path = self.workdir.path().join("variables.tfvars.json");
        let variables = serde_json::to_vec(&module.variables).unwrap_or_default();
        std::fs::write(&path, variables).map_err(written)?;
        self.var_files.push(format!("-var-file={}", path.display()));
        Ok(())
    }

    /// The summary of the saved plan at `path`, as the CLI reads it
    /// (`show -json`, never logged: it holds the state's values).
    async fn show(&mut self, path: &std::path::Path) -> Result<TofuPlan, Failure> {
        let path = path.display().to_string();
        let shown = self
            .cli_data("tofu show", &["show", "-json", "-no-color", &path])
            .await?;
        let shown: Value = crate::runner::yaml::json(&shown, MAX_EXPANDED).map_err(|error| {
            Failure::new(
                FailureCategory::RunnerError,
                format!("the plan's JSON: {error}"),
            )
        })?;
        self.report.cli_version = shown["terraform_version"].as_str().map(str::to_owned);
        Ok(summary(&shown))
    }

    /// `opentofu.plan`: the saved plan, stored by its digest (the reference
    /// an apply names) and as the output `plan.tfplan`, with its summary.
    async fn plan(&mut self, tenant: &str, module: &TofuModule) -> Result<String, Failure> {
        let plan_path = self.workdir.path().join(PLAN_FILE);
        let out = format!("-out={}", plan_path.display());
        let lock = self.lock_timeout();
        let mut args = vec!["plan", "-input=false", "-no-color", &lock, &out];
        args.extend(self.var_files.iter().map(String::as_str));
        self.context.progress("tofu plan", None);
        self.cli("tofu plan", &args).await?;
        let mut plan = self.show(&plan_path).await?;
        let bytes = crate::runner::sandbox::read_regular(
            &plan_path,
            crate::contract::outputs::MAX_OUTPUT_BYTES,
        )
        .map_err(|error| Failure::infrastructure(format!("cannot read the saved plan: {error}")))?;
        // The plan holds the prior state: only this tenant's apply reads it.
        let reference = self
            .context
            .store_input(&bytes, &provenance(tenant, module))
            .await
            .map_err(|failure| {
                Failure::new(failure.category, format!("the plan: {}", failure.message))
            })?;
        self.context
            .store_output(&plan_path, PLAN_FILE, RetentionClass::Evidence)
            .await
            .map_err(|error| {
                Failure::infrastructure(format!("storing the plan output: {error}"))
            })?;
        plan.artifact = Some(reference.to_string());
        let message = format!(
            "plan {reference}: {} to add, {} to change, {} to destroy",
            plan.add, plan.change, plan.destroy
        );
        self.report.plan = Some(plan);
        Ok(message)
    }

    /// Refuses a plan artifact this runner did not make by `opentofu.plan`
    /// for this tenant, module package and path, workspace and backend: a
    /// saved plan carries its own backend settings, workspace and module
    /// code, which the CLI applies as they are.
    async fn check_provenance(
        &self,
        reference: &InputRef,
        tenant: &str,
        module: &TofuModule,
    ) -> Result<(), Failure> {
        let origin = self
            .context
            .input_origin(reference)
            .await
            .map_err(|failure| {
                Failure::new(failure.category, format!("the plan: {}", failure.message))
            })?;
        let Some(made) = origin else {
            return Err(Failure::new(
                FailureCategory::Policy,
                format!("inputs.plan_artifact: {reference} is not a plan an opentofu.plan made"),
            ));
        };
        let wanted = provenance(tenant, module);
        let differs: Vec<&str> = ["tenant", "package", "path", "workspace", "backend"]
            .into_iter()
            .filter(|field| made[field] != wanted[field])
            .collect();
        if !differs.is_empty() {
            return Err(Failure::new(
                FailureCategory::Policy,
                format!(
                    "inputs.plan_artifact: {reference} was planned for another {} than this apply's",
                    differs.join(", ")
                ),
            ));
        }
        Ok(())
    }

    /// `opentofu.apply`: the approved plan artifact (fetched and checked
    /// against its digest), or under an explicit operation policy a plan
    /// made there and then; either applied as saved, once its summary is
    /// read: a plan that destroys anything (a replacement too) needs
    /// `policy.elevated` exactly as `opentofu.destroy` does. Then the state
    /// it left.
    async fn apply(
        &mut self,
        plan_artifact: Option<&InputRef>,
        elevated: bool,
    ) -> Result<String, Failure> {
        let (plan_path, plan) = match plan_artifact {
            Some(reference) => {
                let path = self
                    .workdir
                    .fetch_input(self.context, reference)
                    .await
                    .map_err(|error| {
                        Failure::new(error.category(), format!("inputs.plan_artifact: {error}"))
                    })?;
                let mut plan = self.show(&path).await?;
                plan.artifact = Some(reference.to_string());
                (path, plan)
            }
            None => {
                let path = self.workdir.path().join("apply.tfplan");
                let out = format!("-out={}", path.display());
                let lock = self.lock_timeout();
                let mut args = vec!["plan", "-input=false", "-no-color", &lock, &out];
                args.extend(self.var_files.iter().map(String::as_str));
                self.context.progress("tofu plan", None);
                self.cli("tofu plan", &args).await?;
                let plan = self.show(&path).await?;
                (path, plan)
            }
        };
        if plan.destroy > 0 && !elevated {
            let destroys = plan.destroy;
            self.report.plan = Some(plan);
            return Err(Failure::new(
                FailureCategory::Policy,
                format!(
                    "the plan destroys {destroys} resource(s) (a replacement destroys one): applying it needs `policy.elevated: true`, as opentofu.destroy does"
                ),
            ));
        }
        let (lock, path) = (self.lock_timeout(), plan_path.display().to_string());
        self.context.progress("tofu apply", None);
        self.cli(
            "tofu apply",
            &["apply", "-input=false", "-no-color", &lock, &path],
        )
        .await?;
        self.report.plan = Some(plan);
        self.read_state(true).await?;
        Ok(format!(
            "applied: {} resource(s), {} output(s)",
            self.report.resources.len(),
            self.report.outputs.len()
        ))
    }

    /// `opentofu.destroy` (elevated): every resource of the state destroyed.
    async fn destroy(&mut self) -> Result<String, Failure> {
        let lock = self.lock_timeout();
        self.context.progress("tofu destroy", None);
        let mut args = vec![
            "destroy",
            "-input=false",
            "-no-color",
            "-auto-approve",
            &lock,
        ];
        args.extend(self.var_files.iter().map(String::as_str));
        self.cli("tofu destroy", &args).await?;
        self.read_state(true).await?;
        Ok(format!(
            "destroyed: {} resource(s) left",
            self.report.resources.len()
        ))
    }

    /// `opentofu.output` and `opentofu.state.inspect`: what the state holds.
    async fn inspect(&mut self, operation: Operation) -> Result<String, Failure> {
        self.read_state(false).await?;
        Ok(if operation == Operation::OpentofuOutput {
            format!("{} output(s)", self.report.outputs.len())
        } else {
            format!("{} resource(s)", self.report.resources.len())
        })
    }

    /// The state as the backend holds it (`state pull`, never logged): its
    /// version, outputs (a sensitive one's value withheld) and managed
    /// resources with their ids; with `store` (after a change), the state
    /// itself as the output [`STATE_FILE`], what it marks sensitive
    /// redacted.
    async fn read_state(&mut self, store: bool) -> Result<(), Failure> {
        let pulled = self.cli_data("tofu state pull", &["state", "pull"]).await?;
        if pulled.iter().all(u8::is_ascii_whitespace) {
            // No state yet: nothing applied in this workspace.
            return Ok(());
        }
        let state: Value = crate::runner::yaml::json(&pulled, MAX_EXPANDED).map_err(|error| {
            Failure::new(
                FailureCategory::RunnerError,
                format!("the state is not JSON: {error}"),
            )
        })?;
        let mut facts = state_facts(&state, &pulled);
        if let Some(location) = self.sensitive_outputs_to {
            self.write_sensitive(location, &state, &mut facts.outputs)
                .await?;
        }
        if store {
            facts.version.artifact = Some(self.store_state(state).await?);
        }
        if self.report.cli_version.is_none() {
            self.report.cli_version = facts.cli_version;
        }
        self.report.state = Some(facts.version);
        self.report.outputs = facts.outputs;
        self.report.resources = facts.resources;
        Ok(())
    }
}

impl Run<'_> {
    /// Writes the values of the sensitive outputs of `state` as one secret
    /// at `location`, a key per output (a value that is not a string as
    /// its JSON text), and names it in each output's result.
    async fn write_sensitive(
        &self,
        location: &SecretLocation,
        state: &Value,
        outputs: &mut BTreeMap<String, TofuOutput>,
    ) -> Result<(), Failure> {
        let values: BTreeMap<String, String> = outputs
            .iter()
            .filter(|(_, output)| output.sensitive)
            .map(|(name, _)| {
                let value = &state["outputs"][name]["value"];
                let text = value
                    .as_str()
                    .map_or_else(|| value.to_string(), str::to_owned);
                (name.clone(), text)
            })
            .collect();
        if values.is_empty() {
            return Ok(());
        }
        self.context
            .store_secrets("the sensitive outputs", location, &values)
            .await?;
        for name in values.keys() {
            if let Some(output) = outputs.get_mut(name) {
                output.secret = Some(TofuOutputSecret {
                    mount: location.mount.clone(),
                    path: location.path.clone(),
                    key: name.clone(),
                });
            }
        }
        Ok(())
    }

    /// Stores `state`, redacted, as the output [`STATE_FILE`] (kept as
    /// evidence); its name.
    async fn store_state(&self, state: Value) -> Result<String, Failure> {
        let path = self.workdir.path().join(STATE_FILE);
        let text = serde_json::to_vec_pretty(&redacted(state)).unwrap_or_default();
        // After the module's provisioners ran here.
        crate::runner::sandbox::write_fresh(&path, &text).map_err(|error| {
            Failure::infrastructure(format!("cannot write the state's output: {error}"))
        })?;
        self.context
            .store_output(&path, STATE_FILE, RetentionClass::Evidence)
            .await
            .map_err(|error| {
                Failure::new(error.category(), format!("storing the state: {error}"))
            })?;
        Ok(STATE_FILE.to_owned())
    }
}

/// The output a changed state is stored as.
const STATE_FILE: &str = "state.json";

/// What `text` stands for where a state marks a value sensitive.
const REDACTED: &str = "[redacted]";

/// `state` with what it marks sensitive replaced by [`REDACTED`]: the
/// value of every sensitive output, and every attribute but `id` of each
/// resource instance that has a sensitive attribute. Whole attributes: a
/// state names the sensitive paths, but a value derived from one (a
/// `terraform_data`'s `output`) is not marked, and a dynamic attribute
/// wraps its value, so a path alone would leave copies in the clear.
fn redacted(mut state: Value) -> Value {
    if let Some(outputs) = state["outputs"].as_object_mut() {
        for output in outputs.values_mut() {
            if output["sensitive"].as_bool().unwrap_or(false) {
                output["value"] = json!(REDACTED);
            }
        }
    }
    let Some(resources) = state["resources"].as_array_mut() else {
        return state;
    };
    for instance in resources
        .iter_mut()
        .filter_map(|resource| resource["instances"].as_array_mut())
        .flatten()
    {
        let sensitive = instance["sensitive_attributes"]
            .as_array()
            .is_some_and(|paths| !paths.is_empty());
        if let (true, Some(attributes)) = (sensitive, instance["attributes"].as_object_mut()) {
            for (name, value) in attributes.iter_mut() {
                if name != "id" {
                    *value = json!(REDACTED);
                }
            }
        }
    }
    state
}

/// Whether any configuration file of the package (`.tf`, `.tofu` and
/// their `.json` forms, anywhere in it) holds the word `module`.
fn mentions_module(root: &std::path::Path) -> bool {
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            // Unreadable: assume the worst, install and check.
            return true;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            match entry.file_type() {
                Ok(kind) if kind.is_dir() => pending.push(path),
                Ok(kind) if kind.is_file() => {
                    let name = entry.file_name().to_string_lossy().into_owned();
                    let configuration = [".tf", ".tf.json", ".tofu", ".tofu.json"]
                        .iter()
                        .any(|suffix| name.ends_with(suffix));
                    if configuration
                        && std::fs::read(&path).map_or(true, |bytes| {
                            bytes.windows(6).any(|window| window == b"module")
                        })
                    {
                        return true;
                    }
                }
                _ => {}
            }
        }
    }
    false
}

/// The first override file (`override.tf`, `*_override.tf`, their
/// `.tf.json`, `.tofu` and `.tofu.json` forms) in `dir`, which the CLI would
/// merge after the runner's own, or a file named like the runner's.
fn override_file_in(dir: &std::path::Path) -> Option<String> {
    let entries = std::fs::read_dir(dir).ok()?;
    entries
        .filter_map(Result::ok)
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name != BACKEND_OVERRIDE)
        .find(|name| {
            // OpenTofu reads `.tofu` files too, and one shadows the `.tf`
            // file of its stem: nothing may share the override's stem.
            let stem = [".tf", ".tf.json", ".tofu", ".tofu.json"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix));
            name.starts_with(OVERRIDE_STEM)
                || stem.is_some_and(|stem| stem == "override" || stem.ends_with("_override"))
        })
}

/// What a plan is made for: the tenant, the module package (its digest)
/// and path, the workspace and the backend (type and settings, the secret
/// `conn_str` left out: the apply's own credentials reach the database).
fn provenance(tenant: &str, module: &TofuModule) -> Value {
    let backend: serde_json::Map<String, Value> = module
        .backend
        .iter()
        .filter(|(name, _)| *name != "conn_str")
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect();
    json!({
        "tenant": tenant,
        "package": module.package.digest,
        "path": module.path.as_deref().unwrap_or("."),
        "workspace": module.workspace.as_deref().unwrap_or("default"),
        "backend": {"type": backend_type(module), "settings": backend},
    })
}

/// What a plan changes, from `show -json` of the saved plan.
fn summary(shown: &Value) -> TofuPlan {
    let mut plan = TofuPlan::default();
    for change in shown["resource_changes"].as_array().into_iter().flatten() {
        let actions: Vec<String> = change
            .pointer("/change/actions")
            .and_then(Value::as_array)
            .map(|actions| {
                actions
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let has = |action: &str| actions.iter().any(|a| a == action);
        if has("create") {
            plan.add += 1;
        }
        if has("delete") {
            plan.destroy += 1;
        }
        if has("update") {
            plan.change += 1;
        }
        if actions.iter().all(|a| a == "no-op" || a == "read") {
            continue;
        }
        if plan.changes.len() < MAX_LISTED {
            plan.changes.push(TofuChange {
                address: change["address"].as_str().unwrap_or_default().to_owned(),
                actions,
            });
        }
    }
    let outputs_change = shown["output_changes"].as_object().is_some_and(|outputs| {
        outputs.values().any(|change| {
            change
                .pointer("/actions")
                .and_then(Value::as_array)
                .is_some_and(|actions| actions.iter().any(|a| a != "no-op"))
        })
    });
    plan.has_changes = !plan.changes.is_empty() || outputs_change;
    plan
}

/// What the runner reports of a state.
struct StateFacts {
    version: TofuStateVersion,
    cli_version: Option<String>,
    outputs: BTreeMap<String, TofuOutput>,
    resources: Vec<TofuResource>,
}

/// A state (format version 4) read: lineage, serial and digest; outputs;
/// each managed resource instance's address and id.
fn state_facts(state: &Value, raw: &[u8]) -> StateFacts {
    let outputs = state["outputs"]
        .as_object()
        .map(|outputs| {
            outputs
                .iter()
                .map(|(name, output)| {
                    let sensitive = output["sensitive"].as_bool().unwrap_or(false);
                    let value = if sensitive {
                        Value::Null
                    } else {
                        output["value"].clone()
                    };
                    let output = TofuOutput {
                        sensitive,
                        value,
                        secret: None,
                    };
                    (name.clone(), output)
                })
                .collect()
        })
        .unwrap_or_default();
    let mut resources = Vec::new();
    for resource in state["resources"].as_array().into_iter().flatten() {
        if resource["mode"] != "managed" {
            continue;
        }
        let kind = resource["type"].as_str().unwrap_or_default();
        let base = format!("{kind}.{}", resource["name"].as_str().unwrap_or_default());
        let base = match resource["module"].as_str() {
            Some(module) => format!("{module}.{base}"),
            None => base,
        };
        for instance in resource["instances"].as_array().into_iter().flatten() {
            if resources.len() >= MAX_LISTED {
                break;
            }
            let address = match &instance["index_key"] {
                Value::String(key) => format!("{base}[{}]", json!(key)),
                Value::Number(index) => format!("{base}[{index}]"),
                _ => base.clone(),
            };
            resources.push(TofuResource {
                address,
                kind: kind.to_owned(),
                id: instance.pointer("/attributes/id").and_then(|id| match id {
                    Value::String(id) => Some(id.clone()),
                    Value::Number(id) => Some(id.to_string()),
                    _ => None,
                }),
            });
        }
    }
    StateFacts {
        version: TofuStateVersion {
            lineage: state["lineage"].as_str().unwrap_or_default().to_owned(),
            serial: state["serial"].as_u64().unwrap_or(0),
            sha256: hex::encode(Sha256::digest(raw)),
            artifact: None,
        },
        cli_version: state["terraform_version"].as_str().map(str::to_owned),
        outputs,
        resources,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_runs_exactly_the_catalog_s_opentofu_operations() {
        let runner = TofuRunner::new(TofuConfig::default());
        let mut announced = runner.operations();
        announced.sort();
        let catalog: Vec<Operation> = Operation::implemented_by(RunnerType::Opentofu).collect();
        assert_eq!(announced, catalog);
        assert_eq!(catalog.len(), 5);
    }

    #[test]
    fn a_connection_string_becomes_libpq_variables_and_no_error_quotes_it() {
        let env = pg_environment(
            "postgres://state%40a:p%2Fss@db.internal:5433/tfstate?sslmode=require&connect_timeout=5",
        )
        .unwrap();
        let env: BTreeMap<_, _> = env.into_iter().collect();
        assert_eq!(env["PGUSER"], "state@a");
        assert_eq!(env["PGPASSWORD"], "p/ss");
        assert_eq!(env["PGHOST"], "db.internal");
        assert_eq!(env["PGPORT"], "5433");
        assert_eq!(env["PGDATABASE"], "tfstate");
        assert_eq!(env["PGSSLMODE"], "require");
        assert_eq!(env["PGCONNECT_TIMEOUT"], "5");
        let pairs = pg_environment("host=h user=u password=hunter2 dbname=d").unwrap();
        assert_eq!(pairs.len(), 4);
        for bad in [
            "postgres://u:hunter2@h/d?sslkey=/root/.ssh/id_rsa",
            "host=h password='hunter2'",
            "hunter2",
        ] {
            let error = pg_environment(bad).unwrap_err();
            assert!(!error.contains("hunter2"), "{error}");
        }
    }

    #[test]
    fn a_module_s_own_override_file_is_found() {
        let dir = std::env::temp_dir().join(format!("tofu-override-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        for name in [
            "main.tf",
            "overrides.md",
            "not_override.txt",
            BACKEND_OVERRIDE,
        ] {
            std::fs::write(dir.join(name), "").unwrap();
        }
        assert_eq!(override_file_in(&dir), None);
        std::fs::write(dir.join("zzz_override.tf.json"), "{}").unwrap();
        assert_eq!(
            override_file_in(&dir).as_deref(),
            Some("zzz_override.tf.json")
        );
        std::fs::remove_file(dir.join("zzz_override.tf.json")).unwrap();
        std::fs::write(dir.join("override.tf"), "").unwrap();
        assert_eq!(override_file_in(&dir).as_deref(), Some("override.tf"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_plan_is_counted_as_the_cli_counts_it() {
        let shown = json!({
            "resource_changes": [
                {"address": "null_resource.a", "change": {"actions": ["create"]}},
                {"address": "null_resource.b", "change": {"actions": ["delete", "create"]}},
                {"address": "null_resource.c", "change": {"actions": ["update"]}},
                {"address": "null_resource.d", "change": {"actions": ["no-op"]}},
                {"address": "data.x.y", "change": {"actions": ["read"]}},
            ],
            "output_changes": {"o": {"actions": ["no-op"]}},
        });
        let plan = summary(&shown);
        assert_eq!((plan.add, plan.change, plan.destroy), (2, 1, 1));
        assert_eq!(plan.changes.len(), 3);
        assert!(plan.has_changes);
        let none = summary(&json!({"resource_changes": [], "output_changes": {}}));
        assert!(!none.has_changes);
    }

    #[test]
    fn a_stored_state_keeps_nothing_it_marks_sensitive() {
        let state = json!({
            "version": 4, "serial": 3, "lineage": "l",
            "outputs": {
                "open": {"value": "shown", "type": "string"},
                "hidden": {"value": "abc", "type": "string", "sensitive": true},
            },
            "resources": [{"mode": "managed", "type": "terraform_data", "name": "x", "instances": [
                {"attributes": {"id": "i-1", "input": {"value": {"pass": "abc"}, "type": "dynamic"},
                                "output": {"value": {"pass": "abc"}, "type": "dynamic"}},
                 "sensitive_attributes": [[{"type": "get_attr", "value": "input"},
                                           {"type": "get_attr", "value": "pass"}]]},
                {"attributes": {"id": "i-2", "triggers": {"run": "1"}}, "sensitive_attributes": []},
            ]}],
        });
        let stored = redacted(state).to_string();
        assert!(!stored.contains("abc"), "{stored}");
        let stored: Value = serde_json::from_str(&stored).unwrap();
        assert_eq!(stored["outputs"]["open"]["value"], "shown");
        assert_eq!(stored["outputs"]["hidden"]["value"], REDACTED);
        let instances = &stored["resources"][0]["instances"];
        assert_eq!(instances[0]["attributes"]["id"], "i-1");
        assert_eq!(instances[1]["attributes"]["triggers"]["run"], "1");
    }

    #[test]
    fn a_state_gives_its_version_outputs_and_resource_ids() {
        let state = json!({
            "version": 4, "terraform_version": "1.0.3", "serial": 3, "lineage": "l-1",
            "outputs": {
                "greeting": {"value": "hi", "type": "string"},
                "token": {"value": "hunter2", "type": "string", "sensitive": true},
            },
            "resources": [
                {"mode": "managed", "type": "null_resource", "name": "a",
                 "instances": [{"attributes": {"id": "123"}}]},
                {"mode": "managed", "type": "null_resource", "name": "n", "module": "module.m",
                 "instances": [{"index_key": 0, "attributes": {"id": "7"}}, {"index_key": "k", "attributes": {"id": "8"}}]},
                {"mode": "data", "type": "x", "name": "y", "instances": [{"attributes": {"id": "d"}}]},
            ],
        });
        let raw = state.to_string();
        let facts = state_facts(&state, raw.as_bytes());
        assert_eq!(facts.version.serial, 3);
        assert_eq!(facts.version.lineage, "l-1");
        assert_eq!(facts.outputs["greeting"].value, "hi");
        assert_eq!(facts.outputs["token"].value, Value::Null);
        let addresses: Vec<(&str, Option<&str>)> = facts
            .resources
            .iter()
            .map(|r| (r.address.as_str(), r.id.as_deref()))
            .collect();
        assert_eq!(
            addresses,
            [
                ("null_resource.a", Some("123")),
                ("module.m.null_resource.n[0]", Some("7")),
                ("module.m.null_resource.n[\"k\"]", Some("8")),
            ]
        );
    }
}
