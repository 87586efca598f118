//! Tool processes (docs/ARCHITECTURE.md, "Tool processes"): the supervisor
//! mirrors how its tool ended; a tool that ignores SIGINT is killed after
//! the grace on cancel, with its grandchildren (checked in /proc); a runner
//! killed -9 mid-tool takes its tool and the tool's descendants with it.
//! The sandbox (docs/SECURITY.md): a tool runs as a uid of its own and
//! reaches nothing but its own work; one over a limit fails alone.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::pipeline::{job, Pipeline};
use serde_json::json;
use sqlx::PgPool;

const WAIT: Duration = Duration::from_secs(60);

fn probe_dir() -> String {
    format!("{}/tests/probes", env!("CARGO_MANIFEST_DIR"))
}

/// Whether `pid` is a live (not zombie) process whose command line holds
/// `marker` (so a recycled pid does not count).
fn alive(pid: i32, marker: &str) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat[stat.rfind(')').unwrap() + 1..]
        .split_whitespace()
        .next();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    state != Some("Z") && String::from_utf8_lossy(&cmdline).contains(marker)
}

/// The host pids of the probe started with `token` and of its two
/// grandchildren, and its working directory, once all three run. Found in
/// /proc by the token in the grandchildren's command lines: a sandboxed
/// tool's own pids are its pid namespace's, not the host's.
fn wait_pids(token: &str) -> (Vec<(i32, String)>, std::path::PathBuf) {
    let deadline = Instant::now() + WAIT;
    let find = |suffix: &str| {
        let marker = format!("sleep-{token}-{suffix}");
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .find(|pid| alive(*pid, &marker))
            .map(|pid| (pid, marker))
    };
    while Instant::now() < deadline {
        if let (Some(group), Some(session)) = (find("group"), find("session")) {
            let status = std::fs::read_to_string(format!("/proc/{}/status", group.0)).unwrap();
            let parent: i32 = status
                .lines()
                .find_map(|line| line.strip_prefix("PPid:"))
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            // Bound at the same path inside the sandbox as outside.
            let cwd = std::fs::read_link(format!("/proc/{parent}/cwd")).unwrap();
            return (vec![(parent, "stubborn".to_owned()), group, session], cwd);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the probe with token {token} never started its grandchildren");
}

fn wait_gone(pids: &[(i32, String)], within: Duration) {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if pids.iter().all(|(pid, marker)| !alive(*pid, marker)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let left: Vec<_> = pids
        .iter()
        .filter(|(pid, marker)| alive(*pid, marker))
        .collect();
    // Not left to hold the suite's output pipe for a quarter of an hour.
    for (pid, _) in &left {
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    panic!("still alive after {within:?}: {left:?}");
}

#[test]
fn the_supervisor_ends_as_its_tool_ended() {
    use std::os::unix::process::ExitStatusExt;
    let run = |script: &str| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_execplane"))
            .args(["tool-shim", "--", "/bin/sh", "-c", script])
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let output = child.wait_with_output().unwrap();
        drop(stdin);
        output
    };
    let exited = run("echo out; exit 3");
    assert_eq!(exited.status.code(), Some(3));
    assert_eq!(String::from_utf8_lossy(&exited.stdout), "out\n");
    let signalled = run("kill -TERM $$");
    assert_eq!(signalled.status.signal(), Some(15));
    // Nothing inherited: the supervisor's environment is the tool's.
    let env = String::from_utf8_lossy(&run("env").stdout).into_owned();
    assert!(
        !env.contains("CARGO") && !env.contains("HOME=") && !env.contains("PATH="),
        "{env}"
    );

    let missing = Command::new(env!("CARGO_BIN_EXE_execplane"))
        .args(["tool-shim", "--", "/nonexistent/tool"])
        .stdin(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(127));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("cannot start /nonexistent/tool"));
}

#[test]
fn closing_the_supervisors_stdin_kills_the_tool_and_every_descendant() {
    let dir = std::env::temp_dir().join(format!("execplane-tools-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let token = uuid::Uuid::new_v4().simple().to_string();
    let workdir = dir.join("work");
    std::fs::create_dir(&workdir).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_execplane"))
        .args([
            "tool-shim",
            "--workdir",
            workdir.to_str().unwrap(),
            "--",
            &format!("{}/stubborn", probe_dir()),
        ])
        .current_dir(&workdir)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("EXECPLANE_PROBE_ARGS", json!({"tag": token}).to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let (processes, cwd) = wait_pids(&token);
    assert_eq!(cwd, workdir);
    // SIGINT is ignored by all three.
    stdin.write_all(b"i").unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(processes.iter().all(|(pid, marker)| alive(*pid, marker)));
    drop(stdin);
    wait_gone(&processes, Duration::from_secs(5));
    assert!(child.wait().unwrap().code().is_none(), "killed, not exited");
    // Orphaned (its runner gone), the supervisor removes the working directory.
    assert!(!workdir.exists());
    std::fs::remove_dir_all(dir).unwrap();
}

async fn probing_pipeline(pool: &PgPool) -> (Pipeline, usize) {
    let (pipeline, runner) = pipeline_with_probe(pool, "stubborn", &[]).await;
    pipeline.wait_runners(1).await;
    (pipeline, runner)
}

/// A dispatcher, a relay and a verification runner allowed to run the
/// operator probes `probes` (a list, from tests/probes) with `env`; the
/// runner's index.
async fn pipeline_with_probe(
    pool: &PgPool,
    probes: &str,
    env: &[(&str, &str)],
) -> (Pipeline, usize) {
    let mut pipeline = Pipeline::new(pool).await;
    pipeline.spawn(&["dispatcher"], &[]);
    pipeline.spawn(&["relay"], &[]);
    let dir = probe_dir();
    let mut settings = vec![
        ("EXECPLANE_VERIFY_PROBE_DIR", dir.as_str()),
        ("EXECPLANE_VERIFY_PROBES", probes),
        ("EXECPLANE_RUNNER_STOP_GRACE", "1s"),
    ];
    settings.extend_from_slice(env);
    let runner = pipeline.spawn(&["runner", "verification"], &settings);
    (pipeline, runner)
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_cancelled_tool_that_ignores_sigint_is_killed_with_its_grandchildren(pool: PgPool) {
    let (pipeline, _) = probing_pipeline(&pool).await;
    let token = uuid::Uuid::new_v4().simple().to_string();
    let spec = job(
        "verify.custom.probe",
        json!({"probe_id": "stubborn", "args": {"tag": token}}),
        json!({"retry": {"max_attempts": 1}}),
    );
    pipeline.submit(&spec).await;
    let (processes, workdir) = wait_pids(&token);
    assert!(processes.iter().all(|(pid, marker)| alive(*pid, marker)));
    assert!(workdir.is_dir());
    let attempt = pipeline.attempts(&spec.job_id).await[0].0;
    let cancelled_at = Instant::now();
    pipeline.cancel(attempt, 10_000).await;
    let attempts = pipeline.wait_done(&spec.job_id, WAIT).await;
    assert_eq!(attempts[0].1, "cancelled", "{attempts:?}");
    // SIGINT changed nothing; SIGKILL came after the 1 s grace.
    assert!(cancelled_at.elapsed() >= Duration::from_secs(1));
    wait_gone(&processes, Duration::from_secs(2));
    assert!(!workdir.exists(), "the working directory is removed");
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_runner_killed_mid_tool_takes_its_tool_with_it(pool: PgPool) {
    let (mut pipeline, runner) = probing_pipeline(&pool).await;
    let token = uuid::Uuid::new_v4().simple().to_string();
    let spec = job(
        "verify.custom.probe",
        json!({"probe_id": "stubborn", "args": {"tag": token}}),
        json!({"retry": {"max_attempts": 1}}),
    );
    pipeline.submit(&spec).await;
    let (processes, workdir) = wait_pids(&token);
    pipeline.signal(runner, "KILL");
    wait_gone(&processes, Duration::from_secs(5));
    // Nobody is left to drop the runner's handle: the supervisor removes it.
    let deadline = Instant::now() + Duration::from_secs(5);
    while workdir.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!workdir.exists(), "{} left behind", workdir.display());
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_probe_reads_its_tenants_input_artifact_by_digest_and_a_wrong_one_is_refused(
    pool: PgPool,
) {
    let (pipeline, _) = pipeline_with_probe(&pool, "reader", &[]).await;
    let storage = pipeline.dir.join("artifacts");
    let inventory = pipeline.dir.join("inventory.ini");
    std::fs::write(&inventory, "[web]\nweb-1.example.com\n").unwrap();
    let put = Command::new(env!("CARGO_BIN_EXE_execplane"))
        .args(["artifacts", "put", "--tenant", "team-a"])
        .arg(&inventory)
        .env("EXECPLANE_ARTIFACT_DIR", &storage)
        .output()
        .unwrap();
    assert!(put.status.success(), "{put:?}");
    let reference = String::from_utf8(put.stdout).unwrap().trim().to_owned();
    let digest = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(b"[web]\nweb-1.example.com\n"))
    };
    assert_eq!(reference, format!("sha256:{digest}"));
    pipeline.wait_runners(1).await;
    let reader = |artifact: &str| {
        job(
            "verify.custom.probe",
            json!({"probe_id": "reader", "args": {"file": {"artifact": artifact}, "expect": "[web]"}}),
            json!({"retry": {"max_attempts": 1}}),
        )
    };
    let good = reader(&reference);
    let absent = reader(&format!("sha256:{}", "0".repeat(64)));
    // Produced past every edge that validates: intake refuses it.
    let mut malformed = reader(&reference);
    malformed.inputs["args"]["file"] = json!({"artifact": "sha256:not-hex"});
    // Another tenant that learnt the digest (digests travel in events).
    let mut stranger = reader(&reference);
    stranger.tenant = "team-b".into();
    for spec in [&good, &absent, &malformed, &stranger] {
        pipeline.submit(spec).await;
    }
    // The job's end as (status, category), and its message.
    let ended = |spec: execplane::contract::JobSpec| {
        let (pool, pipeline) = (pool.clone(), &pipeline);
        async move {
            pipeline.wait_done(&spec.job_id, WAIT).await;
            let (status, category, message) =
                sqlx::query_as::<_, (String, Option<String>, Option<String>)>(
                    "SELECT status, failure_category, message FROM attempts WHERE job_id = $1",
                )
                .bind(&spec.job_id)
                .fetch_one(&pool)
                .await
                .unwrap();
            ((status, category), message.unwrap_or_default())
        }
    };
    let end =
        |status: &str, category: Option<&str>| (status.to_owned(), category.map(str::to_owned));
    let (outcome, message) = ended(good).await;
    assert_eq!(outcome, end("succeeded", None), "{message}");
    // Never stored: the same answer as another tenant's content, so it
    // tells no one what others stored.
    let (outcome, message) = ended(absent).await;
    assert_eq!(outcome, end("failed", Some("policy")), "{message}");
    assert!(
        message.contains("inputs.args.file")
            && message.contains(&"0".repeat(64))
            && message.contains("not stored for tenant `team-a`"),
        "{message}"
    );
    let (outcome, message) = ended(malformed).await;
    assert_eq!(outcome, end("rejected", Some("contract")), "{message}");
    assert!(message.contains("inputs.args.file"), "{message}");
    let (outcome, message) = ended(stranger).await;
    assert_eq!(outcome, end("failed", Some("policy")), "{message}");
    assert!(
        message.contains("inputs.args.file") && message.contains("not stored for tenant `team-b`"),
        "{message}"
    );

    // Content changed in storage behind the reference: refused, naming both digests.
    std::fs::write(
        storage.join(format!("inputs/sha256/{digest}")),
        "[web]\nevil.example.com\n",
    )
    .unwrap();
    let tampered = reader(&reference);
    pipeline.submit(&tampered).await;
    let (outcome, message) = ended(tampered).await;
    assert_eq!(outcome, end("failed", Some("contract")), "{message}");
    assert!(
        message.contains(&reference) && message.contains("digest is"),
        "{message}"
    );
}

/// `verify.attempt.output` judges another attempt's output artifact, named
/// as its `finished` event lists it: it passes and fails on its contract,
/// and another tenant's attempt cannot read it, even holding the same bytes.
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn verify_attempt_output_judges_another_attempt_s_artifact(pool: PgPool) {
    let (pipeline, _) = pipeline_with_probe(&pool, "writer", &[]).await;
    let reference = pipeline.put_artifact("hosts.ini", b"[web]\nweb-1\nweb-2\n");
    pipeline.wait_runners(1).await;
    let once = json!({"retry": {"max_attempts": 1}});
    let writer = job(
        "verify.custom.probe",
        json!({"probe_id": "writer", "args": {"file": {"artifact": reference}}}),
        once.clone(),
    );
    pipeline.submit(&writer).await;
    let attempt = pipeline
        .wait_status(&writer.job_id, "succeeded", WAIT)
        .await;
    let outputs: serde_json::Value =
        sqlx::query_scalar("SELECT outputs FROM attempts WHERE attempt_id = $1")
            .bind(attempt)
            .fetch_one(&pool)
            .await
            .unwrap();
    let sha256 = outputs[0]["sha256"].as_str().unwrap().to_owned();
    // team-b holds the very bytes of the report: that tells it nothing of
    // team-a's attempt.
    let report = format!(
        "input sha256 {}\n18 bytes, 3 lines\n",
        reference.trim_start_matches("sha256:")
    );
    let same = pipeline.put_artifact_for("team-b", "report.txt", report.as_bytes());
    assert_eq!(same.trim_start_matches("sha256:"), sha256);
    let judge = |tenant: &str, expect: serde_json::Value| {
        let mut spec = job(
            "verify.attempt.output",
            json!({"attempt_id": attempt, "name": "report.txt", "sha256": sha256,
                   "expect": expect}),
            once.clone(),
        );
        spec.tenant = tenant.to_owned();
        spec
    };
    let passing = judge(
        "team-a",
        json!({"contains": "18 bytes", "matches": "^input sha256 [0-9a-f]{64}\n"}),
    );
    // The report is text, not JSON: a schema fails it.
    let failing = judge(
        "team-a",
        json!({"contains": "18 bytes", "schema": {"type": "object"}}),
    );
    let theirs = judge("team-b", json!({"contains": "18 bytes"}));
    for spec in [&passing, &failing, &theirs] {
        pipeline.submit(spec).await;
    }
    let (status, _, message, result) = pipeline.ended(&passing, WAIT).await;
    assert_eq!(status, "succeeded", "{message}");
    let names: Vec<&str> = result["samples"][0]["assertions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|assertion| assertion["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["contains", "matches"], "{result}");
    assert_eq!(result["samples"][0]["observed"]["bytes"], 96, "{result}");
    let (status, category, message, result) = pipeline.ended(&failing, WAIT).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("failed", Some("verification_failed")),
        "{message}"
    );
    assert!(message.contains("assertion `schema` failed"), "{message}");
    assert_eq!(result["samples"].as_array().unwrap().len(), 1, "{result}");
    let (status, category, message, _) = pipeline.ended(&theirs, WAIT).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("failed", Some("policy")),
        "{message}"
    );
    assert!(
        message.contains("is not an attempt of tenant `team-b`"),
        "{message}"
    );
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_file_a_tool_writes_becomes_a_checksummed_output_artifact_in_the_manifest(pool: PgPool) {
    let (mut pipeline, _) = pipeline_with_probe(&pool, "writer", &[]).await;
    pipeline.spawn(
        &["artifact-worker"],
        &[("EXECPLANE_ARTIFACT_GRACE", "300ms")],
    );
    let storage = pipeline.dir.join("artifacts");
    let storage_env = [("EXECPLANE_ARTIFACT_DIR", storage.to_str().unwrap())];
    let input = pipeline.dir.join("hosts.ini");
    std::fs::write(&input, "[web]\nweb-1\nweb-2\n").unwrap();
    let put = common::execplane_with(
        &pool,
        &[
            "artifacts",
            "put",
            "--tenant",
            "team-a",
            input.to_str().unwrap(),
        ],
        &storage_env,
    );
    assert!(put.status.success(), "{put:?}");
    let reference = String::from_utf8(put.stdout).unwrap().trim().to_owned();
    pipeline.wait_runners(1).await;

    let spec = job(
        "verify.custom.probe",
        json!({"probe_id": "writer", "args": {"file": {"artifact": reference}}}),
        json!({"retry": {"max_attempts": 1}}),
    );
    pipeline.submit(&spec).await;
    let attempt = pipeline.wait_status(&spec.job_id, "succeeded", WAIT).await;
    let expected = format!(
        "input sha256 {}\n18 bytes, 3 lines\n",
        reference.trim_start_matches("sha256:")
    );

    // The finished event records it, name and digest, in the log.
    let recorded: serde_json::Value =
        sqlx::query_scalar("SELECT outputs FROM attempts WHERE attempt_id = $1")
            .bind(attempt)
            .fetch_one(&pool)
            .await
            .unwrap();
    let sha = execplane::artifacts::sha256_hex(expected.as_bytes());
    assert_eq!(recorded[0]["name"], "report.txt", "{recorded}");
    assert_eq!(recorded[0]["sha256"], sha.as_str(), "{recorded}");
    let events = pipeline.stored_events().await;
    let in_log = events[&attempt].iter().any(|event| {
        matches!(&event.body, execplane::contract::EventBody::Finished { outputs, .. }
            if outputs.len() == 1 && outputs[0].sha256 == sha)
    });
    assert!(in_log, "the finished event in the log lists the output");

    // The worker records it as an artifact of the attempt, by the runner.
    pipeline
        .wait("the output's ref", WAIT, || async {
            sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM artifacts WHERE attempt_id = $1 AND name IN ('report.txt', 'manifest.json')",
            )
            .bind(attempt)
            .fetch_one(&pool)
            .await
            .unwrap()
                == 2
        })
        .await;
    let listed = common::execplane_with(
        &pool,
        &["artifacts", "list", &attempt.to_string(), "--json"],
        &storage_env,
    );
    assert!(listed.status.success(), "{listed:?}");
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&listed.stdout).unwrap();
    let report = rows
        .iter()
        .find(|row| row["name"] == "report.txt")
        .unwrap_or_else(|| panic!("{rows:?}"));
    assert_eq!(report["sha256"], sha.as_str());
    assert_ne!(report["producer"], "artifact-worker", "{report}");

    // It downloads with its digest checked.
    let out = pipeline.dir.join("report.txt");
    let report = common::download(&pool, attempt, "report.txt", &out, &storage_env);
    assert_eq!(String::from_utf8(report).unwrap(), expected);

    // And the manifest lists it with the same digest.
    let manifest = pipeline.dir.join("manifest.json");
    let manifest: serde_json::Value = serde_json::from_slice(&common::download(
        &pool,
        attempt,
        "manifest.json",
        &manifest,
        &storage_env,
    ))
    .unwrap();
    let entry = manifest["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|entry| entry["name"] == "report.txt")
        .unwrap_or_else(|| panic!("{manifest}"));
    assert_eq!(entry["sha256"], sha.as_str());
    assert_eq!(entry["class"], "evidence");
}

/// The `report` line a `prober` probe in mode `look` printed.
async fn report(pipeline: &Pipeline, spec: &execplane::contract::JobSpec) -> serde_json::Value {
    printed(pipeline, spec, "report ").await
}

/// The JSON a probe printed after `prefix` on a line of its output.
async fn printed(
    pipeline: &Pipeline,
    spec: &execplane::contract::JobSpec,
    prefix: &str,
) -> serde_json::Value {
    let attempt = execplane::attempt::attempt_id_for(spec.command_id, 1).to_string();
    let output = pipeline.tool_output().await;
    let text = output.get(&attempt).map(String::as_str).unwrap_or_default();
    let line = text
        .lines()
        .find_map(|line| line.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no `{prefix}` line in the probe's output: {text}"));
    serde_json::from_str(line).unwrap()
}

/// The host's view of a process's uid.
fn uid_of(pid: i32) -> u32 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().next()?.parse().ok())
        .unwrap()
}

/// Whether `path` is a mount point of this host (of this test's mount
/// namespace, the runner's).
fn mounted(path: &std::path::Path) -> bool {
    let path = path.to_string_lossy();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|line| line.split(' ').nth(4) == Some(&path))
}

/// Run by [`a_dead_runner_s_working_directory_is_removed_by_the_next_runner_to_start`]
/// as a process of its own: it takes a working directory as a runner does
/// for an attempt, writes in it, says where it is and dies between tools,
/// with no supervisor left to remove it.
#[test]
#[ignore = "a child process of another test"]
fn take_a_working_directory_and_die() {
    let settings = execplane::runner::tool::ToolSettings::default();
    let workdir = execplane::runner::tool::Workdir::for_tools(&settings).unwrap();
    std::fs::write(workdir.path().join("state.tfstate"), "a tenant's state").unwrap();
    println!("workdir={}", workdir.path().display());
    // As `kill -9` would: nothing is dropped.
    std::process::exit(0);
}

/// A runner killed between two of an attempt's tools (no tool, so no
/// supervisor to clean up) leaves the attempt's tmpfs mounted, with the
/// tenant's files in memory; the next runner to start on the host finds
/// it by its uid, which nobody holds any more, and removes it
/// (docs/SECURITY.md, "Its end").
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_dead_runner_s_working_directory_is_removed_by_the_next_runner_to_start(pool: PgPool) {
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "take_a_working_directory_and_die",
            "--ignored",
            "--nocapture",
        ])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&child.stdout);
    let workdir = std::path::PathBuf::from(
        said.lines()
            .find_map(|line| line.strip_prefix("workdir="))
            .unwrap_or_else(|| panic!("the child said: {said}")),
    );
    let tools = execplane::runner::sandbox::tools_view(&workdir);
    assert!(
        mounted(&workdir) && mounted(&tools),
        "left mounted by its dead owner"
    );
    assert!(workdir.join("state.tfstate").is_file());

    let (pipeline, _) = pipeline_with_probe(&pool, "stubborn", &[]).await;
    pipeline.wait_runners(1).await;
    assert!(!mounted(&workdir) && !mounted(&tools), "still mounted");
    assert!(
        !workdir.exists() && !tools.exists(),
        "{} left",
        workdir.display()
    );
}

