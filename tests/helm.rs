//! The helm runner with the real helm 3 CLI (scripts/helm.sh) against the
//! real API server (scripts/kubernetes.sh): a chart pinned by digest is
//! rendered without touching the cluster, installed, upgraded, tested (its
//! test pod run to completion by a stand-in kubelet), rolled back only as
//! an explicit command and uninstalled, each with its revision and the
//! rendered manifests; an untrusted chart is refused; the cluster token
//! from OpenBao is nowhere.

mod common;

use std::time::Duration;

use common::bao::Bao;
use common::kube::{self as cluster, resource};
use common::pipeline::{job, Pipeline};
use execplane::contract::{JobSpec, RunnerType};
use serde_json::{json, Value};
use sqlx::PgPool;

const WAIT: Duration = Duration::from_secs(90);

fn helm_bin() -> std::path::PathBuf {
    std::env::var("EXECPLANE_HELM_BIN")
        .map(Into::into)
        .unwrap_or_else(|_| common::stack_dir().join("helm/bin/helm"))
}

/// A chart of the test's own, packaged by helm: a ConfigMap of the
/// `greeting` value, NOTES, and a test hook pod.
fn chart(dir: &std::path::Path) -> Vec<u8> {
    let root = dir.join("chart/demo");
    std::fs::create_dir_all(root.join("templates/tests")).unwrap();
    std::fs::write(
        root.join("Chart.yaml"),
        "apiVersion: v2\nname: demo\nversion: 0.1.0\n",
    )
    .unwrap();
    std::fs::write(root.join("values.yaml"), "greeting: hello\n").unwrap();
    std::fs::write(
        root.join("templates/configmap.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-settings\ndata:\n  greeting: {{ .Values.greeting | quote }}\n",
    )
    .unwrap();
    // Placed wherever the value says: the runner must refuse to install
    // it outside the tenant's namespaces.
    std::fs::write(
        root.join("templates/stray.yaml"),
        "{{- if .Values.elsewhere }}\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: stray\n  namespace: {{ .Values.elsewhere }}\n{{- end }}\n",
    )
    .unwrap();
    // Placed by a merge key after its own namespace: readers of YAML
    // disagree on which wins (helm's client, the merged one), so the
    // runner must not judge it by either.
    std::fs::write(
        root.join("templates/merged.yaml"),
        "{{- if .Values.merged }}\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: merged, namespace: {{ .Release.Namespace }}, <<: {namespace: {{ .Values.merged }}}}\n{{- end }}\n",
    )
    .unwrap();
    // Placed by the dice, with a fresh token each render: what is
    // installed must be what was checked, never a second render.
    std::fs::write(
        root.join("templates/roll.yaml"),
        "{{- if .Values.roll }}\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-roll\n  namespace: {{ if eq (randInt 0 2) 0 }}{{ .Release.Namespace }}{{ else }}kube-system{{ end }}\ndata:\n  token: {{ randAlphaNum 24 | quote }}\n{{- end }}\n",
    )
    .unwrap();
    // A Job no kubelet runs: it never completes.
    std::fs::write(
        root.join("templates/job.yaml"),
        "{{- if .Values.job }}\napiVersion: batch/v1\nkind: Job\nmetadata:\n  name: {{ .Release.Name }}-migrate\nspec:\n  backoffLimit: 0\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n        - name: migrate\n          image: busybox\n          command: [\"true\"]\n{{- end }}\n",
    )
    .unwrap();
    // Not a definition, in crds/ (which helm installs as it is, untemplated,
    // where the tenant may act cluster-wide).
    std::fs::create_dir_all(root.join("crds")).unwrap();
    std::fs::write(
        root.join("crds/escape.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: crd-escape\n  namespace: kube-system\n",
    )
    .unwrap();
    std::fs::write(
        root.join("templates/NOTES.txt"),
        "{{ .Release.Name }} says {{ .Values.greeting }}.\n",
    )
    .unwrap();
    std::fs::write(
        root.join("templates/tests/check.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {{ .Release.Name }}-check\n  annotations:\n    \"helm.sh/hook\": test\nspec:\n  restartPolicy: Never\n  containers:\n    - name: check\n      image: busybox\n      command: [\"true\"]\n",
    )
    .unwrap();
    let out = dir.join("chart");
    let packaged = std::process::Command::new(helm_bin())
        .env("HOME", dir)
        .args([
            "package",
            root.to_str().unwrap(),
            "-d",
            out.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(packaged.status.success(), "{packaged:?}");
    std::fs::read(out.join("demo-0.1.0.tgz")).unwrap()
}

/// The tenant's policy for `namespace`, trusting charts of `sources`, and
/// the demo chart's 0.1 versions of `market` on the marketplace.
fn policy(namespace: &str, sources: &[&str], market: Option<&str>) -> String {
    let marketplace = market.map_or(String::new(), |repository| {
        format!(
            "helm_marketplace:\n  - {{repository: \"{repository}\", chart: demo, versions: \">=0.1.0, <0.2.0\"}}\n"
        )
    });
    format!(
        r#"
{marketplace}
clusters:
  local:
    server: {server}
    ca_file: {ca}
tenants:
  team-a:
    operations: ["helm.*"]
    grants: [destructive, explicit_command]
    secret_prefixes: ["secret/team-a/"]
    kubernetes:
      clusters:
        local:
          namespaces: ["{namespace}"]
    helm:
      chart_sources: {sources}
      marketplace: true
"#,
        server = cluster::SERVER,
        ca = cluster::ca_file().display(),
        sources = serde_json::to_string(sources).unwrap(),
    )
}

fn helm_job(operation: &str, mut inputs: Value, extra: Value) -> JobSpec {
    if operation != "helm.template" {
        inputs["cluster"] = json!({"name": "local", "credentials": {"$secret": "kube"}});
    }
    let mut extra = extra;
    if extra.get("secret_refs").is_none() {
        extra["secret_refs"] =
            json!([{"name": "kube", "mount": "secret", "path": "team-a/kube", "key": "token"}]);
    }
    extra["retry"] = json!({"max_attempts": 1});
    extra["timeouts"] = json!({"schedule_to_start": "20s", "start_to_close": "60s", "heartbeat": "4s", "schedule_to_close": "90s"});
    job(operation, inputs, extra)
}

/// The dispatcher, relay and helm runner on the test policy for
/// `namespace`, the cluster token in OpenBao, the chart stored: the
/// pipeline and the chart's reference.
async fn helm_pipeline(pool: &PgPool, namespace: &str) -> (Pipeline, Value) {
    helm_pipeline_trusting(pool, namespace, None).await
}

/// [`helm_pipeline`], whose policy puts the demo chart of `repository` on
/// the operator's marketplace (the tenant's own sources do not name it).
async fn helm_pipeline_trusting(
    pool: &PgPool,
    namespace: &str,
    repository: Option<&str>,
) -> (Pipeline, Value) {
    helm_pipeline_with(pool, namespace, repository, false).await
}

/// [`helm_pipeline_trusting`], where the tenant may act cluster-wide or not.
async fn helm_pipeline_with(
    pool: &PgPool,
    namespace: &str,
    repository: Option<&str>,
    cluster_scoped: bool,
) -> (Pipeline, Value) {
    let mut pipeline = Pipeline::new(pool).await;
    let archive = chart(&pipeline.dir);
    let digest = pipeline.put_artifact("demo-0.1.0.tgz", &archive);
    let policy_file = pipeline.dir.join("policy.yaml");
    let mut text = policy(namespace, &[digest.as_str()], repository);
    if cluster_scoped {
        text = text.replace(
            "          namespaces: [",
            "          cluster_scoped: true\n          namespaces: [",
        );
    }
    std::fs::write(&policy_file, text).unwrap();
    pipeline.set_env("EXECPLANE_POLICY_FILE", policy_file.to_str().unwrap());
    let bao = Bao::new();
    bao.put("team-a/kube", json!({"token": cluster::admin_token()}))
        .await;
    pipeline.spawn(&["dispatcher"], &[]);
    pipeline.spawn(&["relay"], &[]);
    let storage = pipeline.dir.join("artifacts");
    let helm = helm_bin();
    pipeline.spawn(
        &["runner", "helm"],
        &[
            ("EXECPLANE_VAULT_ADDR", bao.address.as_str()),
            ("EXECPLANE_VAULT_TOKEN", bao.root.as_str()),
            ("EXECPLANE_ARTIFACT_DIR", storage.to_str().unwrap()),
            ("EXECPLANE_HELM_BIN", helm.to_str().unwrap()),
        ],
    );
    pipeline.wait_runners(1).await;
    let chart_ref =
        json!({"repository": "artifact", "name": "demo", "version": "0.1.0", "digest": digest});
    (pipeline, chart_ref)
}

async fn greeting(admin: &kube::Client, namespace: &str) -> Option<String> {
    cluster::get(
        admin,
        namespace,
        &resource("v1", "ConfigMap", "configmaps"),
        "web-settings",
    )
    .await
    .and_then(|object| object["data"]["greeting"].as_str().map(str::to_owned))
}

/// A chart's `crds/`, installed where the tenant may act cluster-wide,
/// holds CustomResourceDefinitions only: helm creates whatever is there,
/// as it is, past the judge of the render.
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_chart_s_crds_hold_definitions_only(pool: PgPool) {
    let admin = cluster::admin();
    let namespace = cluster::namespace(&admin).await;
    let (pipeline, chart_ref) = helm_pipeline_with(&pool, &namespace, None, true).await;
    let install = helm_job(
        "helm.install",
        json!({"release": "crd", "namespace": namespace, "chart": chart_ref}),
        json!({}),
    );
    pipeline.submit(&install).await;
    let (status, category, message, _) = pipeline.ended(&install, WAIT).await;
    let configmaps = resource("v1", "ConfigMap", "configmaps");
    let escaped = cluster::get(&admin, "kube-system", &configmaps, "crd-escape").await;
    assert!(escaped.is_none(), "installed in kube-system: {escaped:?}");
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("failed", Some("policy")),
        "{message}"
    );
    assert!(message.contains("crds/"), "{message}");
}

/// `wait_for_jobs` waits for the release's Jobs, for the JobSpec's own
/// `timeout` at most: a Job that never completes fails the install as
/// `verification_failed` long before the attempt's deadline; `wait` alone
/// does not wait for it.
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn an_install_waits_for_its_jobs_for_the_timeout_it_names(pool: PgPool) {
    let admin = cluster::admin();
    let namespace = cluster::namespace(&admin).await;
    let (pipeline, chart_ref) = helm_pipeline(&pool, &namespace).await;
    let install = |release: &str, wait: Value| {
        let mut inputs = json!({"release": release, "namespace": namespace, "chart": chart_ref,
                                "values": {"job": true}, "timeout": "5s"});
        inputs
            .as_object_mut()
            .unwrap()
            .extend(wait.as_object().unwrap().clone());
        helm_job("helm.install", inputs, json!({}))
    };
    let started = std::time::Instant::now();
    let jobs = install("jobs", json!({"wait_for_jobs": true}));
    pipeline.submit(&jobs).await;
    let (status, category, message, _) = pipeline.ended(&jobs, WAIT).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("failed", Some("verification_failed")),
        "{category:?} {message}"
    );
    assert!(message.contains("deadline exceeded"), "{message}");
    // The attempt's start_to_close is 60 s: helm gave up at the 5 s asked.
    assert!(
        started.elapsed() < Duration::from_secs(45),
        "{:?}",
        started.elapsed()
    );
    let plain = install("plain", json!({"wait": true}));
    pipeline.submit(&plain).await;
    let (status, _, message, _) = pipeline.ended(&plain, WAIT).await;
    assert_eq!(status, "succeeded", "{message}");
}

/// A value the runner generates (a `secret_refs` entry with `generate`):
/// created in the tenant's Vault path, handed to the chart as a value,
/// kept by the next upgrade, and on no topic, in no table, event or
/// stored artifact.
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_generated_secret_reaches_the_release_and_nothing_else(pool: PgPool) {
    let admin = cluster::admin();
    let namespace = cluster::namespace(&admin).await;
    let (pipeline, chart_ref) = helm_pipeline(&pool, &namespace).await;
    let path = format!("team-a/generated-{}", uuid::Uuid::new_v4().simple());
    let refs = json!({"secret_refs": [
        {"name": "kube", "mount": "secret", "path": "team-a/kube", "key": "token"},
        {"name": "greeting", "mount": "secret", "path": path, "key": "greeting",
         "generate": {"length": 48}},
    ]});
    let release = json!({"release": "web", "namespace": namespace, "chart": chart_ref,
                         "values": {"greeting": {"$secret": "greeting"}}});
    for operation in ["helm.install", "helm.upgrade"] {
        let spec = helm_job(operation, release.clone(), refs.clone());
        pipeline.submit(&spec).await;
        let (status, _, message, _) = pipeline.ended(&spec, WAIT).await;
        assert_eq!(status, "succeeded", "{operation}: {message}");
    }
    let (_, stored) = Bao::new()
        .call(reqwest::Method::GET, &format!("secret/data/{path}"), None)
        .await;
    let generated = stored["data"]["data"]["greeting"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(generated.len(), 48);
    assert_eq!(
        greeting(&admin, &namespace).await.as_deref(),
        Some(generated.as_str())
    );
    common::leaks::assert_secret_nowhere(
        &pipeline,
        &pool,
        &generated,
        RunnerType::Helm,
        &pipeline.dir.join("artifacts"),
    )
    .await;
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_release_goes_through_its_life_with_revisions_and_rendered_manifests(pool: PgPool) {
    let admin = cluster::admin();
    let namespace = cluster::namespace(&admin).await;
    let (pipeline, chart_ref) = helm_pipeline(&pool, &namespace).await;
    let release = |greeting: &str| {
        json!({"release": "web", "namespace": namespace, "chart": chart_ref,
               "values": {"greeting": greeting}})
    };
    let run = |spec: JobSpec| {
        let pipeline = &pipeline;
        async move {
            pipeline.submit(&spec).await;
            pipeline.ended(&spec, WAIT).await
        }
    };

    // A value that places an object outside the tenant's namespaces: the
    // rendered chart is checked before helm installs anything.
    let mut stray = release("one");
    stray["values"]["elsewhere"] = json!("kube-system");
    let (status, category, message, _) = run(helm_job("helm.install", stray, json!({}))).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("failed", Some("policy")),
        "{message}"
    );
    assert!(
        message.contains("stray") && message.contains("kube-system"),
        "{message}"
    );
    let mut merged = release("one");
    merged["values"]["merged"] = json!("kube-system");
    let (status, category, message, _) = run(helm_job("helm.install", merged, json!({}))).await;
    let configmaps = resource("v1", "ConfigMap", "configmaps");
    let escaped = cluster::get(&admin, "kube-system", &configmaps, "merged").await;
    assert!(escaped.is_none(), "installed in kube-system: {escaped:?}");
    // Refused as a render the runner cannot read, as an alias bomb is.
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("failed", Some("runner_error")),
        "{message}"
    );
    assert!(message.contains("merge key"), "{message}");
    assert_eq!(
        greeting(&admin, &namespace).await,
        None,
        "nothing installed"
    );

    // Rendered without a cluster: the manifests, nothing applied.
    let (status, _, message, result) =
        run(helm_job("helm.template", release("hi"), json!({}))).await;
    assert_eq!(status, "succeeded", "{message}");
    assert_eq!(result["manifests"], "rendered-manifests.yaml");
    assert!(
        result["objects"]
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o["kind"] == "ConfigMap" && o["name"] == "web-settings"),
        "{result}"
    );
    assert_eq!(result["revision"], Value::Null);
    assert_eq!(
        greeting(&admin, &namespace).await,
        None,
        "template touches no cluster"
    );

    let (status, _, message, result) =
        run(helm_job("helm.install", release("one"), json!({}))).await;
    assert_eq!(status, "succeeded", "{message}");
    assert_eq!(
        (result["revision"].as_u64(), result["status"].as_str()),
        (Some(1), Some("deployed")),
        "{result}"
    );
    assert_eq!(result["notes"], "web says one.\n");
    assert_eq!(greeting(&admin, &namespace).await.as_deref(), Some("one"));

    let (status, _, message, result) =
        run(helm_job("helm.upgrade", release("two"), json!({}))).await;
    assert_eq!(status, "succeeded", "{message}");
    assert_eq!(result["revision"], 2, "{result}");
    assert_eq!(greeting(&admin, &namespace).await.as_deref(), Some("two"));

    // The test hook's pod, run to completion by a stand-in kubelet.
    let kubelet = {
        let (admin, namespace) = (admin.clone(), namespace.clone());
        tokio::spawn(async move {
            loop {
                cluster::complete_test_pods(&admin, &namespace).await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let reference = json!({"release": "web", "namespace": namespace});
    let (status, _, message, result) =
        run(helm_job("helm.test", reference.clone(), json!({}))).await;
    kubelet.abort();
    assert_eq!(status, "succeeded", "{message}");
    assert_eq!(result["tests"][0]["name"], "web-check", "{result}");
    assert_eq!(result["tests"][0]["phase"], "Succeeded", "{result}");

    // Rollback: only as an explicit control-plane command.
    let rollback = |explicit: bool| {
        let mut spec = helm_job(
            "helm.rollback",
            json!({"release": "web", "namespace": namespace, "revision": 1}),
            json!({"policy": {"explicit_command": true}}),
        );
        spec.policy.explicit_command = explicit;
        spec
    };
    let (status, category, message, _) = run(rollback(false)).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("rejected", Some("policy")),
        "{message}"
    );
    assert_eq!(greeting(&admin, &namespace).await.as_deref(), Some("two"));
    // Revision 0 is the latest to `helm get` and the one before it to
    // `helm rollback`: what is checked would not be what is rolled back to.
    let mut latest = rollback(true);
    latest.inputs["revision"] = json!(0);
    let (status, category, message, _) = run(latest).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("failed", Some("contract")),
        "{message}"
    );
    let (status, _, message, result) = run(rollback(true)).await;
    assert_eq!(status, "succeeded", "{message}");
    assert_eq!(result["revision"], 3, "{result}");
    assert_eq!(greeting(&admin, &namespace).await.as_deref(), Some("one"));

    // A chart whose every render differs: eight installs, each either
    // refused (the checked render was outside) or installed as checked;
    // never an object in kube-system.
    let configmaps = resource("v1", "ConfigMap", "configmaps");
    for index in 0..8 {
        let name = format!("roll-{index}");
        let mut inputs = release("dice");
        inputs["release"] = json!(name);
        inputs["values"]["roll"] = json!(true);
        let (status, category, message, result) =
            run(helm_job("helm.install", inputs, json!({}))).await;
        let placed = cluster::get(&admin, &namespace, &configmaps, &format!("{name}-roll")).await;
        match (status.as_str(), category.as_deref()) {
            ("succeeded", _) => {
                assert!(
                    placed.is_some(),
                    "{name}: installed, but not here: {result}"
                );
            }
            ("failed", Some("policy")) => {
                assert!(message.contains("kube-system"), "{message}");
                assert!(placed.is_none(), "{name}: refused, yet installed");
            }
            other => panic!("{name}: {other:?}: {message}"),
        }
        assert!(
            cluster::get(&admin, "kube-system", &configmaps, &format!("{name}-roll"))
                .await
                .is_none(),
            "{name}: a render that was never checked was installed in kube-system"
        );
    }

    // An untrusted chart: another digest than the policy's.
    let mut untrusted = release("x");
    untrusted["chart"]["digest"] = json!(format!("sha256:{}", "0".repeat(64)));
    let (status, category, message, _) = run(helm_job("helm.install", untrusted, json!({}))).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("rejected", Some("policy")),
        "{message}"
    );
    assert!(message.contains("helm.chart_sources"), "{message}");

    let (status, _, message, result) = run(helm_job(
        "helm.uninstall",
        reference,
        json!({"policy": {"destructive": true}}),
    ))
    .await;
    assert_eq!(status, "succeeded", "{message}");
    assert_eq!(result["status"], "uninstalled");
    assert_eq!(greeting(&admin, &namespace).await, None);

    common::leaks::assert_secret_nowhere(
        &pipeline,
        &pool,
        &cluster::admin_token(),
        execplane::contract::RunnerType::Helm,
        &pipeline.dir,
    )
    .await;
}

/// A chart repository on loopback that answers only to HTTP basic auth
/// as `login` (`user:password`): the files of `dir` under `/charts/`. Its
/// URL.
fn private_repository(dir: std::path::PathBuf, login: &str) -> String {
    use base64::Engine;
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/charts", listener.local_addr().unwrap());
    let expected = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(login)
    );
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request = String::new();
            let _ = reader.read_line(&mut request);
            let path = request.split_whitespace().nth(1).unwrap_or("/").to_owned();
            let mut authorized = false;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some((name, value)) = line.split_once(':') {
                    authorized |=
                        name.eq_ignore_ascii_case("authorization") && value.trim() == expected;
                }
            }
            let file = path
                .strip_prefix("/charts/")
                .filter(|name| !name.contains(".."))
                .and_then(|name| std::fs::read(dir.join(name)).ok());
            let (status, body) = match (authorized, file) {
                (false, _) => ("401 Unauthorized", Vec::new()),
                (true, None) => ("404 Not Found", Vec::new()),
                (true, Some(bytes)) => ("200 OK", bytes),
            };
            let mut stream = stream;
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\nWWW-Authenticate: Basic realm=\"charts\"\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(&body);
        }
    });
    url
}

