//! What earlier bench runs left on the stack, and `execplane bench clean`.
//!
//! `bench pipeline` and `bench store` remove their schema (and topics) when
//! they end, interrupted too (SIGINT, SIGTERM); a run that was killed, or
//! kept with `--keep`, leaves them behind. A broker holding them is slower
//! for every later run (docs/BENCHMARKS.md): each run says what it found,
//! and `bench clean` removes it.

use std::collections::BTreeSet;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use rdkafka::consumer::Consumer;
use tokio_util::sync::CancellationToken;

use crate::cli::assemble;
use crate::config::Config;
use crate::kafka::KafkaConfig;
use crate::store::Store;

/// The schemas and topics of bench runs on the configured stack.
#[derive(Debug, Default)]
pub(crate) struct Leftovers {
    pub schemas: Vec<String>,
    /// Topic prefixes (`bench<id>.`), each one run's.
    pub prefixes: BTreeSet<String>,
    pub topics: usize,
}

impl Leftovers {
    pub(crate) fn is_empty(&self) -> bool {
        self.schemas.is_empty() && self.topics == 0
    }

    /// One line for a run's standard error.
    pub(crate) fn notice(&self) -> String {
        format!(
            "note: {} topics of {} earlier bench runs and {} bench schemas are on this stack \
             (killed runs, or --keep); a broker holding them runs slower, so these figures may \
             be too (docs/BENCHMARKS.md). `execplane bench clean` removes them.",
            self.topics,
            self.prefixes.len(),
            self.schemas.len()
        )
    }
}

/// A bench run's topic prefix: `bench`, its id (digits and hex), a dot.
fn run_prefix(topic: &str) -> Option<&str> {
    let (head, _) = topic.split_once('.')?;
    let id = head.strip_prefix("bench")?;
    (!id.is_empty() && id.bytes().all(|byte| byte.is_ascii_hexdigit()))
        .then(|| &topic[..head.len() + 1])
}

/// A connection to the configured database, outside any schema.
async fn admin(config: &Config) -> anyhow::Result<Store> {
    Store::connect(&config.database.url, 1, None)
        .await
        .context("connecting to Postgres")
}

/// Every bench schema and topic on the stack `config` names.
pub(crate) async fn find(config: &Config) -> anyhow::Result<Leftovers> {
    find_with(&admin(config).await?, config).await
}

async fn find_with(admin: &Store, config: &Config) -> anyhow::Result<Leftovers> {
    let schemas = admin.bench_schemas().await?;
    let kafka = assemble::kafka(config);
    let probe = kafka.assigned_consumer()?;
    let metadata =
        tokio::task::spawn_blocking(move || probe.fetch_metadata(None, Duration::from_secs(10)))
            .await?
            .context("reading the broker's topics")?;
    let mut leftovers = Leftovers {
        schemas,
        ..Default::default()
    };
    for topic in metadata.topics() {
        if let Some(prefix) = run_prefix(topic.name()) {
            leftovers.topics += 1;
            leftovers.prefixes.insert(prefix.to_owned());
        }
    }
    Ok(leftovers)
}

/// `execplane bench clean`: removes every bench schema and topic, a
/// running bench's too.
pub async fn clean(config: &Config) -> anyhow::Result<ExitCode> {
    let admin = admin(config).await?;
    let found = find_with(&admin, config).await?;
    for schema in &found.schemas {
        admin.drop_schema(schema).await?;
    }
    let mut deleted = 0;
    for prefix in &found.prefixes {
        let kafka = KafkaConfig {
            topic_prefix: prefix.clone(),
            ..assemble::kafka(config)
        };
        deleted += crate::kafka::topology::remove_prefixed(&kafka).await?;
    }
    println!(
        "removed {} bench schemas and {deleted} topics of {} bench runs",
        found.schemas.len(),
        found.prefixes.len()
    );
    Ok(ExitCode::SUCCESS)
}

/// Cancelled at the first SIGINT or SIGTERM, so a run removes what it
/// created before it ends; a second signal ends the process at once (exit
/// 130), should that removal itself hang.
pub(crate) fn on_interrupt() -> CancellationToken {
    use tokio::signal::unix::{signal, SignalKind};
    let interrupt = CancellationToken::new();
    let (Ok(mut first), Ok(mut terminate)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return interrupt;
    };
    let cancel = interrupt.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = first.recv() => {}
            _ = terminate.recv() => {}
        }
        eprintln!("interrupted: removing this run's schema and topics (again to quit at once)");
        cancel.cancel();
        tokio::select! {
            _ = first.recv() => {}
            _ = terminate.recv() => {}
        }
        std::process::exit(130);
    });
    interrupt
}

#[cfg(test)]
mod tests {
    use super::run_prefix;

    #[test]
    fn only_a_bench_runs_topics_have_a_run_prefix() {
        assert_eq!(
            run_prefix("bench1234ab09ef.exec.commands.v1"),
            Some("bench1234ab09ef.")
        );
        assert_eq!(run_prefix("bench.exec.commands.v1"), None);
        assert_eq!(run_prefix("benchmark.exec.commands.v1"), None);
        assert_eq!(run_prefix("exec.commands.v1"), None);
        assert_eq!(run_prefix("bench12"), None);
    }
}
