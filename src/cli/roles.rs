//! The long-running roles: `serve` (all of them in one process),
//! `dispatcher`, `relay`, `runner <type>`. SIGINT/SIGTERM shut down
//! gracefully: runners drain and report first, then the dispatcher and
//! relay stop after publishing what those reports caused.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::assemble;
use crate::config::Config;
use crate::contract::RunnerType;
use crate::kafka::relay::{self, RelayConfig};
use crate::kafka::topology;
use crate::policy::SharedPolicy;
use crate::store::Store;
use crate::telemetry::health;

/// Which roles a process runs.
#[derive(Clone, Copy, Debug, Default)]
pub struct Roles {
    pub dispatcher: bool,
    pub relay: bool,
    pub runners: RunnerSet,
    pub ingress: bool,
    pub artifact_worker: bool,
}

/// The runner types a process runs (`executor` makes each).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunnerSet(u8);

impl RunnerSet {
    /// Every type of the catalog: what `serve` runs.
    pub const CATALOG: RunnerSet = {
        let mut bits = 0;
        let mut at = 0;
        while at < RunnerType::CATALOG.len() {
            bits |= Self::one(RunnerType::CATALOG[at]).0;
            at += 1;
        }
        RunnerSet(bits)
    };

    pub const fn one(runner: RunnerType) -> Self {
        RunnerSet(1 << runner as u8)
    }

    pub fn iter(self) -> impl Iterator<Item = RunnerType> {
        RunnerType::ALL
            .iter()
            .copied()
            .filter(move |runner| self.0 & Self::one(*runner).0 != 0)
    }
}

impl Roles {
    const NONE: Roles = Roles {
        dispatcher: false,
        relay: false,
        runners: RunnerSet(0),
        ingress: false,
        artifact_worker: false,
    };
    pub const DISPATCHER: Roles = Roles {
        dispatcher: true,
        ..Self::NONE
    };
    pub const RELAY: Roles = Roles {
        relay: true,
        ..Self::NONE
    };
    pub const INGRESS: Roles = Roles {
        ingress: true,
        ..Self::NONE
    };
    pub const ARTIFACT_WORKER: Roles = Roles {
        artifact_worker: true,
        ..Self::NONE
    };

    /// `runner <type>`: that runner alone.
    pub const fn runner(runner: RunnerType) -> Self {
        Roles {
            runners: RunnerSet::one(runner),
            ..Self::NONE
        }
    }

    /// `serve`: every role, the ingress only when a key is configured.
    pub fn serve(config: &Config) -> Self {
        Roles {
            dispatcher: true,
            relay: true,
            runners: RunnerSet::CATALOG,
            ingress: !config.ingress.key.is_empty() || !config.ingress.api_key.is_empty(),
            artifact_worker: true,
        }
    }
}

/// The registry of runners: the executor of each type, from its settings.
/// A type without one here does not compile.
fn executor(
    runner: RunnerType,
    config: &Config,
    kafka: &crate::kafka::KafkaConfig,
    settings: &crate::runner::RunnerConfig,
    stop: &CancellationToken,
    lenient: bool,
) -> Checked {
    use crate::runners::*;
    macro_rules! checked {
        ($executor:expr) => {
            checked(kafka, settings, $executor, stop, lenient)
        };
    }
    match runner {
        RunnerType::Verification => {
            checked!(verification::VerificationRunner::new(
                assemble::verification(config)
            ))
        }
        RunnerType::Ssh => checked!(ssh::SshRunner::new(assemble::ssh(config))),
        RunnerType::Ansible => checked!(ansible::AnsibleRunner::new(assemble::ansible(config))),
        RunnerType::Kubernetes => checked!(kubernetes::KubernetesRunner::new(
            assemble::kubernetes(config)
        )),
        RunnerType::Helm => checked!(helm::HelmRunner::new(assemble::helm(config))),
        RunnerType::Opentofu => checked!(opentofu::TofuRunner::new(assemble::opentofu(config))),
        #[cfg(feature = "testkit")]
        RunnerType::Testkit => Box::pin(async {
            anyhow::bail!("the testkit runner is the tests' own (tests/testkit.rs): this binary has no executor of it")
        }),
    }
}

fn on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let trigger = token.clone();
    tokio::spawn(async move {
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = async { match terminate.as_mut() { Some(signal) => { signal.recv().await; } None => std::future::pending::<()>().await } } => {}
        }
        info!("shutdown requested");
        trigger.cancel();
    });
    token
}

/// The health condition of the roles as a whole: up once every role and
/// runner of this process was started, down again when it stops.
const STARTED: &str = "roles";

