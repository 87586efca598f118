//! The runner conformance suite: what every runner type must do, checked
//! over all of them (`RunnerType::ALL`), so that a type added to the
//! contract is held to it without a test of its own. Per-runner tests keep
//! only what is specific to their runner.
//!
//! Checked here: each type has operations in the catalog, and each type a
//! release runs (`RunnerType::CATALOG`) its work topic and its name in the
//! API; started by `serve` on the real stack, each such type's instance
//! comes up, announces exactly the catalog's operations for
//! its type, runs its tools in the sandbox, and refuses as `contract` a
//! work item of another type's operation put straight on its partition,
//! and one of its own operations whose inputs the contract refuses (the
//! SDK parses and checks them once, for every type, before any executor).
//!
//! What needs a runner's own stack (a cancel, a deadline, an echoed
//! secret, the result's type: `common::conformance`) each runner's tests
//! run with their stack; this file holds that every type does, and runs
//! it for the verification runner.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::conformance::{self, Fixture, Long};
use common::pipeline::{job, Pipeline};
use execplane::contract::{FailureCategory, Operation, ReportBody, RunnerType};
use serde_json::json;
use sqlx::PgPool;

/// The catalog's types: what a release runs (`serve`), declares topics
/// for and names in its API.
fn types() -> BTreeSet<String> {
    RunnerType::CATALOG
        .iter()
        .map(|runner| runner.as_str().to_owned())
        .collect()
}

fn yaml(path: &str) -> serde_yaml::Value {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    serde_yaml::from_str(&std::fs::read_to_string(root.join(path)).unwrap()).unwrap()
}

fn names(list: &serde_yaml::Value) -> BTreeSet<String> {
    list.as_sequence()
        .unwrap_or_else(|| panic!("a list: {list:?}"))
        .iter()
        .map(|name| name.as_str().unwrap().to_owned())
        .collect()
}

/// The catalog's operations for `runner`, by name.
fn catalog(runner: RunnerType) -> BTreeSet<String> {
    Operation::implemented_by(runner)
        .map(|operation| operation.as_str().to_owned())
        .collect()
}

