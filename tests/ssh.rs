//! The ssh runner against the real sshd scripts/sshd.sh starts on
//! 127.0.0.1:2222 (user `exectest`, key in OpenBao): an allowlisted template
//! runs and its exit code comes back; injection payloads reach the node as
//! one literal argument or are refused before anything connects; unknown
//! and wrong host keys are refused; sudo is the template's, recorded, and
//! enforced; a cancel stops the remote command.

mod common;

use std::time::Duration;

use common::bao::Bao;
use common::leases;
use common::pipeline::{job, Pipeline};
use common::sshd::{self, host_key};
use execplane::contract::{JobSpec, RunnerType};
use serde_json::{json, Value};
use sqlx::PgPool;

const WAIT: Duration = Duration::from_secs(60);
/// The ssh runner's index in the pipeline `ssh_pipeline` starts.
const SSH_RUNNER: usize = 2;

fn stack_ssh() -> std::path::PathBuf {
    common::stack_dir().join("ssh")
}

/// Stores the test user's private key where the JobSpecs reference it.
async fn store_key(bao: &Bao) {
    bao.put("team-a/ssh", json!({"private_key": sshd::user_key()}))
        .await;
}

/// The operator's policy of these tests: team-a may run these templates on
/// 127.0.0.1; `argv` records the words it was given in `out/argv.bin`.
fn policy(dir: &std::path::Path) -> String {
    format!(
        r#"
tenants:
  team-a:
    operations: ["ssh.*"]
    secret_prefixes: ["secret/team-a/"]
    ssh:
      templates: [speak, argv, show-key, fail, id-root, sudo-true, id-plain, sleeper, sleeper-root, upload, download, restart-demo, restart-nostatus, facts]
      nodes: ["127.0.0.1", "localhost"]
      ports: [2222]
ssh_templates:
  argv:
    program: {dir}/argv.sh
    fixed_args: ["{dir}/out/argv.bin"]
    args:
      - {{name: word, type: string, pattern: ".*"}}
  show-key:
    program: /bin/cat
    fixed_args: ["{dir}/key"]
  fail:
    program: /bin/false
  id-root:
    program: /usr/bin/id
    fixed_args: ["-u"]
    sudo: {{as: root}}
  sudo-true:
    program: /bin/true
    sudo: {{as: root}}
  id-plain:
    program: /usr/bin/id
    fixed_args: ["-u"]
  sleeper:
    program: /bin/sleep
    args:
      - {{name: seconds, type: int, min: 1, max: 600}}
  sleeper-root:
    program: /bin/sleep
    args:
      - {{name: seconds, type: int, min: 1, max: 600}}
    sudo: {{as: root}}
  upload:
    operation: ssh.file.upload
    program: /usr/lib/openssh/sftp-server
    args:
      - {{name: destination, type: path, root: "{dir}/drop"}}
  download:
    operation: ssh.file.download
    program: /usr/lib/openssh/sftp-server
    fixed_args: ["-R"]
    args:
      - {{name: path, type: path, root: "{dir}/drop"}}
  restart-demo:
    operation: ssh.service.restart
    program: {dir}/svc.sh
    fixed_args: [restart]
    status_args: [status]
    args:
      - {{name: service, type: enum, values: [demo, broken]}}
  restart-nostatus:
    operation: ssh.service.restart
    program: {dir}/svc.sh
    fixed_args: [restart]
    args:
      - {{name: service, type: enum, values: [demo]}}
  not-team-a:
    program: {dir}/argv.sh
    fixed_args: ["{dir}/out/not-team-a.bin", "ran"]
  speak:
    program: /bin/sh
    fixed_args: ["-c", "echo said on stdout; echo said on stderr >&2"]
  facts:
    operation: ssh.system.fact.collect
    program: /bin/uname
    args:
      - {{name: facts, type: enum, values: [hostname, kernel, os, arch], required: false}}
"#,
        dir = dir.display()
    )
}

