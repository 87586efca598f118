//! The operator's destination policy and the probes' bounds, through real
//! role processes: link-local and metadata addresses are refused at intake,
//! loopback and private ones unless the policy lists them (a literal at
//! intake, a name once resolved),
//! a redirect into a denied address is refused by the runner after its
//! first hop, a callback to a denied address is never sent, and a huge
//! response does not grow the runner.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::http::{Received, Reply, Server};
use common::pipeline::{job, Pipeline};
use serde_json::json;
use sqlx::PgPool;

const WAIT: Duration = Duration::from_secs(60);

/// A policy file letting every tenant reach 127.0.0.1 (where the tests'
/// servers listen) and denying 127.0.0.2 (another loopback address the
/// tests can listen on); tenant `closed` has the defaults: no loopback or
/// private address at all.
fn policy_file(pipeline: &Pipeline) -> String {
    let path = pipeline.dir.join("policy.toml");
    std::fs::write(
        &path,
        "[defaults.destinations]\nallow_private = [\"127.0.0.1/32\"]\ndeny = [\"127.0.0.2/32\"]\n\n[tenants.closed.destinations]\n",
    )
    .unwrap();
    path.display().to_string()
}

async fn result(
    pool: &PgPool,
    job_id: &str,
) -> (String, Option<String>, String, serde_json::Value) {
    let row: (String, Option<String>, Option<String>, Option<String>) = sqlx::query_as(
        "SELECT status, failure_category, message, result_json FROM attempts WHERE job_id = $1 ORDER BY attempt_no DESC LIMIT 1",
    )
    .bind(job_id)
    .fetch_one(pool)
    .await
    .unwrap();
    let evidence = row
        .3
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or_default();
    (row.0, row.1, row.2.unwrap_or_default(), evidence)
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn probes_and_callbacks_reach_only_what_the_operator_allows(pool: PgPool) {
    let mut pipeline = Pipeline::new(&pool).await;
    let policy = policy_file(&pipeline);
    let env = [("EXECPLANE_POLICY_FILE", policy.as_str())];
    pipeline.spawn(&["dispatcher"], &env);
    pipeline.spawn(&["relay"], &env);
    pipeline.spawn(&["runner", "verification"], &env);
    pipeline.wait_runners(1).await;
    // What must never be reached, listening on the denied address.
    let denied = Server::start_on("127.0.0.2", Arc::new(|_: &Received| Reply::Status(200))).await;
    // A target that redirects there.
    let location = denied.url("/latest/meta-data/");
    let redirector = Server::start_on(
        "127.0.0.1",
        Arc::new(move |_: &Received| Reply::Redirect(location.clone())),
    )
    .await;

    // Cloud metadata: refused at intake, never placed.
    let metadata = job(
        "verify.http.endpoint",
        json!({"url": "http://169.254.169.254/latest/meta-data/", "expect": {"body_contains": "ami"}}),
        json!({}),
    );
    // The denied address, directly and as a TCP probe.
    let direct = job(
        "verify.tcp.connect",
        json!({"host": "127.0.0.2", "port": denied.port}),
        json!({}),
    );
    // A redirect into it: only the runner, after the first hop, can see it.
    let redirect = job(
        "verify.http.endpoint",
        json!({"url": redirector.url("/start"), "expect": {"status": 200}}),
        json!({"retry": {"max_attempts": 3, "initial_backoff": "100ms"}}),
    );
    // A callback to it.
    let callback = job(
        "verify.tcp.connect",
        json!({"host": "127.0.0.1", "port": 5432}),
        json!({"callback": {"url": denied.url("/callback")}}),
    );
    // By default nothing on loopback or a private network: the runner's
    // own metrics, the database, the ingress. A literal is refused at
    // intake, as a probe or a callback; a name when it resolves.
    let inside = Server::start_on("127.0.0.1", Arc::new(|_: &Received| Reply::Status(200))).await;
    let closed = |operation: &str, inputs: serde_json::Value, extra: serde_json::Value| {
        let mut spec = job(operation, inputs, extra);
        spec.tenant = "closed".into();
        spec
    };
    let database = closed(
        "verify.tcp.connect",
        json!({"host": "127.0.0.1", "port": 5432}),
        json!({}),
    );
    let mapped = closed(
        "verify.http.endpoint",
        json!({"url": format!("http://[::ffff:127.0.0.1]:{}/metrics", inside.port)}),
        json!({}),
    );
    let private_callback = closed(
        "verify.tcp.connect",
        json!({"host": "192.0.2.1", "port": 9}),
        json!({"callback": {"url": inside.url("/callback")}}),
    );
    let by_name = closed(
        "verify.http.endpoint",
        json!({"url": format!("http://localhost:{}/metrics", inside.port), "expect": {"status": 200}}),
        json!({"retry": {"max_attempts": 1}}),
    );
    for spec in [
        &metadata,
        &direct,
        &redirect,
        &callback,
        &database,
        &mapped,
        &private_callback,
        &by_name,
    ] {
        pipeline.submit(spec).await;
    }
    for spec in [&database, &mapped, &private_callback] {
        pipeline.wait_done(&spec.job_id, WAIT).await;
        let (status, category, message, _) = result(&pool, &spec.job_id).await;
        assert_eq!(
            (status.as_str(), category.as_deref()),
            ("rejected", Some("policy")),
            "{}: {message}",
            spec.job_id
        );
        assert!(message.contains("allow_private"), "{message}");
    }
    pipeline.wait_done(&by_name.job_id, WAIT).await;
    let (status, category, message, _) = result(&pool, &by_name.job_id).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("failed", Some("policy")),
        "{message}"
    );
    assert!(message.contains("loopback or private"), "{message}");
    assert!(
        inside.requests().is_empty(),
        "a closed tenant reached loopback: {:?}",
        inside.requests()
    );
    for spec in [&metadata, &direct, &callback] {
        let attempts = pipeline.wait_done(&spec.job_id, WAIT).await;
        assert_eq!(
            (attempts[0].1.as_str(), attempts[0].2.as_deref()),
            ("rejected", Some("policy")),
            "{}",
            spec.job_id
        );
    }
    let (_, _, message, _) = result(&pool, &metadata.job_id).await;
    assert!(
        message.contains("inputs.url") && message.contains("169.254.169.254"),
        "{message}"
    );
    pipeline.wait_done(&redirect.job_id, WAIT).await;
    let (status, category, message, evidence) = result(&pool, &redirect.job_id).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("failed", Some("policy")),
        "{message}"
    );
    assert_eq!(
        evidence["samples"].as_array().map(Vec::len),
        Some(1),
        "a refusal is not retried: {evidence}"
    );
    assert!(message.contains("redirect refused"), "{message}");
    assert_eq!(redirector.requests().len(), 1, "the first hop was allowed");
    assert!(
        denied.requests().is_empty(),
        "the denied address received {:?}",
        denied.requests()
    );
}

