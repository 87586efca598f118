//! The kubernetes runner against the real API server scripts/kubernetes.sh
//! starts (kube-apiserver 1.20 on 127.0.0.1:6443, etcd, the controllers; no
//! scheduler or kubelet: a stand-in marks pods Ready). The runner connects
//! with a token from OpenBao and checks the server against the operator's
//! CA; the tests read back as the administrator.

mod common;

use std::time::Duration;

use common::bao::Bao;
use common::kube::{self as cluster, resource};
use common::pipeline::{job, Pipeline};
use execplane::contract::{JobSpec, RunnerType};
use serde_json::{json, Value};
use sqlx::PgPool;

const WAIT: Duration = Duration::from_secs(60);
/// The kubernetes runner's index in the pipeline `kube_pipeline` starts
/// (a verification runner follows it).
const KUBE_RUNNER: usize = 2;

/// The operator's policy of these tests: the stack's API server as cluster
/// `local` (and `stalled`, an address that accepts and never answers),
/// team-a on its own namespace and those under it, namespaced kinds only.
fn policy(namespace: &str, stalled_port: u16) -> String {
    format!(
        r#"
clusters:
  local:
    server: {server}
    ca_file: {ca}
  stalled:
    server: https://127.0.0.1:{stalled_port}
tenants:
  team-a:
    operations: ["kubernetes.*", "verify.kubernetes.condition", "verify.resource.capability"]
    grants: [destructive]
    secret_prefixes: ["secret/team-a/"]
    kubernetes:
      clusters:
        local:
          namespaces: ["{namespace}", "{namespace}-*"]
        stalled:
          namespaces: ["{namespace}"]
"#,
        server = cluster::SERVER,
        ca = cluster::ca_file().display(),
    )
}

struct Stack {
    pipeline: Pipeline,
    admin: kube::Client,
    namespace: String,
    /// Accepts connections and never answers (cluster `stalled`).
    _stalled: std::net::TcpListener,
}

async fn kube_pipeline(pool: &PgPool) -> Stack {
    let admin = cluster::admin();
    cluster::ensure_widget_crd(&admin).await;
    let namespace = cluster::namespace(&admin).await;
    let stalled = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let stalled_port = stalled.local_addr().unwrap().port();
    let mut pipeline = Pipeline::new(pool).await;
    let policy_file = pipeline.dir.join("policy.yaml");
    std::fs::write(&policy_file, policy(&namespace, stalled_port)).unwrap();
    pipeline.set_env("EXECPLANE_POLICY_FILE", policy_file.to_str().unwrap());
    let bao = Bao::new();
    bao.put("team-a/kube", json!({"token": cluster::admin_token()}))
        .await;
    // The same credentials as a kubeconfig whose own server points
    // elsewhere: only its user is read, the endpoint is the operator's.
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
         clusters: [{{name: x, cluster: {{server: 'https://elsewhere.invalid:6443'}}}}]\n\
         contexts: [{{name: c, context: {{cluster: x, user: u}}}}]\n\
         users: [{{name: u, user: {{token: {}}}}}]\n",
        cluster::admin_token()
    );
    bao.put("team-a/kubeconfig", json!({"config": kubeconfig}))
        .await;
    pipeline.spawn(&["dispatcher"], &[]);
    pipeline.spawn(&["relay"], &[]);
    let storage = pipeline.dir.join("artifacts");
    pipeline.spawn(
        &["runner", "kubernetes"],
        &[
            ("EXECPLANE_VAULT_ADDR", bao.address.as_str()),
            ("EXECPLANE_VAULT_TOKEN", bao.root.as_str()),
            ("EXECPLANE_ARTIFACT_DIR", storage.to_str().unwrap()),
            ("EXECPLANE_KUBERNETES_POLL_INTERVAL", "200ms"),
        ],
    );
    pipeline.spawn(
        &["runner", "verification"],
        &[
            ("EXECPLANE_VAULT_ADDR", bao.address.as_str()),
            ("EXECPLANE_VAULT_TOKEN", bao.root.as_str()),
        ],
    );
    pipeline.wait_runners(2).await;
    Stack {
        pipeline,
        admin,
        namespace,
        _stalled: stalled,
    }
}