pub async fn run(
    config: &Config,
    policy: &SharedPolicy,
    roles: Roles,
    prepare: bool,
) -> anyhow::Result<ExitCode> {
    // Checked before anything starts: the ingress never runs without keys.
    let ingress_config = if roles.ingress {
        match crate::ingress::IngressConfig::from_config(config, policy.clone()) {
            Ok(checked) => Some(checked),
            Err(problems) => {
                for problem in &problems {
                    eprintln!("error: {problem}");
                }
                eprintln!(
                    "the ingress refuses to start ({} problem(s) above)",
                    problems.len()
                );
                return Ok(ExitCode::from(2));
            }
        }
    } else {
        None
    };
    health::not_ready(STARTED, "starting");
    crate::telemetry::metrics::init(config.telemetry.metrics_addr.trim().parse().ok());
    let kafka = assemble::kafka(config);
    let store = Store::connect(&config.database.url, config.database.max_connections, None)
        .await
        .with_context(|| {
            format!(
                "connecting to Postgres at {}",
                crate::telemetry::redact(&config.database.url)
            )
        })?
        .with_codec(kafka.codec.clone());
    let signal = on_signal();
    // A broker that is down is waited for (SIGTERM still stops the wait);
    // one that refuses this client's credentials or TLS is an error now.
    match crate::kafka::reach(&kafka, &signal).await {
        Ok(true) => {}
        Ok(false) => return Ok(ExitCode::SUCCESS),
        Err(error) => {
            eprintln!("error: {error}");
            return Ok(ExitCode::from(2));
        }
    }
    if prepare {
        prepare_stack(&store, &kafka).await?;
    }
    let runners_stop = CancellationToken::new();
    let core_stop = CancellationToken::new();
    info!(digest = %policy.current().digest(), file = %config.policy.file, "operator policy in force");
    // Every role of this process shares it; a changed file (or SIGHUP)
    // replaces it for all of them.
    tokio::spawn(policy.clone().watch(core_stop.clone()));
    let mut dispatcher = assemble::dispatcher(config, policy);
    if roles.dispatcher {
        dispatcher.callbacks.signing = callback_signing(config, &core_stop).await?;
    }
    let mut core = spawn_core(
        config,
        dispatcher,
        roles,
        ingress_config,
        &store,
        &kafka,
        &core_stop,
    )?;
    // `serve` runs what it can; `runner <type>` only what it was asked to.
    let mut runners = spawn_runners(config, policy, roles, &kafka, &runners_stop, prepare).await?;
    info!(?roles, "execplane running");
    health::ready(STARTED);

    let mut failure = None;
    tokio::select! {
        _ = signal.cancelled() => {}
        Some(result) = core.join_next(), if !core.is_empty() => { failure = flatten(result).err(); }
        Some(result) = runners.join_next(), if !runners.is_empty() => { failure = flatten(result).err(); }
    }
    health::not_ready(STARTED, "stopping");
    // Runners first: they drain and report; then the core decides and
    // publishes what those reports caused.
    runners_stop.cancel();
    while let Some(result) = runners.join_next().await {
        if let Err(error) = flatten(result) {
            failure.get_or_insert(error);
        }
    }
    if failure.is_none() && (roles.dispatcher || roles.relay) {
        settle(&store, &kafka, roles, SETTLE_BOUND).await;
    }
    core_stop.cancel();
    while let Some(result) = core.join_next().await {
        if let Err(error) = flatten(result) {
            failure.get_or_insert(error);
        }
    }
    match failure {
        Some(error) => Err(error),
        None => Ok(ExitCode::SUCCESS),
    }
}

/// `serve` applies the migrations and the topology before anything runs.
async fn prepare_stack(store: &Store, kafka: &crate::kafka::KafkaConfig) -> anyhow::Result<()> {
    store.migrate().await.context("applying migrations")?;
    let report = topology::apply(kafka)
        .await
        .context("applying the topic topology")?;
    for name in &report.created {
        info!(topic = %name, "topic created");
    }
    for drift in &report.drift {
        tracing::warn!(%drift, "topic drift");
    }
    Ok(())
}

type Tasks = tokio::task::JoinSet<anyhow::Result<()>>;