/// A pool of one uid of its own, for the held-network tests: each
/// holder of it is the one before's successor.
fn one_uid_pool() -> execplane::runner::tool::ToolSettings {
    let mut settings = execplane::runner::tool::ToolSettings {
        shim: env!("CARGO_BIN_EXE_execplane").into(),
        ..Default::default()
    };
    // Below the default pool (1,900,000,000 on), which other tests use.
    settings.sandbox.uid_base = 1_899_000_000;
    settings.sandbox.uid_count = 1;
    settings
}

/// Whether `uid`'s sockets connect to `port` on loopback (a process of
/// its own run as that uid, as a tool's would be).
fn connects_as(uid: u32, port: u16) -> bool {
    let status = Command::new("setpriv")
        .args([
            format!("--reuid={uid}"),
            format!("--regid={uid}"),
            "--clear-groups".into(),
            "/usr/bin/python3".into(),
            "-c".into(),
            format!("import socket; socket.create_connection(('127.0.0.1', {port}), 3)"),
        ])
        .stderr(Stdio::null())
        .status()
        .unwrap();
    status.success()
}

/// Run by [`a_uid_s_network_held_by_a_runner_that_died_is_let_go_by_its_next_holder`]
/// as a process of its own: it guards the network as a runner does at
/// start, holds its uid's tools to one port, says which, and dies holding
/// it, with nothing dropped.
#[test]
#[ignore = "a child process of another test"]
fn hold_a_uid_s_network_and_die() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let settings = one_uid_pool();
    runtime
        .block_on(execplane::runner::sandbox::check(&settings))
        .unwrap();
    let workdir = execplane::runner::tool::Workdir::for_tools(&settings).unwrap();
    let granted = std::env::var("GRANTED").unwrap();
    let reach = [execplane::runner::sandbox::egress::Destination::parse(&granted).unwrap()];
    let unresolved = runtime
        .block_on(workdir.hold_network(Some(&reach)))
        .unwrap();
    assert_eq!(unresolved, Some(Vec::new()));
    println!(
        "table={}",
        execplane::runner::sandbox::egress::table_name(settings.sandbox.uid_base)
    );
    std::process::exit(0);
}

