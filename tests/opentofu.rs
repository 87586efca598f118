//! The opentofu runner with a real Terraform-compatible CLI and the null
//! provider from an offline filesystem mirror (scripts/opentofu.sh): a
//! plan approved by digest is applied, its outputs and resource ids
//! returned, read back by `output` and `state.inspect` and destroyed only
//! under an elevated policy; the state lives in the local Postgres (`pg`
//! backend) whose connection string, like the provider's credential, comes
//! from OpenBao and is found nowhere afterwards. Two applies on one
//! workspace never overlap, and a runner killed mid-apply leaves the
//! attempt `outcome_unknown`, never retried.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::bao::Bao;
use common::pipeline::{job, Pipeline};
use execplane::contract::{JobSpec, RunnerType};
use serde_json::{json, Value};
use sqlx::PgPool;

const WAIT: Duration = Duration::from_secs(120);

fn tofu_bin() -> PathBuf {
    std::env::var("EXECPLANE_TOFU_BIN")
        .map(Into::into)
        .unwrap_or_else(|_| common::stack_dir().join("opentofu/bin/tofu"))
}

fn mirror() -> PathBuf {
    std::env::var("EXECPLANE_TOFU_PROVIDER_MIRROR")
        .map(Into::into)
        .unwrap_or_else(|_| common::stack_dir().join("opentofu/mirror"))
}

/// The test module: one null resource replaced on every new `run`, whose
/// provisioner prints when it starts and ends (holding `hold` seconds
/// between, with the clock in nanoseconds) and how long the provider
/// credential it was given is. The tool is sandboxed: its output, on the
/// attempt's log, is the one trace it leaves.
const MODULE: &str = r#"
terraform {
  required_providers {
    null = { source = "hashicorp/null", version = "2.1.2" }
  }
}
variable "greeting" { type = string }
variable "run" {
  type    = string
  default = "1"
}
variable "hold" {
  type    = number
  default = 0
}
resource "null_resource" "greeting" {
  triggers = { greeting = var.greeting, run = var.run }
  provisioner "local-exec" {
    command = "echo mark start ${var.run} $(date +%s%N) token-length $${#PROVIDER_TOKEN}; sleep ${var.hold}; echo mark end ${var.run} $(date +%s%N)"
  }
}
output "greeting" { value = var.greeting }
output "resource_id" { value = null_resource.greeting.id }
module "tags" { source = "../tags" }
output "owner" { value = module.tags.owner }
"#;

/// A module that prints the provider credential it was given (the
/// conformance suite's echo).
const ECHO: &str = r#"
terraform {
  required_providers {
    null = { source = "hashicorp/null", version = "2.1.2" }
  }
}
resource "null_resource" "echo" {
  provisioner "local-exec" {
    command = "echo the token is $PROVIDER_TOKEN"
  }
}
"#;

/// A module with a sensitive output derived from its input: the value is
/// in no input, so it can be looked for everywhere else.
const SECRETIVE: &str = r#"
variable "seed" { type = string }
output "token" {
  value     = sha256(var.seed)
  sensitive = true
}
output "plain" { value = "visible" }
"#;

/// A child module of the package, called by a `../` source.
const TAGS: &str = r#"output "owner" { value = "team-a" }"#;

/// A module of the same approved package whose child module lives
/// elsewhere: the approved digest would not cover the code that runs.
const FETCHER: &str = r#"
module "remote" { source = "git::https://example.com/modules.git" }
"#;

/// The module as a package: `network/` of a gzipped tar.
fn package(dir: &Path) -> Vec<u8> {
    let root = dir.join("module-src");
    for (path, text) in [
        ("network/main.tf", MODULE),
        ("tags/main.tf", TAGS),
        ("fetcher/main.tf", FETCHER),
        ("echo/main.tf", ECHO),
        ("secretive/main.tf", SECRETIVE),
    ] {
        std::fs::create_dir_all(root.join(path).parent().unwrap()).unwrap();
        std::fs::write(root.join(path), text).unwrap();
    }
    let archive = dir.join("module.tar.gz");
    let status = std::process::Command::new("tar")
        .args([
            "-czf",
            archive.to_str().unwrap(),
            "-C",
            root.to_str().unwrap(),
            ".",
        ])
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::read(archive).unwrap()
}

/// The state backend's Postgres server (never the platform's).
fn state_server() -> String {
    std::env::var("EXECPLANE_TEST_STATE_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5433/postgres".into())
}

/// Team-a's policy: its module, and what its code may reach over the
/// network: the state backend's server and `egress`.
fn policy(digest: &str, egress: &[String]) -> String {
    let server = url::Url::parse(&state_server()).unwrap();
    let mut reach = vec![format!(
        "\"{}:{}\"",
        server.host_str().unwrap(),
        server.port().unwrap_or(5432)
    )];
    reach.extend(
        egress
            .iter()
            .map(|destination| format!("\"{destination}\"")),
    );
    let reach = reach.join(", ");
    format!(
        r#"
tenants:
  team-a:
    operations: ["opentofu.*"]
    grants: [elevated, explicit_command]
    secret_prefixes: ["secret/team-a/"]
    opentofu:
      modules: ["{digest}"]
      backends: [local, pg]
      env: [PROVIDER_TOKEN]
      approvers: [reviewer, pipeline-test]
      egress: [{reach}]
principals:
  reviewer: {{key_sha256: "{}", roles: {{team-a: [approver]}}}}
  pipeline-test: {{key_sha256: "{}", roles: {{team-a: [operator, approver]}}}}
"#,
        hex::encode(<sha2::Sha256 as sha2::Digest>::digest(REVIEWER_KEY)),
        hex::encode(<sha2::Sha256 as sha2::Digest>::digest(REQUESTER_KEY)),
    )
}

