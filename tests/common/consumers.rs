//! The example consumers of the published log (`examples/consumers/`,
//! docs/EVENTS.md), as their READMEs run them; `scripts/consumers.sh`
//! installs them (the test command runs it first).

use std::process::{Command, Output};

use serde_json::Value;

/// The Python consumer's interpreter and the Java consumer's jar.
fn python() -> std::path::PathBuf {
    let python = super::stack_dir().join("consumers-venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/consumers.sh",
        python.display()
    );
    python
}

fn jar() -> std::path::PathBuf {
    let jar = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/consumers/java/target/execplane-consumer.jar");
    assert!(
        jar.exists(),
        "{} is missing: run scripts/consumers.sh",
        jar.display()
    );
    jar
}

fn script(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/consumers/python")
        .join(name)
}

/// Each consumer, named, as a command before its own arguments.
pub fn each() -> [(&'static str, Command); 2] {
    let mut java = Command::new("java");
    java.arg("-jar").arg(jar());
    let mut python = Command::new(python());
    python.arg(script("fold.py"));
    [("python", python), ("java", java)]
}

/// The vector check of each consumer.
pub fn vector_checks() -> [(&'static str, Command); 2] {
    let mut java = Command::new("java");
    java.arg("-jar")
        .arg(jar())
        .arg("--vectors")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/schemas/vectors"));
    let mut python = Command::new(python());
    python.arg(script("test_vectors.py"));
    [("python", python), ("java", java)]
}

/// A consumer's fold of `topic`: its one JSON object. Panics, with what it
/// said, when it does not exit 0.
pub fn fold(
    name: &str,
    mut command: Command,
    brokers: &str,
    topic: &str,
    extra: &[String],
) -> Value {
    let output: Output = command
        .args(["--brokers", brokers, "--topic", topic])
        .args(extra)
        .output()
        .unwrap_or_else(|error| panic!("the {name} consumer runs: {error}"));
    assert!(
        output.status.success(),
        "the {name} consumer: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|error| panic!("the {name} consumer's output: {error}"))
}

/// Each attempt's (id, status, last seq) in a consumer's fold, by id.
pub fn folded_states(fold: &Value) -> Vec<(String, String, i64)> {
    let mut states: Vec<(String, String, i64)> = fold["attempts"]
        .as_object()
        .expect("the fold's attempts")
        .iter()
        .map(|(attempt, state)| {
            (
                attempt.clone(),
                state["status"].as_str().unwrap_or_default().to_owned(),
                state["last_seq"].as_i64().unwrap_or_default(),
            )
        })
        .collect();
    states.sort();
    states
}

/// The same of the projection in Postgres.
pub async fn stored_states(pool: &sqlx::PgPool) -> Vec<(String, String, i64)> {
    let mut states: Vec<(String, String, i64)> =
        sqlx::query_as("SELECT attempt_id::text, status, last_seq FROM attempts")
            .fetch_all(pool)
            .await
            .expect("the projection reads");
    // Byte order, as the fold's (a collation may order text otherwise).
    states.sort();
    states
}
