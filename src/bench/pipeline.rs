//! `execplane bench pipeline`: N jobs at a target rate through the real
//! pipeline (Kafka commands → dispatcher → Postgres → relay → runner →
//! reports → terminal), with a loopback TCP probe, all roles in this process,
//! in a schema and topic prefix of its own. Then the bare pipeline on the
//! same stack: the same number of Kafka records produced and consumed and
//! the same number of Postgres rows inserted in batches, with no execplane
//! logic; the ratio of the two is the cost of the guarantees.

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::Message;
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::cli::assemble;
use crate::codec::CommandRecord;
use crate::config::Config;
use crate::contract::{
    topics, validate_jobspec, AttemptEvent, EventBody, JobSpec, TerminalOutcome,
};
use crate::kafka::{partition_count, KafkaConfig};
use crate::policy::SharedPolicy;
use crate::runners::verification::VerificationRunner;
use crate::store::Store;

#[derive(Debug, clap::Args)]
pub struct PipelineBenchArgs {
    /// Jobs to run.
    #[arg(long, default_value_t = 2_000)]
    pub jobs: usize,
    /// Target submission rate, jobs per second.
    #[arg(long, default_value_t = 1_000)]
    pub rate: u32,
    /// Runner capacity (concurrent attempts of the one runner instance).
    #[arg(long, default_value_t = 512)]
    pub capacity: u32,
    /// Give up waiting for terminal states after this many seconds.
    #[arg(long, default_value_t = 300)]
    pub timeout_secs: u64,
    #[arg(long)]
    pub json: bool,
    /// Keep the bench schema afterwards.
    #[arg(long)]
    pub keep: bool,
    /// Queue every job first with no runner alive, then start the runner
    /// and measure how fast the backlog drains.
    #[arg(long)]
    pub backlog: bool,
    /// Skip the bare-pipeline comparison (long runs).
    #[arg(long)]
    pub no_bare: bool,
    /// Jobs run to their end, at the target rate, before the measured
    /// ones, and left out of every figure: the pipeline's first seconds
    /// (consumer groups joining, connections and statement caches
    /// filling) are not its steady state. None with `--backlog`.
    #[arg(long, default_value_t = 500)]
    pub warmup: usize,
}