#[test]
fn every_runner_type_has_its_topic_its_api_name_and_its_operations() {
    let topics = yaml("topology/topics.yaml");
    assert_eq!(names(&topics["work_topics"]["types"]), types());
    let api = yaml("docs/openapi.yaml");
    assert_eq!(
        names(&api["components"]["schemas"]["RunnerType"]["enum"]),
        types()
    );
    for &runner in RunnerType::ALL {
        let operations = catalog(runner);
        assert!(!operations.is_empty(), "{runner} runs nothing");
        for operation in Operation::ALL {
            if operations.contains(operation.as_str()) {
                assert_eq!(operation.runner_type(), runner, "{operation}");
            }
        }
    }
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn every_runner_type_serves_its_catalog_in_the_sandbox(pool: PgPool) {
    let mut pipeline = Pipeline::new(&pool).await;
    pipeline.spawn(
        &["serve"],
        &[
            ("EXECPLANE_METRICS_ADDR", ""),
            ("EXECPLANE_RUNNER_CAPACITY", "2"),
        ],
    );
    let rows = || async {
        sqlx::query_as::<_, (String, serde_json::Value, String, i32, String)>(
            "SELECT runner_type, operations, isolation, capacity, instance_id \
             FROM runner_instances WHERE status = 'ready' ORDER BY runner_type",
        )
        .fetch_all(&pool)
        .await
        .unwrap()
    };
    pipeline
        .wait(
            "an instance of every runner type up",
            Duration::from_secs(120),
            || async {
                let up: BTreeSet<String> = rows().await.into_iter().map(|row| row.0).collect();
                up == types()
            },
        )
        .await;
    let (mut injected, mut refused) = (Vec::new(), Vec::new());
    for (runner_type, operations, isolation, capacity, instance) in rows().await {
        let runner: RunnerType = runner_type.parse().unwrap();
        let announced: BTreeSet<String> = serde_json::from_value(operations).unwrap();
        assert_eq!(announced, catalog(runner), "{runner}");
        assert_eq!(isolation, "sandboxed", "{runner}");
        assert_eq!(capacity, 2, "{runner}");
        // Another type's operation, on this instance's partition.
        let foreign = match runner {
            RunnerType::Verification => job(
                "opentofu.plan",
                json!({"package": {"name": "net", "version": "1",
                                   "digest": format!("sha256:{}", "0".repeat(64))}}),
                json!({}),
            ),
            _ => job(
                "verify.tcp.connect",
                json!({"host": "127.0.0.1", "port": 9}),
                json!({}),
            ),
        };
        let attempt = pipeline.inject_work(runner, &instance, &foreign).await;
        injected.push((runner, foreign.operation, attempt));
        // Its own operation with inputs no runner may be handed (put past
        // intake, which would refuse them): the SDK refuses them.
        let own = Operation::implemented_by(runner).next().unwrap();
        let mut unparsed = foreign.clone();
        unparsed.operation = own;
        unparsed.inputs = json!({"not_an_input": true});
        let attempt = pipeline.inject_work(runner, &instance, &unparsed).await;
        refused.push((runner, attempt));
    }
    for (runner, attempt) in refused {
        let message = refused_as_contract(&pipeline, runner, attempt).await;
        assert!(
            message.contains("inputs.not_an_input"),
            "{runner}: {message}"
        );
    }
    for (runner, operation, attempt) in injected {
        let message = refused_as_contract(&pipeline, runner, attempt).await;
        let expected = format!("the {runner} runner does not run {operation}");
        assert_eq!(message, expected, "{runner}");
    }
}

/// The message of the attempt's final report, which must be a `contract`
/// failure.
async fn refused_as_contract(
    pipeline: &Pipeline,
    runner: RunnerType,
    attempt: uuid::Uuid,
) -> String {
    match pipeline
        .final_report(attempt, Duration::from_secs(60))
        .await
    {
        ReportBody::Finished {
            category, message, ..
        } => {
            assert_eq!(
                category,
                Some(FailureCategory::Contract),
                "{runner}: {message:?}"
            );
            message
        }
        other => panic!("{runner}: {other:?}"),
    }
}

/// Each runner type's tests run the conformance suite on its stack: a
/// file of `tests/` calls `conformance::suite(RunnerType::<Type>, …)` for
/// every type.
#[test]
fn every_runner_type_runs_the_conformance_suite() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let calls: String = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "rs"))
        .map(|path| std::fs::read_to_string(path).unwrap())
        .collect::<String>()
        .split_whitespace()
        .collect();
    for runner in RunnerType::ALL {
        let call = format!("conformance::suite(RunnerType::{runner:?},");
        assert!(calls.contains(&call), "no test runs `{call} …)`");
    }
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn the_verification_runner_conforms(pool: PgPool) {
    let bao = common::bao::Bao::new();
    let secret = conformance::store_echo_secret(&bao, "vérif").await;
    let mut pipeline = Pipeline::new(&pool).await;
    conformance::spawn_core(&mut pipeline);
    let probes = format!("{}/tests/probes", env!("CARGO_MANIFEST_DIR"));
    pipeline.spawn(
        &["runner", "verification"],
        &[
            ("EXECPLANE_VAULT_ADDR", bao.address.as_str()),
            ("EXECPLANE_VAULT_TOKEN", bao.root.as_str()),
            ("EXECPLANE_VERIFY_PROBES", "stubborn,leaky"),
            ("EXECPLANE_VERIFY_PROBE_DIR", probes.as_str()),
            ("EXECPLANE_RUNNER_STOP_GRACE", "1s"),
        ],
    );
    pipeline.wait_runners(1).await;
    // Ignores SIGINT and leaves two grandchildren (tests/probes/stubborn).
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let long = job(
        "verify.custom.probe",
        json!({"probe_id": "stubborn", "args": {"tag": tag}}),
        json!({}),
    );
    let echo = job(
        "verify.custom.probe",
        json!({"probe_id": "leaky", "args": {"text": {"$secret": "value"}}}),
        json!({"secret_refs": conformance::echo_secret_refs()}),
    );
    let fixture = Fixture {
        long: Long::twice(
            long,
            vec![format!("sleep-{tag}-group"), format!("sleep-{tag}-session")],
        ),
        echo,
        secret,
        echo_in_output: true,
        artifacts: pipeline.dir.join("artifacts"),
    };
    conformance::suite(RunnerType::Verification, &pipeline, fixture).await;
}
