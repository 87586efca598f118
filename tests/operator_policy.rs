//! The operator's policy file through real role processes: every class of
//! rule refused at intake as `rejected (policy)` naming the rule, with the
//! policy's digest in the attempt's first event; a work record injected
//! past the dispatcher refused again by the runner; a changed file in force
//! without a restart, a broken one refused while the policy in force stays;
//! `policy check` naming every problem of a bad file.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::http::{Received, Reply, Server};
use common::pipeline::{job, Pipeline};
use execplane::contract::{FailureCategory, JobSpec, ReportBody, RunnerType};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use sqlx::PgPool;
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(60);
const EXAMPLE: &str = include_str!("../examples/policy.yaml");
const PACKAGE: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
const MODULE: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

fn digest_of(text: &str) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes())))
}

fn as_tenant(tenant: &str, operation: &str, inputs: Value, mut extra: Value) -> JobSpec {
    extra["tenant"] = json!(tenant);
    job(operation, inputs, extra)
}

/// The one operation the example policy lets team-b run.
fn team_b_probe() -> JobSpec {
    as_tenant(
        "team-b",
        "verify.tcp.connect",
        json!({"host": "127.0.0.1", "port": 5432}),
        json!({}),
    )
}

fn cluster(name: &str) -> Value {
    json!({"name": name, "credentials": {"$secret": "kubeconfig"}})
}

fn kube() -> Value {
    json!({"secret_refs": [{"name": "kubeconfig", "mount": "secret", "path": "team-a/dev", "key": "config"}]})
}

/// One JobSpec per class of rule, each crossing exactly that rule of the
/// example policy, with the rule the refusal must name.
fn one_per_rule() -> Vec<(JobSpec, &'static str)> {
    let node = || json!({"targets": [{"kind": "node", "id": "node-1"}]});
    let object = json!({"api_version": "v1", "kind": "Pod", "name": "x"});
    vec![
        (
            as_tenant(
                "team-b",
                "verify.http.endpoint",
                json!({"url": "http://127.0.0.1:1/"}),
                json!({}),
            ),
            "tenants.team-b.operations",
        ),
        (
            as_tenant(
                "team-b",
                "verify.tcp.connect",
                json!({"host": "127.0.0.1", "port": 1}),
                json!({"policy": {"explicit_command": true}}),
            ),
            "tenants.team-b.grants",
        ),
        (
            as_tenant(
                "team-a",
                "helm.uninstall",
                json!({"cluster": cluster("dev"), "release": "web", "namespace": "team-a"}),
                kube(),
            ),
            "requires.destructive",
        ),
        (
            as_tenant(
                "team-a",
                "kubernetes.resource.read",
                json!({"cluster": cluster("prod"), "namespace": "team-a", "object": object}),
                kube(),
            ),
            "tenants.team-a.kubernetes.clusters",
        ),
        (
            as_tenant(
                "team-a",
                "kubernetes.resource.read",
                json!({"cluster": cluster("dev"), "namespace": "kube-system", "object": object}),
                kube(),
            ),
            "tenants.team-a.kubernetes.clusters.dev.namespaces",
        ),
        (
            as_tenant(
                "team-a",
                "kubernetes.manifest.apply",
                json!({"cluster": cluster("dev"), "namespace": "team-a",
                   "manifests": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}]}),
                kube(),
            ),
            "tenants.team-a.kubernetes.clusters.dev.cluster_scoped",
        ),
        (
            as_tenant(
                "team-a",
                "helm.template",
                json!({"release": "web", "namespace": "team-a",
                   "chart": {"repository": "https://charts.attacker.example/stable", "name": "web", "version": "1"}}),
                json!({}),
            ),
            "tenants.team-a.helm.chart_sources",
        ),
        (
            as_tenant(
                "team-a",
                "ansible.playbook.run",
                json!({"package": {"name": "web", "version": "1", "digest": format!("sha256:{}", "3".repeat(64))}, "playbook": "site.yml"}),
                json!({}),
            ),
            "tenants.team-a.ansible.packages",
        ),
        (
            as_tenant(
                "team-a",
                "ansible.playbook.run",
                json!({"package": {"name": "web", "version": "1", "digest": PACKAGE}, "playbook": "tools/wipe.yml"}),
                json!({}),
            ),
            "tenants.team-a.ansible.packages.playbooks",
        ),
        (
            as_tenant(
                "team-a",
                "ansible.role.run",
                json!({"package": {"name": "web", "version": "1", "digest": PACKAGE}, "role": "db"}),
                json!({}),
            ),
            "tenants.team-a.ansible.packages.roles",
        ),
        (
            as_tenant(
                "team-a",
                "ssh.command.run",
                json!({"template_id": "reboot"}),
                node(),
            ),
            "tenants.team-a.ssh.templates",
        ),
        (
            as_tenant(
                "team-a",
                "ssh.command.run",
                json!({"template_id": "greet", "args": {"name": "x; rm -rf /"}}),
                node(),
            ),
            "tenants.team-a.ssh.templates",
        ),
        (
            as_tenant(
                "team-a",
                "ssh.command.run",
                json!({"template_id": "uptime", "sudo": true}),
                node(),
            ),
            "tenants.team-a.ssh.templates",
        ),
        (
            as_tenant(
                "team-a",
                "ssh.command.run",
                json!({"template_id": "uptime"}),
                json!({"targets": [{"kind": "node", "id": "node-1", "address": "203.0.113.9"}]}),
            ),
            "tenants.team-a.ssh.nodes",
        ),
        (
            // Every operation's targets take node keys, so a tenant names
            // only its own nodes, whatever it runs (a probe naming
            // team-a's node would hold team-a's node key).
            as_tenant(
                "team-b",
                "verify.tcp.connect",
                json!({"host": "127.0.0.1", "port": 5432}),
                json!({"targets": [{"kind": "node", "id": "node-1"}]}),
            ),
            "tenants.team-b.ssh.nodes",
        ),
        (
            as_tenant(
                "team-a",
                "opentofu.plan",
                json!({"package": {"name": "net", "version": "1", "digest": PACKAGE}}),
                json!({}),
            ),
            "tenants.team-a.opentofu.modules",
        ),
        (
            as_tenant(
                "team-a",
                "opentofu.plan",
                json!({"package": {"name": "net", "version": "1", "digest": MODULE}, "backend": {"type": "http"}}),
                json!({}),
            ),
            "tenants.team-a.opentofu.backends",
        ),
    ]
}