/// A service supervisor of the test's own: `restart NAME` (re)starts a
/// detached `sleep` and counts the restart; `status NAME` says whether it
/// runs (exit 0) or not (exit 3). The service `broken` dies at once.
const SERVICE: &str = r#"#!/bin/sh
dir="$(dirname "$0")/svc"; name="$2"; pidfile="$dir/$name.pid"
case "$1" in
restart)
  [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null
  if [ "$name" = broken ]; then seconds=0; else seconds=931; fi
  setsid /bin/sleep "$seconds" </dev/null >/dev/null 2>&1 &
  echo $! > "$pidfile"
  echo restarted >> "$dir/$name.restarts"
  echo "restarting $name"; echo "stopped the old $name" >&2
  sleep 0.3 ;;
status)
  if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    echo "$name active (pid $(cat "$pidfile"))"; exit 0
  fi
  echo "$name inactive"; exit 3 ;;
esac
"#;

/// A JobSpec of `operation` on the local node with the test user's login.
fn ssh_operation(operation: &str, mut inputs: Value) -> JobSpec {
    inputs["user"] = json!("exectest");
    inputs["private_key"] = json!({"$secret": "ssh_key"});
    job(
        operation,
        inputs,
        json!({
            "targets": [local_node()],
            "secret_refs": [{"name": "ssh_key", "mount": "secret", "path": "team-a/ssh", "key": "private_key"}],
            "retry": {"max_attempts": 1}
        }),
    )
}

fn ssh_job(template: &str, args: Value, target: Value) -> JobSpec {
    job(
        "ssh.command.run",
        json!({"template_id": template, "args": args, "user": "exectest",
               "private_key": {"$secret": "ssh_key"}}),
        json!({
            "targets": [target],
            "secret_refs": [{"name": "ssh_key", "mount": "secret", "path": "team-a/ssh", "key": "private_key"}],
            "retry": {"max_attempts": 1}
        }),
    )
}

fn local_node() -> Value {
    json!({"kind": "node", "id": "local", "address": "127.0.0.1",
           "attributes": {"port": "2222", "host_key": host_key()}})
}