/// A chart from a password-protected repository installs with its login
/// from OpenBao (a wrong password fails as `contract`, saying so), its
/// values from two artifacts merged in order; the stored manifests output
/// is what the cluster holds; `helm.test` of it (no test hook) fails
/// unless allowed; the password is nowhere.
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_private_chart_installs_with_its_login_and_values_from_artifacts(pool: PgPool) {
    let admin = cluster::admin();
    let namespace = cluster::namespace(&admin).await;
    let dir =
        std::env::temp_dir().join(format!("execplane-repo-{}", uuid::Uuid::new_v4().simple()));
    let served = dir.join("served");
    std::fs::create_dir_all(&served).unwrap();
    // The demo chart without its test hook.
    chart(&dir);
    std::fs::remove_dir_all(dir.join("chart/demo/templates/tests")).unwrap();
    let packaged = std::process::Command::new(helm_bin())
        .env("HOME", &dir)
        .args(["package", dir.join("chart/demo").to_str().unwrap()])
        .args(["-d", served.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(packaged.status.success(), "{packaged:?}");
    let password = format!("pw-{}", uuid::Uuid::new_v4().simple());
    let url = private_repository(served.clone(), &format!("ci:{password}"));
    let indexed = std::process::Command::new(helm_bin())
        .env("HOME", &dir)
        .args(["repo", "index", served.to_str().unwrap(), "--url", &url])
        .output()
        .unwrap();
    assert!(indexed.status.success(), "{indexed:?}");

    let (mut pipeline, _) = helm_pipeline_trusting(&pool, &namespace, Some(&url)).await;
    pipeline.spawn(
        &["artifact-worker"],
        &[("EXECPLANE_ARTIFACT_GRACE", "300ms")],
    );
    let bao = Bao::new();
    bao.put(
        "team-a/repo",
        json!({"password": password, "wrong": "not-it"}),
    )
    .await;
    let first = pipeline.put_artifact("first.yaml", b"greeting: first\n");
    let second = pipeline.put_artifact("second.yaml", b"greeting: second\n");
    let install = |key: &str| {
        let inputs = json!({
            "release": "web", "namespace": namespace,
            "chart": {"repository": url, "name": "demo", "version": "0.1.0",
                      "login": {"username": "ci", "password": {"$secret": "repo"}}},
            "values_artifacts": [first, second],
        });
        let refs = json!([
            {"name": "kube", "mount": "secret", "path": "team-a/kube", "key": "token"},
            {"name": "repo", "mount": "secret", "path": "team-a/repo", "key": key},
        ]);
        helm_job("helm.install", inputs, json!({"secret_refs": refs}))
    };

    // The marketplace admits the chart's 0.1 versions only.
    let mut newer = install("password");
    newer.inputs["chart"]["version"] = json!("0.2.0");
    pipeline.submit(&newer).await;
    let (status, category, message, _) = pipeline.ended(&newer, WAIT).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("rejected", Some("policy")),
        "{message}"
    );
    assert!(message.contains("nor on the marketplace"), "{message}");

    let wrong = install("wrong");
    pipeline.submit(&wrong).await;
    let (status, category, message, _) = pipeline.ended(&wrong, WAIT).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("failed", Some("contract")),
        "{message}"
    );
    assert!(
        message.contains("inputs.chart.login") && message.contains("refused the login"),
        "{message}"
    );
    assert_eq!(greeting(&admin, &namespace).await, None);

    let right = install("password");
    pipeline.submit(&right).await;
    let (status, _, message, result) = pipeline.ended(&right, WAIT).await;
    assert_eq!(status, "succeeded", "{message}");
    assert_eq!(result["chart"], "demo-0.1.0");
    // The second artifact's value, merged over the first's.
    assert_eq!(
        greeting(&admin, &namespace).await.as_deref(),
        Some("second")
    );

    // The manifests output, as a consumer downloads it, holds what the
    // cluster holds.
    let attempt = pipeline.wait_status(&right.job_id, "succeeded", WAIT).await;
    let manifests = pipeline.download(attempt, "rendered-manifests.yaml").await;
    let manifests = String::from_utf8(manifests).unwrap();
    let configmaps = resource("v1", "ConfigMap", "configmaps");
    let held = cluster::get(&admin, &namespace, &configmaps, "web-settings")
        .await
        .expect("the release's ConfigMap");
    let rendered: Vec<Value> = manifests
        .split("\n---")
        .filter_map(|document| serde_yaml::from_str::<Value>(document).ok())
        .filter(|object| object["kind"] == "ConfigMap")
        .collect();
    assert_eq!(rendered.len(), 1, "{manifests}");
    assert_eq!(rendered[0]["metadata"]["name"], "web-settings");
    assert_eq!(rendered[0]["data"], held["data"], "{manifests}");

    // Another tenant's values file, whose digest a tenant learnt: refused
    // before helm reads it, and nothing changes.
    let theirs = pipeline.put_artifact_for("team-b", "theirs.yaml", b"greeting: theirs\n");
    let mut stolen = install("password");
    stolen.inputs["values_artifacts"] = json!([theirs]);
    pipeline.submit(&stolen).await;
    let (status, category, message, _) = pipeline.ended(&stolen, WAIT).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("failed", Some("policy")),
        "{message}"
    );
    assert!(message.contains("inputs.values_artifacts"), "{message}");
    assert_eq!(
        greeting(&admin, &namespace).await.as_deref(),
        Some("second")
    );

    // Its chart has no test hook: helm.test verified nothing, and fails
    // for it unless the JobSpec allows that.
    for allowed in [false, true] {
        let test = helm_job(
            "helm.test",
            json!({"release": "web", "namespace": namespace, "allow_no_tests": allowed}),
            json!({}),
        );
        pipeline.submit(&test).await;
        let (status, category, message, _) = pipeline.ended(&test, WAIT).await;
        let expected = if allowed {
            ("succeeded", None)
        } else {
            ("failed", Some("verification_failed"))
        };
        assert_eq!(
            (status.as_str(), category.as_deref()),
            expected,
            "{message}"
        );
        assert!(message.contains("no test hooks"), "{message}");
    }

    common::leaks::assert_secret_nowhere(
        &pipeline,
        &pool,
        &password,
        RunnerType::Helm,
        &pipeline.dir,
    )
    .await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A chart pushed to the stack's password-protected OCI registry (a real