/// Where the callback worker reads each tenant's signing secrets, when
/// the operator configured it: the secret store, connected now.
async fn callback_signing(
    config: &Config,
    stop: &CancellationToken,
) -> anyhow::Result<Option<Arc<crate::dispatcher::Signing>>> {
    let setting = config.dispatcher.callback_signing_secrets.trim();
    if setting.is_empty() {
        return Ok(None);
    }
    // Both checked when the settings were read.
    let (mount, path) =
        crate::contract::callbacks::signing_location(setting).map_err(anyhow::Error::msg)?;
    let vault = assemble::secret_store(config)
        .context("EXECPLANE_CALLBACK_SIGNING_SECRETS needs EXECPLANE_VAULT_ADDR")?;
    let address = vault.address.clone();
    let vault = crate::secrets::Vault::connect(vault)
        .await
        .map_err(|error| anyhow::anyhow!("secret store at {address}: {error}"))?;
    vault.keep_alive(stop.clone());
    Ok(Some(Arc::new(crate::dispatcher::Signing {
        vault,
        mount,
        path,
    })))
}

/// The dispatcher, relay, artifact worker and ingress this process runs.
fn spawn_core(
    config: &Config,
    dispatcher: crate::dispatcher::DispatcherConfig,
    roles: Roles,
    ingress_config: Option<crate::ingress::IngressConfig>,
    store: &Store,
    kafka: &crate::kafka::KafkaConfig,
    stop: &CancellationToken,
) -> anyhow::Result<Tasks> {
    let producer = kafka.producer().context("creating the Kafka producer")?;
    let mut core = Tasks::new();
    if roles.dispatcher {
        let task = crate::dispatcher::run(
            store.clone(),
            kafka.clone(),
            producer.clone(),
            dispatcher,
            stop.clone(),
        );
        core.spawn(async move { task.await.map_err(anyhow::Error::from) });
    }
    if roles.relay {
        let task = relay::run(
            store.clone(),
            kafka.clone(),
            RelayConfig::default(),
            stop.clone(),
        );
        core.spawn(async move { task.await.map_err(anyhow::Error::from) });
    }
    if roles.artifact_worker {
        let storage = Arc::new(crate::artifacts::Storage::open(&assemble::storage(config)));
        let task = crate::artifacts::run(
            store.clone(),
            kafka.clone(),
            producer.clone(),
            assemble::artifacts(config),
            storage,
            stop.clone(),
        );
        core.spawn(async move { task.await.map_err(anyhow::Error::from) });
    }
    if let Some(ingress_config) = ingress_config {
        let task = crate::ingress::run(
            ingress_config,
            store.clone(),
            kafka.clone(),
            producer,
            Arc::new(crate::artifacts::Storage::open(&assemble::storage(config))),
            stop.clone(),
        );
        core.spawn(task);
    }
    Ok(core)
}

/// `settings` (`assemble::runner`'s) made ready for runner instances to
/// share: the sandbox checked, the artifact storage opened, the secret
/// store reached. Before any instance announces itself: a runner that
/// cannot sandbox its tools serves nothing (docs/SECURITY.md). A runner
/// of the tests' own (docs/RUNNERS.md) is equipped by the same call.
pub async fn equip(
    mut settings: crate::runner::RunnerConfig,
    config: &Config,
    stop: &CancellationToken,
) -> anyhow::Result<crate::runner::RunnerConfig> {
    use crate::runner::sandbox::{egress::Destination, Network};
    if let Network::Guarded { deny, .. } = &mut Arc::make_mut(&mut settings.tools).sandbox.network {
        // Every broker of the cluster, not only those the configuration
        // names: a tool must reach none of them.
        let brokers = crate::kafka::cluster_brokers(
            &assemble::kafka(config),
            crate::contract::topics::RUNNER_PRESENCE,
        )
        .await
        .map_err(|error| {
            anyhow::anyhow!("cannot list the cluster's brokers, which the tools' network must keep them off: {error}")
        })?;
        deny.extend(
            brokers
                .into_iter()
                .map(|(host, port)| Destination::Endpoint { host, port }),
        );
    }
    crate::runner::sandbox::check(&settings.tools)
        .await
        .map_err(anyhow::Error::msg)?;
    settings.storage = Some(Arc::new(crate::artifacts::Storage::open(
        &assemble::storage(config),
    )));
    if let Some(vault) = assemble::secret_store(config) {
        let address = vault.address.clone();
        let vault = crate::secrets::Vault::connect(vault)
            .await
            .map_err(|error| anyhow::anyhow!("secret store at {address}: {error}"))?;
        vault.keep_alive(stop.clone());
        settings.secrets = Some(vault);
    }
    Ok(settings)
}