/// The dispatcher, relay and ssh runner (index `SSH_RUNNER`) on the test
/// policy, with the user's key in OpenBao.
async fn ssh_pipeline(pool: &PgPool) -> Pipeline {
    let mut pipeline = Pipeline::new(pool).await;
    let dir = pipeline.dir.clone();
    // What the node's user runs and writes: readable and writable by it.
    std::fs::create_dir_all(dir.join("out")).unwrap();
    let script = dir.join("argv.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\nout=\"$1\"; shift\nprintf '%s\\0' \"$@\" > \"$out\"\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(dir.join("out"), std::fs::Permissions::from_mode(0o777)).unwrap();
    // Where uploads go, and a service under a supervisor of the test's own.
    for sub in ["drop", "svc"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
        std::fs::set_permissions(dir.join(sub), std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    std::fs::write(dir.join("svc.sh"), SERVICE).unwrap();
    std::fs::set_permissions(dir.join("svc.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let policy_file = dir.join("policy.yaml");
    std::fs::write(&policy_file, policy(&dir)).unwrap();
    pipeline.set_env("EXECPLANE_POLICY_FILE", policy_file.to_str().unwrap());
    let bao = Bao::new();
    store_key(&bao).await;
    pipeline.spawn(&["dispatcher"], &[]);
    pipeline.spawn(&["relay"], &[]);
    pipeline.spawn(
        &["runner", "ssh"],
        &[
            ("EXECPLANE_VAULT_ADDR", bao.address.as_str()),
            ("EXECPLANE_VAULT_TOKEN", bao.root.as_str()),
            ("EXECPLANE_RUNNER_STOP_GRACE", "1s"),
        ],
    );
    pipeline.wait_runners(1).await;
    pipeline
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_template_runs_on_the_real_sshd_with_its_arguments_as_inert_literals(pool: PgPool) {
    let pipeline = ssh_pipeline(&pool).await;
    let out = pipeline.dir.join("out/argv.bin");
    for payload in [
        "; rm -rf /",
        "$(touch /tmp/execplane-pwned)",
        "`touch /tmp/execplane-pwned`",
        "it's 'quoted' \"twice\" \\ * ?",
    ] {
        let _ = std::fs::remove_file(&out);
        let spec = ssh_job("argv", json!({"word": payload}), local_node());
        pipeline.submit(&spec).await;
        let (status, category, message, result) = pipeline.ended(&spec, WAIT).await;
        assert_eq!(status, "succeeded", "{category:?} {message}");
        // The node saw exactly one argument, byte for byte.
        assert_eq!(
            std::fs::read(&out).unwrap(),
            format!("{payload}\0").into_bytes()
        );
        assert_eq!(result["nodes"][0]["exit_code"], 0, "{result}");
        assert_eq!(result["argv"].as_array().unwrap().last().unwrap(), payload);
        assert!(result["sudo_as"].is_null());
    }
    assert!(!std::path::Path::new("/tmp/execplane-pwned").exists());

    // Refused before anything connects: a newline, an option, an unknown
    // template, sudo on a template without it.
    for (template, args, sudo) in [
        ("argv", json!({"word": "one\ntwo"}), false),
        ("argv", json!({"word": "--option=smuggled"}), false),
        ("reboot", json!({}), false),
        ("id-plain", json!({}), true),
    ] {
        let mut spec = ssh_job(template, args, local_node());
        spec.inputs["sudo"] = json!(sudo);
        pipeline.submit(&spec).await;
        let (status, category, message, _) = pipeline.ended(&spec, WAIT).await;
        assert_eq!(
            (status.as_str(), category.as_deref()),
            ("rejected", Some("policy")),
            "{template}: {message}"
        );
    }

    // A non-zero exit is a runner error with the code.
    let spec = ssh_job("fail", json!({}), local_node());
    pipeline.submit(&spec).await;
    let (status, category, message, result) = pipeline.ended(&spec, WAIT).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("failed", Some("runner_error"))
    );
    assert!(message.contains("exited with code 1"), "{message}");
    assert_eq!(result["nodes"][0]["exit_code"], 1, "{result}");
}

/// A command on two nodes: each node's stdout and stderr are outputs of
/// their own, named in its result, which a consumer downloads.
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn each_node_s_stdout_and_stderr_are_outputs_of_their_own(pool: PgPool) {
    let mut pipeline = ssh_pipeline(&pool).await;
    pipeline.spawn(
        &["artifact-worker"],
        &[("EXECPLANE_ARTIFACT_GRACE", "300ms")],
    );
    let mut other = local_node();
    other["id"] = json!("loopback");
    other["address"] = json!("localhost");
    let spec = job(
        "ssh.command.run",
        json!({"template_id": "speak", "user": "exectest",
               "private_key": {"$secret": "ssh_key"}}),
        json!({
            "targets": [local_node(), other],
            "secret_refs": [{"name": "ssh_key", "mount": "secret", "path": "team-a/ssh", "key": "private_key"}],
            "retry": {"max_attempts": 1}
        }),
    );
    pipeline.submit(&spec).await;
    let (status, _, message, result) = pipeline.ended(&spec, WAIT).await;
    assert_eq!(status, "succeeded", "{message}");
    let attempt = pipeline.wait_status(&spec.job_id, "succeeded", WAIT).await;
    let download = |name: String| {
        let pipeline = &pipeline;
        async move { String::from_utf8(pipeline.download(attempt, &name).await).unwrap() }
    };
    let nodes = result["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2, "{result}");
    for (index, (node, target)) in nodes.iter().zip(["local", "loopback"]).enumerate() {
        assert_eq!(node["target"], target, "{result}");
        let (stdout, stderr) = (
            format!("node-{}.stdout.log", index + 1),
            format!("node-{}.stderr.log", index + 1),
        );
        assert_eq!(node["stdout"], json!(stdout), "{result}");
        assert_eq!(node["stderr"], json!(stderr), "{result}");
        assert_eq!(download(stdout).await, "said on stdout\n");
        assert_eq!(download(stderr).await, "said on stderr\n");
    }
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn unknown_or_wrong_host_keys_are_refused_and_sudo_is_the_templates(pool: PgPool) {
    let pipeline = ssh_pipeline(&pool).await;
    let unknown = json!({"kind": "node", "id": "local", "address": "127.0.0.1",
                         "attributes": {"port": "2222"}});
    let spec = ssh_job("id-plain", json!({}), unknown);
    pipeline.submit(&spec).await;
    let (status, category, message, _) = pipeline.ended(&spec, WAIT).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("failed", Some("contract"))
    );
    assert!(message.contains("no known host key"), "{message}");

    // Another key than the node's: OpenSSH refuses to go on.
    let other = std::fs::read_to_string(stack_ssh().join("user_ed25519.pub")).unwrap();
    let other: String = other
        .split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ");
    let wrong = json!({"kind": "node", "id": "local", "address": "127.0.0.1",
                       "attributes": {"port": "2222", "host_key": other}});
    let spec = ssh_job("id-plain", json!({}), wrong);
    pipeline.submit(&spec).await;
    let (status, category, message, _) = pipeline.ended(&spec, WAIT).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("failed", Some("contract")),
        "{message}"
    );
    assert!(
        message.contains("Host key verification failed"),
        "{message}"
    );

    // Pinned by fingerprint instead: the key the node offers is taken only
    // when it hashes to the pin.
    let pin = sshd::host_key_fingerprint();
    let pinned = |pin: &str| {
        json!({"kind": "node", "id": "local", "address": "127.0.0.1",
               "attributes": {"port": "2222", "host_key_fingerprint": pin}})
    };
    let spec = ssh_job("id-plain", json!({}), pinned(&pin));
    pipeline.submit(&spec).await;
    let (status, _, message, _) = pipeline.ended(&spec, WAIT).await;
    assert_eq!(status, "succeeded", "{message}");
    let wrong = format!("SHA256:{}", "A".repeat(43));
    let spec = ssh_job("id-plain", json!({}), pinned(&wrong));
    pipeline.submit(&spec).await;
    let (status, category, message, _) = pipeline.ended(&spec, WAIT).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("failed", Some("contract")),
        "{message}"
    );
    assert!(
        message.contains("Host key verification failed"),
        "{message}"
    );

    // Sudo as root, as the template says: it runs, and the attempt's
    // finished event records it.
    let spec = ssh_job("id-root", json!({}), local_node());
    pipeline.submit(&spec).await;
    let (status, _, message, result) = pipeline.ended(&spec, WAIT).await;
    assert_eq!(status, "succeeded", "{message}");
    assert_eq!(result["sudo_as"], "root");
    assert_eq!(result["argv"][0], "/usr/bin/sudo");
    // The node's sudoers allows the test user /usr/bin/id only: sudo is the
    // node's to enforce as well, and nothing asks for a password.
    let spec = ssh_job("sudo-true", json!({}), local_node());
    pipeline.submit(&spec).await;
    let (status, category, message, _) = pipeline.ended(&spec, WAIT).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("failed", Some("runner_error")),
        "{message}"
    );
}

/// Whether a process runs `/bin/sleep <seconds>` (the node is this host).
fn sleeping(seconds: &str) -> bool {
    let wanted = format!("/bin/sleep\0{seconds}\0").into_bytes();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .any(|entry| {
            std::fs::read(entry.path().join("cmdline")).is_ok_and(|cmdline| cmdline == wanted)
        })
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_cancel_stops_the_remote_command_run_through_sudo(pool: PgPool) {
    let pipeline = ssh_pipeline(&pool).await;
    // As root through sudo, whom the login user cannot signal: the
    // session's hangup reaches it through sudo. (As the login user: the
    // conformance suite.)
    let spec = ssh_job("sleeper-root", json!({"seconds": 478}), local_node());
    pipeline.submit(&spec).await;
    pipeline
        .wait("the remote sleep to start", WAIT, || async {
            sleeping("478")
        })
        .await;
    let attempt = pipeline.attempts(&spec.job_id).await[0].0;
    pipeline.cancel(attempt, 5_000).await;
    let attempts = pipeline.wait_done(&spec.job_id, WAIT).await;
    assert_eq!(attempts[0].1, "cancelled", "{attempts:?}");
    pipeline
        .wait(
            "the remote sleep to be gone",
            Duration::from_secs(10),
            || async { !sleeping("478") },
        )
        .await;
}

/// The conformance suite (`common::conformance`): the long job sleeps on
/// the node for a time of its own; the echo prints the attempt's login
/// key.
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn the_ssh_runner_conforms(pool: PgPool) {
    let mut pipeline = ssh_pipeline(&pool).await;
    // The attempts' logs bundled into the artifact storage, to be scanned.
    pipeline.spawn(
        &["artifact-worker"],
        &[("EXECPLANE_ARTIFACT_GRACE", "300ms")],
    );
    // The attempt's own secret is its login key (template arguments are
    // literals, never secrets): the node prints a copy of it.
    let secret = sshd::user_key();
    let copy = pipeline.dir.join("key");
    std::fs::write(&copy, &secret).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o644)).unwrap();
    let seconds = 501 + uuid::Uuid::new_v4().as_u128() % 99;
    let fixture = common::conformance::Fixture {
        long: common::conformance::Long::twice(
            ssh_job("sleeper", json!({"seconds": seconds}), local_node()),
            vec![format!("/bin/sleep {seconds}")],
        ),
        echo: ssh_job("show-key", json!({}), local_node()),
        secret,
        echo_in_output: true,
        artifacts: pipeline.dir.join("artifacts"),
    };
    common::conformance::suite(RunnerType::Ssh, &pipeline, fixture).await;
}

/// A runner killed -9 mid-command takes the remote command with it (its
/// client dies with its supervisor, the session's stdin ends, the node's
/// watchdog stops the command), and the started, non-idempotent attempt
/// ends `outcome_unknown`, never retried.
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_runner_killed_mid_command_leaves_nothing_running_and_the_attempt_unknown(pool: PgPool) {
    let mut pipeline = ssh_pipeline(&pool).await;
    let mut spec = ssh_job("sleeper", json!({"seconds": 479}), local_node());
    spec.retry.max_attempts = 3;
    pipeline.submit(&spec).await;
    pipeline
        .wait("the remote sleep to start", WAIT, || async {
            sleeping("479")
        })
        .await;
    pipeline
        .wait("the attempt to be running", WAIT, || async {
            pipeline.attempts(&spec.job_id).await[0].1 == "running"
        })
        .await;
    pipeline.signal(SSH_RUNNER, "KILL");
    pipeline
        .wait(
            "the remote sleep to be gone",
            Duration::from_secs(10),
            || async { !sleeping("479") },
        )
        .await;
    let attempts = pipeline.wait_done(&spec.job_id, WAIT).await;
    assert_eq!(attempts.len(), 1, "never retried: {attempts:?}");
    assert_eq!(attempts[0].1, "outcome_unknown", "{attempts:?}");
}

/// Per-target concurrency with the operator's defaults (no `concurrency`
/// section: limit 1 for operations that are not idempotent): twenty
/// `ssh.command.run` at once, ten on `node:127.0.0.1`, ten on
/// `node:localhost` (two keys, one sshd). The log shows no two leases on
/// one key at once, and the two keys side by side.
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn non_idempotent_commands_on_one_node_never_overlap(pool: PgPool) {
    let pipeline = ssh_pipeline(&pool).await;
    let specs: Vec<JobSpec> = (0..20)
        .map(|index| {
            let mut node = local_node();
            if index % 2 == 1 {
                node["address"] = json!("localhost");
            }
            // Ten one at a time on each key take about 20 s on a busy
            // 2-core machine: the schedule_to_start gives them room.
            let mut spec = ssh_job("sleeper", json!({"seconds": 1}), node);
            spec.timeouts.schedule_to_start = execplane::contract::DurationMs::from_secs(90);
            spec.timeouts.schedule_to_close = execplane::contract::DurationMs::from_secs(120);
            spec
        })
        .collect();
    for spec in &specs {
        pipeline.submit(spec).await;
    }
    for spec in &specs {
        let (status, _, message, _) = pipeline.ended(spec, WAIT).await;
        assert_eq!(status, "succeeded", "{message}");
    }
    let jobs: Vec<String> = specs.iter().map(|spec| spec.job_id.clone()).collect();
    let mut by_key = leases::by_key(&pool, &jobs).await;
    assert_eq!(
        by_key.keys().collect::<Vec<_>>(),
        vec!["node:127.0.0.1", "node:localhost"]
    );
    assert!(by_key.values().all(|held| held.len() == 10), "{by_key:?}");
    leases::assert_serial_per_key_parallel_across(&mut by_key, "node:127.0.0.1", "node:localhost");
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn files_go_up_and_come_back_the_same_and_services_and_facts_report_evidence(pool: PgPool) {
    use std::os::unix::fs::PermissionsExt;
    let mut pipeline = ssh_pipeline(&pool).await;
    pipeline.spawn(
        &["artifact-worker"],
        &[("EXECPLANE_ARTIFACT_GRACE", "300ms")],
    );
    let drop = pipeline.dir.join("drop");
    // Binary, every byte value, larger than one SFTP packet.
    let bytes: Vec<u8> = (0..200_000_u32).map(|i| (i * 7 % 256) as u8).collect();
    let reference = pipeline.put_artifact("payload.bin", &bytes);
    let destination = drop.join("payload.bin");
    let spec = ssh_operation(
        "ssh.file.upload",
        json!({"template_id": "upload", "source_artifact": reference,
               "destination": destination, "mode": "0640"}),
    );
    pipeline.submit(&spec).await;
    let (status, category, message, result) = pipeline.ended(&spec, WAIT).await;
    assert_eq!(status, "succeeded", "{category:?} {message} {result}");
    assert_eq!(std::fs::read(&destination).unwrap(), bytes);
    let mode = std::fs::metadata(&destination)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o640);
    assert_eq!(result["nodes"][0]["sha256"], reference, "{result}");
    assert_eq!(result["nodes"][0]["size"], bytes.len());
    // No temporary file left beside it.
    assert_eq!(std::fs::read_dir(&drop).unwrap().count(), 1);

    let spec = ssh_operation(
        "ssh.file.download",
        json!({"template_id": "download", "path": destination}),
    );
    pipeline.submit(&spec).await;
    let (status, category, message, result) = pipeline.ended(&spec, WAIT).await;
    assert_eq!(status, "succeeded", "{category:?} {message} {result}");
    assert_eq!(result["nodes"][0]["sha256"], reference, "{result}");
    assert_eq!(result["nodes"][0]["artifact"], "download-1");
    let attempt = pipeline.attempts(&spec.job_id).await[0].0;
    let digest = reference.trim_start_matches("sha256:");
    let stored = pipeline
        .dir
        .join(format!("artifacts/outputs/{attempt}/{digest}/download-1"));
    assert_eq!(
        std::fs::read(&stored).unwrap(),
        bytes,
        "{}",
        stored.display()
    );

    // Outside the template's root, by traversal or plainly: refused at
    // intake, nothing written. A template for another operation is refused
    // too: the `download` template is no upload's.
    let spec = ssh_operation(
        "ssh.file.upload",
        json!({"template_id": "download", "source_artifact": reference,
               "destination": drop.join("other.bin")}),
    );
    pipeline.submit(&spec).await;
    let (status, category, message, _) = pipeline.ended(&spec, WAIT).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("rejected", Some("policy")),
        "{message}"
    );
    assert!(message.contains("serves ssh.file.download"), "{message}");
    for outside in [
        format!("{}/../escaped.bin", drop.display()),
        "/tmp/escaped.bin".to_owned(),
    ] {
        let spec = ssh_operation(
            "ssh.file.upload",
            json!({"template_id": "upload", "source_artifact": reference, "destination": outside}),
        );
        pipeline.submit(&spec).await;
        let (status, category, message, _) = pipeline.ended(&spec, WAIT).await;
        assert_eq!(
            (status.as_str(), category.as_deref()),
            ("rejected", Some("policy")),
            "{outside}: {message}"
        );
        assert!(message.contains("destination"), "{message}");
    }
    assert!(!pipeline.dir.join("escaped.bin").exists());
    assert!(!std::path::Path::new("/tmp/escaped.bin").exists());
    // A mode with the setuid bit is refused by the runner (as the JobSpec's
    // error, before any connection): nothing is written.
    let spec = ssh_operation(
        "ssh.file.upload",
        json!({"template_id": "upload", "source_artifact": reference,
               "destination": drop.join("suid.bin"), "mode": "4755"}),
    );
    pipeline.submit(&spec).await;
    let (status, category, message, _) = pipeline.ended(&spec, WAIT).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("failed", Some("contract")),
        "{message}"
    );
    assert!(!drop.join("suid.bin").exists());

    // A restart, with the status as its evidence.
    let spec = ssh_operation(
        "ssh.service.restart",
        json!({"template_id": "restart-demo", "service": "demo"}),
    );
    pipeline.submit(&spec).await;
    let (status, category, message, result) = pipeline.ended(&spec, WAIT).await;
    assert_eq!(status, "succeeded", "{category:?} {message} {result}");
    let node = &result["nodes"][0];
    assert_eq!(node["restart_exit_code"], 0, "{result}");
    assert_eq!(node["active"], true);
    let pid = std::fs::read_to_string(pipeline.dir.join("svc/demo.pid")).unwrap();
    assert_eq!(node["status"], format!("demo active (pid {})", pid.trim()));
    assert_eq!(result["status_argv"][1], "status");
    // The restart's own output, per node, as outputs that download.
    let attempt = pipeline.wait_status(&spec.job_id, "succeeded", WAIT).await;
    assert_eq!(
        (node["stdout"].as_str(), node["stderr"].as_str()),
        (Some("node-1.stdout.log"), Some("node-1.stderr.log")),
        "{result}"
    );
    assert_eq!(
        pipeline.download(attempt, "node-1.stdout.log").await,
        b"restarting demo\n"
    );
    assert_eq!(
        pipeline.download(attempt, "node-1.stderr.log").await,
        b"stopped the old demo\n"
    );
    // A service that does not stay up: restarted, not active, a runner error.
    let spec = ssh_operation(
        "ssh.service.restart",
        json!({"template_id": "restart-demo", "service": "broken"}),
    );
    pipeline.submit(&spec).await;
    let (status, category, message, result) = pipeline.ended(&spec, WAIT).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("failed", Some("runner_error")),
        "{message}"
    );
    assert_eq!(result["nodes"][0]["status"], "broken inactive", "{result}");
    // A template without a status command cannot report one: refused.
    let spec = ssh_operation(
        "ssh.service.restart",
        json!({"template_id": "restart-nostatus", "service": "demo"}),
    );
    pipeline.submit(&spec).await;
    let (status, category, message, _) = pipeline.ended(&spec, WAIT).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("failed", Some("policy")),
        "{message}"
    );
    let _ = std::process::Command::new("kill").arg(pid.trim()).status();

    // The node's facts: this host's name and kernel.
    let spec = ssh_operation(
        "ssh.system.fact.collect",
        json!({"template_id": "facts", "facts": ["hostname", "kernel"]}),
    );
    pipeline.submit(&spec).await;
    let (status, category, message, result) = pipeline.ended(&spec, WAIT).await;
    assert_eq!(status, "succeeded", "{category:?} {message} {result}");
    let uname = |flag: &str| {
        let out = std::process::Command::new("uname")
            .arg(flag)
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    let facts = &result["nodes"][0]["facts"];
    assert_eq!(
        facts,
        &json!({"hostname": uname("-n"), "kernel": uname("-r")})
    );
    // What uname printed, as the node's stdout output.
    let attempt = pipeline.wait_status(&spec.job_id, "succeeded", WAIT).await;
    assert_eq!(
        result["nodes"][0]["stdout"], "node-1.stdout.log",
        "{result}"
    );
    let printed = String::from_utf8(pipeline.download(attempt, "node-1.stdout.log").await).unwrap();
    let words: Vec<String> = ["-s", "-n", "-r", "-m"]
        .iter()
        .map(|flag| uname(flag))
        .collect();
    assert_eq!(printed.split_whitespace().collect::<Vec<_>>(), words);
}

