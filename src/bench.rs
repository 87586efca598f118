//! `execplane bench`: figures, never assertions.

pub mod ansible;
pub mod cost;
pub mod kubernetes;
pub mod leftovers;
pub mod opentofu;
pub mod pipeline;
pub mod store;

use anyhow::Context;

use crate::config::Config;
use crate::runner::{Assignment, ExecutionContext, Executor};
use crate::store::Store;

/// A schema of a bench's own, created on the configured database and
/// dropped afterwards unless kept.
pub(crate) struct ScratchSchema {
    admin: Store,
    pub name: String,
}

impl ScratchSchema {
    pub(crate) async fn create(config: &Config, name: String) -> anyhow::Result<Self> {
        let admin = Store::connect(&config.database.url, 1, None)
            .await
            .context("connecting to Postgres")?;
        admin.create_schema(&name).await?;
        Ok(Self { admin, name })
    }

    pub(crate) async fn finish(self, keep: bool) -> anyhow::Result<()> {
        if !keep {
            self.admin.drop_schema(&self.name).await?;
        }
        Ok(())
    }
}

/// One attempt of `spec` through `executor` in this process, as a runner
/// would hand it over (a fresh attempt id; `prepare` adds what the
/// executor needs to the context): how long it took, or why it did not
/// succeed.
pub(crate) async fn time_attempt<E: Executor>(
    executor: &E,
    policy: &crate::policy::SharedPolicy,
    spec: crate::contract::JobSpec,
    prepare: impl FnOnce(uuid::Uuid, ExecutionContext) -> ExecutionContext,
) -> anyhow::Result<std::time::Duration> {
    let (progress, _progress_rx) = tokio::sync::mpsc::unbounded_channel();
    let (log, _log_rx) = tokio::sync::mpsc::unbounded_channel();
    let attempt_id = uuid::Uuid::new_v4();
    let context = prepare(
        attempt_id,
        ExecutionContext::new(tokio_util::sync::CancellationToken::new(), progress, log),
    );
    // Admitted as the runner SDK admits it: the policy, then the inputs.
    let policy = policy.current();
    let refused = policy.check_jobspec(&spec);
    anyhow::ensure!(
        refused.is_empty(),
        "the bench policy refuses it: {}",
        crate::contract::Problems(refused)
    );
    let inputs = crate::runner::admit::<E::Inputs>(&spec, executor.runner_type(), &policy)
        .map_err(|refused| anyhow::anyhow!("inputs refused: {}", refused.message))?;
    let context = context.with_policy(policy).with_tenant(spec.tenant.clone());
    let started = std::time::Instant::now();
    let assignment = Assignment {
        attempt_id,
        job_id: spec.job_id.clone(),
        attempt_no: 1,
        lease_epoch: 1,
        spec,
    };
    let outcome = executor.execute(assignment, inputs, context).await;
    let took = started.elapsed();
    anyhow::ensure!(
        outcome.category.is_none(),
        "through the runner: {:?} {}",
        outcome.category,
        outcome.message
    );
    Ok(took)
}

/// Durations in milliseconds.
/// A local artifact storage under `scratch` holding one package: a tar of
/// one file `name` with `text`; the storage and the package's reference.
pub(crate) async fn one_file_package(
    scratch: &std::path::Path,
    name: &str,
    text: &str,
) -> anyhow::Result<(
    std::sync::Arc<crate::artifacts::Storage>,
    crate::artifacts::inputs::InputRef,
)> {
    let storage = std::sync::Arc::new(crate::artifacts::Storage::open(
        &crate::artifacts::StorageSettings::Local(scratch.join("artifacts")),
    ));
    let mut tar = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_size(text.len() as u64);
    header.set_mode(0o644);
    tar.append_data(&mut header, name, text.as_bytes())?;
    let package = crate::artifacts::inputs::put(storage.as_ref(), &tar.into_inner()?)
        .await
        .map_err(|error| anyhow::anyhow!("storing the package: {error}"))?;
    Ok((storage, package))
}

/// What a tool runner's executor needs of its context in a bench: the
/// bench's storage and tool settings, an outputs sink for `attempt_id`.
pub(crate) fn tool_context(
    context: ExecutionContext,
    attempt_id: uuid::Uuid,
    storage: &std::sync::Arc<crate::artifacts::Storage>,
    tools: &std::sync::Arc<crate::runner::tool::ToolSettings>,
) -> ExecutionContext {
    context
        .with_storage(Some(storage.clone()))
        .with_tools(tools.clone(), std::time::Duration::from_secs(2))
        .with_outputs(crate::runner::outputs::Outputs::new(
            attempt_id,
            "bench",
            crate::secrets::Masker::default(),
        ))
}

/// Runs per second, one after the other, of samples in milliseconds.
pub(crate) fn per_second(samples_ms: &[f64]) -> f64 {
    1000.0 * samples_ms.len() as f64 / samples_ms.iter().sum::<f64>().max(1.0)
}

/// The sample at `quantile` (0 to 1) of `samples`, nearest rank.
pub(crate) fn quantile(samples: &[f64], quantile: f64) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * quantile).round() as usize]
}

pub(crate) fn milliseconds(samples: &[std::time::Duration]) -> Vec<f64> {
    samples
        .iter()
        .map(|duration| duration.as_secs_f64() * 1000.0)
        .collect()
}
