//! The runner conformance suite: what every runner type must do, run by
//! each runner's own tests on the stack that runner needs (as each of
//! vector's sinks calls its compliance check). `tests/runners.rs` holds
//! that every `RunnerType` has a test that runs it.
//!
//! For each type, on the real tools:
//! - a cancel ends the attempt `cancelled` within its grace, and no
//!   process of the attempt is left on this host;
//! - a deadline (`start_to_close`) ends it as a `timeout`, and no process
//!   of it is left;
//! - a secret the tool echoes appears masked in its output, and unmasked
//!   on no topic, in no table or stored event, in no stored artifact;
//! - the result of a successful attempt is of its operation's documented
//!   type (`contract::check_result`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use execplane::contract::{DurationMs, JobSpec, RunnerType};
use uuid::Uuid;

use super::pipeline::Pipeline;

/// A job whose tool runs far longer than the suite waits and stops only
/// when told.
pub struct Long {
    pub job: JobSpec,
    /// For each process the job runs on this host (its tool, what its
    /// tool starts, a node's command), a word of its command line unique
    /// to the job; none when the runner runs no process of its own
    /// (kubernetes' in-process client).
    pub processes: Vec<String>,
}

impl Long {
    /// The same job, twice (for the cancel and for the deadline).
    pub fn twice(job: JobSpec, processes: Vec<String>) -> [Long; 2] {
        let long = || Long {
            job: job.clone(),
            processes: processes.clone(),
        };
        [long(), long()]
    }
}

/// What the suite needs of a runner's stack.
pub struct Fixture {
    /// The long jobs it cancels and lets run past their deadline.
    pub long: [Long; 2],
    /// A job whose tool is handed `secret` (a `$secret` of the stack's
    /// secret store), writes it to its output and succeeds.
    pub echo: JobSpec,
    pub secret: String,
    /// Whether the echo reaches the tool output (log chunks), so that the
    /// suite can see it there masked; `false` for a runner whose tools'
    /// output is not streamed.
    pub echo_in_output: bool,
    /// Where the pipeline's artifacts are stored (an artifact worker must
    /// run): scanned for the secret once the echo's are bundled.
    pub artifacts: PathBuf,
}

/// A fresh secret for the echo, `prefix` then random, stored in the
/// stack's OpenBao where [`echo_secret_refs`] point: the secret.
pub async fn store_echo_secret(bao: &super::bao::Bao, prefix: &str) -> String {
    let secret = format!("{prefix}-{}", Uuid::new_v4().simple());
    bao.put("team-a/conformance", serde_json::json!({"value": secret}))
        .await;
    secret
}

/// The `secret_refs` of an echo that names its secret `{"$secret": "value"}`.
pub fn echo_secret_refs() -> serde_json::Value {
    serde_json::json!([{"name": "value", "mount": "secret",
                        "path": "team-a/conformance", "key": "value"}])
}

/// The roles the suite needs besides the runner: the dispatcher, the
/// relay and an artifact worker (the echo's artifacts are scanned).
pub fn spawn_core(pipeline: &mut Pipeline) {
    pipeline.spawn(&["dispatcher"], &[]);
    pipeline.spawn(&["relay"], &[]);
    pipeline.spawn(
        &["artifact-worker"],
        &[("EXECPLANE_ARTIFACT_GRACE", "300ms")],
    );
}

/// The grace a cancel is given.
const GRACE: Duration = Duration::from_secs(5);
/// The deadline of the deadline check.
const DEADLINE: Duration = Duration::from_secs(15);
const WAIT: Duration = Duration::from_secs(180);

/// Runs every check of the suite on `runner`.
pub async fn suite(runner: RunnerType, pipeline: &Pipeline, fixture: Fixture) {
    let [cancelled, overdue] = &fixture.long;
    for spec in [&cancelled.job, &overdue.job, &fixture.echo] {
        assert_eq!(spec.operation.runner_type(), runner, "{}", spec.operation);
    }
    cancel(runner, pipeline, cancelled).await;
    deadline(runner, pipeline, overdue).await;
    echo(runner, pipeline, &fixture).await;
}

/// A copy of `spec` with ids of its own.
fn fresh(spec: &JobSpec) -> JobSpec {
    let mut spec = spec.clone();
    spec.command_id = Uuid::new_v4();
    spec.job_id = format!("conformance/{}", Uuid::new_v4().simple());
    spec.retry.max_attempts = 1;
    spec
}