/// CNCF distribution, scripts/registry.sh) installs with its login by
/// Vault reference, written to the attempt's own registry configuration; a
/// wrong password is `contract`, saying the registry refused the login.
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_chart_from_a_password_protected_oci_registry_installs(pool: PgPool) {
    let registry =
        std::env::var("EXECPLANE_TEST_REGISTRY").unwrap_or_else(|_| "127.0.0.1:5000".into());
    let password_file = std::env::var("EXECPLANE_TEST_REGISTRY_PASSWORD_FILE")
        .expect("EXECPLANE_TEST_REGISTRY_PASSWORD_FILE (scripts/registry.sh)");
    let password = std::fs::read_to_string(password_file)
        .unwrap()
        .trim()
        .to_owned();
    let admin = cluster::admin();
    let namespace = cluster::namespace(&admin).await;
    let dir = std::env::temp_dir().join(format!("execplane-oci-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    chart(&dir);
    // Pushed with a login of the test's own (never the runner's).
    let repository = format!("oci://{registry}/t-{}", uuid::Uuid::new_v4().simple());
    let helm = |args: &[&str], stdin: Option<&str>| {
        use std::io::Write;
        let mut child = std::process::Command::new(helm_bin())
            .env("HOME", &dir)
            .env("HELM_REGISTRY_CONFIG", dir.join("registry.json"))
            .env("DOCKER_CONFIG", dir.join("docker"))
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.unwrap_or_default().as_bytes())
            .unwrap();
        let output = child.wait_with_output().unwrap();
        assert!(output.status.success(), "helm {args:?}: {output:?}");
    };
    helm(
        &[
            "registry",
            "login",
            &registry,
            "--username",
            "execplane-ci",
            "--password-stdin",
        ],
        Some(&password),
    );
    let archive = dir.join("chart/demo-0.1.0.tgz");
    helm(&["push", archive.to_str().unwrap(), &repository], None);

    let (pipeline, _) = helm_pipeline_trusting(&pool, &namespace, Some(&repository)).await;
    let bao = Bao::new();
    bao.put(
        "team-a/registry",
        json!({"password": password, "wrong": "not-it"}),
    )
    .await;
    let install = |key: &str| {
        let inputs = json!({
            "release": "oci", "namespace": namespace, "values": {"greeting": "from-oci"},
            "chart": {"repository": repository, "name": "demo", "version": "0.1.0",
                      "login": {"username": "execplane-ci", "password": {"$secret": "registry"}}},
        });
        let refs = json!([
            {"name": "kube", "mount": "secret", "path": "team-a/kube", "key": "token"},
            {"name": "registry", "mount": "secret", "path": "team-a/registry", "key": key},
        ]);
        helm_job("helm.install", inputs, json!({"secret_refs": refs}))
    };
    let wrong = install("wrong");
    pipeline.submit(&wrong).await;
    let (status, category, message, _) = pipeline.ended(&wrong, WAIT).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("failed", Some("contract")),
        "{message}"
    );
    assert!(
        message.contains("inputs.chart.login") && message.contains("refused the login"),
        "{message}"
    );
    let right = install("password");
    pipeline.submit(&right).await;
    let (status, _, message, result) = pipeline.ended(&right, WAIT).await;
    assert_eq!(status, "succeeded", "{message}");
    assert_eq!(result["chart"], "demo-0.1.0");
    let configmaps = resource("v1", "ConfigMap", "configmaps");
    let held = cluster::get(&admin, &namespace, &configmaps, "oci-settings")
        .await
        .expect("the release's ConfigMap");
    assert_eq!(held["data"]["greeting"], "from-oci");
    common::leaks::assert_secret_nowhere(
        &pipeline,
        &pool,
        &password,
        RunnerType::Helm,
        &pipeline.dir,
    )
    .await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A repository that takes only a client certificate its CA signed, over
/// TLS with a CA of its own: the chart installs with the login's
/// certificate, key and CA (each by Vault reference, written to 0600 files
/// the attempt's repository configuration names); without the
/// certificate the repository refuses the handshake, and that is
/// `contract`.
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_chart_from_a_repository_that_wants_a_client_certificate_installs(pool: PgPool) {
    let admin = cluster::admin();
    let namespace = cluster::namespace(&admin).await;
    let dir =
        std::env::temp_dir().join(format!("execplane-mtls-{}", uuid::Uuid::new_v4().simple()));
    let served = dir.join("served");
    std::fs::create_dir_all(&served).unwrap();
    chart(&dir);
    std::fs::copy(
        dir.join("chart/demo-0.1.0.tgz"),
        served.join("demo-0.1.0.tgz"),
    )
    .unwrap();
    let openssl = |args: &[&str]| {
        let output = std::process::Command::new("openssl")
            .current_dir(&dir)
            .args(args)
            .output()
            .unwrap();
        assert!(output.status.success(), "openssl {args:?}: {output:?}");
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    openssl(
        &[
            &["req", "-x509"][..],
            &ec,
            &[
                "-days",
                "2",
                "-subj",
                "/CN=test-ca",
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
            ],
        ]
        .concat(),
    );
    for (name, extension) in [
        ("server", "subjectAltName=IP:127.0.0.1"),
        ("client", "extendedKeyUsage=clientAuth"),
    ] {
        openssl(
            &[
                &["req"][..],
                &ec,
                &[
                    "-subj",
                    &format!("/CN={name}"),
                    "-keyout",
                    &format!("{name}.key"),
                    "-out",
                    &format!("{name}.csr"),
                ],
            ]
            .concat(),
        );
        std::fs::write(dir.join(format!("{name}.ext")), extension).unwrap();
        openssl(&[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            &format!("{name}.ext"),
            "-out",
            &format!("{name}.pem"),
        ]);
    }
    let mut server = std::process::Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/support/mtls_repository.py"
        ))
        .args([
            &served,
            &dir.join("server.pem"),
            &dir.join("server.key"),
            &dir.join("ca.pem"),
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let port = {
        use std::io::BufRead;
        let mut line = String::new();
        std::io::BufReader::new(server.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        line.trim().to_owned()
    };
    let url = format!("https://127.0.0.1:{port}");
    let indexed = std::process::Command::new(helm_bin())
        .env("HOME", &dir)
        .args(["repo", "index", served.to_str().unwrap(), "--url", &url])
        .output()
        .unwrap();
    assert!(indexed.status.success(), "{indexed:?}");

    let (pipeline, _) = helm_pipeline_trusting(&pool, &namespace, Some(&url)).await;
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
    let bao = Bao::new();
    bao.put(
        "team-a/mtls",
        json!({"cert": read("client.pem"), "key": read("client.key"), "ca": read("ca.pem")}),
    )
    .await;
    let install = |login: Value| {
        let inputs = json!({
            "release": "mtls", "namespace": namespace, "values": {"greeting": "over-mtls"},
            "chart": {"repository": url, "name": "demo", "version": "0.1.0", "login": login},
        });
        let reference = |name: &str| json!({"name": name, "mount": "secret", "path": "team-a/mtls", "key": name});
        let refs = json!([
            {"name": "kube", "mount": "secret", "path": "team-a/kube", "key": "token"},
            reference("cert"), reference("key"), reference("ca"),
        ]);
        helm_job("helm.install", inputs, json!({"secret_refs": refs}))
    };
    let anonymous = install(json!({"ca": {"$secret": "ca"}}));
    pipeline.submit(&anonymous).await;
    let (status, category, message, _) = pipeline.ended(&anonymous, WAIT).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("failed", Some("contract")),
        "{message}"
    );
    assert!(message.contains("inputs.chart.login"), "{message}");
    let certified = install(json!({
        "client_cert": {"$secret": "cert"}, "client_key": {"$secret": "key"}, "ca": {"$secret": "ca"}
    }));
    pipeline.submit(&certified).await;
    let (status, _, message, result) = pipeline.ended(&certified, WAIT).await;
    assert_eq!(status, "succeeded", "{message}");
    assert_eq!(result["chart"], "demo-0.1.0");
    let held = cluster::get(
        &admin,
        &namespace,
        &resource("v1", "ConfigMap", "configmaps"),
        "mtls-settings",
    )
    .await
    .expect("the release's ConfigMap");
    assert_eq!(held["data"]["greeting"], "over-mtls");
    common::leaks::assert_secret_nowhere(
        &pipeline,
        &pool,
        read("client.key").lines().nth(1).unwrap(),
        RunnerType::Helm,
        &pipeline.dir,
    )
    .await;
    let _ = server.kill();
    let _ = server.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every README example under `examples/helm` runs, in order, to the end
/// the README's table gives it, on the local API server under the rendered
/// demo policy (the demo chart packaged and stored by scripts/examples.sh).
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn the_helm_examples_run_to_the_end_the_readme_gives_them(pool: PgPool) {
    let helm = helm_bin();
    // A run stopped between the examples' install and their uninstall left
    // the release behind, and every later install would refuse its name.
    let install: Value = serde_json::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/helm/2-install.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let cleared = std::process::Command::new(&helm)
        .args(["uninstall", "--ignore-not-found", "--wait", "--namespace"])
        .arg(install["inputs"]["namespace"].as_str().unwrap())
        .arg(install["inputs"]["release"].as_str().unwrap())
        .env("HELM_KUBEAPISERVER", cluster::SERVER)
        .env("HELM_KUBETOKEN", cluster::admin_token())
        .env("HELM_KUBECAFILE", cluster::ca_file())
        .output()
        .unwrap();
    assert!(
        cleared.status.success(),
        "{}",
        String::from_utf8_lossy(&cleared.stderr)
    );
    common::examples::run_readme_examples(
        &pool,
        "helm",
        &["helm"],
        &[("EXECPLANE_HELM_BIN", helm.to_str().unwrap())],
    )
    .await;
}

/// The conformance suite (`common::conformance`): the long job is
/// `helm test` of a release whose test pod never completes (no kubelet
/// runs it); the echo renders a chart with a Vault secret as a value.
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn the_helm_runner_conforms(pool: PgPool) {
    let admin = cluster::admin();
    let namespace = cluster::namespace(&admin).await;
    let (mut pipeline, chart_ref) = helm_pipeline(&pool, &namespace).await;
    pipeline.spawn(
        &["artifact-worker"],
        &[("EXECPLANE_ARTIFACT_GRACE", "300ms")],
    );
    let secret = format!("helm-{}", uuid::Uuid::new_v4().simple());
    Bao::new()
        .put("team-a/conformance", json!({"value": secret}))
        .await;
    // One release per long job: a test pod left pending by one `helm
    // test` would fail the next.
    let mut long = Vec::new();
    for _ in 0..2 {
        let release = format!("conf{}", &uuid::Uuid::new_v4().simple().to_string()[..10]);
        let install = helm_job(
            "helm.install",
            json!({"release": release, "namespace": namespace, "chart": chart_ref}),
            json!({}),
        );
        pipeline.submit(&install).await;
        let (status, _, message, _) = pipeline.ended(&install, WAIT).await;
        assert_eq!(status, "succeeded", "{message}");
        long.push(common::conformance::Long {
            job: helm_job(
                "helm.test",
                json!({"release": release, "namespace": namespace}),
                json!({}),
            ),
            processes: vec![format!("test {release}")],
        });
    }
    let echo = helm_job(
        "helm.template",
        json!({"release": "echo", "namespace": namespace, "chart": chart_ref,
               "values": {"greeting": {"$secret": "value"}}}),
        json!({"secret_refs": [{"name": "value", "mount": "secret",
                                "path": "team-a/conformance", "key": "value"}]}),
    );
    let fixture = common::conformance::Fixture {
        long: long.try_into().unwrap_or_else(|_| unreachable!()),
        echo,
        secret,
        echo_in_output: false,
        artifacts: pipeline.dir.join("artifacts"),
    };
    common::conformance::suite(RunnerType::Helm, &pipeline, fixture).await;
}
