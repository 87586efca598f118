//! `execplane validate`: each class of bad JobSpec gets a clear error listing
//! every problem with its field path, exit code 2, and nothing is written.

mod common;

use serde_json::{json, Value};
use sqlx::PgPool;

fn good() -> Value {
    json!({
        "command_id": "9d2b3c4e-1f00-4a5b-8c6d-7e8f9a0b1c2d",
        "job_id": "plan-7/verify",
        "tenant": "team-a",
        "requested_by": "control-plane",
        "operation": "verify.http.endpoint",
        "inputs": {"url": "http://app.example.com:8080/health", "expect": {"status": 200}},
        // Under the tenant's own prefix: `validate` applies the operator's
        // policy (the defaults here) as intake does.
        "secret_refs": [{"name": "api", "mount": "secret", "path": "team-a/api", "key": "token"}]
    })
}

fn with(changes: &[(&str, Value)]) -> Value {
    let mut spec = good();
    for (pointer, value) in changes {
        let (parent, key) = pointer.rsplit_once('/').unwrap();
        let target = if parent.is_empty() {
            &mut spec
        } else {
            spec.pointer_mut(parent).unwrap()
        };
        if value.is_null() {
            target.as_object_mut().unwrap().remove(key);
        } else {
            target[key] = value.clone();
        }
    }
    spec
}