/// The peak resident memory of a process, in bytes.
fn peak_rss(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|value| {
            value
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .unwrap()
        * 1024
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_huge_response_does_not_grow_the_runner(pool: PgPool) {
    let mut pipeline = Pipeline::new(&pool).await;
    let (_, _, runners) = pipeline.start_roles(1);
    pipeline.wait_runners(1).await;
    let runner_pid = pipeline.pid(runners[0]);
    let before = peak_rss(runner_pid);
    let huge = Server::start_on(
        "127.0.0.1",
        Arc::new(|_: &Received| Reply::Large(100 << 20)),
    )
    .await;
    let spec = job(
        "verify.http.endpoint",
        json!({"url": huge.url("/big"), "expect": {"status": 200, "body_contains": "needle"}, "timeout": "30s"}),
        json!({"retry": {"max_attempts": 1}}),
    );
    pipeline.submit(&spec).await;
    pipeline.wait_done(&spec.job_id, WAIT).await;
    let (status, _, _, evidence) = result(&pool, &spec.job_id).await;
    assert_eq!(status, "failed", "the needle is not in the first MiB");
    let observed = &evidence["samples"][0]["observed"];
    assert_eq!(observed["body_bytes"], 1024 * 1024, "{evidence}");
    assert_eq!(observed["body_truncated"], true, "{evidence}");
    // Bound: the default 1 MiB body cap plus allocator slack; reading the
    // whole 100 MiB body (as before) took it up by hundreds of MiB.
    let after = peak_rss(runner_pid);
    assert!(
        after < before + (48 << 20),
        "runner peak RSS grew from {} MiB to {} MiB",
        before >> 20,
        after >> 20
    );
}
