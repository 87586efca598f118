//! The real Kubernetes API scripts/kubernetes.sh starts on 127.0.0.1:6443:
//! an admin client for the tests' own setup and checks (the runner under
//! test connects with the token from OpenBao and the operator's CA), a
//! namespace per test, the tests' custom resource definition, and a
//! stand-in kubelet that marks pods Ready (there is no kubelet).

use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

/// The API server's address.
pub const SERVER: &str = "https://127.0.0.1:6443";

pub fn kube_dir() -> std::path::PathBuf {
    super::stack_dir().join("kubernetes")
}

/// The static admin token scripts/kubernetes.sh made.
pub fn admin_token() -> String {
    std::fs::read_to_string(kube_dir().join("admin-token"))
        .expect("scripts/kubernetes.sh made the admin token")
        .trim()
        .to_owned()
}

/// The API server's serving certificate bundle (its self-signed CA with it).
pub fn ca_file() -> std::path::PathBuf {
    kube_dir().join("certs").join("apiserver.crt")
}

/// A client as the stack's administrator (the tests' own setup; certificate
/// checks are the runner's business, tested through it).
pub fn admin() -> kube::Client {
    let mut config = kube::Config::new(SERVER.parse().unwrap());
    config.accept_invalid_certs = true;
    config.auth_info.token = Some(admin_token().into());
    kube::Client::try_from(config).expect("an admin client")
}

/// A fresh namespace for one test: `ep-<random>`.
pub async fn namespace(client: &kube::Client) -> String {
    let name = format!("ep-{}", &uuid::Uuid::new_v4().simple().to_string()[..10]);
    let namespaces: Api<DynamicObject> =
        Api::all_with(client.clone(), &resource("v1", "Namespace", "namespaces"));
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}
    }))
    .unwrap();
    namespaces
        .create(&PostParams::default(), &object)
        .await
        .expect("namespace created");
    // The service account controller must make `default` before pods are
    // admitted in the namespace.
    let accounts: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &name,
        &resource("v1", "ServiceAccount", "serviceaccounts"),
    );
    for _ in 0..100 {
        if accounts.get_opt("default").await.ok().flatten().is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    name
}

pub fn resource(api_version: &str, kind: &str, plural: &str) -> ApiResource {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// The tests' custom resource, `Widget` (`test.execplane.io/v1`,
/// namespaced), defined once and established.
pub async fn ensure_widget_crd(client: &kube::Client) {
    let crds: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &resource(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
        ),
    );
    let crd: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.test.execplane.io"},
        "spec": {"group": "test.execplane.io", "scope": "Namespaced",
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object",
                                   "x-kubernetes-preserve-unknown-fields": true}}}]}
    }))
    .unwrap();
    let params = PatchParams::apply("execplane-tests").force();
    crds.patch("widgets.test.execplane.io", &params, &Patch::Apply(&crd))
        .await
        .expect("the Widget CRD applies");
    for _ in 0..100 {
        let established = crds
            .get("widgets.test.execplane.io")
            .await
            .ok()
            .and_then(|crd| serde_json::to_value(crd).ok())
            .and_then(|crd| crd.pointer("/status/conditions").cloned())
            .and_then(|conditions| conditions.as_array().cloned())
            .is_some_and(|conditions| {
                conditions
                    .iter()
                    .any(|c| c["type"] == "Established" && c["status"] == "True")
            });
        if established {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the Widget CRD was not established");
}

/// An object read back as the administrator, or `None`.
pub async fn get(
    client: &kube::Client,
    namespace: &str,
    resource: &ApiResource,
    name: &str,
) -> Option<Value> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, resource);
    api.get_opt(name)
        .await
        .expect("a read as the administrator")
        .map(|object| serde_json::to_value(object).unwrap())
}

/// What a kubelet would do for every pod of `namespace` that is not Ready:
/// Running, containers ready, the Ready condition True. Returns how many
/// it marked.
pub async fn mark_pods_ready(client: &kube::Client, namespace: &str) -> usize {
    let pods: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &resource("v1", "Pod", "pods"));
    let Ok(listed) = pods.list(&ListParams::default()).await else {
        return 0;
    };
    let mut marked = 0;
    for pod in listed.items {
        let pod = serde_json::to_value(pod).unwrap();
        let ready = pod
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|conditions| {
                conditions
                    .iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            });
        if ready || pod.pointer("/metadata/deletionTimestamp").is_some() {
            continue;
        }
        let name = pod["metadata"]["name"].as_str().unwrap().to_owned();
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let containers: Vec<Value> = pod["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|container| {
                json!({"name": container["name"], "ready": true, "restartCount": 0,
                       "image": container["image"], "imageID": "", "started": true,
                       "state": {"running": {"startedAt": now}}})
            })
            .collect();
        let status = json!({"status": {
            "phase": "Running",
            "conditions": [
                {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                {"type": "Ready", "status": "True", "lastTransitionTime": now},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": now}
            ],
            "containerStatuses": containers,
            "startTime": now
        }});
        if pods
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .is_ok()
        {
            marked += 1;
        }
    }
    marked
}

/// What a kubelet would do for a Helm test hook's pods in `namespace`:
/// run them to `Succeeded`. Returns how many it completed.
pub async fn complete_test_pods(client: &kube::Client, namespace: &str) -> usize {
    let pods: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &resource("v1", "Pod", "pods"));
    let Ok(listed) = pods.list(&ListParams::default()).await else {
        return 0;
    };
    let mut completed = 0;
    for pod in listed.items {
        let pod = serde_json::to_value(pod).unwrap();
        let is_test = pod
            .pointer("/metadata/annotations/helm.sh~1hook")
            .and_then(Value::as_str)
            .is_some_and(|hook| hook.split(',').any(|hook| hook.trim() == "test"));
        let done = pod.pointer("/status/phase").and_then(Value::as_str) == Some("Succeeded");
        if !is_test || done {
            continue;
        }
        let name = pod["metadata"]["name"].as_str().unwrap().to_owned();
        let status = json!({"status": {"phase": "Succeeded"}});
        if pods
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .is_ok()
        {
            completed += 1;
        }
    }
    completed
}