/// The console keys of the plan's approver and of its requester.
const REVIEWER_KEY: &str = "reviewer-key-for-the-console-0123";
const REQUESTER_KEY: &str = "requester-key-for-the-console-0123";

struct Stack {
    pipeline: Pipeline,
    digest: String,
    runner: usize,
    /// This test's own OpenBao paths (tests share one OpenBao):
    /// `team-a/tfstate-<secrets>` and `team-a/provider-<secrets>`.
    secrets: String,
}

async fn stack(pool: &PgPool, bao: &Bao) -> Stack {
    stack_granting(pool, bao, &[]).await
}

/// [`stack`], with `egress` granted to the module's code as well.
async fn stack_granting(pool: &PgPool, bao: &Bao, egress: &[String]) -> Stack {
    let mut pipeline = Pipeline::new(pool).await;
    let digest = pipeline.put_artifact("module.tar.gz", &package(&pipeline.dir));
    let policy_file = pipeline.dir.join("policy.yaml");
    std::fs::write(&policy_file, policy(&digest, egress)).unwrap();
    pipeline.set_env("EXECPLANE_POLICY_FILE", policy_file.to_str().unwrap());
    // The callback signing secrets where team-a's default prefix
    // (`*/team-a/`) covers them: still execplane's, never a JobSpec's.
    pipeline.set_env("EXECPLANE_VAULT_ADDR", &bao.address);
    pipeline.set_env("EXECPLANE_VAULT_TOKEN", &bao.root);
    pipeline.set_env(
        "EXECPLANE_CALLBACK_SIGNING_SECRETS",
        "secret/team-a/{tenant}/callbacks",
    );
    pipeline.spawn(&["dispatcher"], &[]);
    pipeline.spawn(&["relay"], &[]);
    let storage = pipeline.dir.join("artifacts");
    let states = pipeline.dir.join("states");
    // A working directory with a long path: the CLI's plugin sockets must
    // not be made there (a Unix socket's path holds at most 107 bytes).
    let work = pipeline.dir.join(format!("work-{}", "long".repeat(20)));
    let runner = pipeline.spawn(
        &["runner", "opentofu"],
        &[
            ("EXECPLANE_ARTIFACT_DIR", storage.to_str().unwrap()),
            ("EXECPLANE_TOFU_BIN", tofu_bin().to_str().unwrap()),
            ("EXECPLANE_TOFU_PROVIDER_MIRROR", mirror().to_str().unwrap()),
            ("EXECPLANE_TOFU_STATE_DIR", states.to_str().unwrap()),
            ("EXECPLANE_RUNNER_WORK_DIR", work.to_str().unwrap()),
        ],
    );
    pipeline.wait_runners(1).await;
    Stack {
        pipeline,
        digest,
        runner,
        secrets: random(12),
    }
}

impl Stack {
    fn module(&self, variables: Value, backend: Value) -> Value {
        json!({
            "package": {"name": "network", "version": "1.0.0", "digest": self.digest},
            "path": "network",
            "workspace": "blue",
            "variables": variables,
            "backend": backend,
            "env": {"PROVIDER_TOKEN": {"$secret": "provider"}},
        })
    }

    /// Stores this test's backend connection string and provider token.
    async fn put_secrets(&self, bao: &Bao, conn_str: &str, token: &str) {
        bao.put(
            &format!("team-a/tfstate-{}", self.secrets),
            json!({"conn_str": conn_str}),
        )
        .await;
        bao.put(
            &format!("team-a/provider-{}", self.secrets),
            json!({"token": token}),
        )
        .await;
    }

    fn job(&self, operation: &str, inputs: Value, extra: Value) -> JobSpec {
        let mut extra = extra;
        extra["secret_refs"] = json!([
            {"name": "state", "mount": "secret", "path": format!("team-a/tfstate-{}", self.secrets), "key": "conn_str"},
            {"name": "provider", "mount": "secret", "path": format!("team-a/provider-{}", self.secrets), "key": "token"},
        ]);
        if extra.get("retry").is_none() {
            extra["retry"] = json!({"max_attempts": 1});
        }
        extra["timeouts"] = json!({"schedule_to_start": "60s", "start_to_close": "90s", "heartbeat": "4s", "schedule_to_close": "150s"});
        job(operation, inputs, extra)
    }

    async fn run(&self, spec: &JobSpec) -> (String, Option<String>, String, Value) {
        self.pipeline.submit(spec).await;
        self.pipeline.ended(spec, WAIT).await
    }
}