async fn cancel(runner: RunnerType, pipeline: &Pipeline, long: &Long) {
    let spec = fresh(&long.job);
    pipeline.submit(&spec).await;
    let attempt = pipeline.wait_status(&spec.job_id, "running", WAIT).await;
    for word in &long.processes {
        wait_for_process(runner, word).await;
    }
    if long.processes.is_empty() {
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let asked = Instant::now();
    pipeline.cancel(attempt, GRACE.as_millis() as i64).await;
    let attempts = pipeline.wait_done(&spec.job_id, WAIT).await;
    let took = asked.elapsed();
    assert_eq!(attempts[0].1, "cancelled", "{runner}: {attempts:?}");
    // Before the grace ran out: by the runner, not by the dispatcher's
    // grace timer.
    assert!(
        took < GRACE,
        "{runner}: cancelled after {took:?}, not within its grace of {GRACE:?}"
    );
    for word in &long.processes {
        assert_no_process(runner, word).await;
    }
}

async fn deadline(runner: RunnerType, pipeline: &Pipeline, long: &Long) {
    let mut spec = fresh(&long.job);
    spec.timeouts.start_to_close = DurationMs(DEADLINE.as_millis() as u64);
    spec.timeouts.schedule_to_close = DurationMs(WAIT.as_millis() as u64);
    pipeline.submit(&spec).await;
    for word in &long.processes {
        wait_for_process(runner, word).await;
    }
    let (status, category, message, _) = pipeline.ended(&spec, WAIT).await;
    // Whichever sees the deadline first: the dispatcher's timer
    // (`timed_out`), or the runner stopping its tool at it (`failed`).
    assert!(
        matches!(status.as_str(), "timed_out" | "failed") && category.as_deref() == Some("timeout"),
        "{runner}: {status} {category:?}: {message}"
    );
    for word in &long.processes {
        assert_no_process(runner, word).await;
    }
}

async fn echo(runner: RunnerType, pipeline: &Pipeline, fixture: &Fixture) {
    let spec = fresh(&fixture.echo);
    pipeline.submit(&spec).await;
    let (status, _, message, result) = pipeline.ended(&spec, WAIT).await;
    assert_eq!(status, "succeeded", "{runner}: {message}");
    if let Err(problem) = execplane::contract::ops::check_result(spec.operation, &result) {
        panic!(
            "{runner}: the result of {} is not of its type: {problem}\n{result:#}",
            spec.operation
        );
    }
    if fixture.echo_in_output {
        let attempt = execplane::attempt::attempt_id_for(spec.command_id, 1).to_string();
        let output = pipeline
            .tool_output()
            .await
            .remove(&attempt)
            .unwrap_or_default();
        // Shown without the value, should it be there.
        assert!(
            output.contains("[masked]"),
            "{runner}: the tool's output shows no masked echo:\n{}",
            output.replace(&fixture.secret, "<the secret>")
        );
    }
    // Scanned once the artifact worker has bundled the attempt's output.
    let attempt = execplane::attempt::attempt_id_for(spec.command_id, 1);
    pipeline
        .wait("the echo's artifacts", WAIT, || async {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM artifacts WHERE attempt_id = $1")
                .bind(attempt)
                .fetch_one(&pipeline.pool)
                .await
                .unwrap_or(0)
                > 0
        })
        .await;
    super::leaks::assert_secret_nowhere(
        pipeline,
        &pipeline.pool,
        &fixture.secret,
        runner,
        &fixture.artifacts,
    )
    .await;
}

/// The processes on this host whose command line has `word`.
fn processes_with(word: &str) -> Vec<(i32, String)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let bytes = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let line = String::from_utf8_lossy(&bytes).replace('\0', " ");
            line.contains(word).then_some((pid, line))
        })
        .collect()
}

async fn wait_for_process(runner: RunnerType, word: &str) {
    let until = Instant::now() + WAIT;
    while processes_with(word).is_empty() {
        assert!(
            Instant::now() < until,
            "{runner}: no process with `{word}` ever ran"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// None is left shortly after the attempt ended: a tool's at once, a
/// node's command within its watchdog's grace (docs/SECURITY.md).
async fn assert_no_process(runner: RunnerType, word: &str) {
    let until = Instant::now() + Duration::from_secs(8);
    loop {
        let left = processes_with(word);
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < until,
            "{runner}: left running after the attempt ended: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