/// A runner that dies while its attempt's tools are held to their
/// destinations leaves its table, and the uid held in it, behind until
/// the next runner of the pool starts; meanwhile another runner may take
/// the uid for an attempt whose tools are not held. It finds the release
/// the dead one recorded and lets the uid go before its tools run
/// (docs/SECURITY.md, "Network").
#[tokio::test]
async fn a_uid_s_network_held_by_a_runner_that_died_is_let_go_by_its_next_holder() {
    let open = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let granted = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = |listener: &std::net::TcpListener| listener.local_addr().unwrap().port();
    let settings = one_uid_pool();
    let uid = settings.sandbox.uid_base;
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "hold_a_uid_s_network_and_die",
            "--ignored",
            "--nocapture",
        ])
        .env("GRANTED", format!("127.0.0.1:{}", port(&granted)))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&child.stdout);
    let table = said
        .lines()
        .find_map(|line| line.strip_prefix("table="))
        .unwrap_or_else(|| {
            panic!(
                "the child said: {said}{}",
                String::from_utf8_lossy(&child.stderr)
            )
        })
        .to_owned();
    // Held by the dead runner's table: the granted port only.
    assert!(connects_as(uid, port(&granted)));
    assert!(
        !connects_as(uid, port(&open)),
        "the held uid reached a port it was not given"
    );

    // The next holder of the uid, whose tools are not held.
    let workdir = execplane::runner::tool::Workdir::for_tools(&settings).unwrap();
    assert!(
        connects_as(uid, port(&open)),
        "the next holder found the uid held"
    );

    drop(workdir);

    // A live runner's hold ends with its working directory. Guarding the
    // network here installs this process's table, and removes the dead
    // one's as the next runner to start does; but not a table whose
    // runner keeps no lock file here (in a container of its own, say),
    // which may be alive.
    let foreign = format!("execplane_sandbox_{uid}_1");
    let nft = |args: &[&str]| {
        let status = Command::new(execplane::runner::sandbox::egress::NFT)
            .args(args)
            .status()
            .unwrap();
        assert!(status.success(), "nft {args:?}");
    };
    nft(&["add", "table", "inet", &foreign]);
    execplane::runner::sandbox::check(&settings).await.unwrap();
    let tables = listed_tables();
    nft(&["delete", "table", "inet", &foreign]);
    assert!(!tables.contains(&table), "the dead runner's table stayed");
    assert!(
        tables.contains(&foreign),
        "a table with no lock file here was removed"
    );
    let workdir = execplane::runner::tool::Workdir::for_tools(&settings).unwrap();
    let reach = [
        execplane::runner::sandbox::egress::Destination::parse(&format!(
            "127.0.0.1:{}",
            port(&granted)
        ))
        .unwrap(),
    ];
    workdir.hold_network(Some(&reach)).await.unwrap();
    assert!(!connects_as(uid, port(&open)));
    workdir.hold_network(None).await.unwrap();
    assert!(connects_as(uid, port(&open)), "let go for the next tool");
    workdir.hold_network(Some(&reach)).await.unwrap();
    drop(workdir);
    assert!(connects_as(uid, port(&open)), "held after its attempt");
    let own = execplane::runner::sandbox::egress::table_name(uid);
    let removed = Command::new(execplane::runner::sandbox::egress::NFT)
        .args(["delete", "table", "inet", &own])
        .status()
        .unwrap();
    assert!(removed.success());
}