fn credentials(cluster_name: &str) -> Value {
    json!({"name": cluster_name, "credentials": {"$secret": "kube"}})
}

/// `kubernetes.manifest.apply` of `text` stored as the manifests artifact
/// `name` in `namespace`, followed to its end: status, category, message.
async fn apply_file(
    pipeline: &Pipeline,
    namespace: &str,
    name: &str,
    text: &str,
) -> (String, Option<String>, String) {
    let reference = pipeline.put_artifact(name, text.as_bytes());
    let spec = kube_job(
        "kubernetes.manifest.apply",
        json!({"namespace": namespace, "manifests_artifact": reference}),
        json!({}),
    );
    pipeline.submit(&spec).await;
    let (status, category, message, _) = pipeline.ended(&spec, WAIT).await;
    (status, category, message)
}

fn kube_job(operation: &str, mut inputs: Value, extra: Value) -> JobSpec {
    if inputs.get("cluster").is_none() {
        inputs["cluster"] = credentials("local");
    }
    let mut extra = extra;
    extra["secret_refs"] =
        json!([{"name": "kube", "mount": "secret", "path": "team-a/kube", "key": "token"}]);
    if extra.get("retry").is_none() {
        extra["retry"] = json!({"max_attempts": 1});
    }
    job(operation, inputs, extra)
}

fn deployment(name: &str, image: &str, replicas: u32) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "app", "image": image}]}}}
    })
}

fn config_map(name: &str, value: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"key": value}})
}

fn widget(name: &str) -> Value {
    json!({"apiVersion": "test.execplane.io/v1", "kind": "Widget", "metadata": {"name": name},
           "spec": {"size": 3}})
}

fn objects(result: &Value) -> Vec<Value> {
    result["objects"].as_array().cloned().unwrap_or_default()
}

fn configmaps() -> kube::api::ApiResource {
    resource("v1", "ConfigMap", "configmaps")
}