fn validate(pool: Option<&PgPool>, spec: &Value) -> (Option<i32>, String) {
    let dir = std::env::temp_dir().join(format!("execplane-validate-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("job.json");
    std::fs::write(&path, serde_json::to_vec_pretty(spec).unwrap()).unwrap();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_execplane"));
    command.args(["validate", path.to_str().unwrap()]);
    if let Some(pool) = pool {
        command.env("EXECPLANE_DATABASE_URL", common::database_url(pool));
    }
    let output = command.output().unwrap();
    std::fs::remove_dir_all(&dir).ok();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned()
            + &String::from_utf8_lossy(&output.stdout),
    )
}

fn assert_refused(spec: Value, expected: &[&str]) {
    let (code, output) = validate(None, &spec);
    assert_eq!(code, Some(2), "{output}");
    for needle in expected {
        assert!(
            output.contains(needle),
            "`{needle}` missing from:\n{output}"
        );
    }
}

#[test]
fn a_good_spec_passes() {
    let (code, output) = validate(None, &good());
    assert_eq!(code, Some(0), "{output}");
}

#[test]
fn unknown_operation_and_mismatched_inputs() {
    assert_refused(
        with(&[("/operation", json!("verify.telepathy"))]),
        &["operation: unknown operation `verify.telepathy`"],
    );
    assert_refused(
        with(&[("/inputs/port", json!(80))]),
        &["inputs.port: unknown field"],
    );
    assert_refused(
        with(&[("/operation", json!("verify.tcp.connect"))]),
        &[
            "inputs.port: required field is missing",
            "inputs.url: unknown field",
        ],
    );
}

#[test]
fn missing_required_fields_are_all_listed() {
    assert_refused(
        with(&[
            ("/command_id", Value::Null),
            ("/tenant", Value::Null),
            ("/inputs", Value::Null),
        ]),
        &[
            "3 problem(s)",
            "command_id: required field is missing",
            "tenant: required field is missing",
            "inputs: required field is missing",
        ],
    );
}

#[test]
fn timeouts_out_of_bounds_or_inconsistent() {
    assert_refused(
        with(&[(
            "/timeouts",
            json!({"schedule_to_start": "10ms", "start_to_close": "20m", "heartbeat": "2h", "schedule_to_close": "15m"}),
        )]),
        &[
            "timeouts.schedule_to_start: 10ms is out of bounds",
            "timeouts.heartbeat: 2h is out of bounds",
            "timeouts.start_to_close: 20m exceeds schedule_to_close 15m",
        ],
    );
    assert_refused(
        with(&[(
            "/retry",
            json!({"max_attempts": 0, "initial_backoff": "2m", "max_backoff": "1m"}),
        )]),
        &["retry.max_attempts", "retry.initial_backoff"],
    );
}

#[test]
fn literal_secrets_are_refused() {
    assert_refused(
        with(&[(
            "/inputs/headers",
            json!({"Authorization": "Bearer abc", "X-Api-Token": {"$secret": "api"}, "x-client-secret": "s3cr3t"}),
        )]),
        &[
            "inputs.headers.Authorization: a literal where a secret belongs",
            "inputs.headers.x-client-secret: a literal where a secret belongs",
        ],
    );
    let mut postgres = with(&[("/operation", json!("verify.postgres.ready"))]);
    postgres["inputs"] =
        json!({"host": "127.0.0.1", "database": "app", "user": "app", "password": "hunter2"});
    assert_refused(
        postgres,
        &["inputs.password: a literal where a secret belongs"],
    );
}

#[test]
fn policy_classes() {
    let cluster = json!({"name": "prod", "credentials": {"$secret": "api"}});
    let mut delete = with(&[("/operation", json!("kubernetes.manifest.delete"))]);
    delete["inputs"] = json!({"cluster": cluster, "namespace": "apps", "objects": [{"api_version": "v1", "kind": "ConfigMap", "name": "x"}]});
    assert_refused(
        delete,
        &["policy.destructive: kubernetes.manifest.delete deletes objects"],
    );
    let module = json!({"package": {"name": "network", "version": "1.2.0"}});
    let mut apply = with(&[("/operation", json!("opentofu.apply"))]);
    apply["inputs"] = module.clone();
    assert_refused(
        apply,
        &["policy.approved_plan_digest: opentofu.apply needs an approved plan digest"],
    );
    let mut destroy = with(&[("/operation", json!("opentofu.destroy"))]);
    destroy["inputs"] = module;
    assert_refused(
        destroy,
        &["policy.elevated: opentofu.destroy needs an elevated policy"],
    );
    let mut rollback = with(&[("/operation", json!("helm.rollback"))]);
    rollback["inputs"] =
        json!({"cluster": cluster, "release": "web", "namespace": "apps", "revision": 4});
    assert_refused(
        rollback,
        &["policy.explicit_command: helm.rollback runs only as an explicit control-plane command"],
    );
    let mut ssh = with(&[("/operation", json!("ssh.command.run"))]);
    ssh["inputs"] = json!({"args": {"service": "nginx"}});
    assert_refused(
        ssh,
        &["inputs.template_id: ssh operations run allowlisted command templates only"],
    );
    for playbook in ["/etc/ansible/site.yml", "../../site.yml"] {
        let mut ansible = with(&[("/operation", json!("ansible.playbook.run"))]);
        ansible["inputs"] =
            json!({"package": {"name": "site", "version": "3.1.0"}, "playbook": playbook});
        assert_refused(ansible, &["inputs.playbook: must"]);
    }
}

#[test]
fn validate_applies_the_operator_policy_configured_here_as_intake_does() {
    let dir = std::env::temp_dir().join(format!("execplane-validate-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("job.json");
    let spec = with(&[("/tenant", json!("team-b"))]);
    std::fs::write(&path, serde_json::to_vec_pretty(&spec).unwrap()).unwrap();
    let policy = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/policy.yaml");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_execplane"))
        .args(["validate", path.to_str().unwrap()])
        .env("EXECPLANE_POLICY_FILE", policy)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    // team-b may only run verify.tcp.connect, and may read only its own secrets.
    for needle in [
        "operator policy rule `tenants.team-b.operations`",
        "secret_refs[0]",
    ] {
        assert!(
            stderr.contains(needle),
            "`{needle}` missing from:\n{stderr}"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn not_json_at_all() {
    let dir = std::env::temp_dir().join(format!("execplane-validate-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("job.json");
    std::fs::write(&path, "{\"job_id\": ").unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_execplane"))
        .args(["validate", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("not valid JSON at line 1"));
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn validation_writes_nothing(pool: PgPool) {
    // One spec of each class, run with the database configured.
    let cluster = json!({"name": "prod", "credentials": {"$secret": "api"}});
    let module = json!({"package": {"name": "network", "version": "1.2.0"}});
    let classes = [
        with(&[("/operation", json!("helm.explode"))]),
        with(&[("/tenant", Value::Null)]),
        with(&[("/timeouts", json!({"heartbeat": "2h"}))]),
        with(&[("/inputs/headers", json!({"Authorization": "Bearer abc"}))]),
        with(&[
            ("/operation", json!("kubernetes.manifest.delete")),
            (
                "/inputs",
                json!({"cluster": cluster, "namespace": "a", "objects": []}),
            ),
        ]),
        with(&[
            ("/operation", json!("opentofu.destroy")),
            ("/inputs", module),
        ]),
        with(&[
            ("/operation", json!("helm.rollback")),
            (
                "/inputs",
                json!({"cluster": cluster, "release": "w", "namespace": "a", "revision": 1}),
            ),
        ]),
        with(&[
            ("/operation", json!("ssh.command.run")),
            ("/inputs", json!({})),
        ]),
        with(&[
            ("/operation", json!("ansible.playbook.run")),
            (
                "/inputs",
                json!({"package": {"name": "s", "version": "1"}, "playbook": "../x.yml"}),
            ),
        ]),
    ];
    for spec in &classes {
        let (code, output) = validate(Some(&pool), spec);
        assert_eq!(code, Some(2), "{output}");
    }
    for table in ["jobs", "attempts", "attempt_events", "inbox", "outbox"] {
        let rows: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(rows, 0, "{table}");
    }
}