async fn refusal(pool: &PgPool, job_id: &str) -> (String, Option<String>, String, Option<String>) {
    sqlx::query_as(
        "SELECT status, failure_category, coalesce(message, ''), policy_digest FROM attempts WHERE job_id = $1",
    )
    .bind(job_id)
    .fetch_one(pool)
    .await
    .unwrap()
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn the_operator_policy_binds_at_intake_in_the_runner_and_after_a_reload(pool: PgPool) {
    let mut pipeline = Pipeline::new(&pool).await;
    let path = pipeline.dir.join("policy.yaml");
    std::fs::write(&path, EXAMPLE).unwrap();
    let file = path.display().to_string();
    let env = [("EXECPLANE_POLICY_FILE", file.as_str())];
    let dispatcher = pipeline.spawn(&["dispatcher"], &env);
    pipeline.spawn(&["relay"], &env);
    let runner = pipeline.spawn(&["runner", "verification"], &env);
    pipeline.wait_runners(1).await;
    let first_digest = digest_of(EXAMPLE);

    // 1. Intake: every class of rule, refused and named; nothing placed.
    let cases = one_per_rule();
    for (spec, _) in &cases {
        pipeline.submit(spec).await;
    }
    let allowed = team_b_probe();
    pipeline.submit(&allowed).await;
    for (spec, rule) in &cases {
        pipeline.wait_done(&spec.job_id, WAIT).await;
        let (status, category, message, digest) = refusal(&pool, &spec.job_id).await;
        assert_eq!(
            (status.as_str(), category.as_deref()),
            ("rejected", Some("policy")),
            "{} ({rule}): {message}",
            spec.operation
        );
        assert!(
            message.contains(&format!("operator policy rule `{rule}`")),
            "{} should name {rule}: {message}",
            spec.operation
        );
        assert_eq!(digest.as_deref(), Some(first_digest.as_str()));
    }
    pipeline.wait_done(&allowed.job_id, WAIT).await;
    let (status, _, message, digest) = refusal(&pool, &allowed.job_id).await;
    assert_eq!(status, "succeeded", "{message}");
    assert_eq!(
        digest.as_deref(),
        Some(first_digest.as_str()),
        "the first event records the policy that admitted the job"
    );
    let leases: i64 = sqlx::query_scalar("SELECT count(*) FROM leases")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(leases, 1, "only the allowed job was ever placed");

    // 2. The runner, past the dispatcher: team-b may not run an HTTP probe;
    //    a work record injected onto the runner's partition must not reach
    //    the listener.
    let listener = Server::start_on("127.0.0.1", Arc::new(|_: &Received| Reply::Status(200))).await;
    let instance: String = sqlx::query_scalar("SELECT instance_id FROM runner_instances WHERE runner_type = 'verification' ORDER BY last_seen_at DESC LIMIT 1")
        .fetch_one(&pool)
        .await
        .unwrap();
    let injected = as_tenant(
        "team-b",
        "verify.http.endpoint",
        json!({"url": listener.url("/injected"), "expect": {"status": 200}}),
        json!({}),
    );
    let attempt_id = pipeline
        .inject_work(RunnerType::Verification, &instance, &injected)
        .await;
    let ReportBody::Finished {
        category, message, ..
    } = pipeline.final_report(attempt_id, WAIT).await
    else {
        unreachable!()
    };
    assert_eq!(category, Some(FailureCategory::Policy), "{message}");
    assert!(message.contains("tenants.team-b.operations"), "{message}");
    assert!(
        listener.requests().is_empty(),
        "the runner acted on an injected record: {:?}",
        listener.requests()
    );

    // 3. A reload: team-b loses verify.tcp.connect; no restart.
    let narrowed = EXAMPLE.replace(
        "    operations: [\"verify.tcp.connect\"]",
        "    operations: [\"verify.postgres.ready\"]",
    );
    assert_ne!(narrowed, EXAMPLE);
    std::fs::write(&path, &narrowed).unwrap();
    pipeline
        .wait("the dispatcher to reload its policy", WAIT, || async {
            pipeline
                .log(dispatcher)
                .contains("operator policy reloaded")
                && pipeline.log(runner).contains("operator policy reloaded")
        })
        .await;
    let now_refused = team_b_probe();
    pipeline.submit(&now_refused).await;
    pipeline.wait_done(&now_refused.job_id, WAIT).await;
    let (status, category, message, digest) = refusal(&pool, &now_refused.job_id).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("rejected", Some("policy")),
        "{message}"
    );
    assert!(message.contains("tenants.team-b.operations"), "{message}");
    let second_digest = digest_of(&narrowed);
    assert_eq!(digest.as_deref(), Some(second_digest.as_str()));

    // 4. A broken file is refused; the policy in force stays (SIGHUP reads at once).
    std::fs::write(
        &path,
        "tenants: {team-b: {operations: [\"helm.explode\"]}}\n",
    )
    .unwrap();
    pipeline.signal(dispatcher, "HUP");
    pipeline
        .wait("the dispatcher to refuse the broken file", WAIT, || async {
            pipeline
                .log(dispatcher)
                .contains("operator policy file refused")
        })
        .await;
    let still_refused = team_b_probe();
    pipeline.submit(&still_refused).await;
    pipeline.wait_done(&still_refused.job_id, WAIT).await;
    let (status, _, _, digest) = refusal(&pool, &still_refused.job_id).await;
    assert_eq!(status, "rejected");
    assert_eq!(
        digest.as_deref(),
        Some(second_digest.as_str()),
        "the policy in force is the last good one"
    );
    assert!(
        pipeline.log(dispatcher).contains("helm.explode"),
        "the refusal says what was wrong"
    );
}