/// The nftables tables of this host.
fn listed_tables() -> String {
    let listed = Command::new(execplane::runner::sandbox::egress::NFT)
        .args(["list", "tables"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&listed.stdout).into_owned()
}

/// A probe that swaps its output directory for a link to a directory of
/// the host's: the runner, storing its outputs as root, lists nothing of
/// what the link names, and says why it stored nothing (docs/SECURITY.md,
/// "Its own disk").
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_probe_s_output_directory_swapped_for_a_link_stores_nothing_of_the_host(pool: PgPool) {
    let (pipeline, _) = pipeline_with_probe(&pool, "swapper", &[]).await;
    let host = pipeline.dir.join("host-dir");
    std::fs::create_dir_all(&host).unwrap();
    std::fs::write(host.join("hostfile.txt"), "the host's file").unwrap();
    pipeline.wait_runners(1).await;
    let spec = job(
        "verify.custom.probe",
        json!({"probe_id": "swapper", "args": {"dir": host}}),
        json!({"retry": {"max_attempts": 1}}),
    );
    pipeline.submit(&spec).await;
    let (status, _, message, result) = pipeline.ended(&spec, WAIT).await;
    let said = format!("{status} {message} {result}");
    assert!(!said.contains("hostfile"), "{said}");
    let recorded: Vec<serde_json::Value> =
        sqlx::query_scalar("SELECT outputs FROM attempts WHERE job_id = $1")
            .bind(&spec.job_id)
            .fetch_all(&pool)
            .await
            .unwrap();
    assert!(
        !serde_json::json!(recorded).to_string().contains("hostfile"),
        "{recorded:?}"
    );
    assert_eq!(status, "failed", "{message}");
    assert!(said.contains("the output directory"), "{said}");
}

/// Two tenants' tools at once: each runs as a uid of its own from the
/// pool (never the runner's), with no capabilities and no way to gain
/// any, in namespaces of its own; it reaches neither the other attempt's
/// working directory, nor the runner's process, environment or files,
/// nor the host's secrets, and can write nothing but its own work.
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_tool_reaches_nothing_but_its_own_work(pool: PgPool) {
    // A service on every address of this host (the stack's own listen on
    // 127.0.0.1 only), named in the operator's deny list by one of them,
    // with OpenBao and the cluster's etcd.
    let everywhere = std::net::TcpListener::bind("[::]:0").unwrap();
    let port = everywhere.local_addr().unwrap().port();
    let deny = format!("169.254.0.0/16,127.0.0.1:8200,127.0.0.1:2379,127.0.0.1:{port}");
    let (pipeline, runner) = pipeline_with_probe(
        &pool,
        "stubborn,prober",
        &[("EXECPLANE_SANDBOX_DENY", deny.as_str())],
    )
    .await;
    pipeline.wait_runners(1).await;
    // The first tenant's tool holds a key in its working directory.
    let token = uuid::Uuid::new_v4().simple().to_string();
    let held = job(
        "verify.custom.probe",
        json!({"probe_id": "stubborn", "args": {"tag": token}}),
        json!({"retry": {"max_attempts": 1}}),
    );
    pipeline.submit(&held).await;
    let (processes, workdir) = wait_pids(&token);
    let key = workdir.join("secrets/key");
    std::fs::create_dir_all(key.parent().unwrap()).unwrap();
    std::fs::write(&key, "the first tenant's key").unwrap();
    let runner_pid = pipeline.pid(runner);
    let stack_token = common::stack_dir().join("openbao-root-token");
    let peek = [
        key.display().to_string(),
        workdir.display().to_string(),
        format!("/proc/{runner_pid}/environ"),
        format!("/proc/{}/environ", processes[0].0),
        stack_token.display().to_string(),
        pipeline
            .dir
            .join(format!("runner-verification-{runner}.log"))
            .display()
            .to_string(),
        "/root".into(),
        "/etc/shadow".into(),
        "/var/lib/postgresql".into(),
    ];
    // New files only: were the sandbox broken, nothing of the host is
    // overwritten.
    let planted = format!("execplane-planted-{token}");
    let poke = [
        format!("/usr/bin/{planted}"),
        format!("/etc/{planted}"),
        // bubblewrap's /dev, a tmpfs of no size of its own.
        format!("/dev/{planted}"),
        format!("/tmp/../../usr/lib/{planted}"),
        workdir.join(&planted).display().to_string(),
    ];
    // The platform's own endpoints (the broker, the database, at any
    // address of this host) and the deny list are out of reach; the
    // cluster's API server, which tools need, is not.
    let refused = [
        pipeline.brokers.clone(),
        "127.0.0.1:5432".into(),
        "127.0.0.1:8200".into(),
        "127.0.0.1:2379".into(),
        // Refused at every local address, not the one named only.
        format!("127.0.0.2:{port}"),
        format!("[::1]:{port}"),
        format!("[::ffff:127.0.0.3]:{port}"),
    ];
    let allowed = "127.0.0.1:6443".to_owned();
    let connect: Vec<String> = refused.iter().chain([&allowed]).cloned().collect();
    let look = job(
        "verify.custom.probe",
        json!({"probe_id": "prober", "args": {"mode": "look", "peek": peek, "poke": poke, "connect": connect}}),
        json!({"retry": {"max_attempts": 1}}),
    );
    pipeline.submit(&look).await;
    let (status, _, message, _) = pipeline.ended(&look, WAIT).await;
    assert_eq!(status, "succeeded", "{message}");
    let seen = report(&pipeline, &look).await;
    let uid = seen["uid"].as_u64().unwrap() as u32;
    let other = uid_of(processes[0].0);
    assert!(uid >= 1_900_000_000 && other >= 1_900_000_000, "{seen}");
    assert_ne!(uid, other, "each attempt has its own uid");
    assert_ne!(uid, uid_of(runner_pid));
    assert_eq!(seen["gid"], uid, "{seen}");
    assert_eq!(seen["groups"], json!([]), "{seen}");
    assert_eq!(seen["cap_eff"], "0000000000000000", "{seen}");
    assert_eq!(seen["no_new_privs"], "1", "{seen}");
    assert_eq!(seen["hostname"], "execplane-tool", "{seen}");
    // Its own pid namespace: a handful of pids, none the runner's.
    let pids: Vec<i64> = serde_json::from_value(seen["pids"].clone()).unwrap();
    assert!(pids.len() <= 4, "{seen}");
    // Nothing of the runner's is open in it: its stdin, stdout and stderr
    // are all it holds (and the listing's own directory). The runner's
    // Kafka client makes pipes that do not close on exec.
    for (fd, target) in seen["fds"].as_object().unwrap() {
        let fd: u32 = fd.parse().unwrap();
        let target = target.as_str().unwrap();
        assert!(
            fd <= 2 || target.starts_with("/proc/"),
            "descriptor {fd} ({target}) reached the tool: {seen}"
        );
    }
    assert_ne!(seen["pty"], "ok", "a terminal of the host's: {seen}");
    // No socket the firewall does not see, no call that opens much of the
    // kernel to it; the sockets it needs.
    if cfg!(target_arch = "x86_64") {
        for family in ["vsock", "alg"] {
            assert_eq!(seen["sockets"][family], "EAFNOSUPPORT", "{family}: {seen}");
        }
        for protocol in ["sctp", "generic_netlink"] {
            assert_eq!(
                seen["sockets"][protocol], "EPROTONOSUPPORT",
                "{protocol}: {seen}"
            );
        }
        for call in ["io_uring_setup", "keyctl"] {
            assert_eq!(seen["calls"][call], "EPERM", "{call}: {seen}");
        }
    }
    for family in ["inet", "unix"] {
        assert_eq!(seen["sockets"][family], "ok", "{family}: {seen}");
    }
    for (path, outcome) in seen["peek"].as_object().unwrap() {
        assert_ne!(outcome, "ok", "{path} was readable: {seen}");
    }
    for (path, outcome) in seen["poke"].as_object().unwrap() {
        assert_ne!(outcome, "ok", "{path} was writable: {seen}");
    }
    for address in &refused {
        assert_eq!(
            seen["connect"][address], "ECONNREFUSED",
            "{address}: {seen}"
        );
    }
    assert_eq!(seen["connect"][&allowed], "ok", "{seen}");
    drop(everywhere);
    for path in &poke {
        let path = std::path::Path::new(path);
        assert!(!path.exists(), "{} was planted", path.display());
        let _ = std::fs::remove_file(path);
    }
    // The first tenant's tool never noticed.
    assert!(processes.iter().all(|(pid, marker)| alive(*pid, marker)));
    let attempt = pipeline.attempts(&held.job_id).await[0].0;
    pipeline.cancel(attempt, 1_000).await;
    pipeline.wait_done(&held.job_id, WAIT).await;
    wait_gone(&processes, Duration::from_secs(5));
}

/// A tool over its memory, process or disk limit is stopped, and its
/// attempt fails as `policy`, naming the limit and its setting; the
/// runner, and the next attempt, carry on.
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_tool_over_a_limit_fails_alone_naming_it(pool: PgPool) {
    let (pipeline, _) = pipeline_with_probe(
        &pool,
        "prober",
        &[
            ("EXECPLANE_SANDBOX_MEMORY_MIB", "128"),
            ("EXECPLANE_SANDBOX_PIDS", "24"),
            ("EXECPLANE_SANDBOX_DISK_MIB", "8"),
        ],
    )
    .await;
    pipeline.wait_runners(1).await;
    let probe = |mode: &str| {
        job(
            "verify.custom.probe",
            json!({"probe_id": "prober", "args": {"mode": mode}}),
            json!({"retry": {"max_attempts": 1}}),
        )
    };
    let cases = [
        (probe("memory"), "memory limit of 128 MiB"),
        (probe("fork"), "limit of 24 processes"),
        (probe("disk"), "working directory's 8 MiB"),
        (probe("files"), "its 16384 files"),
    ];
    for (spec, _) in &cases {
        pipeline.submit(spec).await;
    }
    for (spec, expected) in &cases {
        let (status, category, message, _) = pipeline.ended(spec, WAIT).await;
        assert_eq!(
            (status.as_str(), category.as_deref()),
            ("failed", Some("policy")),
            "{message}"
        );
        assert!(message.contains(expected), "{message}");
    }
    let after = probe("look");
    pipeline.submit(&after).await;
    let (status, _, message, _) = pipeline.ended(&after, WAIT).await;
    assert_eq!(status, "succeeded", "{message}");
}

/// A tool's processes share the CPU its limit gives them, however many
/// they are (each in a session of its own, too): the runner and the other
/// attempts keep theirs.
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_tool_s_processes_together_get_no_more_cpu_than_its_limit(pool: PgPool) {
    let (pipeline, _) =
        pipeline_with_probe(&pool, "prober", &[("EXECPLANE_SANDBOX_CPU_PERCENT", "50")]).await;
    pipeline.wait_runners(1).await;
    let spin = job(
        "verify.custom.probe",
        json!({"probe_id": "prober", "args": {"mode": "spin", "spinners": 4, "seconds": 2}}),
        json!({"retry": {"max_attempts": 1}}),
    );
    pipeline.submit(&spin).await;
    let (status, _, message, _) = pipeline.ended(&spin, WAIT).await;
    assert_eq!(status, "succeeded", "{message}");
    let spun = printed(&pipeline, &spin, "spun ").await;
    let (wall, cpu) = (
        spun["wall"].as_f64().unwrap(),
        spun["cpu"].as_f64().unwrap(),
    );
    // Half a CPU's worth, and some slack for the period's edges.
    assert!(cpu <= wall * 0.7, "{cpu} CPU seconds in {wall} s: {spun}");
}

/// A runner whose tools' network cannot be guarded as configured serves
/// nothing: it exits at start, saying why, before it announces itself.
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_runner_that_cannot_guard_the_tools_network_refuses_to_start(pool: PgPool) {
    let mut pipeline = Pipeline::new(&pool).await;
    let runner = pipeline.spawn(
        &["runner", "verification"],
        &[("EXECPLANE_SANDBOX_DENY", "no-such-host.invalid:443")],
    );
    let status = pipeline
        .wait_exit(runner, Duration::from_secs(60))
        .expect("the runner exits");
    assert!(!status.success());
    let log = pipeline.log(runner);
    assert!(
        log.contains("cannot guard the tools' network: cannot resolve `no-such-host.invalid`"),
        "{log}"
    );
}
