//! A runner defined here, with the runner kit alone, by the steps of
//! `docs/RUNNERS.md`: its vocabulary is `contract::ops::testkit` (built
//! with the `testkit` feature only, never in a release), its executor is
//! below, and it passes the conformance suite every runner type passes.
//! Proof that the guide is true: what it says a runner writes is enough.
#![cfg(feature = "testkit")]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::bao::Bao;
use common::conformance::{self, Fixture, Long};
use common::pipeline::{job, Pipeline};
use execplane::contract::ops::testkit::{TestkitEcho, TestkitInputs, TestkitResult};
use execplane::contract::{topics, FailureCategory, RunnerType};
use execplane::runner::tool::{self, ToolCommand, Workdir};
use execplane::runner::{Assignment, ExecutionContext, ExecutionOutcome, Executor, Failure};
use serde_json::{json, Value};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

/// Prints the message, then sleeps: bash as `testkit-<tag>-main` and a
/// child of it as `testkit-<tag>-child`, both sleeping, so that a stop
/// must end a process group, not one process.
const SCRIPT: &str = r#"printf '%s\n' "$MESSAGE"
(exec -a "testkit-$1-child" sleep "$2") &
exec -a "testkit-$1-main" sleep "$2""#;

/// The testkit runner: one operation, one tool, run and judged by the kit.
struct TestkitRunner;

impl Executor for TestkitRunner {
    type Inputs = TestkitInputs;

    fn runner_type(&self) -> RunnerType {
        RunnerType::Testkit
    }

    async fn execute(
        &self,
        _assignment: Assignment,
        inputs: TestkitInputs,
        context: ExecutionContext,
    ) -> ExecutionOutcome {
        let TestkitInputs::TestkitEchoRun(echo) = inputs;
        match echo_and_sleep(&echo, &context).await {
            Ok(result) => ExecutionOutcome::succeeded("said and slept", result),
            Err(failure) => failure.outcome(None),
        }
    }
}

async fn echo_and_sleep(echo: &TestkitEcho, context: &ExecutionContext) -> Result<Value, Failure> {
    let workdir = Workdir::for_tools(context.tools())
        .map_err(|error| Failure::infrastructure(format!("no working directory: {error}")))?;
    // Its secret is resolved by now: the SDK masks it wherever it is said.
    let message = match &echo.message {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    let command = ToolCommand::new("/bin/bash")
        .base_env(&workdir)
        .env("MESSAGE", message)
        .args([
            "-c",
            SCRIPT,
            "testkit",
            &echo.tag,
            &echo.seconds.to_string(),
        ]);
    let exit = tool::run_judged(context, &workdir, "the echo", command, |_| {
        FailureCategory::RunnerError
    })
    .await?;
    let result = TestkitResult {
        exit_code: exit.code,
        seconds: echo.seconds,
    };
    serde_json::to_value(result).map_err(|error| Failure::infrastructure(error.to_string()))
}

/// The testkit runner, in this process, as `serve` would run it: the
/// pipeline's settings with `env`, equipped by `cli::equip`, on a runtime
/// of its own. Stopped when dropped.
struct InProcess {
    stop: CancellationToken,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl InProcess {
    async fn start(pipeline: &Pipeline, env: &[(&str, &str)]) -> Self {
        // A release's topology has no topic for a type the tests define.
        let topic = pipeline.kafka.topic(&topics::work(RunnerType::Testkit));
        let new =
            rdkafka::admin::NewTopic::new(&topic, 4, rdkafka::admin::TopicReplication::Fixed(1));
        let created = pipeline
            .kafka
            .admin()
            .unwrap()
            .create_topics(&[new], &rdkafka::admin::AdminOptions::new())
            .await
            .unwrap();
        assert!(created.iter().all(Result::is_ok), "{created:?}");

        let environment = pipeline.environment(env);
        let lookup = move |name: &str| {
            environment
                .iter()
                .rev()
                .find(|(key, _)| key == name)
                .map(|(_, value)| value.clone())
                .or_else(|| std::env::var(name).ok())
        };
        let (config, policy) =
            execplane::cli::assemble::load_with(None, lookup, &[]).expect("the settings load");
        let mut settings = execplane::cli::assemble::runner(&config, &policy);
        // The tools' supervisor is the execplane binary, not this test's.
        Arc::make_mut(&mut settings.tools).shim = env!("CARGO_BIN_EXE_execplane").into();
        let kafka = pipeline.kafka.clone();
        let stop = CancellationToken::new();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let token = stop.clone();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let settings = execplane::cli::equip(settings, &config, &token)
                    .await
                    .expect("the runner is equipped");
                let executor = Arc::new(TestkitRunner);
                execplane::runner::run_instance(kafka, settings, executor, token, Some(ready_tx))
                    .await
                    .expect("the testkit runner runs");
            });
        });
        tokio::time::timeout(Duration::from_secs(60), ready_rx)
            .await
            .expect("the testkit runner starts within a minute")
            .expect("the testkit runner starts");
        Self {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn the_testkit_runner_conforms(pool: PgPool) {
    let bao = Bao::new();
    let secret = conformance::store_echo_secret(&bao, "testkit").await;
    let mut pipeline = Pipeline::new(&pool).await;
    conformance::spawn_core(&mut pipeline);
    let runner = InProcess::start(
        &pipeline,
        &[
            ("EXECPLANE_VAULT_ADDR", bao.address.as_str()),
            ("EXECPLANE_VAULT_TOKEN", bao.root.as_str()),
            ("EXECPLANE_RUNNER_STOP_GRACE", "1s"),
        ],
    )
    .await;
    pipeline.wait_runners(1).await;
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let long = job(
        "testkit.echo.run",
        json!({"message": "long", "seconds": 3600, "tag": tag}),
        json!({}),
    );
    let echo = job(
        "testkit.echo.run",
        json!({"message": {"$secret": "value"}, "tag": format!("{tag}-echo")}),
        json!({"secret_refs": conformance::echo_secret_refs()}),
    );
    let fixture = Fixture {
        long: Long::twice(
            long,
            vec![
                format!("testkit-{tag}-main"),
                format!("testkit-{tag}-child"),
            ],
        ),
        echo,
        secret,
        echo_in_output: true,
        artifacts: pipeline.dir.join("artifacts"),
    };
    conformance::suite(RunnerType::Testkit, &pipeline, fixture).await;
    drop(runner);
}
