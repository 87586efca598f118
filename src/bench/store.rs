//! `execplane bench store`: batched appends through the real store. Drives N
//! attempts through create → lease → start → finish in an isolated schema
//! and reports inputs/s, events/s and rows/s per phase.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::Mutex;
use uuid::Uuid;

use crate::attempt::attempt_id_for;
use crate::config::Config;
use crate::contract::{validate_jobspec, Input, ReportBody, ReportedOutcome, RunnerReport};
use crate::store::{InputEnvelope, Store};

#[derive(Debug, Default, Serialize)]
pub struct PhaseFigures {
    pub phase: &'static str,
    pub inputs: u64,
    pub events: u64,
    /// Every row written: events, projection rows, outbox rows, inbox rows.
    pub rows: u64,
    pub transactions: u64,
    pub seconds: f64,
    pub inputs_per_second: f64,
    pub events_per_second: f64,
    pub rows_per_second: f64,
    pub mean_transaction_ms: f64,
}

#[derive(Debug, Serialize)]
pub struct StoreBenchReport {
    pub attempts: usize,
    pub batch: usize,
    pub writers: usize,
    pub phases: Vec<PhaseFigures>,
    pub total: PhaseFigures,
}

#[derive(Debug, clap::Args)]
pub struct StoreBenchArgs {
    /// Attempts to drive through their whole life.
    #[arg(long, default_value_t = 10_000)]
    pub attempts: usize,
    /// Inputs per transaction.
    #[arg(long, default_value_t = 500)]
    pub batch: usize,
    /// Concurrent writers, each with its own connection.
    #[arg(long, default_value_t = 2)]
    pub writers: usize,
    #[arg(long)]
    pub json: bool,
    /// Keep the bench schema afterwards.
    #[arg(long)]
    pub keep: bool,
}

pub async fn run(config: &Config, args: &StoreBenchArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        args.attempts > 0 && args.batch > 0 && args.writers > 0,
        "--attempts, --batch and --writers must be positive"
    );
    let schema =
        super::ScratchSchema::create(config, format!("execplane_bench_{}", std::process::id()))
            .await?;
    let interrupt = super::leftovers::on_interrupt();
    let result = tokio::select! {
        result = drive(config, args, &schema.name) => result,
        _ = interrupt.cancelled() => Err(anyhow::anyhow!("interrupted")),
    };
    schema.finish(args.keep).await?;
    let report = result?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    Ok(ExitCode::SUCCESS)
}

async fn drive(
    config: &Config,
    args: &StoreBenchArgs,
    schema: &str,
) -> anyhow::Result<StoreBenchReport> {
    let connections = u32::try_from(args.writers).unwrap_or(8) + 1;
    let store = Store::connect(&config.database.url, connections, Some(schema)).await?;
    store.migrate().await?;
    let now = chrono::Utc::now().timestamp_millis();
    let commands: Vec<Uuid> = (0..args.attempts).map(|_| Uuid::new_v4()).collect();
    let mut phases = Vec::new();
    for step in Step::ALL {
        let inputs = commands
            .iter()
            .enumerate()
            .map(|(index, command_id)| step.input(index, *command_id))
            .collect();
        phases.push(phase(&store, step.name(), inputs, args, now).await?);
    }
    let total = total(&phases);
    Ok(StoreBenchReport {
        attempts: args.attempts,
        batch: args.batch,
        writers: args.writers,
        phases,
        total,
    })
}

/// The life every bench attempt goes through, one phase per step.
#[derive(Clone, Copy)]
enum Step {
    Create,
    Lease,
    Start,
    Finish,
}

impl Step {
    const ALL: [Step; 4] = [Step::Create, Step::Lease, Step::Start, Step::Finish];

    fn name(self) -> &'static str {
        match self {
            Step::Create => "create",
            Step::Lease => "lease",
            Step::Start => "start",
            Step::Finish => "finish",
        }
    }

    /// This step's input for the `index`th attempt, first of its command.
    fn input(self, index: usize, command_id: Uuid) -> InputEnvelope {
        let attempt_id = attempt_id_for(command_id, 1);
        let runner_instance = format!("bench-runner-{}", index % 16);
        let report = |body| {
            Input::Report(RunnerReport {
                attempt_id,
                lease_epoch: 1,
                runner_instance: runner_instance.clone(),
                body,
            })
        };
        let input = match self {
            Step::Create => Input::Execute {
                policy_digest: None,
                target_keys: Vec::new(),
                spec: std::sync::Arc::new(
                    validate_jobspec(&serde_json::json!({
                        "command_id": command_id.to_string(),
                        "job_id": format!("bench/{index}"),
                        "tenant": "bench",
                        "requested_by": "execplane-bench",
                        "operation": "verify.tcp.connect",
                        "inputs": {"host": "127.0.0.1", "port": 5432}
                    }))
                    .expect("the bench spec is valid"),
                ),
            },
            Step::Lease => Input::Grant {
                attempt_id,
                runner_instance: runner_instance.clone(),
            },
            Step::Start => report(ReportBody::Started),
            Step::Finish => report(ReportBody::Finished {
                outcome: ReportedOutcome::Succeeded,
                category: None,
                message: "ok".into(),
                result_json: Some("{\"connected\":true}".into()),
                outputs: Vec::new(),
            }),
        };
        InputEnvelope {
            input_id: format!("bench-{}-{command_id}", self.name()),
            source: "bench".into(),
            input,
        }
    }
}

