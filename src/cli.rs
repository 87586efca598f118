//! The `execplane` command line.

pub mod assemble;
mod attempts;
pub(crate) mod audit;
mod operations;
mod projection;
mod roles;
pub use roles::equip;
mod submit;
mod validate;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use uuid::Uuid;

use crate::config::Config;
use crate::contract::RunnerType;
use crate::store::Store;

#[derive(Debug, Parser)]
#[command(
    name = "execplane",
    version,
    about = "The execution plane: typed runners, fenced leases, a tamper-evident attempt log."
)]
pub struct Cli {
    /// A TOML configuration file (also `EXECPLANE_CONFIG`); environment
    /// variables override it.
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Apply the database migrations.
    Migrate,
    /// Validate a JobSpec (JSON); prints every problem and exits 2 when invalid.
    Validate {
        file: PathBuf,
        /// Print the problems (or the normalised spec) as JSON.
        #[arg(long)]
        json: bool,
    },
    /// The operation catalog: each operation's runner type, whether it is
    /// idempotent, and whether a runner of this release runs it.
    Operations {
        #[arg(long)]
        json: bool,
        /// Also how many live runner instances serve each operation (reads
        /// the database's presence).
        #[arg(long)]
        live: bool,
    },
    /// The operator's policy.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Tamper evidence and history.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// The projection.
    #[command(subcommand)]
    Projection(ProjectionCommand),
    /// Benchmarks, reported as figures.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Every role in one process: dispatcher, relay, timers, callbacks, the
    /// verification runner, and the ingress when its keys are set (applies
    /// migrations and topology first).
    Serve,
    /// The artifact worker alone: log chunks to stored, checksummed bundles.
    ArtifactWorker,
    /// Stored artifacts of an attempt.
    #[command(subcommand)]
    Artifacts(ArtifactsCommand),
    /// The ingress role alone: HTTP and TCP for executors, the execute API.
    /// Refuses to start without EXECPLANE_INGRESS_KEY and EXECPLANE_API_KEY.
    Ingress,
    /// The runner catalog the ingress checks executors against.
    #[command(subcommand)]
    Executors(ExecutorsCommand),
    /// The dispatcher role alone.
    Dispatcher,
    /// The outbox relay role alone.
    Relay,
    /// One runner instance of a type.
    Runner {
        /// The runner type (`verification`, `ssh`, `ansible`, `kubernetes`, `helm`, `opentofu`).
        runner_type: String,
    },
    /// Kafka topics.
    #[command(subcommand)]
    Topology(TopologyCommand),
    /// Validate a JobSpec, produce it, follow it to its terminal state.
    /// Exits 0 on success, 1 on any other outcome, 2 if invalid, 4 on timeout.
    Submit {
        file: PathBuf,
        /// Give up waiting after this long.
        #[arg(long, default_value = "5m", value_parser = parse_duration)]
        timeout: std::time::Duration,
        #[arg(long)]
        json: bool,
    },
    /// Attempts in the projection.
    #[command(subcommand)]
    Attempts(AttemptsCommand),
    /// Internal: the supervisor a runner starts each tool process under
    /// (docs/ARCHITECTURE.md, "Tool processes"). Not for operators.
    #[command(hide = true)]
    ToolShim {
        /// The tool's working directory, removed if the runner goes away.
        #[arg(long)]
        workdir: Option<PathBuf>,
        /// Give the tool a stdin pipe that stays open while the supervisor
        /// lives (end of file when it is gone), instead of /dev/null.
        #[arg(long)]
        hold_stdin: bool,
        /// Start the tool as this uid (and the gid of the same number),
        /// without supplementary groups: a sandboxed run, whose program is
        /// the sandbox builder (docs/SECURITY.md).
        #[arg(long)]
        uid: Option<u32>,
        /// A cgroup directory to join before the tool starts (repeated).
        #[arg(long)]
        cgroup: Vec<PathBuf>,
        /// The program and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<std::ffi::OsString>,
    },
    /// Internal: run inside a tool sandbox at start, lists the addresses it
    /// can connect to, exit 1 when any (docs/SECURITY.md, "Network"). Not
    /// for operators.
    #[command(hide = true)]
    SandboxReach {
        addresses: Vec<std::net::SocketAddr>,
    },
    /// Internal: OpenSSH's `KnownHostsCommand` for nodes pinned by host-key
    /// fingerprint (docs/OPERATIONS.md, "SSH"). Not for operators.
    #[command(hide = true)]
    KnownHost {
        pins: PathBuf,
        host: String,
        #[arg(allow_hyphen_values = true)]
        kind: String,
        #[arg(allow_hyphen_values = true)]
        key: String,
    },
    /// Internal: the ssh client the ansible runner gives ansible
    /// (docs/SECURITY.md, "Ansible packages"). Not for operators.
    #[command(hide = true)]
    AnsibleSsh {
        /// The attempt's targets, an `address port` line each: the only
        /// places ssh may connect to.
        #[arg(long)]
        targets: std::path::PathBuf,
        /// ssh's arguments, the remote command last.
        #[arg(last = true)]
        args: Vec<std::ffi::OsString>,
    },
}

fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    crate::contract::DurationMs::parse(text).map(|duration| duration.as_std())
}

#[derive(Debug, Subcommand)]
pub enum ArtifactsCommand {
    /// Store an input artifact by content; prints its reference
    /// (`sha256:<hex>`), which a JobSpec names as `{"artifact": "..."}`.
    Put {
        file: PathBuf,
        /// A tenant whose jobs may name it (repeat, or comma-separate, for
        /// several). Without one, only a digest the operator's policy
        /// approves (an ansible package, an OpenTofu module, a chart) can
        /// be read.
        #[arg(long = "tenant", value_delimiter = ',')]
        tenants: Vec<String>,
        #[arg(long)]
        json: bool,
    },
    /// An attempt's artifacts: name, class, size, sha256.
    List {
        attempt: Uuid,
        #[arg(long)]
        json: bool,
    },
    /// Download one artifact, verifying its sha256 (exit 1 on a mismatch).
    Get {
        attempt: Uuid,
        name: String,
        /// Write here instead of standard output.
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Delete artifacts past their class's retention; `--dry-run` lists
    /// exactly what a real run would delete, and why.
    Gc {
        #[arg(long)]
        dry_run: bool,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum ExecutorsCommand {
    /// Add an executor or replace its entry.
    Put {
        executor_id: String,
        /// Runner types it may serve, comma-separated (e.g. `verification,ssh`).
        #[arg(long, value_delimiter = ',', required = true)]
        types: Vec<String>,
        /// Tenants whose attempts it may run, comma-separated; none = all.
        #[arg(long, value_delimiter = ',')]
        tenants: Vec<String>,
        /// Keep the entry but refuse the executor.
        #[arg(long)]
        disabled: bool,
    },
    /// The catalog.
    List {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum TopologyCommand {
    /// Create missing topics from topology/topics.yaml, report drift; never
    /// delete or reconfigure.
    Apply {
        /// Change nothing: name the missing topics and the drift; exit 1
        /// when there is either.
        #[arg(long)]
        check: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum AttemptsCommand {
    /// Recent attempts.
    List {
        #[arg(long)]
        status: Option<String>,
        #[arg(long)]
        job: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: i64,
        #[arg(long)]
        json: bool,
    },
    /// One attempt: its projection row and its history.
    Show {
        attempt: Uuid,
        #[arg(long)]
        json: bool,
    },
    /// Print an attempt's events as they are appended, until it ends.
    Watch { attempt: Uuid },
}

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Walk the hash chains of the database, the published topic
    /// (`--from-kafka`) or an evidence bundle (`--file`); exits 1 at the
    /// first bad attempt and seq, naming them.
    Verify {
        #[arg(long)]
        attempt: Option<Uuid>,
        /// Read `exec.attempt-events.v1` instead of the database.
        #[arg(long, conflicts_with = "file")]
        from_kafka: bool,
        /// The topic's full name (default: the published log's, prefixed).
        #[arg(long, requires = "from_kafka")]
        topic: Option<String>,
        /// An evidence bundle (`audit export`), checked offline.
        #[arg(long, conflicts_with = "attempt")]
        file: Option<std::path::PathBuf>,
        /// The operator's Ed25519 public key (PEM) the bundle must be signed with.
        #[arg(long, requires = "file")]
        public_key: Option<std::path::PathBuf>,
    },
    /// The published topic (deduplicated by `ce_id`) against the database,
    /// attempt by attempt; exits 1 on any event missing, extra or different.
    Compare {
        #[arg(long)]
        attempt: Option<Uuid>,
        /// The topic's full name (default: the published log's, prefixed).
        #[arg(long)]
        topic: Option<String>,
    },
    /// A timeline of one attempt, of a job's attempts together, or of
    /// everything since a time, from the database or the published topic.
    Replay {
        #[arg(long, group = "selection", required = true)]
        attempt: Option<Uuid>,
        #[arg(long, group = "selection")]
        job: Option<String>,
        /// RFC 3339 time, or a duration before now (`2h`).
        #[arg(long, group = "selection")]
        since: Option<String>,
        #[arg(long)]
        from_kafka: bool,
        #[arg(long, requires = "from_kafka")]
        topic: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// An evidence bundle of the events that occurred in [since, until), as
    /// JSON lines on stdout, signed when a key is configured.
    Export {
        /// RFC 3339 time, or a duration before now (`24h`).
        #[arg(long)]
        since: String,
        /// RFC 3339 time, or a duration before now (default: now).
        #[arg(long)]
        until: Option<String>,
        /// The operator's Ed25519 private key, PKCS#8 PEM.
        #[arg(long, env = "EXECPLANE_AUDIT_SIGNING_KEY_FILE")]
        signing_key: Option<std::path::PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub enum ProjectionCommand {
    /// Rebuild the projection from attempt_events into a shadow schema.
    Rebuild {
        /// Diff against the live projection; exit 1 on any difference.
        #[arg(long)]
        verify: bool,
        /// Keep the shadow schema (`execplane_shadow`) for inspection.
        #[arg(long)]
        keep: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Check a policy file (YAML or TOML): prints its digest and tenants,
    /// or every problem in it and exits 2.
    Check {
        file: PathBuf,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Batched appends through the store: create, lease, start and finish
    /// N attempts, in an isolated schema that is dropped afterwards.
    Store(crate::bench::store::StoreBenchArgs),
    /// N jobs at a target rate through the real pipeline (all roles in this
    /// process, a loopback TCP probe), then the bare pipeline for comparison.
    Pipeline(crate::bench::pipeline::PipelineBenchArgs),
    /// A one-task playbook on one node: `ansible-playbook` by hand, then
    /// through the ansible runner's executor; the overhead per attempt.
    Ansible(crate::bench::ansible::AnsibleBenchArgs),
    /// One ConfigMap server-side applied: `kubectl apply --server-side`,
    /// then through the kubernetes runner's executor, in turn.
    Kubernetes(crate::bench::kubernetes::KubernetesBenchArgs),
    /// The opentofu runner's cost per apply: one null resource applied by
    /// the CLI (init + apply) and through the opentofu runner's executor,
    /// in turn.
    Opentofu(crate::bench::opentofu::TofuBenchArgs),
    /// Removes the schemas and topics bench runs left behind (killed runs,
    /// or `--keep`), a running bench's too.
    Clean,
}

/// Runs the command; the exit code is the command's verdict.
pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    // Run by the ssh client inside a tool's environment (the tool's own
    // variables, none of execplane's settings): it reads no configuration.
    if let Command::KnownHost {
        pins,
        host,
        kind,
        key,
    } = &cli.command
    {
        let pins = std::fs::read_to_string(pins).unwrap_or_default();
        if let Some(line) = crate::policy::ssh::known_host_line(&pins, host, kind, key) {
            println!("{line}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    if let Command::AnsibleSsh { targets, args } = &cli.command {
        return Ok(crate::runners::ansible::ssh_client::run(targets, args));
    }
    if let Command::SandboxReach { addresses } = &cli.command {
        return Ok(crate::runner::sandbox::egress::reach(addresses));
    }
    // A bundle is checked offline: no configuration, database or broker.
    if let Command::Audit(AuditCommand::Verify {
        file: Some(file),
        public_key,
        ..
    }) = &cli.command
    {
        return audit::verify_file(file, public_key.as_deref());
    }
    let (config, policy) = match assemble::load(cli.config.as_deref()) {
        Ok(loaded) => loaded,
        Err(error) => {
            // Every problem at once, and a usage exit code.
            eprintln!("error: {error}");
            return Ok(ExitCode::from(2));
        }
    };
    crate::telemetry::init(&config.telemetry);
    match cli.command {
        Command::Validate { file, json } => validate::run(&file, json, &policy.current()),
        Command::Operations { json, live: false } => operations::run(json),
        Command::Operations { json, live: true } => {
            let store = connect(&config).await?;
            let live = store
                .live_operations(config.dispatcher.presence_ttl.as_std())
                .await?;
            operations::live(json, &live)
        }
        Command::Policy(PolicyCommand::Check { file, json }) => validate::policy(&file, json),
        Command::Migrate => {
            let store = connect(&config).await?;
            store.migrate().await.context("applying migrations")?;
            println!("migrations applied");
            Ok(ExitCode::SUCCESS)
        }
        Command::Audit(AuditCommand::Verify {
            attempt,
            from_kafka: true,
            topic,
            ..
        }) => audit::verify_topic(&assemble::kafka(&config), topic, attempt).await,
        Command::Audit(AuditCommand::Verify { attempt, .. }) => {
            audit::verify(&connect(&config).await?, attempt).await
        }
        Command::Audit(AuditCommand::Compare { attempt, topic }) => {
            audit::compare(
                &connect(&config).await?,
                &assemble::kafka(&config),
                topic,
                attempt,
            )
            .await
        }
        Command::Audit(AuditCommand::Replay {
            attempt,
            job,
            since,
            from_kafka,
            topic,
            json,
        }) => {
            let selection = audit::selection(attempt, job, since.as_deref())?;
            if from_kafka {
                audit::replay_topic(&assemble::kafka(&config), topic, &selection, json).await
            } else {
                audit::replay(&connect(&config).await?, &selection, json).await
            }
        }
        Command::Audit(AuditCommand::Export {
            since,
            until,
            signing_key,
        }) => {
            audit::export(
                &connect(&config).await?,
                &since,
                until.as_deref(),
                signing_key.as_deref(),
            )
            .await
        }
        Command::Projection(ProjectionCommand::Rebuild { verify, keep }) => {
            projection::rebuild(&connect(&config).await?, verify, keep).await
        }
        Command::Bench(BenchCommand::Store(args)) => crate::bench::store::run(&config, &args).await,
        Command::Bench(BenchCommand::Pipeline(args)) => {
            crate::bench::pipeline::run(&config, &args).await
        }
        Command::Bench(BenchCommand::Kubernetes(args)) => {
            crate::bench::kubernetes::run(&args).await
        }
        Command::Bench(BenchCommand::Opentofu(args)) => crate::bench::opentofu::run(&args).await,
        Command::Bench(BenchCommand::Clean) => crate::bench::leftovers::clean(&config).await,
        Command::Bench(BenchCommand::Ansible(args)) => {
            crate::bench::ansible::run(&config, &args).await
        }
        Command::Serve => roles::run(&config, &policy, roles::Roles::serve(&config), true).await,
        Command::Ingress => roles::run(&config, &policy, roles::Roles::INGRESS, false).await,
        Command::ArtifactWorker => {
            roles::run(&config, &policy, roles::Roles::ARTIFACT_WORKER, false).await
        }
        Command::Dispatcher => roles::run(&config, &policy, roles::Roles::DISPATCHER, false).await,
        Command::Relay => roles::run(&config, &policy, roles::Roles::RELAY, false).await,
        Command::Runner { runner_type } => match runner_type.parse::<RunnerType>() {
            Ok(runner) => roles::run(&config, &policy, roles::Roles::runner(runner), false).await,
            Err(_) => {
                let available: Vec<&str> = RunnerType::CATALOG.iter().map(|r| r.as_str()).collect();
                eprintln!(
                    "error: no runner `{runner_type}` in this build (available: {})",
                    available.join(", ")
                );
                Ok(ExitCode::from(2))
            }
        },
        Command::Executors(command) => executors(&connect(&config).await?, command).await,
        // Storage only: no database needed.
        Command::Artifacts(ArtifactsCommand::Put {
            file,
            tenants,
            json,
        }) => artifacts_put(&config, &file, &tenants, json).await,
        Command::Artifacts(command) => artifacts(&config, &connect(&config).await?, command).await,
        Command::Topology(TopologyCommand::Apply { check }) => {
            roles::topology_apply(&config, check).await
        }
        Command::Submit {
            file,
            timeout,
            json,
        } => submit::run(&config, &policy.current(), &file, timeout, json).await,
        Command::Attempts(AttemptsCommand::List {
            status,
            job,
            limit,
            json,
        }) => attempts::list(&connect(&config).await?, status, job, limit, json).await,
        Command::Attempts(AttemptsCommand::Show { attempt, json }) => {
            attempts::show(&connect(&config).await?, attempt, json).await
        }
        Command::Attempts(AttemptsCommand::Watch { attempt }) => {
            attempts::watch(
                &connect(&config).await?,
                attempt,
                std::time::Duration::from_millis(300),
            )
            .await
        }
        Command::ToolShim {
            workdir,
            hold_stdin,
            uid,
            cgroup,
            command,
        } => {
            let options = crate::runner::tool::shim::Options {
                workdir: workdir.as_deref(),
                hold_stdin,
                uid,
                cgroups: &cgroup,
            };
            Ok(crate::runner::tool::shim::run(&options, &command))
        }
        Command::KnownHost { .. } | Command::AnsibleSsh { .. } | Command::SandboxReach { .. } => {
            unreachable!("answered before the configuration is read")
        }
    }
}

/// `artifacts put`: exit 0 and the reference; 2 for a file too large or a
/// tenant name no JobSpec could carry.
async fn artifacts_put(
    config: &Config,
    file: &std::path::Path,
    tenants: &[String],
    json: bool,
) -> anyhow::Result<ExitCode> {
    use crate::artifacts::inputs::MAX_INPUT_BYTES;
    for tenant in tenants {
        let mut problems = Vec::new();
        crate::contract::limits::check_tenant("--tenant", tenant, &mut problems);
        if let Some(problem) = problems.first() {
            eprintln!("{problem}");
            return Ok(ExitCode::from(2));
        }
    }
    let size = std::fs::metadata(file)
        .with_context(|| format!("reading {}", file.display()))?
        .len();
    if size > MAX_INPUT_BYTES as u64 {
        eprintln!(
            "{}: {size} bytes; an input artifact is at most {MAX_INPUT_BYTES}",
            file.display()
        );
        return Ok(ExitCode::from(2));
    }
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let storage = crate::artifacts::Storage::open(&assemble::storage(config));
    let reference = crate::artifacts::inputs::put(&storage, &bytes)
        .await
        .map_err(anyhow::Error::msg)?;
    for tenant in tenants {
        crate::artifacts::inputs::bind(&storage, &reference, tenant)
            .await
            .with_context(|| format!("binding {reference} to tenant `{tenant}`"))?;
    }
    if json {
        println!(
            "{}",
            serde_json::json!({"artifact": reference.to_string(), "size": bytes.len(), "tenants": tenants})
        );
    } else {
        println!("{reference}");
    }
    Ok(ExitCode::SUCCESS)
}

async fn artifacts(
    config: &Config,
    store: &Store,
    command: ArtifactsCommand,
) -> anyhow::Result<ExitCode> {
    use crate::artifacts::ArtifactStorage;
    let storage = crate::artifacts::Storage::open(&assemble::storage(config));
    match command {
        ArtifactsCommand::Put {
            file,
            tenants,
            json,
        } => artifacts_put(config, &file, &tenants, json).await,
        ArtifactsCommand::List { attempt, json } => {
            let rows = store.artifacts_of(attempt).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                for row in rows {
                    println!(
                        "{:<16} {:<9} {:>9} B  sha256:{}  {}",
                        row.name, row.retention_class, row.size, row.sha256, row.media_type
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        ArtifactsCommand::Gc { dry_run, json } => {
            let retention = assemble::retention(config);
            let listed = crate::artifacts::collect_garbage(store, &storage, retention, dry_run)
                .await
                .map_err(anyhow::Error::msg)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&listed)?);
            } else {
                let verb = if dry_run { "would delete" } else { "deleted" };
                for row in &listed {
                    let kept = match row.retention_class.as_str() {
                        "logs" => retention.logs,
                        "rendered" => retention.rendered,
                        _ => retention.evidence,
                    };
                    println!(
                        "{verb} {}/{} ({}, created {}, past its {} retention)",
                        row.attempt_id,
                        row.name,
                        row.retention_class,
                        row.created_at
                            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                        humantime::format_duration(kept)
                    );
                }
                println!("{} artifact(s) {verb}", listed.len());
            }
            Ok(ExitCode::SUCCESS)
        }
        ArtifactsCommand::Get {
            attempt,
            name,
            output,
        } => {
            let Some(row) = store
                .artifacts_of(attempt)
                .await?
                .into_iter()
                .find(|row| row.name == name)
            else {
                eprintln!("attempt {attempt} has no artifact `{name}`");
                return Ok(ExitCode::from(1));
            };
            let bytes = storage
                .get(&row.storage_key)
                .await
                .with_context(|| format!("reading {}", storage.uri(&row.storage_key)))?;
            let actual = crate::artifacts::sha256_hex(&bytes);
            if actual != row.sha256 {
                eprintln!(
                    "sha256 mismatch for {name}: the manifest says {}, the content is {actual}",
                    row.sha256
                );
                return Ok(ExitCode::from(1));
            }
            match output {
                Some(path) => std::fs::write(&path, &bytes)
                    .with_context(|| format!("writing {}", path.display()))?,
                None => {
                    use std::io::Write;
                    std::io::stdout().write_all(&bytes)?;
                }
            }
            eprintln!("sha256 verified: {actual}");
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn executors(store: &Store, command: ExecutorsCommand) -> anyhow::Result<ExitCode> {
    match command {
        ExecutorsCommand::Put {
            executor_id,
            types,
            tenants,
            disabled,
        } => {
            if !crate::ingress::protocol::valid_executor_id(&executor_id) {
                eprintln!(
                    "error: `{executor_id}` is not an executor id (1 to 64 of A-Z a-z 0-9 _ -)"
                );
                return Ok(ExitCode::from(2));
            }
            for runner_type in &types {
                if let Err(error) = runner_type.parse::<crate::contract::RunnerType>() {
                    eprintln!("error: {error}");
                    return Ok(ExitCode::from(2));
                }
            }
            store
                .put_executor(&crate::store::ExecutorGrant {
                    executor_id: executor_id.clone(),
                    runner_types: types,
                    tenants,
                    enabled: !disabled,
                })
                .await?;
            println!(
                "executor {executor_id} {}",
                if disabled { "disabled" } else { "enabled" }
            );
            Ok(ExitCode::SUCCESS)
        }
        ExecutorsCommand::List { json } => {
            let grants = store.list_executors().await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&grants)?);
            } else {
                for grant in grants {
                    println!(
                        "{:<24} {:<8} types={} tenants={}",
                        grant.executor_id,
                        if grant.enabled { "enabled" } else { "disabled" },
                        grant.runner_types.join(","),
                        if grant.tenants.is_empty() {
                            "*".to_owned()
                        } else {
                            grant.tenants.join(",")
                        }
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn connect(config: &Config) -> anyhow::Result<Store> {
    Store::connect(&config.database.url, config.database.max_connections, None)
        .await
        .with_context(|| {
            format!(
                "connecting to Postgres at {}",
                crate::telemetry::redact(&config.database.url)
            )
        })
        .map(|store| store.with_codec(assemble::kafka(config).codec))
}