/// The runner instances this process runs, with the secret store.
async fn spawn_runners(
    config: &Config,
    policy: &SharedPolicy,
    roles: Roles,
    kafka: &crate::kafka::KafkaConfig,
    stop: &CancellationToken,
    lenient: bool,
) -> anyhow::Result<Tasks> {
    let mut runners = Tasks::new();
    if roles.runners == RunnerSet::default() {
        return Ok(runners);
    }
    let settings = equip(assemble::runner(config, policy), config, stop).await?;
    // One instance per runner type this process runs, all alike, each
    // only once its tool answers (`runner::preflight`). The checks run at
    // once, so a slow tool delays no other runner. A runner of its own
    // that cannot run its tool is an error; under `serve` it is left out,
    // loudly, and the other roles go on.
    let checks = roles
        .runners
        .iter()
        .map(|runner| executor(runner, config, kafka, &settings, stop, lenient));
    for instance in futures_util::future::try_join_all(checks)
        .await?
        .into_iter()
        .flatten()
    {
        runners.spawn(instance);
    }
    Ok(runners)
}

/// A runner instance ready to run, or none when `serve` left its runner
/// out; an error when a runner of its own cannot run its tool.
type Checked = BoxFuture<'static, anyhow::Result<Option<BoxFuture<'static, anyhow::Result<()>>>>>;

/// Checks `executor`'s tool, then gives the instance that runs it.
fn checked<E: crate::runner::Executor>(
    kafka: &crate::kafka::KafkaConfig,
    settings: &crate::runner::RunnerConfig,
    executor: E,
    stop: &CancellationToken,
    lenient: bool,
) -> Checked {
    let (kafka, settings, stop) = (kafka.clone(), settings.clone(), stop.clone());
    Box::pin(async move {
        let runner = executor.runner_type();
        if let Err(reason) = executor.preflight().await {
            if !lenient {
                anyhow::bail!(
                    "the {} runner cannot run its tool: {reason}",
                    runner.as_str()
                );
            }
            tracing::error!(runner = runner.as_str(), %reason, "runner disabled: it cannot run its tool, so it announces nothing and serves no job");
            health::warning(
                &crate::runner::condition(runner),
                format!("disabled, it cannot run its tool: {reason}"),
            );
            return Ok(None);
        }
        let instance: BoxFuture<'static, anyhow::Result<()>> = Box::pin(async move {
            crate::runner::run_instance(kafka, settings, Arc::new(executor), stop, None)
                .await
                .map_err(anyhow::Error::from)
        });
        Ok(Some(instance))
    })
}

/// The longest a shutdown waits for the final reports to be decided and
/// published.
const SETTLE_BOUND: Duration = Duration::from_secs(5);

/// Waits until every runner-events partition is decided past now (when
/// this process decides) and the outbox is empty (when it publishes), or
/// `bound` passed.
async fn settle(store: &Store, kafka: &crate::kafka::KafkaConfig, roles: Roles, bound: Duration) {
    let since = chrono::Utc::now().timestamp_millis();
    let deadline = tokio::time::Instant::now() + bound;
    let topic = kafka.topic(crate::contract::topics::RUNNER_EVENTS);
    // Within the bound too: a broker that is away answers no metadata.
    let partitions = {
        let (kafka, topic) = (kafka.clone(), topic.clone());
        let lookup = tokio::task::spawn_blocking(move || {
            let consumer = kafka.assigned_consumer().ok()?;
            crate::kafka::partition_count(&consumer, &topic).ok()
        });
        tokio::time::timeout_at(deadline, lookup)
            .await
            .ok()
            .and_then(Result::ok)
            .flatten()
            .unwrap_or(1)
    };
    loop {
        let decided = !roles.dispatcher
            || store
                .intake_decided_until(&topic, partitions)
                .await
                .ok()
                .flatten()
                .is_some_and(|until| until >= since);
        let drained = !roles.relay || store.unpublished().await.is_ok_and(|rows| rows == 0);
        if decided && drained {
            return;
        }
        if tokio::time::Instant::now() >= deadline {
            tracing::warn!(
                decided,
                drained,
                "stopping before the final reports settled"
            );
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn flatten(result: Result<anyhow::Result<()>, tokio::task::JoinError>) -> anyhow::Result<()> {
    match result {
        Ok(inner) => inner,
        Err(join) => Err(anyhow::anyhow!("task panicked: {join}")),
    }
}

pub async fn topology_apply(config: &Config, check: bool) -> anyhow::Result<ExitCode> {
    let kafka = assemble::kafka(config);
    let report = if check {
        topology::check(&kafka).await?
    } else {
        topology::apply(&kafka).await?
    };
    for name in &report.created {
        println!("{} {name}", if check { "missing" } else { "created" });
    }
    for name in &report.present {
        println!("present {name}");
    }
    for drift in &report.drift {
        println!("drift   {drift}");
    }
    if check && !(report.created.is_empty() && report.drift.is_empty()) {
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