/// Apply (a Deployment, a ConfigMap and an instance of a custom resource)
/// returns object refs and a diff summary; the same apply again changes
/// nothing; a dry run changes nothing on the server; deletes need the
/// destructive flag and stay in the tenant's namespaces, and a kind that
/// discovery says is cluster-scoped is refused before anything is written;
/// the cluster token from OpenBao is nowhere.
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn apply_reports_refs_and_diffs_reapply_is_a_no_op_and_gates_hold(pool: PgPool) {
    let stack = kube_pipeline(&pool).await;
    let (pipeline, namespace) = (&stack.pipeline, stack.namespace.as_str());
    let manifests = json!([
        deployment("web", "nginx:1.25", 1),
        config_map("settings", "one"),
        widget("gizmo")
    ]);
    let apply = |manifests: Value, dry_run: bool| {
        kube_job(
            "kubernetes.manifest.apply",
            json!({"namespace": namespace, "manifests": manifests, "field_manager": "team-a-deployer",
                   "dry_run": dry_run}),
            json!({}),
        )
    };

    let first = apply(manifests.clone(), false);
    pipeline.submit(&first).await;
    let (status, _, message, result) = pipeline.ended(&first, WAIT).await;
    assert_eq!(status, "succeeded", "{message}");
    let created = objects(&result);
    assert_eq!(created.len(), 3, "{result}");
    for object in &created {
        assert_eq!(object["action"], "created", "{object}");
        assert_eq!(object["namespace"], namespace);
        assert!(
            object["uid"].as_str().is_some_and(|uid| !uid.is_empty()),
            "{object}"
        );
        assert!(object["resource_version"].as_str().is_some(), "{object}");
        assert!(
            !object["changed_fields"].as_array().unwrap().is_empty(),
            "{object}"
        );
    }
    assert!(created[1]["changed_fields"]
        .as_array()
        .unwrap()
        .contains(&json!("data.key")));
    assert_eq!(created[2]["kind"], "Widget");
    let live = cluster::get(&stack.admin, namespace, &configmaps(), "settings")
        .await
        .unwrap();
    assert_eq!(live["metadata"]["uid"], created[1]["uid"]);
    let managers: Vec<&str> = live["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|entry| entry["manager"].as_str())
        .collect();
    assert!(
        managers.contains(&"team-a-deployer"),
        "server-side apply as the field manager: {managers:?}"
    );

    // The same manifests again: a no-op diff, nothing written.
    let again = apply(manifests.clone(), false);
    pipeline.submit(&again).await;
    let (status, _, message, result) = pipeline.ended(&again, WAIT).await;
    assert_eq!(status, "succeeded", "{message}");
    assert!(message.contains("3 unchanged"), "{message}");
    for (before, after) in created.iter().zip(objects(&result)) {
        assert_eq!(after["action"], "unchanged", "{after}");
        assert_eq!(after["changed_fields"], json!([]), "{after}");
        assert_eq!(after["uid"], before["uid"], "{after}");
        assert_eq!(
            after["generation"], before["generation"],
            "the spec is as it was: {after}"
        );
        // Nothing but the apply writes these two (the Deployment's
        // controller writes its status): not even a new resourceVersion.
        if after["kind"] != "Deployment" {
            assert_eq!(
                after["resource_version"], before["resource_version"],
                "{after}"
            );
        }
    }

    // A dry run of a change: reported, not persisted.
    let dry = apply(json!([config_map("settings", "two")]), true);
    pipeline.submit(&dry).await;
    let (status, _, message, result) = pipeline.ended(&dry, WAIT).await;
    assert_eq!(status, "succeeded", "{message}");
    assert_eq!(result["dry_run"], true);
    assert_eq!(objects(&result)[0]["action"], "configured");
    assert_eq!(objects(&result)[0]["changed_fields"], json!(["data.key"]));
    let live = cluster::get(&stack.admin, namespace, &configmaps(), "settings")
        .await
        .unwrap();
    assert_eq!(live["data"]["key"], "one", "a dry run changes nothing");

    // Gates: no destructive flag; a namespace outside the tenant's; a
    // cluster-scoped kind named only in an artifact (so only the runner,
    // through discovery, can see its scope).
    let objects_to_delete = json!([{"api_version": "v1", "kind": "ConfigMap", "name": "settings"}]);
    // (Built valid, then stripped of its flag: the helper validates.)
    let mut undestructive = kube_job(
        "kubernetes.manifest.delete",
        json!({"namespace": namespace, "objects": objects_to_delete}),
        json!({"policy": {"destructive": true}}),
    );
    undestructive.policy.destructive = false;
    pipeline.submit(&undestructive).await;
    let (status, category, message, _) = pipeline.ended(&undestructive, WAIT).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("rejected", Some("policy")),
        "{message}"
    );
    assert!(message.contains("policy.destructive"), "{message}");
    let elsewhere = apply(json!([config_map("stray", "x")]), false);
    let mut elsewhere = elsewhere;
    elsewhere.inputs["namespace"] = json!("kube-system");
    pipeline.submit(&elsewhere).await;
    let (status, category, message, _) = pipeline.ended(&elsewhere, WAIT).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("rejected", Some("policy")),
        "{message}"
    );
    assert!(
        message.contains("kubernetes.clusters.local.namespaces"),
        "{message}"
    );
    let cluster_scoped = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: before-namespace}}\n---\n\
         apiVersion: v1\nkind: Namespace\nmetadata: {{name: {namespace}-sneaky}}\n"
    );
    let odd = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: n, namespace: 'team-a-x#'}\n";
    let (status, category, message) = apply_file(pipeline, namespace, "odd.yaml", odd).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("failed", Some("contract")),
        "{message}"
    );
    assert!(message.contains("metadata.namespace"), "{message}");
    let (status, category, message) =
        apply_file(pipeline, namespace, "manifests.yaml", &cluster_scoped).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("failed", Some("policy")),
        "{message}"
    );
    assert!(message.contains("cluster-scoped"), "{message}");
    assert!(
        cluster::get(&stack.admin, namespace, &configmaps(), "before-namespace")
            .await
            .is_none(),
        "nothing of a refused apply is written, not even what came before the refused manifest"
    );

    // A merge key (`<<`) moves the object to another namespace as helm and
    // the API server read YAML: judged the same way, it is refused.
    let merged = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: merged-{namespace}, <<: {{namespace: kube-system}}}}\n"
    );
    let (status, category, message) = apply_file(pipeline, namespace, "merged.yaml", &merged).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("failed", Some("policy")),
        "{message}"
    );
    assert!(message.contains("kube-system"), "{message}");
    let name = format!("merged-{namespace}");
    assert!(
        cluster::get(&stack.admin, "kube-system", &configmaps(), &name)
            .await
            .is_none()
    );
    // An alias bomb: 1.5 MiB anchored, aliased 500,000 times (3.5 MB of
    // text, 750 GB expanded) is refused by what it expands to, the runner's
    // memory held, and the runner serves on (the jobs below).
    let mut bomb = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: bomb}}\ndata: {{a: &a {}}}\nbinaryData: [",
        "b".repeat(3 << 19)
    );
    bomb.push_str(&vec!["*a"; 500_000].join(","));
    bomb.push_str("]\n");
    let (status, category, message) = apply_file(pipeline, namespace, "bomb.yaml", &bomb).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("failed", Some("contract")),
        "{message}"
    );
    assert!(message.contains("expands to more than"), "{message}");
    let peak = std::fs::read_to_string(format!("/proc/{}/status", pipeline.pid(2)))
        .unwrap()
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .map(|kib| kib.trim().trim_end_matches(" kB").parse::<u64>().unwrap())
        .unwrap();
    eprintln!(
        "the kubernetes runner's peak RSS after the alias bomb: {} MiB",
        peak / 1024
    );
    assert!(peak < 512 * 1024, "peak RSS {peak} KiB");

    // A kubeconfig as the credentials: its user, the operator's endpoint.
    let mut through_kubeconfig = kube_job(
        "kubernetes.resource.read",
        json!({"namespace": namespace,
               "object": {"api_version": "v1", "kind": "ConfigMap", "name": "settings"}}),
        json!({}),
    );
    through_kubeconfig.secret_refs[0].path = "team-a/kubeconfig".into();
    through_kubeconfig.secret_refs[0].key = "config".into();
    pipeline.submit(&through_kubeconfig).await;
    let (status, _, message, result) = pipeline.ended(&through_kubeconfig, WAIT).await;
    assert_eq!(status, "succeeded", "{message}");
    assert_eq!(objects(&result)[0]["uid"], created[1]["uid"]);

    // With the flag: deleted, then absent.
    let delete = || {
        kube_job(
            "kubernetes.manifest.delete",
            json!({"namespace": namespace, "objects": objects_to_delete}),
            json!({"policy": {"destructive": true}}),
        )
    };
    let destructive = delete();
    pipeline.submit(&destructive).await;
    let (status, _, message, result) = pipeline.ended(&destructive, WAIT).await;
    assert_eq!(status, "succeeded", "{message}");
    assert_eq!(objects(&result)[0]["action"], "deleted");
    assert_eq!(objects(&result)[0]["uid"], created[1]["uid"]);
    assert!(
        cluster::get(&stack.admin, namespace, &configmaps(), "settings")
            .await
            .is_none()
    );
    let twice = delete();
    pipeline.submit(&twice).await;
    let (status, _, message, result) = pipeline.ended(&twice, WAIT).await;
    assert_eq!(status, "succeeded", "{message}");
    assert_eq!(objects(&result)[0]["action"], "absent");

    common::leaks::assert_secret_nowhere(
        pipeline,
        &pool,
        &cluster::admin_token(),
        execplane::contract::RunnerType::Kubernetes,
        &pipeline.dir,
    )
    .await;
}