/// A work item put straight on the runner's partition, past intake, with
/// a secret reference where the template's name goes, resolving to a
/// template of the operator's that team-a may not use: the runner refuses
/// it before it resolves anything, and the template never runs. (The
/// policy's check cannot read a name that is still a reference; intake
/// refuses such a JobSpec, and now so does the runner.)
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_forged_item_naming_its_template_by_secret_runs_nothing(pool: PgPool) {
    let pipeline = ssh_pipeline(&pool).await;
    let bao = Bao::new();
    bao.put("team-a/name", json!({"template": "not-team-a"}))
        .await;
    let mut spec = ssh_job("argv", json!({}), local_node());
    spec.secret_refs.push(
        serde_json::from_value(
            json!({"name": "name", "mount": "secret", "path": "team-a/name", "key": "template"}),
        )
        .unwrap(),
    );
    spec.inputs["template_id"] = json!({"$secret": "name"});
    spec.inputs.as_object_mut().unwrap().remove("args");
    let instance: String = sqlx::query_scalar(
        "SELECT instance_id FROM runner_instances WHERE runner_type = 'ssh' AND status = 'ready'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    let attempt = pipeline
        .inject_work(execplane::contract::RunnerType::Ssh, &instance, &spec)
        .await;
    match pipeline.final_report(attempt, WAIT).await {
        execplane::contract::ReportBody::Finished {
            category, message, ..
        } => {
            assert_eq!(
                category,
                Some(execplane::contract::FailureCategory::Contract),
                "{message}"
            );
            assert!(message.contains("inputs.template_id"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert!(
        !pipeline.dir.join("out/not-team-a.bin").exists(),
        "the template team-a may not use ran"
    );
}