#[derive(Debug, Default, Serialize)]
pub struct Percentiles {
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

fn percentiles(mut samples: Vec<i64>) -> Percentiles {
    if samples.is_empty() {
        return Percentiles::default();
    }
    samples.sort_unstable();
    let at =
        |quantile: f64| samples[((samples.len() as f64 - 1.0) * quantile).round() as usize] as f64;
    Percentiles {
        p50_ms: at(0.50),
        p95_ms: at(0.95),
        p99_ms: at(0.99),
        max_ms: *samples.last().unwrap_or(&0) as f64,
    }
}

#[derive(Debug, Serialize)]
pub struct PipelineReport {
    pub jobs: usize,
    /// Jobs run before the measured ones, in no figure.
    pub warmup_jobs: usize,
    pub target_rate: u32,
    pub completed: usize,
    pub succeeded: usize,
    pub submit_seconds: f64,
    pub seconds: f64,
    pub attempts_per_second: f64,
    pub command_to_lease: Percentiles,
    pub command_to_start: Percentiles,
    pub command_to_terminal: Percentiles,
    pub postgres_rows_per_attempt: f64,
    pub kafka_records_per_attempt: f64,
    /// WAL the database cluster wrote during the run, per attempt.
    pub wal_bytes_per_attempt: f64,
    /// CPU time of every process on the machine (roles, broker, Postgres,
    /// the bench's own producer and follower) during the run, per attempt.
    pub cpu_ms_per_attempt: f64,
    /// CPU time of the bench's process alone (every role, and the bench's
    /// producer and follower), per attempt.
    pub process_cpu_ms_per_attempt: f64,
    /// Of all the machine's CPU time during the run, the share its host
    /// gave other machines while this one wanted to run (`steal` in
    /// `/proc/stat`; 0 on bare metal), in percent. Throughput falls with
    /// it; the CPU figures above leave it out.
    pub steal_percent: f64,
    /// Of all the machine's CPU time during the run, the share no process
    /// wanted (idle or waiting for I/O), in percent.
    pub idle_percent: f64,
    pub bare_kafka_records: u64,
    pub bare_postgres_rows: u64,
    pub bare_seconds: f64,
    pub bare_kafka_seconds: f64,
    pub bare_postgres_seconds: f64,
    /// execplane seconds / bare seconds for the same records and rows.
    pub ratio: f64,
    /// With `--backlog`: seconds from the runner's start to the last
    /// terminal state, and attempts per second over them.
    pub drain_seconds: Option<f64>,
    pub drain_rate: Option<f64>,
    /// Attempts reaching a terminal state in each 10-second window of the
    /// run: a rate that falls as the run goes on is a cost that grows.
    pub window_rates: Vec<f64>,
    /// The p50 and p99 command→lease of the commands issued in each 10-second
    /// window: a latency that climbs as the run goes on is a cost that grows
    /// with N even while throughput holds.
    pub window_lease_ms: Vec<(f64, f64)>,
}

/// p50 and p99 of command→lease per 10-second window of issue time.
fn window_latencies(
    issued: &HashMap<String, i64>,
    lease: &HashMap<String, i64>,
) -> Vec<(f64, f64)> {
    const WINDOW_MS: i64 = 10_000;
    let Some(first) = issued.values().min() else {
        return Vec::new();
    };
    let mut windows: Vec<Vec<i64>> = Vec::new();
    for (job, elapsed) in lease {
        let Some(at) = issued.get(job) else {
            continue;
        };
        let window = usize::try_from((at - first) / WINDOW_MS).unwrap_or(0);
        if windows.len() <= window {
            windows.resize(window + 1, Vec::new());
        }
        windows[window].push(*elapsed);
    }
    windows
        .into_iter()
        .map(|samples| {
            let figures = percentiles(samples);
            (figures.p50_ms, figures.p99_ms)
        })
        .collect()
}

/// Terminal states per 10-second window, as attempts per second.
fn window_rates(ends: &[i64]) -> Vec<f64> {
    const WINDOW_MS: i64 = 10_000;
    let (Some(first), Some(last)) = (ends.iter().min(), ends.iter().max()) else {
        return Vec::new();
    };
    let windows = usize::try_from((last - first) / WINDOW_MS + 1).unwrap_or(1);
    let mut counts = vec![0u64; windows];
    for end in ends {
        counts[usize::try_from((end - first) / WINDOW_MS).unwrap_or(0)] += 1;
    }
    counts
        .into_iter()
        .map(|count| count as f64 / (WINDOW_MS as f64 / 1000.0))
        .collect()
}

/// The policy the bench runs under: tenant `bench`'s probes may reach the
/// rig's loopback listener.
const BENCH_POLICY: &str = "tenants:\n  bench:\n    operations: [\"verify.tcp.connect\"]\n    destinations:\n      allow_private: [\"127.0.0.1/32\"]\n";

pub async fn run(config: &Config, args: &PipelineBenchArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        args.jobs > 0 && args.rate > 0,
        "--jobs and --rate must be positive"
    );
    let id = format!(
        "{}{}",
        std::process::id(),
        &Uuid::new_v4().simple().to_string()[..6]
    );
    let leftovers = super::leftovers::find(config).await?;
    if !leftovers.is_empty() {
        eprintln!("{}", leftovers.notice());
    }
    let schema = super::ScratchSchema::create(config, format!("execplane_bench_{id}")).await?;
    let prefix = format!("bench{id}.");
    // The bench's own policy, whatever the operator's file says: its jobs
    // probe the rig's loopback listener, which no tenant reaches by default.
    let policy = crate::policy::OperatorPolicy::from_yaml(BENCH_POLICY)
        .map_err(|problems| anyhow::anyhow!("the bench policy: {}", problems.join("; ")))?
        .into();
    let interrupt = super::leftovers::on_interrupt();
    let result = drive(config, &policy, args, &schema.name, &prefix, &interrupt).await;
    schema.finish(args.keep).await?;
    if !args.keep {
        let kafka = KafkaConfig {
            topic_prefix: prefix,
            ..assemble::kafka(config)
        };
        if let Err(error) = crate::kafka::topology::remove_prefixed(&kafka).await {
            eprintln!(
                "the bench's topics ({}*) were not deleted: {error}",
                kafka.topic_prefix
            );
        }
    }
    let report = result?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    Ok(ExitCode::SUCCESS)
}