/// `rollout.status` waits for the new generation: after an image change it
/// does not report success on the previous rollout's numbers, and succeeds
/// once the new pods are Ready (marked by the test, as a kubelet would).
/// `kubernetes.wait` returns its condition history, `resource.patch` and
/// `resource.read` return refs with uid and resourceVersion, and a wait for
/// a condition that never comes ends `timeout` with its evidence.
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn rollouts_wait_for_the_new_generation_and_every_operation_runs(pool: PgPool) {
    let stack = kube_pipeline(&pool).await;
    let (pipeline, namespace) = (&stack.pipeline, stack.namespace.as_str());
    let apply = |manifest: Value| {
        kube_job(
            "kubernetes.manifest.apply",
            json!({"namespace": namespace, "manifests": [manifest]}),
            json!({}),
        )
    };
    let object = json!({"api_version": "apps/v1", "kind": "Deployment", "name": "api"});
    let rollout = || {
        kube_job(
            "kubernetes.rollout.status",
            json!({"namespace": namespace, "object": object}),
            json!({}),
        )
    };

    let first = apply(deployment("api", "nginx:1.25", 2));
    pipeline.submit(&first).await;
    let (status, _, message, _) = pipeline.ended(&first, WAIT).await;
    assert_eq!(status, "succeeded", "{message}");
    // A stand-in kubelet from here on.
    let kubelet = {
        let (admin, namespace) = (stack.admin.clone(), namespace.to_owned());
        let ready = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let flag = ready.clone();
        let task = tokio::spawn(async move {
            loop {
                if flag.load(std::sync::atomic::Ordering::SeqCst) {
                    cluster::mark_pods_ready(&admin, &namespace).await;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        (ready, task)
    };
    let done = rollout();
    pipeline.submit(&done).await;
    let (status, _, message, result) = pipeline.ended(&done, WAIT).await;
    assert_eq!(status, "succeeded", "{message}");
    assert_eq!(result["wait"]["met"], true, "{result}");

    // A new generation the controller has not seen yet (it is paused):
    // the status still reads 2 of 2 updated and available, the previous
    // rollout's numbers, which must not read as this one's completion.
    kubelet.0.store(false, std::sync::atomic::Ordering::SeqCst);
    let controllers = ControllerPause::new();
    let second = apply(deployment("api", "nginx:1.26", 2));
    pipeline.submit(&second).await;
    let (status, _, message, result) = pipeline.ended(&second, WAIT).await;
    assert_eq!(status, "succeeded", "{message}");
    assert_eq!(objects(&result)[0]["action"], "configured");
    let generation = objects(&result)[0]["generation"].as_i64().unwrap();
    assert!(
        objects(&result)[0]["changed_fields"]
            .as_array()
            .unwrap()
            .contains(&json!("spec.template.spec.containers[0].image")),
        "{result}"
    );
    let waiting = rollout();
    pipeline.submit(&waiting).await;
    pipeline.wait_status(&waiting.job_id, "running", WAIT).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        pipeline.attempts(&waiting.job_id).await[0].1,
        "running",
        "no success on the previous rollout"
    );
    drop(controllers);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        pipeline.attempts(&waiting.job_id).await[0].1,
        "running",
        "no success while the new pods are not ready"
    );
    kubelet.0.store(true, std::sync::atomic::Ordering::SeqCst);
    let (status, _, message, result) = pipeline.ended(&waiting, WAIT).await;
    assert_eq!(status, "succeeded", "{message}");
    let history = result["wait"]["history"].as_array().unwrap();
    assert!(
        history.first().unwrap()["message"]
            .as_str()
            .is_some_and(|message| message.contains("not yet observed")),
        "the first look saw the old status under the new generation: {result}"
    );
    assert_eq!(
        history.first().unwrap()["status"],
        "Progressing",
        "{result}"
    );
    assert!(
        history
            .iter()
            .all(|look| look["generation"] == json!(generation)),
        "{result}"
    );
    let last = history.last().unwrap();
    assert_eq!(
        (last["status"].as_str(), last["met"].as_bool()),
        (Some("Complete"), Some(true))
    );
    assert_eq!(last["detail"]["updated"], 2);
    assert_eq!(last["detail"]["available"], 2);

    // kubernetes.wait on a named condition: its history.
    let wait = kube_job(
        "kubernetes.wait",
        json!({"namespace": namespace, "object": object, "condition": "Available", "timeout": "20s"}),
        json!({}),
    );
    pipeline.submit(&wait).await;
    let (status, _, message, result) = pipeline.ended(&wait, WAIT).await;
    assert_eq!(status, "succeeded", "{message}");
    assert_eq!(result["wait"]["condition"], "Available=True");
    assert_eq!(
        result["wait"]["history"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()["status"],
        "True"
    );
    assert!(
        !result["events"].as_array().unwrap().is_empty(),
        "the deployment's events: {result}"
    );

    // The verification runner's probes of the same cluster: a condition
    // that holds and one that does not; a kind served with its verbs, and
    // one that is not served.
    let verify = |operation: &str, inputs: Value| kube_job(operation, inputs, json!({}));
    let cases = [
        (
            verify(
                "verify.kubernetes.condition",
                json!({"namespace": namespace, "object": object, "condition": "Available"}),
            ),
            None,
        ),
        (
            verify(
                "verify.kubernetes.condition",
                json!({"namespace": namespace, "object": object, "condition": "Frozen"}),
            ),
            Some("verification_failed"),
        ),
        // A set: all of them at once, or any one of them.
        (
            verify(
                "verify.kubernetes.condition",
                json!({"namespace": namespace, "object": object,
                       "conditions": ["Available", "Progressing"]}),
            ),
            None,
        ),
        (
            verify(
                "verify.kubernetes.condition",
                json!({"namespace": namespace, "object": object,
                       "conditions": ["Available", "Frozen"]}),
            ),
            Some("verification_failed"),
        ),
        (
            verify(
                "verify.kubernetes.condition",
                json!({"namespace": namespace, "object": object,
                       "conditions": ["Frozen", "Available"], "any": true}),
            ),
            None,
        ),
        (
            verify(
                "verify.resource.capability",
                json!({"namespace": namespace, "resource": "test.execplane.io/v1/Widget", "verbs": ["get", "patch", "delete"]}),
            ),
            None,
        ),
        (
            verify(
                "verify.resource.capability",
                json!({"namespace": namespace, "resource": "test.execplane.io/v1/Gadget", "verbs": []}),
            ),
            Some("verification_failed"),
        ),
        (
            verify(
                "verify.resource.capability",
                json!({"namespace": namespace, "resource": "v1/ConfigMap", "verbs": ["escalate"]}),
            ),
            Some("verification_failed"),
        ),
    ];
    for (spec, expected) in &cases {
        pipeline.submit(spec).await;
        let (status, category, message, result) = pipeline.ended(spec, WAIT).await;
        assert_eq!(
            category.as_deref(),
            *expected,
            "{}: {status} {message} {result}",
            spec.inputs
        );
        assert_eq!(result["passed"], json!(expected.is_none()), "{result}");
    }

    // A condition that never comes: timeout, with what was seen.
    let never = kube_job(
        "kubernetes.wait",
        json!({"namespace": namespace, "object": object, "condition": "condition=Frozen", "timeout": "1s"}),
        json!({}),
    );
    pipeline.submit(&never).await;
    let (_, category, message, result) = pipeline.ended(&never, WAIT).await;
    assert_eq!(category.as_deref(), Some("timeout"), "{message}");
    assert_eq!(result["wait"]["met"], false, "{result}");

    // Patch and read: refs with uid and resourceVersion.
    let patch = kube_job(
        "kubernetes.resource.patch",
        json!({"namespace": namespace, "object": object, "patch_type": "merge",
               "patch": {"metadata": {"labels": {"tier": "backend"}}}}),
        json!({}),
    );
    pipeline.submit(&patch).await;
    let (status, _, message, result) = pipeline.ended(&patch, WAIT).await;
    assert_eq!(status, "succeeded", "{message}");
    let patched = &objects(&result)[0];
    assert_eq!(patched["action"], "patched");
    assert_eq!(patched["changed_fields"], json!(["metadata.labels.tier"]));
    let read = kube_job(
        "kubernetes.resource.read",
        json!({"namespace": namespace, "object": object}),
        json!({}),
    );
    pipeline.submit(&read).await;
    let (status, _, message, result) = pipeline.ended(&read, WAIT).await;
    assert_eq!(status, "succeeded", "{message}");
    let read = &objects(&result)[0];
    assert_eq!(read["uid"], patched["uid"]);
    assert_eq!(read["resource_version"], patched["resource_version"]);
    assert_eq!(read["object"]["metadata"]["labels"]["tier"], "backend");
    assert!(read["object"]["metadata"].get("managedFields").is_none());

    // A Secret as `kubectl apply` leaves it: its values in `data` and again
    // in the last-applied annotation. A read shows them in neither.
    let value = format!("pw-{}", uuid::Uuid::new_v4().simple());
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
                        "metadata": {"name": "db", "namespace": namespace},
                        "stringData": {"password": value}});
    let mut stored = secret.clone();
    stored["metadata"]["annotations"] =
        json!({"kubectl.kubernetes.io/last-applied-configuration": secret.to_string()});
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(stack.admin.clone(), namespace);
    secrets
        .create(
            &Default::default(),
            &serde_json::from_value(stored).unwrap(),
        )
        .await
        .unwrap();
    let read = kube_job(
        "kubernetes.resource.read",
        json!({"namespace": namespace, "object": {"api_version": "v1", "kind": "Secret", "name": "db"}}),
        json!({}),
    );
    pipeline.submit(&read).await;
    let (status, _, message, result) = pipeline.ended(&read, WAIT).await;
    assert_eq!(status, "succeeded", "{message}");
    let shown = &objects(&result)[0]["object"];
    assert_eq!(shown["data"]["password"], "[redacted]", "{shown}");
    let annotation =
        &shown["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"];
    assert!(
        annotation.as_str().unwrap().contains("[redacted]"),
        "{shown}"
    );
    common::leaks::assert_secret_nowhere(
        pipeline,
        &pool,
        &value,
        execplane::contract::RunnerType::Kubernetes,
        &pipeline.dir,
    )
    .await;
    kubelet.1.abort();
}

/// The controller manager, stopped (SIGSTOP) while this lives: no
/// controller observes anything meanwhile.
struct ControllerPause(String);

impl ControllerPause {
    fn new() -> Self {
        let found = std::process::Command::new("pgrep")
            .args(["-f", "kube-controller-manager"])
            .output()
            .unwrap();
        let pid = String::from_utf8(found.stdout)
            .unwrap()
            .lines()
            .next()
            .expect("kube-controller-manager runs")
            .to_owned();
        std::process::Command::new("kill")
            .args(["-STOP", &pid])
            .status()
            .unwrap();
        Self(pid)
    }
}

impl Drop for ControllerPause {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-CONT", &self.0])
            .status();
    }
}