/// The phases summed, with rates over their summed time.
fn total(phases: &[PhaseFigures]) -> PhaseFigures {
    let mut total = PhaseFigures {
        phase: "total",
        ..Default::default()
    };
    for figures in phases {
        total.inputs += figures.inputs;
        total.events += figures.events;
        total.rows += figures.rows;
        total.transactions += figures.transactions;
        total.seconds += figures.seconds;
    }
    let total_elapsed = Duration::from_secs_f64(total.seconds);
    rates(&mut total, total_elapsed, Duration::ZERO);
    let mean: f64 = phases
        .iter()
        .map(|figures| figures.mean_transaction_ms * figures.transactions as f64)
        .sum::<f64>();
    total.mean_transaction_ms = mean / total.transactions.max(1) as f64;
    total
}

async fn phase(
    store: &Store,
    name: &'static str,
    inputs: Vec<InputEnvelope>,
    args: &StoreBenchArgs,
    now: i64,
) -> anyhow::Result<PhaseFigures> {
    let batches: Vec<Vec<InputEnvelope>> = inputs
        .chunks(args.batch)
        .map(<[InputEnvelope]>::to_vec)
        .collect();
    let queue = Arc::new(Mutex::new(batches));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..args.writers {
        let queue = Arc::clone(&queue);
        let store = store.clone();
        workers.push(tokio::spawn(async move {
            let mut figures = PhaseFigures::default();
            let mut busy = Duration::ZERO;
            loop {
                let Some(batch) = queue.lock().await.pop() else {
                    break;
                };
                let began = Instant::now();
                let outcome = store.process_batch(&batch, now).await?;
                busy += began.elapsed();
                figures.inputs += batch.len() as u64;
                figures.events += outcome.events.len() as u64;
                figures.rows +=
                    (outcome.events.len() + outcome.projection_rows + batch.len()) as u64;
                figures.transactions += 1;
            }
            anyhow::Ok((figures, busy))
        }));
    }
    let mut figures = PhaseFigures {
        phase: name,
        ..Default::default()
    };
    let mut busy = Duration::ZERO;
    for worker in workers {
        let (part, part_busy) = worker.await??;
        figures.inputs += part.inputs;
        figures.events += part.events;
        figures.rows += part.rows;
        figures.transactions += part.transactions;
        busy += part_busy;
    }
    rates(&mut figures, started.elapsed(), busy);
    Ok(figures)
}

fn rates(figures: &mut PhaseFigures, elapsed: Duration, busy: Duration) {
    let seconds = elapsed.as_secs_f64().max(1e-9);
    figures.seconds = seconds;
    figures.inputs_per_second = figures.inputs as f64 / seconds;
    figures.events_per_second = figures.events as f64 / seconds;
    figures.rows_per_second = figures.rows as f64 / seconds;
    if figures.transactions > 0 && !busy.is_zero() {
        figures.mean_transaction_ms = busy.as_secs_f64() * 1000.0 / figures.transactions as f64;
    }
}

fn print_table(report: &StoreBenchReport) {
    println!(
        "store bench: {} attempts, {} inputs per transaction, {} writers",
        report.attempts, report.batch, report.writers
    );
    println!(
        "{:<8} {:>8} {:>8} {:>9} {:>8} {:>10} {:>10} {:>11} {:>9}",
        "phase", "inputs", "events", "rows", "seconds", "inputs/s", "events/s", "rows/s", "tx ms"
    );
    for figures in report.phases.iter().chain(std::iter::once(&report.total)) {
        println!(
            "{:<8} {:>8} {:>8} {:>9} {:>8.2} {:>10.0} {:>10.0} {:>11.0} {:>9.1}",
            figures.phase,
            figures.inputs,
            figures.events,
            figures.rows,
            figures.seconds,
            figures.inputs_per_second,
            figures.events_per_second,
            figures.rows_per_second,
            figures.mean_transaction_ms
        );
    }
}