/// The plan attempt's approval once one is recorded.
async fn approve_wait(pool: &PgPool, attempt_id: uuid::Uuid) -> Value {
    let deadline = std::time::Instant::now() + WAIT;
    while std::time::Instant::now() < deadline {
        let approval: Option<Value> =
            sqlx::query_scalar("SELECT plan_approval FROM attempts WHERE attempt_id = $1")
                .bind(attempt_id)
                .fetch_one(pool)
                .await
                .unwrap();
        if let Some(approval) = approval {
            return approval;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("attempt {attempt_id}'s plan was never approved");
}

fn random(length: usize) -> String {
    uuid::Uuid::new_v4()
        .simple()
        .to_string()
        .chars()
        .chain(uuid::Uuid::new_v4().simple().to_string().chars())
        .take(length)
        .collect()
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn an_approved_plan_is_applied_read_back_and_destroyed_with_state_in_postgres(pool: PgPool) {
    // The state lives in a database of this test's own on the state
    // backend's server (never the platform's), reached as a role whose
    // password is only in OpenBao.
    let server = state_server();
    let admin = PgPool::connect(&server)
        .await
        .expect("the state backend's Postgres");
    let database = format!("tfstate_{}", random(8));
    let role = format!("tf_{}", random(8));
    let password = random(32);
    for statement in [
        format!("CREATE DATABASE {database}"),
        format!("CREATE ROLE {role} LOGIN SUPERUSER PASSWORD '{password}'"),
    ] {
        sqlx::query(&statement).execute(&admin).await.unwrap();
    }
    let mut address = url::Url::parse(&server).unwrap();
    address.set_path(&database);
    let state_db = PgPool::connect(address.as_str()).await.unwrap();
    let (host, port) = (
        address.host_str().unwrap().to_owned(),
        address.port().unwrap_or(5432),
    );
    let conn_str = format!("postgres://{role}:{password}@{host}:{port}/{database}?sslmode=disable");
    let provider_token = format!("ptok-{}", random(28));
    let bao = Bao::new();
    let stack = stack(&pool, &bao).await;
    stack.put_secrets(&bao, &conn_str, &provider_token).await;
    let variables = json!({"greeting": "hello"});
    // The backend's settings by reference (an artifact of the tenant's),
    // its secret inline on top.
    let backend_config = |settings: &[u8]| stack.pipeline.put_artifact("backend.json", settings);
    let pg = json!({"conn_str": {"$secret": "state"}});
    let mut module = stack.module(variables, pg);
    // Settings that would move the state where the policy does not let it
    // live, or carry a secret the runner never resolves: refused before
    // the CLI runs.
    for (settings, category, said) in [
        (
            &br#"{"type": "s3", "bucket": "b"}"#[..],
            "policy",
            "backend `s3` is not allowed",
        ),
        (
            &br#"{"type": "pg", "password": {"$secret": "state"}}"#[..],
            "contract",
            "holds a secret",
        ),
        (
            &br#"{"type": "pg", "password": "hunter2-hunter2"}"#[..],
            "contract",
            "holds a secret",
        ),
    ] {
        let mut wrong = module.clone();
        wrong["backend_config"] = json!(backend_config(settings));
        let (status, got, message, _) = stack
            .run(&stack.job("opentofu.plan", wrong, json!({})))
            .await;
        assert_eq!(
            (status.as_str(), got.as_deref()),
            ("failed", Some(category)),
            "{message}"
        );
        assert!(
            message.contains("inputs.backend_config") && message.contains(said),
            "{message}"
        );
    }
    module["backend_config"] = json!(backend_config(
        br#"{"type": "pg", "schema_name": "network_state"}"#
    ));

    let plan_spec = stack.job("opentofu.plan", module.clone(), json!({}));
    let (status, _, message, result) = stack.run(&plan_spec).await;
    assert_eq!(status, "succeeded", "{message}");
    let plan = &result["plan"];
    assert_eq!(
        (&plan["add"], &plan["change"], &plan["destroy"]),
        (&json!(1), &json!(0), &json!(0)),
        "{result}"
    );
    assert_eq!(plan["changes"][0]["address"], "null_resource.greeting");
    assert_eq!(plan["has_changes"], true);
    let artifact = plan["artifact"].as_str().unwrap().to_owned();
    assert!(artifact.starts_with("sha256:"), "{artifact}");
    assert_eq!(result["workspace"], "blue");
    assert_eq!(result["backend"], "pg");

    // A child module from outside the package: never fetched, refused.
    let mut fetcher = module.clone();
    fetcher["path"] = json!("fetcher");
    let (status, category, message, _) = stack
        .run(&stack.job("opentofu.plan", fetcher, json!({})))
        .await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("failed", Some("policy")),
        "{message}"
    );
    assert!(
        message.contains("child modules come only from inside the approved package"),
        "{message}"
    );

    let apply = |approved: &str| {
        let mut inputs = module.clone();
        inputs["plan_artifact"] = json!(artifact);
        let mut spec = stack.job(
            "opentofu.apply",
            inputs,
            json!({"policy": {"approved_plan_digest": artifact}}),
        );
        spec.policy.approved_plan_digest = Some(approved.to_owned());
        spec
    };

    // A digest the requester vouches for itself is no approval: refused at
    // intake until an ApprovePlan approves it.
    let (status, category, message, _) = stack.run(&apply(&artifact)).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("rejected", Some("policy")),
        "{message}"
    );
    assert!(message.contains("has no approval"), "{message}");
    // Approvals, in order on one partition: the plan's own requester
    // (four eyes: refused), someone the policy does not name (refused),
    // then a reviewer. Only the reviewer's is in the plan attempt's log.
    let planned = stack.pipeline.attempts(&plan_spec.job_id).await[0].0;
    for who in ["pipeline-test", "stranger", "reviewer"] {
        stack
            .pipeline
            .approve(planned, &artifact, "team-a", who)
            .await;
    }
    let approval = approve_wait(&pool, planned).await;
    assert_eq!(approval["approved_by"], json!(["reviewer"]), "{approval}");
    assert_eq!(approval["digest"], json!(artifact));
    let kinds = stack.pipeline.events_of(planned).await;
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("plan_approved"),
        "{kinds:?}"
    );
    // Another digest approved: refused at intake, nothing runs.
    let other = format!("sha256:{}", "ab".repeat(32));
    let (status, category, message, _) = stack.run(&apply(&other)).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("rejected", Some("contract")),
        "{message}"
    );
    assert!(message.contains("not the approved plan"), "{message}");

    // Approved, but not a plan the runner made, or made for another
    // workspace: a saved plan carries its own backend, workspace and code,
    // so the runner refuses it before the CLI runs.
    let forged = stack
        .pipeline
        .put_artifact("forged.tfplan", b"PK not a plan of ours");
    let mut spec = apply(&forged);
    spec.inputs["plan_artifact"] = json!(forged);
    let (status, category, message, _) = stack.run(&spec).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("rejected", Some("policy")),
        "{message}"
    );
    assert!(message.contains("has no approval"), "{message}");
    let mut elsewhere = apply(&artifact);
    elsewhere.inputs["workspace"] = json!("green");
    let (status, category, message, _) = stack.run(&elsewhere).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("failed", Some("policy")),
        "{message}"
    );
    assert!(message.contains("another workspace"), "{message}");

    let approved = apply(&artifact);
    let (status, _, message, result) = stack.run(&approved).await;
    assert_eq!(status, "succeeded", "{message}");
    assert_eq!(result["outputs"]["greeting"]["value"], "hello", "{result}");
    assert_eq!(
        result["outputs"]["owner"]["value"], "team-a",
        "the package's own child module ran: {result}"
    );
    let resources = result["resources"].as_array().unwrap();
    assert_eq!(resources.len(), 1, "{result}");
    assert_eq!(resources[0]["address"], "null_resource.greeting");
    let id = resources[0]["id"].as_str().unwrap().to_owned();
    assert_eq!(result["outputs"]["resource_id"]["value"], id);
    assert_eq!(result["plan"]["artifact"], json!(artifact));
    let state = &result["state"];
    assert!(!state["lineage"].as_str().unwrap().is_empty(), "{result}");
    // Only the approved apply ran the provisioner (no plan, no refused
    // apply), whose environment had the credential.
    let output = stack.pipeline.tool_output().await;
    let ran: Vec<&String> = output
        .iter()
        .filter(|(_, text)| !marks(text).is_empty())
        .map(|(attempt, _)| attempt)
        .collect();
    let applied = attempt_of(&approved).to_string();
    assert_eq!(ran, [&applied], "{output:?}");
    let marked = &marks(&output[&applied])[0];
    assert_eq!(marked.3, provider_token.len(), "{output:?}");
    // The state is in Postgres, in the schema the JobSpec named.
    let states: i64 = sqlx::query_scalar("SELECT count(*) FROM network_state.states")
        .fetch_one(&state_db)
        .await
        .unwrap();
    assert!(states >= 1);

    // The same plan again: stale now, refused by the CLI, nothing changed.
    let (status, category, message, _) = stack.run(&apply(&artifact)).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("failed", Some("contract")),
        "{message}"
    );

    // A plan that replaces the resource destroys it: approved, it is still
    // refused without `policy.elevated`, before the CLI applies anything.
    let mut replacing = module.clone();
    replacing["variables"]["run"] = json!("2");
    let replan = stack.job("opentofu.plan", replacing.clone(), json!({}));
    let (status, _, message, result) = stack.run(&replan).await;
    assert_eq!(status, "succeeded", "{message}");
    assert_eq!(result["plan"]["destroy"], 1, "{result}");
    let destroying = result["plan"]["artifact"].as_str().unwrap().to_owned();
    let replanned = stack.pipeline.attempts(&replan.job_id).await[0].0;
    stack
        .pipeline
        .approve(replanned, &destroying, "team-a", "reviewer")
        .await;
    approve_wait(&pool, replanned).await;
    replacing["plan_artifact"] = json!(destroying);
    let mut spec = stack.job(
        "opentofu.apply",
        replacing,
        json!({"policy": {"approved_plan_digest": destroying}}),
    );
    spec.policy.approved_plan_digest = Some(destroying.clone());
    let (status, category, message, _) = stack.run(&spec).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("failed", Some("policy")),
        "{message}"
    );
    assert!(
        message.contains("destroys 1 resource") && message.contains("policy.elevated"),
        "{message}"
    );
    let output = stack.pipeline.tool_output().await;
    assert!(
        output
            .get(&attempt_of(&spec).to_string())
            .is_none_or(|text| marks(text).is_empty()),
        "the refused plan was applied"
    );

    let (status, _, message, result) = stack
        .run(&stack.job("opentofu.output", module.clone(), json!({})))
        .await;
    assert_eq!(status, "succeeded", "{message}");
    assert_eq!(result["outputs"]["greeting"]["value"], "hello");
    assert_eq!(result["outputs"]["resource_id"]["value"], id);

    let (status, _, message, result) = stack
        .run(&stack.job("opentofu.state.inspect", module.clone(), json!({})))
        .await;
    assert_eq!(status, "succeeded", "{message}");
    assert_eq!(
        result["resources"],
        json!([{"address": "null_resource.greeting", "type": "null_resource", "id": id}])
    );
    assert_eq!(result["state"]["lineage"], state["lineage"]);

    // Destroy: only under an elevated policy.
    let mut unelevated = stack.job(
        "opentofu.destroy",
        module.clone(),
        json!({"policy": {"elevated": true}}),
    );
    unelevated.policy.elevated = false;
    let (status, _, message, _) = stack.run(&unelevated).await;
    assert_eq!(status, "rejected", "{message}");
    assert!(message.contains("elevated"), "{message}");
    let (status, _, message, result) = stack
        .run(&stack.job(
            "opentofu.destroy",
            module.clone(),
            json!({"policy": {"elevated": true}}),
        ))
        .await;
    assert_eq!(status, "succeeded", "{message}");
    assert_eq!(result["resources"], json!([]), "{result}");

    // The plan file is a zip: what it holds, uncompressed, holds no secret
    // either (the CLI writes the backend's settings and every variable
    // into it).
    let hex = artifact.trim_start_matches("sha256:");
    let stored = stack.pipeline.dir.join("artifacts/inputs/sha256").join(hex);
    let unzipped = std::process::Command::new("python3")
        .args([
            "-c",
            "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); sys.stdout.buffer.write(b''.join(z.read(n) for n in z.namelist()))",
            stored.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(unzipped.status.success(), "{unzipped:?}");
    let inside = String::from_utf8_lossy(&unzipped.stdout);
    assert!(inside.contains("null_resource"), "the plan was read");
    for secret in [
        conn_str.as_str(),
        password.as_str(),
        provider_token.as_str(),
    ] {
        let needles = common::leaks::leaks(secret);
        assert_eq!(
            common::leaks::find_leak(&unzipped.stdout, &needles),
            None,
            "in the plan file"
        );
    }
    for secret in [
        conn_str.as_str(),
        password.as_str(),
        provider_token.as_str(),
    ] {
        common::leaks::assert_secret_nowhere(
            &stack.pipeline,
            &pool,
            secret,
            RunnerType::Opentofu,
            &stack.pipeline.dir,
        )
        .await;
    }
    state_db.close().await;
    for statement in [
        format!("DROP DATABASE {database} WITH (FORCE)"),
        format!("DROP ROLE {role}"),
    ] {
        sqlx::query(&statement).execute(&admin).await.unwrap();
    }
}

/// The provisioner's marks in one attempt's output: `(start|end, run,
/// clock in ns, credential length)` in order.
fn marks(output: &str) -> Vec<(String, String, u128, usize)> {
    output
        .lines()
        .filter_map(|line| line.split_once("(local-exec): mark ").map(|(_, mark)| mark))
        .map(|mark| {
            let words: Vec<&str> = mark.split_whitespace().collect();
            let word = |at: usize| words.get(at).copied().unwrap_or_default();
            (
                word(0).to_owned(),
                word(1).to_owned(),
                word(2).parse().unwrap_or_default(),
                word(4).parse().unwrap_or_default(),
            )
        })
        .collect()
}

/// The first attempt of a job.
fn attempt_of(spec: &JobSpec) -> uuid::Uuid {
    execplane::attempt::attempt_id_for(spec.command_id, 1)
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn applies_on_one_workspace_never_overlap_and_a_killed_runner_leaves_one_unknown(
    pool: PgPool,
) {
    let bao = Bao::new();
    let mut stack = stack(&pool, &bao).await;
    stack.put_secrets(&bao, "host=unused", &random(20)).await;
    let explicit = |run: &str, hold: u32, retry: Value| {
        let variables = json!({"greeting": "hi", "run": run, "hold": hold});
        stack.job(
            "opentofu.apply",
            stack.module(variables, json!({})),
            // Each run replaces the resource: a destroy, so elevated.
            json!({"policy": {"explicit_command": true, "elevated": true}, "retry": retry}),
        )
    };
    // Two applies at once on one workspace (the local backend).
    let first = explicit("a", 3, json!({"max_attempts": 1}));
    let second = explicit("b", 3, json!({"max_attempts": 1}));
    stack.pipeline.submit(&first).await;
    stack.pipeline.submit(&second).await;
    for spec in [&first, &second] {
        let (status, _, message, _) = stack.pipeline.ended(spec, WAIT).await;
        assert_eq!(status, "succeeded", "{message}");
    }
    let output = stack.pipeline.tool_output().await;
    let span = |spec: &JobSpec, run: &str| {
        let seen = marks(&output[&attempt_of(spec).to_string()]);
        assert_eq!(seen.len(), 2, "{output:?}");
        assert_eq!((seen[0].0.as_str(), seen[0].1.as_str()), ("start", run));
        assert_eq!((seen[1].0.as_str(), seen[1].1.as_str()), ("end", run));
        (seen[0].2, seen[1].2)
    };
    let (a, b) = (span(&first, "a"), span(&second, "b"));
    assert!(
        a.1 <= b.0 || b.1 <= a.0,
        "the applies overlapped: {a:?} {b:?}"
    );

    // Killed while the apply's provisioner runs: nobody knows what it did.
    let held = explicit(
        "c",
        60,
        json!({"max_attempts": 3, "initial_backoff": "200ms", "max_backoff": "1s"}),
    );
    stack.pipeline.submit(&held).await;
    stack
        .pipeline
        .wait("the held apply's provisioner", WAIT, || {
            let attempt = attempt_of(&held).to_string();
            let pipeline = &stack.pipeline;
            async move {
                pipeline
                    .tool_output()
                    .await
                    .get(&attempt)
                    .is_some_and(|text| {
                        marks(text)
                            .iter()
                            .any(|(mark, run, ..)| mark == "start" && run == "c")
                    })
            }
        })
        .await;
    stack.pipeline.signal(stack.runner, "KILL");
    let attempts = stack.pipeline.wait_done(&held.job_id, WAIT).await;
    assert_eq!(attempts.len(), 1, "never retried: {attempts:?}");
    assert_eq!(attempts[0].1, "outcome_unknown", "{attempts:?}");
}

/// Every README example under `examples/opentofu` runs, in order, to the
/// end the README's table gives it, under the rendered demo policy.
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn the_opentofu_examples_run_to_the_end_the_readme_gives_them(pool: PgPool) {
    let states = std::env::temp_dir().join(format!("execplane-tofu-{}", random(12)));
    let (bin, mirror) = (tofu_bin(), mirror());
    common::examples::run_readme_examples(
        &pool,
        "opentofu",
        &["opentofu"],
        &[
            ("EXECPLANE_TOFU_BIN", bin.to_str().unwrap()),
            ("EXECPLANE_TOFU_PROVIDER_MIRROR", mirror.to_str().unwrap()),
            ("EXECPLANE_TOFU_STATE_DIR", states.to_str().unwrap()),
        ],
    )
    .await;
    let _ = std::fs::remove_dir_all(&states);
}

/// The conformance suite (`common::conformance`): the long job is an
/// explicit apply whose provisioner sleeps for a time of its own (each on
/// a workspace of its own, so that no lock of one holds the other), the
/// echo an apply of a module printing the provider credential.
/// An apply with two variable files (JSON, then HCL) and inline
/// variables on top; its state version names the stored state, which a
/// consumer downloads and which is that version.
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn variable_files_reach_the_cli_in_order_and_the_state_is_stored(pool: PgPool) {
    let bao = Bao::new();
    let mut stack = stack(&pool, &bao).await;
    stack.pipeline.spawn(
        &["artifact-worker"],
        &[("EXECPLANE_ARTIFACT_GRACE", "300ms")],
    );
    stack.put_secrets(&bao, "host=unused", "token").await;
    let json_file = stack.pipeline.put_artifact(
        "first.tfvars.json",
        br#"{"greeting": "from-json", "run": "7"}"#,
    );
    let hcl_file = stack
        .pipeline
        .put_artifact("second.tfvars", b"greeting = \"from-hcl\"\n");
    // Another tenant's variable file: refused before the CLI reads it.
    let theirs =
        stack
            .pipeline
            .put_artifact_for("team-b", "theirs.tfvars", b"greeting = \"theirs\"\n");
    let mut inputs = stack.module(json!({"run": "8"}), json!({}));
    inputs["workspace"] = json!("var-files");
    inputs["var_files"] = json!([json_file, theirs]);
    let stolen = stack.job(
        "opentofu.apply",
        inputs.clone(),
        json!({"policy": {"explicit_command": true}}),
    );
    let (status, category, message, _) = stack.run(&stolen).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("failed", Some("policy")),
        "{message}"
    );
    assert!(message.contains("inputs.var_files[1]"), "{message}");
    inputs["var_files"] = json!([json_file, hcl_file]);
    let apply = stack.job(
        "opentofu.apply",
        inputs,
        json!({"policy": {"explicit_command": true}}),
    );
    let (status, _, message, result) = stack.run(&apply).await;
    assert_eq!(status, "succeeded", "{message}");
    // The HCL file over the JSON one; the inline `run` over the JSON's.
    assert_eq!(
        result["outputs"]["greeting"]["value"], "from-hcl",
        "{result}"
    );
    let resource = &result["resources"][0]["id"];
    assert_eq!(result["state"]["artifact"], "state.json", "{result}");

    let attempt = attempt_of(&apply);
    let stored = stack.pipeline.download(attempt, "state.json").await;
    let state: Value = serde_json::from_slice(&stored).unwrap();
    assert_eq!(state["lineage"], result["state"]["lineage"]);
    assert_eq!(state["serial"], result["state"]["serial"]);
    assert_eq!(state["outputs"]["greeting"]["value"], "from-hcl");
    let instance = &state["resources"][0]["instances"][0]["attributes"];
    assert_eq!(&instance["id"], resource);
    assert_eq!(instance["triggers"]["run"], "8", "{state}");
}

/// A tenant's module runs code in the sandbox (a provisioner), and the
/// runner, as root outside it, writes and reads in the same working
/// directory after that code ran (the accounts of the next tool, the
/// state's output): it never follows a link the module left there, and a
/// FIFO left there never stalls it (docs/SECURITY.md, "Its own disk").
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_module_s_links_and_fifos_in_its_directory_never_lead_the_runner(pool: PgPool) {
    let bao = Bao::new();
    let stack = stack(&pool, &bao).await;
    stack.put_secrets(&bao, "host=unused", "token").await;
    let canaries: Vec<std::path::PathBuf> = ["state", "accounts"]
        .iter()
        .map(|name| stack.pipeline.dir.join(format!("canary-{name}")))
        .collect();
    for canary in &canaries {
        std::fs::write(canary, "the host's file").unwrap();
    }
    // `run` is the tenant's variable, spliced into the module's provisioner.
    let plant = format!(
        "1; ln -sfn {} $HOME/state.json; ln -sfn {} $HOME/.execplane/passwd; true",
        canaries[0].display(),
        canaries[1].display()
    );
    let mut inputs = stack.module(json!({"greeting": "hi", "run": plant}), json!({}));
    inputs["workspace"] = json!("links");
    let linked = stack.job(
        "opentofu.apply",
        inputs,
        json!({"policy": {"explicit_command": true}}),
    );
    let (status, _, message, _) = stack.run(&linked).await;
    for canary in &canaries {
        assert_eq!(
            std::fs::read_to_string(canary).unwrap(),
            "the host's file",
            "{} was written through a link ({status}: {message})",
            canary.display()
        );
    }
    assert_eq!(status, "succeeded", "{message}");
    // A FIFO where the runner writes next: refused or replaced, never
    // waited on (the attempt ends well before its timeouts).
    let fifo = "2; rm -f $HOME/state.json $HOME/.execplane/passwd; mkfifo $HOME/state.json $HOME/.execplane/passwd; true";
    let mut inputs = stack.module(json!({"greeting": "hi", "run": fifo}), json!({}));
    inputs["workspace"] = json!("fifos");
    let piped = stack.job(
        "opentofu.apply",
        inputs,
        json!({"policy": {"explicit_command": true}}),
    );
    let started = std::time::Instant::now();
    let (status, _, message, _) = stack.run(&piped).await;
    assert_eq!(status, "succeeded", "{message}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
}

/// A module's code (here a provisioner's command, which the tenant's
/// variable is spliced into) runs held to what the operator's policy
/// grants the tenant's modules: another service of the host's, neither
/// the platform's nor granted, is out of its reach (docs/SECURITY.md,
/// "Network").
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_module_s_code_reaches_what_the_policy_grants_and_nothing_else(pool: PgPool) {
    let open = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let granted = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = |listener: &std::net::TcpListener| listener.local_addr().unwrap().port();
    let bao = Bao::new();
    let stack = stack_granting(&pool, &bao, &[format!("127.0.0.1:{}", port(&granted))]).await;
    stack.put_secrets(&bao, "host=unused", "token").await;
    let probe = |name: &str, port: u16| {
        format!("if timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}' 2>/dev/null; then echo {name}=reached; else echo {name}=refused; fi")
    };
    let run = format!(
        "1; {}; {}; true",
        probe("open", port(&open)),
        probe("granted", port(&granted))
    );
    let mut inputs = stack.module(json!({"greeting": "hi", "run": run}), json!({}));
    inputs["workspace"] = json!("reach");
    let spec = stack.job(
        "opentofu.apply",
        inputs,
        json!({"policy": {"explicit_command": true}}),
    );
    let (status, _, message, _) = stack.run(&spec).await;
    assert_eq!(status, "succeeded", "{message}");
    let output = stack.pipeline.tool_output().await;
    let said = &output[&attempt_of(&spec).to_string()];
    // The command's own lines, not its echo of the command.
    assert!(said.contains("(local-exec): granted=reached"), "{said}");
    assert!(said.contains("(local-exec): open=refused"), "{said}");
}

/// A sensitive output's value goes to the tenant's Vault path the JobSpec
/// names, its result names where, and the value is in no event, record,
/// table or stored file; another tenant's path is refused.
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_sensitive_output_is_written_to_vault_and_nowhere_else(pool: PgPool) {
    let bao = Bao::new();
    let stack = stack(&pool, &bao).await;
    stack.put_secrets(&bao, "host=unused", &random(20)).await;
    let seed = random(24);
    let token = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(seed.as_bytes()));
    let mut inputs = stack.module(json!({"seed": seed}), json!({}));
    inputs["path"] = json!("secretive");
    inputs["workspace"] = json!("sensitive");
    let explicit = json!({"policy": {"explicit_command": true}});
    inputs["sensitive_outputs_to"] = json!({"mount": "secret", "path": "team-b/outputs"});
    let theirs = stack.job("opentofu.apply", inputs.clone(), explicit.clone());
    let (_, category, message, _) = stack.run(&theirs).await;
    assert_eq!(category.as_deref(), Some("policy"), "{message}");
    assert!(message.contains("inputs.sensitive_outputs_to"), "{message}");
    // A sensitive output written over team-b's signing secrets would sign
    // team-b's callbacks with a key the module chose.
    inputs["sensitive_outputs_to"] = json!({"mount": "secret", "path": "team-a/team-b/callbacks"});
    let forger = stack.job("opentofu.apply", inputs.clone(), explicit.clone());
    let (_, category, message, _) = stack.run(&forger).await;
    assert_eq!(category.as_deref(), Some("policy"), "{message}");
    assert!(message.contains("callback signing secrets"), "{message}");
    let path = format!("team-a/outputs-{}", stack.secrets);
    inputs["sensitive_outputs_to"] = json!({"mount": "secret", "path": path});
    let apply = stack.job("opentofu.apply", inputs, explicit);
    let (status, _, message, result) = stack.run(&apply).await;
    assert_eq!(status, "succeeded", "{message}");
    assert_eq!(result["outputs"]["plain"]["value"], "visible", "{result}");
    let written = &result["outputs"]["token"];
    assert_eq!(written["value"], Value::Null, "{result}");
    assert_eq!(
        written["secret"],
        json!({"mount": "secret", "path": path, "key": "token"}),
        "{result}"
    );
    let (code, secret) = bao
        .call(reqwest::Method::GET, &format!("secret/data/{path}"), None)
        .await;
    assert_eq!(code, 200, "{secret}");
    assert_eq!(secret["data"]["data"]["token"], token.as_str());
    assert!(secret["data"]["data"].get("plain").is_none(), "{secret}");
    common::leaks::assert_secret_nowhere(
        &stack.pipeline,
        &pool,
        &token,
        execplane::contract::RunnerType::Opentofu,
        &stack.pipeline.dir.join("artifacts"),
    )
    .await;
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn the_opentofu_runner_conforms(pool: PgPool) {
    let bao = Bao::new();
    let mut stack = stack(&pool, &bao).await;
    stack.pipeline.spawn(
        &["artifact-worker"],
        &[("EXECPLANE_ARTIFACT_GRACE", "300ms")],
    );
    let secret = format!("ptok-{}", random(28));
    stack.put_secrets(&bao, "host=unused", &secret).await;
    let explicit = |path: &str, workspace: &str, variables: Value| {
        let mut inputs = stack.module(variables, json!({}));
        inputs["path"] = json!(path);
        inputs["workspace"] = json!(workspace);
        stack.job(
            "opentofu.apply",
            inputs,
            json!({"policy": {"explicit_command": true, "elevated": true}}),
        )
    };
    let long = ["conf-a", "conf-b"].map(|workspace| {
        let hold = 40_000 + uuid::Uuid::new_v4().as_u128() % 20_000;
        common::conformance::Long {
            job: explicit(
                "network",
                workspace,
                json!({"greeting": "hi", "run": workspace, "hold": hold}),
            ),
            processes: vec![format!("sleep {hold}")],
        }
    });
    let fixture = common::conformance::Fixture {
        long,
        echo: explicit("echo", "conf-echo", json!({})),
        secret,
        echo_in_output: true,
        artifacts: stack.pipeline.dir.join("artifacts"),
    };
    common::conformance::suite(RunnerType::Opentofu, &stack.pipeline, fixture).await;
}

/// Four eyes in the console: the plan's requester cannot approve it there;
/// an approver does, with a click on the approvals page, the log names the
/// approver, and the apply that names the plan runs.
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn an_approver_approves_a_plan_in_the_console_and_its_apply_runs(pool: PgPool) {
    use common::browser::Browser;
    let bao = Bao::new();
    let mut stack = stack(&pool, &bao).await;
    stack.put_secrets(&bao, "host=unused", "token").await;
    let ingress = common::ingress::start(&mut stack.pipeline, &["ingress"], &[]).await;
    let mut module = stack.module(json!({"greeting": "approved"}), json!({}));
    module["workspace"] = json!("console");
    let plan_spec = stack.job("opentofu.plan", module.clone(), json!({}));
    let (status, _, message, result) = stack.run(&plan_spec).await;
    assert_eq!(status, "succeeded", "{message}");
    let artifact = result["plan"]["artifact"].as_str().unwrap().to_owned();
    let planned = stack.pipeline.attempts(&plan_spec.job_id).await[0].0;

    let browser = Browser::start().await;
    let approve = format!(".plan[data-attempt=\"{planned}\"] button.approve");
    for (key, who) in [(REQUESTER_KEY, "pipeline-test"), (REVIEWER_KEY, "reviewer")] {
        browser.goto(&ingress.url("/console")).await;
        if !browser.all("#sign-out").await.is_empty() {
            browser.click("#sign-out").await;
        }
        browser.type_into("#key", key).await;
        browser.click("#sign-in").await;
        assert_eq!(browser.text_of("#principal").await, who);
        browser.goto(&ingress.url("/console/approvals")).await;
        let card = browser
            .text_of(&format!(".plan[data-attempt=\"{planned}\"]"))
            .await;
        for shown in [
            "network",
            "console",
            "pipeline-test",
            "null_resource.greeting",
        ] {
            assert!(card.contains(shown), "{shown} in {card}");
        }
        browser.click(&approve).await;
        if who == "pipeline-test" {
            let error = browser.text_of("#error").await;
            assert!(error.contains("requested the plan"), "four eyes: {error}");
        }
    }
    let approval = approve_wait(&pool, planned).await;
    assert_eq!(approval["approved_by"], json!(["reviewer"]), "{approval}");
    let (_, attempt) = common::ingress::call(
        reqwest::Method::GET,
        &ingress.url(&format!("/v1/attempts/{planned}")),
        Some(REVIEWER_KEY),
        None,
        &[],
        None,
    )
    .await;
    let approved = attempt["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .find(|entry| entry["kind"] == "plan_approved")
        .unwrap_or_else(|| panic!("no plan_approved in {attempt}"));
    assert!(
        approved["summary"].as_str().unwrap().contains("reviewer"),
        "the log names the approver: {approved}"
    );
    browser
        .goto(&ingress.url(&format!("/console/attempts/{planned}")))
        .await;
    assert_eq!(browser.text_of("#approval").await, "by reviewer");

    let mut inputs = module;
    inputs["plan_artifact"] = json!(artifact);
    let apply = stack.job(
        "opentofu.apply",
        inputs,
        json!({"policy": {"approved_plan_digest": artifact}}),
    );
    let (status, _, message, result) = stack.run(&apply).await;
    assert_eq!(status, "succeeded", "{message}");
    assert_eq!(
        result["outputs"]["greeting"]["value"], "approved",
        "{result}"
    );
}