/// The conformance suite (`common::conformance`): the long job waits for
/// a condition that never comes (the runner runs no process of its own),
/// the echo is an apply of a ConfigMap holding a Vault secret.
/// An apply that waits, once written, for two conditions of its
/// Deployment (both at once), with the history of each as evidence; a
/// wait on conditions of which only one can come ends `timeout`, unless
/// one is enough (`any`).
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn an_apply_waits_for_two_conditions_of_what_it_wrote(pool: PgPool) {
    let stack = kube_pipeline(&pool).await;
    let (pipeline, namespace) = (&stack.pipeline, stack.namespace.as_str());
    let object = json!({"api_version": "apps/v1", "kind": "Deployment", "name": "idle"});
    // No replicas: the controller reports it Available and Progressing
    // without a kubelet.
    let apply = kube_job(
        "kubernetes.manifest.apply",
        json!({"namespace": namespace, "manifests": [deployment("idle", "nginx:1.25", 0)],
               "wait_for": [{"object": object, "conditions": ["Available", "Progressing=True"],
                             "timeout": "30s"}]}),
        json!({}),
    );
    pipeline.submit(&apply).await;
    let (status, _, message, result) = pipeline.ended(&apply, WAIT).await;
    assert_eq!(status, "succeeded", "{message}");
    assert!(message.contains("1 wait(s) met"), "{message}");
    let waits = result["waits"].as_array().unwrap();
    assert_eq!(waits.len(), 1, "{result}");
    assert_eq!(waits[0]["condition"], "Available=True, Progressing=True");
    assert_eq!(
        waits[0]["object"],
        format!("Deployment/idle in {namespace}")
    );
    assert_eq!(waits[0]["met"], true);
    let last = waits[0]["history"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        last["status"], "Available=True, Progressing=True",
        "{result}"
    );

    let wait = |conditions: Value, any: bool| {
        kube_job(
            "kubernetes.wait",
            json!({"namespace": namespace, "object": object, "conditions": conditions,
                   "any": any, "timeout": "2s"}),
            json!({}),
        )
    };
    let never = wait(json!(["Available", "Frozen"]), false);
    pipeline.submit(&never).await;
    let (status, category, message, result) = pipeline.ended(&never, WAIT).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("failed", Some("timeout")),
        "{message}"
    );
    assert_eq!(result["wait"]["met"], false, "{result}");
    let either = wait(json!(["Available", "Frozen"]), true);
    pipeline.submit(&either).await;
    let (status, _, message, result) = pipeline.ended(&either, WAIT).await;
    assert_eq!(status, "succeeded", "{message}");
    assert_eq!(result["wait"]["condition"], "Available=True | Frozen=True");
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn the_kubernetes_runner_conforms(pool: PgPool) {
    let mut stack = kube_pipeline(&pool).await;
    stack.pipeline.spawn(
        &["artifact-worker"],
        &[("EXECPLANE_ARTIFACT_GRACE", "300ms")],
    );
    let namespace = stack.namespace.clone();
    let secret = format!("kube-{}", uuid::Uuid::new_v4().simple());
    Bao::new()
        .put("team-a/conformance", json!({"value": secret}))
        .await;
    let (status, _, message) = apply_file(
        &stack.pipeline,
        &namespace,
        "waited.yaml",
        &serde_json::to_string(&config_map("waited", "x")).unwrap(),
    )
    .await;
    assert_eq!(status, "succeeded", "{message}");
    let long = kube_job(
        "kubernetes.wait",
        json!({"namespace": namespace,
               "object": {"api_version": "v1", "kind": "ConfigMap", "name": "waited"},
               "condition": "condition=Frozen", "timeout": "5m"}),
        json!({}),
    );
    let echo = job(
        "kubernetes.manifest.apply",
        json!({"cluster": credentials("local"), "namespace": namespace,
               "manifests": [{"apiVersion": "v1", "kind": "ConfigMap",
                              "metadata": {"name": "echo"},
                              "data": {"key": {"$secret": "value"}}}]}),
        json!({"retry": {"max_attempts": 1},
               "secret_refs": [
                   {"name": "kube", "mount": "secret", "path": "team-a/kube", "key": "token"},
                   {"name": "value", "mount": "secret", "path": "team-a/conformance", "key": "value"}]}),
    );
    let fixture = common::conformance::Fixture {
        long: common::conformance::Long::twice(long, Vec::new()),
        echo,
        secret,
        echo_in_output: false,
        artifacts: stack.pipeline.dir.join("artifacts"),
    };
    common::conformance::suite(RunnerType::Kubernetes, &stack.pipeline, fixture).await;
}