async fn drive(
    config: &Config,
    policy: &SharedPolicy,
    args: &PipelineBenchArgs,
    schema: &str,
    prefix: &str,
    interrupt: &CancellationToken,
) -> anyhow::Result<PipelineReport> {
    let mut rig = tokio::select! {
        rig = Rig::start(config, policy, args, schema, prefix) => rig?,
        _ = interrupt.cancelled() => anyhow::bail!("interrupted"),
    };
    let run = tokio::select! {
        run = run_jobs(&mut rig, args, schema) => run,
        _ = interrupt.cancelled() => Err(anyhow::anyhow!("interrupted")),
    };
    // Stopped on every path: a rig left running past its schema's drop
    // fills the log with its roles' failures.
    rig.stop().await;
    let Followed {
        before,
        observed,
        issued,
        submit_seconds,
        drain_started,
        seconds,
        cost,
    } = run?;
    // A refused job measures nothing: say why rather than report zeros.
    if let Some(why) = &observed.rejected {
        anyhow::bail!("the bench's jobs were rejected at intake: {why}");
    }

    let rows = (rig.store.rows_written(schema, &[]).await? - before.rows).max(0) as u64;
    let records = rig.records_written()?.saturating_sub(before.records);
    let (bare_kafka_seconds, bare_postgres_seconds) = if args.no_bare {
        (0.0, 0.0)
    } else {
        bare(config, &rig.kafka, records, rows, schema).await?
    };
    let run = RunFigures {
        submit_seconds,
        seconds,
        drain_started,
        cost,
        rows,
        records,
        bare_kafka_seconds,
        bare_postgres_seconds,
    };
    Ok(observed.report(args, &issued, run))
}

/// The bench's jobs, submitted and followed to their end.
struct Followed {
    /// What the warm-up wrote, left out of the figures.
    before: Written,
    observed: Observed,
    /// When each job was issued, by job id.
    issued: HashMap<String, i64>,
    submit_seconds: f64,
    /// When the backlog's drain began (with `--backlog`).
    drain_started: Option<i64>,
    seconds: f64,
    /// What the run cost, from the first command to the last terminal state.
    cost: super::cost::Cost,
}

/// The tables written on a timer whether attempts run or not: intake's
/// progress, the relay's horizon, presence.
const WRITTEN_AT_REST: [&str; 3] = ["intake_progress", "relay_state", "runner_instances"];

/// Rows written so far, once the count has settled: each backend reports
/// its rows to the statistics in its own time (within a second when busy,
/// up to ten when idle), so a count read at once misses the last ones.
/// Settled means: the tables attempts write unchanged for two seconds (the
/// tables written at rest never settle, and made every run wait the whole
/// twelve).
async fn settled_rows(store: &Store, schema: &str) -> anyhow::Result<i64> {
    let mut rows = store.rows_written(schema, &WRITTEN_AT_REST).await?;
    let mut unchanged = 0;
    for _ in 0..12 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = store.rows_written(schema, &WRITTEN_AT_REST).await?;
        unchanged = if now == rows { unchanged + 1 } else { 0 };
        rows = now;
        if unchanged == 2 {
            break;
        }
    }
    Ok(store.rows_written(schema, &[]).await?)
}

/// Rows and records written so far.
#[derive(Debug, Default)]
struct Written {
    rows: i64,
    records: u64,
}

async fn run_jobs(
    rig: &mut Rig<'_>,
    args: &PipelineBenchArgs,
    schema: &str,
) -> anyhow::Result<Followed> {
    if !args.backlog {
        rig.start_runner().await?;
    }
    let follower = rig.follow_events()?;
    let timeout = Duration::from_secs(args.timeout_secs);
    if !args.backlog && args.warmup > 0 {
        let warmup = bench_specs("bench-warmup", args.warmup, rig.port);
        let issued = rig.submit(&warmup, args.rate).await?;
        let observed = Observed::follow(&follower, &rig.kafka, &warmup, &issued, timeout).await;
        anyhow::ensure!(
            observed.terminal.len() == warmup.len(),
            "only {} of the {} warm-up jobs ended",
            observed.terminal.len(),
            warmup.len()
        );
    }
    let before = Written {
        rows: settled_rows(&rig.store, schema).await?,
        records: rig.records_written()?,
    };
    let specs = bench_specs("bench", args.jobs, rig.port);
    let meter = super::cost::Meter::start(&rig.store).await?;
    let started = Instant::now();
    let issued = rig.submit(&specs, args.rate).await?;
    let submit_seconds = started.elapsed().as_secs_f64();
    // With --backlog: every attempt queued, nobody to run it; then a runner.
    let mut drain_started = None;
    if args.backlog {
        rig.await_backlog(args).await?;
        drain_started = Some(chrono::Utc::now().timestamp_millis());
        rig.start_runner().await?;
    }
    let observed = Observed::follow(&follower, &rig.kafka, &specs, &issued, timeout).await;
    let seconds = started.elapsed().as_secs_f64();
    let cost = meter.read(&rig.store).await?;
    Ok(Followed {
        before,
        observed,
        issued,
        submit_seconds,
        drain_started,
        seconds,
        cost,
    })
}

