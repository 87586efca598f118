//! The runner conformance suite: what every runner type must do, checked
//! over all of them (`RunnerType::ALL`), so that a type added to the
//! contract is held to it without a test of its own. Per-runner tests keep
//! only what is specific to their runner.
//!
//! Checked here: each type has its work topic, its name in the API, and
//! operations in the catalog; started by `serve` on the real stack, each
//! type's instance comes up, announces exactly the catalog's operations for
//! its type and runs its tools in the sandbox.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::pipeline::Pipeline;
use execplane::contract::{Operation, RunnerType};
use sqlx::PgPool;

fn types() -> BTreeSet<String> {
    RunnerType::ALL
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
    for runner in RunnerType::ALL {
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
        sqlx::query_as::<_, (String, serde_json::Value, String, i32)>(
            "SELECT runner_type, operations, isolation, capacity FROM runner_instances \
             WHERE status = 'ready' ORDER BY runner_type",
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
    for (runner_type, operations, isolation, capacity) in rows().await {
        let runner: RunnerType = runner_type.parse().unwrap();
        let announced: BTreeSet<String> = serde_json::from_value(operations).unwrap();
        assert_eq!(announced, catalog(runner), "{runner}");
        assert_eq!(isolation, "sandboxed", "{runner}");
        assert_eq!(capacity, 2, "{runner}");
    }
}