/// A runner killed -9 while an apply hangs (the cluster accepts the
/// connection and never answers) leaves a started, non-idempotent attempt
/// whose effect nobody can know: `outcome_unknown`, never retried.
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_runner_killed_mid_apply_leaves_it_unknown(pool: PgPool) {
    let mut stack = kube_pipeline(&pool).await;
    let namespace = stack.namespace.clone();
    let spec = kube_job(
        "kubernetes.manifest.apply",
        json!({"cluster": credentials("stalled"), "namespace": namespace,
               "manifests": [config_map("never", "x")]}),
        json!({"retry": {"max_attempts": 3, "initial_backoff": "200ms", "max_backoff": "1s"}}),
    );
    stack.pipeline.submit(&spec).await;
    stack
        .pipeline
        .wait_status(&spec.job_id, "running", WAIT)
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    stack.pipeline.signal(KUBE_RUNNER, "KILL");
    let attempts = stack.pipeline.wait_done(&spec.job_id, WAIT).await;
    assert_eq!(attempts.len(), 1, "never retried: {attempts:?}");
    assert_eq!(attempts[0].1, "outcome_unknown", "{attempts:?}");
}

/// Every README example under `examples/kubernetes` runs, in order, to the
/// end the README's table gives it, on the local API server under the
/// rendered demo policy.
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn the_kubernetes_examples_run_to_the_end_the_readme_gives_them(pool: PgPool) {
    common::examples::run_readme_examples(
        &pool,
        "kubernetes",
        &["kubernetes", "verification"],
        &[],
    )
    .await;
}