#[test]
fn policy_check_accepts_the_example_and_names_every_problem_of_a_bad_file() {
    let run = |path: &std::path::Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_execplane"))
            .args(["policy", "check"])
            .arg(path)
            .env_remove("EXECPLANE_POLICY_FILE")
            .output()
            .unwrap()
    };
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/policy.yaml");
    let good = run(&example);
    let stdout = String::from_utf8_lossy(&good.stdout);
    assert_eq!(
        good.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&good.stderr)
    );
    assert!(stdout.contains(&digest_of(EXAMPLE)), "{stdout}");
    assert!(stdout.contains("team-a, team-b"), "{stdout}");

    let dir = std::env::temp_dir().join(format!("execplane-policy-check-{}", Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.yaml");
    std::fs::write(
        &bad,
        r#"
defaults:
  operations: ["verify.*", "helm.explode"]
ssh_templates:
  t: {program: relative/uptime, args: [{name: n, type: string}]}
tenants:
  a:
    ssh: {templates: [nope]}
    opentofu: {modules: ["sha1:abc"]}
"#,
    )
    .unwrap();
    let refused = run(&bad);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    for expected in [
        "helm.explode",
        "ssh_templates.t: program",
        "ssh_templates.t: argument `n`",
        "ssh.templates: `nope`",
        "opentofu.modules: `sha1:abc`",
    ] {
        assert!(
            stderr.contains(expected),
            "{expected} missing from:\n{stderr}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