/// Every role of the pipeline in this process, on the bench's own schema
/// and topic prefix, with a loopback TCP listener for the probes to reach.
struct Rig<'a> {
    config: &'a Config,
    policy: &'a SharedPolicy,
    capacity: u32,
    store: Store,
    kafka: KafkaConfig,
    producer: FutureProducer,
    port: u16,
    target: tokio::task::JoinHandle<()>,
    stop_core: CancellationToken,
    stop_runner: CancellationToken,
    core: Vec<tokio::task::JoinHandle<()>>,
    runner: Option<tokio::task::JoinHandle<()>>,
}

impl<'a> Rig<'a> {
    async fn start(
        config: &'a Config,
        policy: &'a SharedPolicy,
        args: &PipelineBenchArgs,
        schema: &str,
        prefix: &str,
    ) -> anyhow::Result<Self> {
        let store = Store::connect(
            &config.database.url,
            config.database.max_connections.max(8),
            Some(schema),
        )
        .await?
        .with_codec(assemble::kafka(config).codec);
        store.migrate().await?;
        let kafka = KafkaConfig {
            topic_prefix: prefix.to_owned(),
            ..assemble::kafka(config)
        };
        crate::kafka::topology::apply(&kafka).await?;

        // The probe target: a loopback listener that accepts and drops.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let target = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                drop(stream);
            }
        });

        let stop_core = CancellationToken::new();
        let producer = kafka.producer()?;
        let mut dispatcher_config = assemble::dispatcher(config, policy);
        dispatcher_config.group = format!("{prefix}dispatcher");
        let dispatcher = crate::dispatcher::run(
            store.clone(),
            kafka.clone(),
            producer.clone(),
            dispatcher_config,
            stop_core.clone(),
        );
        let relay = crate::kafka::relay::run(
            store.clone(),
            kafka.clone(),
            Default::default(),
            stop_core.clone(),
        );
        let core = vec![
            tokio::spawn(async move {
                if let Err(error) = dispatcher.await {
                    tracing::error!(%error, "bench dispatcher failed");
                }
            }),
            tokio::spawn(async move {
                if let Err(error) = relay.await {
                    tracing::error!(%error, "bench relay failed");
                }
            }),
        ];
        Ok(Self {
            config,
            policy,
            capacity: args.capacity,
            store,
            kafka,
            producer,
            port,
            target,
            stop_core,
            stop_runner: CancellationToken::new(),
            core,
            runner: None,
        })
    }

    /// Start the one runner instance and wait until placement can see it.
    async fn start_runner(&mut self) -> anyhow::Result<()> {
        let mut runner_config = assemble::runner(self.config, self.policy);
        runner_config.capacity = self.capacity;
        runner_config.storage = Some(Arc::new(crate::artifacts::Storage::open(
            &assemble::storage(self.config),
        )));
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let instance = crate::runner::run_instance(
            self.kafka.clone(),
            runner_config,
            Arc::new(VerificationRunner::new(assemble::verification(self.config))),
            self.stop_runner.clone(),
            Some(ready_tx),
        );
        self.runner = Some(tokio::spawn(async move {
            if let Err(error) = instance.await {
                tracing::error!(%error, "bench runner failed");
            }
        }));
        ready_rx.await.context("the runner did not start")?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while self
            .store
            .live_instances(chrono::Utc::now().timestamp_millis() - 3_000)
            .await?
            .is_empty()
        {
            anyhow::ensure!(Instant::now() < deadline, "the runner never became live");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// A consumer of the published attempt log, from its current end.
    fn follow_events(&self) -> anyhow::Result<StreamConsumer> {
        Ok(self
            .kafka
            .consumer_from_the_end(&self.kafka.topic(topics::ATTEMPT_EVENTS))?)
    }

    /// Produce one execute command per spec at `rate` per second; the
    /// submission time of each job, by job id.
    async fn submit(&self, specs: &[JobSpec], rate: u32) -> anyhow::Result<HashMap<String, i64>> {
        let commands_topic = self.kafka.topic(topics::COMMANDS);
        let period = Duration::from_millis(10);
        // Fractions carry over: below 100/s a job goes out every few ticks.
        let per_tick = f64::from(rate) * period.as_secs_f64();
        let mut issued = HashMap::with_capacity(specs.len());
        let mut deliveries = Vec::with_capacity(specs.len());
        let mut ticker = tokio::time::interval(period);
        let mut budget = 0f64;
        let mut pending = specs.iter();
        'ticks: loop {
            ticker.tick().await;
            budget += per_tick;
            while budget >= 1.0 {
                let Some(spec) = pending.next() else {
                    break 'ticks;
                };
                let now = chrono::Utc::now().timestamp_millis();
                let payload = self
                    .kafka
                    .codec
                    .encode_record(&CommandRecord::execute(spec, now))?;
                issued.insert(spec.job_id.clone(), now);
                let record = FutureRecord::to(&commands_topic)
                    .key(&spec.job_id)
                    .payload(&payload);
                deliveries.push(send_when_room(&self.producer, record).await);
                budget -= 1.0;
            }
        }
        for delivery in deliveries {
            let _ = delivery.await;
        }
        Ok(issued)
    }

    /// Wait until every job's first attempt is queued.
    async fn await_backlog(&self, args: &PipelineBenchArgs) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(args.timeout_secs);
        loop {
            let queued = self
                .store
                .live_attempts_by_status(None)
                .await?
                .into_iter()
                .find(|(status, _)| status == "queued")
                .map_or(0, |(_, count)| count);
            if queued >= args.jobs as i64 {
                tracing::info!(queued, "backlog queued; starting the runner");
                return Ok(());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "only {queued} of {} attempts were queued",
                args.jobs
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Let the final reports land and the outbox drain, then stop the
    /// runner, then the dispatcher and relay.
    async fn stop(&mut self) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        self.stop_runner.cancel();
        if let Some(runner) = self.runner.take() {
            let _ = runner.await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        self.stop_core.cancel();
        for task in self.core.drain(..) {
            let _ = task.await;
        }
        self.target.abort();
    }

    /// Records on every declared topic of the bench's prefix.
    fn records_written(&self) -> anyhow::Result<u64> {
        let mut records = 0i64;
        let probe: StreamConsumer = self.kafka.assigned_consumer()?;
        for spec in crate::kafka::topology::declared()? {
            let topic = self.kafka.topic(&spec.name);
            let partitions = partition_count(&probe, &topic).unwrap_or(0);
            for partition in 0..partitions {
                if let Ok((low, high)) =
                    probe.fetch_watermarks(&topic, partition, Duration::from_secs(5))
                {
                    records += high - low;
                }
            }
        }
        Ok(records.max(0) as u64)
    }
}

/// Hand a record to the producer, waiting while its queue is full.
async fn send_when_room(
    producer: &FutureProducer,
    mut record: FutureRecord<'_, String, Vec<u8>>,
) -> rdkafka::producer::DeliveryFuture {
    loop {
        match producer.send_result(record) {
            Ok(delivery) => return delivery,
            Err((error, returned)) => {
                tracing::debug!(%error, "producer queue full");
                record = returned;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }
}

/// One TCP-connect probe job per index, against the rig's listener.
fn bench_specs(name: &str, jobs: usize, port: u16) -> Vec<JobSpec> {
    (0..jobs)
        .map(|index| {
            validate_jobspec(&serde_json::json!({
                "command_id": Uuid::new_v4().to_string(),
                "job_id": format!("{name}/{index}"),
                "tenant": "bench",
                "requested_by": "execplane-bench",
                "operation": "verify.tcp.connect",
                "inputs": {"host": "127.0.0.1", "port": port, "timeout": "5s"},
                "timeouts": {"schedule_to_start": "30m", "start_to_close": "5m", "heartbeat": "1m", "schedule_to_close": "1h"},
                "retry": {"max_attempts": 1}
            }))
            .expect("bench spec is valid")
        })
        .collect()
}

/// Milliseconds from each job's command to its first lease, start and
/// terminal event, as read from the published log.
#[derive(Default)]
struct Observed {
    lease: HashMap<String, i64>,
    start: HashMap<String, i64>,
    terminal: HashMap<String, i64>,
    succeeded: usize,
    /// Why the first rejected job was rejected.
    rejected: Option<String>,
}

/// A line on standard error, rewritten once a second while the run goes
/// on, when standard error is a terminal: how many jobs have ended, and
/// how fast they end now.
struct Progress {
    jobs: usize,
    /// When it was last shown, and how many had ended then; `None`: not
    /// on a terminal.
    last: Option<(Instant, usize)>,
}

impl Progress {
    fn new(jobs: usize) -> Self {
        use std::io::IsTerminal;
        Self {
            jobs,
            last: std::io::stderr().is_terminal().then(|| (Instant::now(), 0)),
        }
    }

    fn show(&mut self, ended: usize) {
        let Some((at, before)) = self.last else {
            return;
        };
        let elapsed = at.elapsed();
        if elapsed < Duration::from_secs(1) {
            return;
        }
        let rate = (ended - before) as f64 / elapsed.as_secs_f64();
        eprint!(
            "\r  {ended:>9} of {} ended, {rate:>7.0}/s now   ",
            self.jobs
        );
        self.last = Some((Instant::now(), ended));
    }

    fn done(&self, ended: usize) {
        if self.last.is_some() {
            eprintln!("\r  {ended:>9} of {} ended{:24}", self.jobs, "");
        }
    }
}

/// What the run measured besides the observed events.
struct RunFigures {
    submit_seconds: f64,
    seconds: f64,
    drain_started: Option<i64>,
    cost: super::cost::Cost,
    rows: u64,
    records: u64,
    bare_kafka_seconds: f64,
    bare_postgres_seconds: f64,
}

/// The header `name` of a published record.
fn header<'m>(message: &'m impl Message, name: &str) -> Option<&'m [u8]> {
    use rdkafka::message::Headers;
    message
        .headers()?
        .iter()
        .find(|header| header.key == name)
        .and_then(|header| header.value)
}

/// The steps of a job the follower times besides its end.
#[derive(Clone, Copy)]
enum Stage {
    Lease,
    Start,
}

/// What the follower does with a record of the published log, by its
/// CloudEvents headers (docs/EVENTS.md).
enum Seen {
    /// A lease or a start of a followed attempt, at `ce_time`: all that is
    /// noted of it, so its datum is not decoded.
    At { stage: Stage, occurred_at: i64 },
    /// A terminal event (or a record without the headers): decoded.
    Decode,
    /// Nothing the follower notes.
    Skip,
}

fn seen(message: &impl Message) -> Seen {
    use crate::contract::event_kind::{CE_TYPE_PREFIX, FINISHED, LEASE_GRANTED, REJECTED, STARTED};
    let Some(kind) = header(message, "ce_type") else {
        return Seen::Decode;
    };
    let Some(kind) = kind.strip_prefix(CE_TYPE_PREFIX.as_bytes()) else {
        return Seen::Skip;
    };
    if [FINISHED, REJECTED]
        .iter()
        .any(|end| end.as_bytes() == kind)
    {
        return Seen::Decode;
    }
    let stage = if kind == LEASE_GRANTED.as_bytes() {
        Stage::Lease
    } else if kind == STARTED.as_bytes() {
        Stage::Start
    } else {
        return Seen::Skip;
    };
    let occurred_at = header(message, "ce_time")
        .and_then(|time| std::str::from_utf8(time).ok())
        .and_then(|time| chrono::DateTime::parse_from_rfc3339(time).ok());
    match occurred_at {
        Some(at) => Seen::At {
            stage,
            occurred_at: at.timestamp_millis(),
        },
        None => Seen::Decode,
    }
}

impl Observed {
    /// Read the log until every job of `specs` is terminal or the timeout
    /// passes.
    async fn follow(
        follower: &StreamConsumer,
        kafka: &KafkaConfig,
        specs: &[JobSpec],
        issued: &HashMap<String, i64>,
        timeout: Duration,
    ) -> Self {
        // A job's one attempt, by the id its records are keyed by.
        let job_of: HashMap<String, &str> = specs
            .iter()
            .map(|spec| {
                let attempt_id = crate::attempt::attempt_id_for(spec.command_id, 1);
                (attempt_id.to_string(), spec.job_id.as_str())
            })
            .collect();
        let mut observed = Self::default();
        let wait_until = Instant::now() + timeout;
        let mut progress = Progress::new(issued.len());
        while observed.terminal.len() < issued.len()
            && observed.rejected.is_none()
            && Instant::now() < wait_until
        {
            progress.show(observed.terminal.len());
            let Ok(Ok(message)) =
                tokio::time::timeout(Duration::from_secs(5), follower.recv()).await
            else {
                continue;
            };
            // The follower shares the cores it measures: a lease or a start
            // is read from its headers alone, and only the records `note`
            // reads are decoded (a `created` event carries the whole spec).
            match seen(&message) {
                Seen::Skip => {}
                Seen::At { stage, occurred_at } => {
                    let job = message
                        .key()
                        .and_then(|key| std::str::from_utf8(key).ok())
                        .and_then(|attempt_id| job_of.get(attempt_id));
                    if let Some(job) = job {
                        observed.note_at(stage, job, occurred_at, issued);
                    }
                }
                Seen::Decode => {
                    let event = message.payload().and_then(|payload| {
                        let record = kafka
                            .codec
                            .decode_record::<crate::codec::AttemptEventRecord>(payload)
                            .ok()?;
                        AttemptEvent::try_from(record).ok()
                    });
                    if let Some(event) = event {
                        observed.note(&event, issued);
                    }
                }
            }
        }
        progress.done(observed.terminal.len());
        observed
    }

    /// A lease or a start of `job` at `occurred_at`; the first one counts.
    fn note_at(
        &mut self,
        stage: Stage,
        job: &str,
        occurred_at: i64,
        issued: &HashMap<String, i64>,
    ) {
        let Some(at) = issued.get(job).copied() else {
            return;
        };
        let noted = match stage {
            Stage::Lease => &mut self.lease,
            Stage::Start => &mut self.start,
        };
        if !noted.contains_key(job) {
            noted.insert(job.to_owned(), occurred_at - at);
        }
    }

    fn note(&mut self, event: &AttemptEvent, issued: &HashMap<String, i64>) {
        let Some(at) = issued.get(&event.job_id).copied() else {
            return;
        };
        let elapsed = event.occurred_at - at;
        match &event.body {
            EventBody::LeaseGranted { .. } => {
                self.note_at(Stage::Lease, &event.job_id, event.occurred_at, issued);
            }
            EventBody::Started { .. } => {
                self.note_at(Stage::Start, &event.job_id, event.occurred_at, issued);
            }
            EventBody::Rejected { problems, .. } => {
                self.rejected
                    .get_or_insert_with(|| crate::contract::Problems(problems.clone()).to_string());
            }
            EventBody::Finished { outcome, .. } if !self.terminal.contains_key(&event.job_id) => {
                self.terminal.insert(event.job_id.clone(), elapsed);
                if *outcome == TerminalOutcome::Succeeded {
                    self.succeeded += 1;
                }
            }
            _ => {}
        }
    }

    fn report(
        self,
        args: &PipelineBenchArgs,
        issued: &HashMap<String, i64>,
        run: RunFigures,
    ) -> PipelineReport {
        let terminal_count = self.terminal.len();
        // Throughput from the first command to the last terminal state.
        let first_issued = issued.values().copied().min().unwrap_or(0);
        let ends: Vec<i64> = self
            .terminal
            .iter()
            .filter_map(|(job, elapsed)| issued.get(job).map(|at| at + elapsed))
            .collect();
        let last_end = ends.iter().copied().max().unwrap_or(first_issued);
        let active_seconds = ((last_end - first_issued) as f64 / 1000.0).max(1e-3);
        let drain_seconds = run
            .drain_started
            .map(|from| ((last_end - from) as f64 / 1000.0).max(1e-3));
        let completed = terminal_count.max(1) as f64;
        let bare_seconds = run.bare_kafka_seconds + run.bare_postgres_seconds;
        let share = |ms: f64| 100.0 * ms / run.cost.capacity_cpu_ms.max(1e-3);
        PipelineReport {
            jobs: args.jobs,
            warmup_jobs: if args.backlog { 0 } else { args.warmup },
            target_rate: args.rate,
            completed: terminal_count,
            succeeded: self.succeeded,
            submit_seconds: run.submit_seconds,
            seconds: run.seconds,
            attempts_per_second: terminal_count as f64 / active_seconds,
            window_lease_ms: window_latencies(issued, &self.lease),
            command_to_lease: percentiles(self.lease.into_values().collect()),
            command_to_start: percentiles(self.start.into_values().collect()),
            command_to_terminal: percentiles(self.terminal.into_values().collect()),
            postgres_rows_per_attempt: run.rows as f64 / completed,
            kafka_records_per_attempt: run.records as f64 / completed,
            wal_bytes_per_attempt: run.cost.wal_bytes as f64 / completed,
            cpu_ms_per_attempt: run.cost.machine_cpu_ms / completed,
            process_cpu_ms_per_attempt: run.cost.process_cpu_ms / completed,
            steal_percent: share(run.cost.stolen_cpu_ms),
            idle_percent: share(
                run.cost.capacity_cpu_ms - run.cost.machine_cpu_ms - run.cost.stolen_cpu_ms,
            ),
            bare_kafka_records: run.records,
            bare_postgres_rows: run.rows,
            bare_seconds,
            bare_kafka_seconds: run.bare_kafka_seconds,
            bare_postgres_seconds: run.bare_postgres_seconds,
            ratio: active_seconds / bare_seconds.max(1e-3),
            drain_rate: drain_seconds.map(|seconds| terminal_count as f64 / seconds),
            drain_seconds,
            window_rates: window_rates(&ends),
        }
    }
}

/// The same volume with no execplane logic: produce and consume `records`
/// 300-byte records on one topic, insert `rows` rows in 500-row batches.
async fn bare(
    config: &Config,
    kafka: &KafkaConfig,
    records: u64,
    rows: u64,
    schema: &str,
) -> anyhow::Result<(f64, f64)> {
    let topic = kafka.topic("bare.v1");
    let admin = kafka.admin()?;
    let new_topic =
        rdkafka::admin::NewTopic::new(&topic, 6, rdkafka::admin::TopicReplication::Fixed(1));
    admin
        .create_topics([&new_topic], &rdkafka::admin::AdminOptions::new())
        .await?;
    let probe: StreamConsumer = kafka.assigned_consumer()?;
    let deadline = Instant::now() + Duration::from_secs(15);
    while partition_count(&probe, &topic).is_err() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let producer: FutureProducer = kafka.producer()?;
    let consumer = kafka.group_consumer(&format!("{topic}-group"))?;
    consumer.subscribe(&[&topic])?;
    let payload = vec![b'x'; 300];
    let began = Instant::now();
    let mut deliveries = Vec::with_capacity(records as usize);
    for index in 0..records {
        let key = index.to_string();
        let record = FutureRecord::to(&topic).key(&key).payload(&payload);
        deliveries.push(send_when_room(&producer, record).await);
    }
    let _ = producer.flush(Duration::from_secs(30));
    for delivery in deliveries {
        let _ = delivery.await;
    }
    let mut consumed = 0u64;
    while consumed < records {
        match tokio::time::timeout(Duration::from_secs(10), consumer.recv()).await {
            Ok(Ok(_)) => consumed += 1,
            _ => break,
        }
    }
    let kafka_seconds = began.elapsed().as_secs_f64();

    let store = Store::connect(&config.database.url, 2, Some(schema)).await?;
    let began = Instant::now();
    store.insert_bare_rows(rows).await?;
    Ok((kafka_seconds, began.elapsed().as_secs_f64()))
}

fn print_report(report: &PipelineReport) {
    println!(
        "pipeline bench: {} jobs at a target of {}/s, after {} warm-up jobs; {} reached a terminal state ({} succeeded)",
        report.jobs, report.target_rate, report.warmup_jobs, report.completed, report.succeeded
    );
    println!(
        "  throughput            {:>10.0} attempts/s end to end",
        report.attempts_per_second
    );
    for (name, figures) in [
        ("command→lease", &report.command_to_lease),
        ("command→start", &report.command_to_start),
        ("command→terminal", &report.command_to_terminal),
    ] {
        println!(
            "  {name:<20} p50 {:>7.0} ms   p95 {:>7.0} ms   p99 {:>7.0} ms   max {:>7.0} ms",
            figures.p50_ms, figures.p95_ms, figures.p99_ms, figures.max_ms
        );
    }
    println!(
        "  postgres rows/attempt {:>10.1}",
        report.postgres_rows_per_attempt
    );
    println!(
        "  kafka records/attempt {:>10.1}",
        report.kafka_records_per_attempt
    );
    println!(
        "  WAL bytes/attempt     {:>10.0}",
        report.wal_bytes_per_attempt
    );
    println!(
        "  CPU ms/attempt        {:>10.2} on the whole machine (broker and Postgres included; {:.2} in this process)",
        report.cpu_ms_per_attempt, report.process_cpu_ms_per_attempt
    );
    println!(
        "  CPUs' time            {:>10.1} % taken by the host for other machines (steal), {:.1} % idle",
        report.steal_percent, report.idle_percent
    );
    if report.bare_seconds > 0.0 {
        println!(
            "  bare pipeline         {:>10.2} s  ({} Kafka records produced+consumed in {:.2} s, {} rows inserted in {:.2} s)",
            report.bare_seconds, report.bare_kafka_records, report.bare_kafka_seconds, report.bare_postgres_rows, report.bare_postgres_seconds
        );
        println!(
            "  ratio                 {:>10.2} × the bare pipeline",
            report.ratio
        );
    } else {
        println!("  bare pipeline         skipped (--no-bare)");
    }
    if let (Some(seconds), Some(rate)) = (report.drain_seconds, report.drain_rate) {
        println!(
            "  backlog drained       {:>10.1} s  ({rate:.0} attempts/s from the runner's start)",
            seconds
        );
    }
    let windows: Vec<String> = report
        .window_rates
        .iter()
        .map(|rate| format!("{rate:.0}"))
        .collect();
    println!("  per 10 s window       {} attempts/s", windows.join(" "));
    let latencies: Vec<String> = report
        .window_lease_ms
        .iter()
        .map(|(p50, p99)| format!("{p50:.0}/{p99:.0}"))
        .collect();
    println!(
        "  command→lease p50/p99 per 10 s window of issue: {} ms",
        latencies.join(" ")
    );
}
