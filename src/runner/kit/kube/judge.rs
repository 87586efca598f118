//! The pure rules of a cluster's objects (the kubernetes runner's, helm's
//! and the verification probes'), unit-tested without a cluster: the
//! diff summary of an object before and after a call, a named condition's
//! state, and whether a rollout is complete.

use serde_json::{Map, Value};

use crate::contract::ops::WantedCondition;
use crate::runner::Failure;

/// The most documents one manifests file holds.
pub const MAX_DOCUMENTS: usize = 500;

/// How many times its own size a manifests file may expand to, aliases
/// expanded (of at least 1 MiB).
const EXPANSION: usize = 4;

/// The most changed field paths one object reports.
pub const MAX_CHANGED_FIELDS: usize = 100;

/// `kubectl apply`'s copy of what it applied, the whole object.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Annotations the API server or a controller writes, never the manifest.
const VOLATILE_ANNOTATIONS: [&str; 2] = [LAST_APPLIED, "deployment.kubernetes.io/revision"];

/// The fields of an object a write can change, for comparison: its
/// status (a controller's, never an apply's) and the server's bookkeeping
/// are left out.
pub fn comparable(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(map) = object.as_object_mut() {
        map.remove("status");
        if let Some(Value::Object(metadata)) = map.get_mut("metadata") {
            for field in [
                "managedFields",
                "resourceVersion",
                "generation",
                "creationTimestamp",
                "uid",
                "selfLink",
            ] {
                metadata.remove(field);
            }
            if let Some(Value::Object(annotations)) = metadata.get_mut("annotations") {
                for annotation in VOLATILE_ANNOTATIONS {
                    annotations.remove(annotation);
                }
                if annotations.is_empty() {
                    metadata.remove("annotations");
                }
            }
        }
    }
    object
}

/// The paths of the fields that differ between `before` (none: the object
/// did not exist) and `after`, at most [`MAX_CHANGED_FIELDS`]; `true` when
/// there were more.
pub fn changed_fields(before: Option<&Value>, after: &Value) -> (Vec<String>, bool) {
    let empty = Value::Object(Map::new());
    let before = before.map(comparable).unwrap_or(empty);
    let after = comparable(after);
    let mut paths = Vec::new();
    diff(&before, &after, String::new(), &mut paths);
    let truncated = paths.len() > MAX_CHANGED_FIELDS;
    paths.truncate(MAX_CHANGED_FIELDS);
    (paths, truncated)
}

fn diff(before: &Value, after: &Value, path: String, paths: &mut Vec<String>) {
    if before == after || paths.len() > MAX_CHANGED_FIELDS {
        return;
    }
    match (before, after) {
        (Value::Object(old), Value::Object(new)) => {
            let mut keys: Vec<&String> = old.keys().chain(new.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let old = old.get(key).unwrap_or(&Value::Null);
                let new = new.get(key).unwrap_or(&Value::Null);
                diff(old, new, join(&path, key), paths);
            }
        }
        (Value::Array(old), Value::Array(new)) if old.len() == new.len() => {
            for (index, (old, new)) in old.iter().zip(new).enumerate() {
                diff(old, new, format!("{path}[{index}]"), paths);
            }
        }
        // Created from nothing: every leaf it has is a change.
        (Value::Null, Value::Object(_)) => {
            diff(&Value::Object(Map::new()), after, path, paths);
        }
        _ => paths.push(if path.is_empty() { ".".into() } else { path }),
    }
}

/// `parent.key`, or `parent["key"]` when the key holds characters a
/// dotted path would misread (`app.kubernetes.io/name`).
fn join(parent: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    match (parent.is_empty(), plain) {
        (true, true) => key.to_owned(),
        (false, true) => format!("{parent}.{key}"),
        (_, false) => format!("{parent}[{}]", Value::String(key.to_owned())),
    }
}

/// The documents of a manifests file (YAML, of which JSON is a part),
/// empty documents skipped and `List`s expanded into their items.
pub fn documents(bytes: &[u8]) -> Result<Vec<Value>, String> {
    let mut manifests = Vec::new();
    // Aliases expanded, merge keys applied, as helm and the API server
    // read them, and never more than a few times the text (docs/SECURITY.md).
    let max_expanded = bytes.len().max(1 << 20).saturating_mul(EXPANSION);
    let read =
        crate::runner::yaml::manifests(bytes, max_expanded).map_err(|error| error.message)?;
    for (index, value) in read.into_iter().enumerate() {
        match value {
            Value::Null => {}
            Value::Object(_) => flatten(value, 0, &mut manifests)
                .map_err(|problem| format!("document {index}: {problem}"))?,
            _ => return Err(format!("document {index}: not an object")),
        }
        if manifests.len() > MAX_DOCUMENTS {
            return Err(format!("more than {MAX_DOCUMENTS} manifests"));
        }
    }
    Ok(manifests)
}

/// An object, or the items of a list, nested ones too, as helm's client
/// (apimachinery's unstructured decoding) reads them: any object with an
/// `items` key is a list, whatever its kind says (a `ConfigMap` with
/// `items` is created as its items, never as itself), and every object a
/// list carries is judged on its own.
fn flatten(object: Value, depth: usize, into: &mut Vec<Value>) -> Result<(), String> {
    let is_list = object.get("items").is_some();
    if !is_list {
        into.push(object);
        return Ok(());
    }
    if depth >= 4 {
        return Err("lists nested more than four deep".into());
    }
    let Some(Value::Array(items)) = object.get("items").cloned() else {
        return Err("a list whose `items` is not a list".into());
    };
    for item in items {
        if !item.is_object() {
            return Err("a list item that is not an object".into());
        }
        flatten(item, depth + 1, into)?;
        if into.len() > MAX_DOCUMENTS {
            return Err(format!("more than {MAX_DOCUMENTS} manifests"));
        }
    }
    Ok(())
}

/// The managedFields entry of `manager`'s applies to `object` (not its
/// status): which fields it owns, and when that last changed. An apply
/// that leaves it and every field as they were wrote nothing.
pub fn applied_by(object: &Value, manager: &str) -> Option<Value> {
    object
        .pointer("/metadata/managedFields")?
        .as_array()?
        .iter()
        .find(|entry| {
            entry.get("manager").and_then(Value::as_str) == Some(manager)
                && entry.get("operation").and_then(Value::as_str) == Some("Apply")
                && entry.get("subresource").is_none()
        })
        .cloned()
}

/// `object` as a result may carry it: a Secret's values (`data`,
/// `stringData`) replaced by `[redacted]`, its keys kept, wherever they
/// appear: `kubectl apply` keeps the whole applied Secret, values and
/// all, in its last-applied annotation, which is redacted the same way
/// (or replaced whole when it is not JSON). A Secret read from the cluster
/// was never resolved by execplane, so no masker knows its values; they
/// must not reach the event log.
pub fn redacted(mut object: Value) -> Value {
    let is_secret = object.get("kind").and_then(Value::as_str) == Some("Secret")
        && object.get("apiVersion").and_then(Value::as_str) == Some("v1");
    if !is_secret {
        return object;
    }
    redact_values(&mut object);
    if let Some(Value::Object(annotations)) = object.pointer_mut("/metadata/annotations") {
        for (name, value) in annotations.iter_mut() {
            if name != LAST_APPLIED {
                continue;
            }
            let applied = value
                .as_str()
                .and_then(|text| serde_json::from_str::<Value>(text).ok())
                .filter(Value::is_object);
            *value = Value::String(match applied {
                Some(mut applied) => {
                    redact_values(&mut applied);
                    applied.to_string()
                }
                None => "[redacted]".into(),
            });
        }
    }
    object
}

fn redact_values(secret: &mut Value) {
    for field in ["data", "stringData"] {
        if let Some(Value::Object(values)) = secret.get_mut(field) {
            for value in values.values_mut() {
                *value = Value::String("[redacted]".into());
            }
        }
    }
}

/// What one look at an object showed of a condition (or a rollout); a
/// history records a look only when it differs from the one before.
#[derive(Clone, Debug, PartialEq)]
pub struct Observation {
    pub generation: Option<i64>,
    pub observed_generation: Option<i64>,
    pub status: Option<String>,
    pub reason: Option<String>,
    pub message: Option<String>,
    /// Rollouts: the replica counts judged.
    pub detail: Option<Value>,
    pub met: bool,
}

fn int_at(object: &Value, pointer: &str) -> Option<i64> {
    object.pointer(pointer).and_then(Value::as_i64)
}

fn text_at(object: &Value, pointer: &str) -> Option<String> {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// The wanted condition on `object`. It is met only when its status is the
/// wanted one AND it describes the current generation: a condition (or a
/// status) whose `observedGeneration` is older than `metadata.generation`
/// speaks of the previous spec.
pub fn condition(object: &Value, wanted: &WantedCondition) -> Observation {
    let generation = int_at(object, "/metadata/generation");
    let status_observed = int_at(object, "/status/observedGeneration");
    let found = object
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|conditions| {
            conditions.iter().find(|condition| {
                condition.get("type").and_then(Value::as_str) == Some(&wanted.kind)
            })
        });
    let condition_observed = found.and_then(|condition| int_at(condition, "/observedGeneration"));
    let observed_generation = condition_observed.or(status_observed);
    let current = match (generation, observed_generation) {
        (Some(generation), Some(observed)) => observed >= generation,
        _ => true,
    };
    let status = found.and_then(|condition| text_at(condition, "/status"));
    Observation {
        generation,
        observed_generation,
        met: current && status.as_deref() == Some(wanted.status.as_str()),
        status,
        reason: found.and_then(|condition| text_at(condition, "/reason")),
        message: found.and_then(|condition| text_at(condition, "/message")),
        detail: None,
    }
}

/// [`condition`] of several conditions at once: met when all are (or,
/// with `any`, one is); its status each condition's, `Type=Status` joined,
/// its reason and message the first unmet one's. One condition is judged
/// as [`condition`] judges it.
pub fn conditions(object: &Value, wanted: &[WantedCondition], any: bool) -> Observation {
    if let [one] = wanted {
        return condition(object, one);
    }
    let looks: Vec<Observation> = wanted.iter().map(|w| condition(object, w)).collect();
    let met = if any {
        looks.iter().any(|look| look.met)
    } else {
        !looks.is_empty() && looks.iter().all(|look| look.met)
    };
    let status = wanted
        .iter()
        .zip(&looks)
        .map(|(wanted, look)| {
            format!(
                "{}={}",
                wanted.kind,
                look.status.as_deref().unwrap_or("absent")
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    let unmet = looks.iter().find(|look| !look.met).or(looks.first());
    Observation {
        generation: int_at(object, "/metadata/generation"),
        observed_generation: unmet.and_then(|look| look.observed_generation),
        status: Some(status),
        reason: unmet.and_then(|look| look.reason.clone()),
        message: unmet.and_then(|look| look.message.clone()),
        detail: None,
        met,
    }
}

/// Where a rollout is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rollout {
    Complete,
    /// Still going: what it waits for.
    Progressing(String),
    /// It will not complete by itself (a deadline the controller reports).
    Failed(String),
}

/// The kinds `kubernetes.rollout.status` judges.
pub const ROLLOUT_KINDS: [&str; 3] = ["Deployment", "StatefulSet", "DaemonSet"];

/// Whether the rollout of `object` (a Deployment, StatefulSet or
/// DaemonSet) is complete: the controller has observed the current
/// generation AND the updated, available (ready) and desired replicas are
/// all equal, with no old replica left. A status that still describes the
/// previous generation never counts, so a rollout just started is never
/// reported complete on the previous one's numbers.
pub fn rollout(kind: &str, object: &Value) -> Result<(Rollout, Observation), Failure> {
    let generation = int_at(object, "/metadata/generation");
    let observed_generation = int_at(object, "/status/observedGeneration");
    let count = |pointer: &str| int_at(object, pointer).unwrap_or(0);
    let (state, detail) = match kind {
        "Deployment" => {
            let desired = int_at(object, "/spec/replicas").unwrap_or(1);
            let (updated, available, total) = (
                count("/status/updatedReplicas"),
                count("/status/availableReplicas"),
                count("/status/replicas"),
            );
            let deadline = object
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|conditions| {
                    conditions.iter().find(|condition| {
                        condition.get("type").and_then(Value::as_str) == Some("Progressing")
                    })
                })
                .filter(|condition| {
                    condition.get("reason").and_then(Value::as_str)
                        == Some("ProgressDeadlineExceeded")
                });
            let state = if let Some(condition) = deadline {
                let message = text_at(condition, "/message").unwrap_or_default();
                Rollout::Failed(format!("progress deadline exceeded: {message}"))
            } else if updated < desired {
                Rollout::Progressing(format!("{updated} of {desired} replicas updated"))
            } else if total > updated {
                Rollout::Progressing(format!(
                    "{} old replica(s) pending termination",
                    total - updated
                ))
            } else if available < desired {
                Rollout::Progressing(format!(
                    "{available} of {desired} updated replicas available"
                ))
            } else {
                Rollout::Complete
            };
            let detail = serde_json::json!({
                "desired": desired, "updated": updated, "available": available, "replicas": total
            });
            (state, detail)
        }
        "StatefulSet" => {
            let desired = int_at(object, "/spec/replicas").unwrap_or(1);
            let (updated, ready) = (
                count("/status/updatedReplicas"),
                count("/status/readyReplicas"),
            );
            let current = text_at(object, "/status/currentRevision");
            let update = text_at(object, "/status/updateRevision");
            let state = if updated < desired {
                Rollout::Progressing(format!("{updated} of {desired} replicas updated"))
            } else if ready < desired {
                Rollout::Progressing(format!("{ready} of {desired} replicas ready"))
            } else if current.is_some() && update.is_some() && current != update {
                Rollout::Progressing("the update revision is not yet current".into())
            } else {
                Rollout::Complete
            };
            let detail = serde_json::json!({
                "desired": desired, "updated": updated, "ready": ready,
                "current_revision": current, "update_revision": update
            });
            (state, detail)
        }
        "DaemonSet" => {
            let desired = count("/status/desiredNumberScheduled");
            let (updated, available) = (
                count("/status/updatedNumberScheduled"),
                count("/status/numberAvailable"),
            );
            let state = if updated < desired {
                Rollout::Progressing(format!("{updated} of {desired} pods updated"))
            } else if available < desired {
                Rollout::Progressing(format!("{available} of {desired} updated pods available"))
            } else {
                Rollout::Complete
            };
            let detail =
                serde_json::json!({"desired": desired, "updated": updated, "available": available});
            (state, detail)
        }
        other => {
            return Err(Failure::contract(format!(
                "`{other}` has no rollout: rollout.status watches {}",
                ROLLOUT_KINDS.join(", ")
            )))
        }
    };
    // The generation gate comes first: numbers from the previous rollout
    // must never read as this one's completion.
    let state = match (generation, observed_generation) {
        (Some(generation), observed) if observed.unwrap_or(0) < generation => {
            Rollout::Progressing(format!(
                "generation {generation} not yet observed (observed {})",
                observed.unwrap_or(0)
            ))
        }
        _ => state,
    };
    let (status, message) = match &state {
        Rollout::Complete => ("Complete", None),
        Rollout::Progressing(message) => ("Progressing", Some(message.clone())),
        Rollout::Failed(message) => ("Failed", Some(message.clone())),
    };
    let observation = Observation {
        generation,
        observed_generation,
        status: Some(status.to_owned()),
        reason: None,
        message,
        detail: Some(detail),
        met: state == Rollout::Complete,
    };
    Ok((state, observation))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_manifests_file_is_its_documents_with_lists_expanded() {
        let text = "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n---\n\
                    {\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": [{\"kind\": \"Secret\"}, {\"kind\": \"Service\"}]}\n";
        let kinds: Vec<Value> = documents(text.as_bytes())
            .unwrap()
            .into_iter()
            .map(|manifest| manifest["kind"].clone())
            .collect();
        assert_eq!(
            kinds,
            vec![json!("ConfigMap"), json!("Secret"), json!("Service")]
        );
        assert!(documents(b"- a\n- b\n")
            .unwrap_err()
            .contains("not an object"));
    }

    #[test]
    fn an_unchanged_object_has_no_changed_fields_whatever_the_server_bookkeeping() {
        let before = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "resourceVersion": "1", "managedFields": [{"manager": "x"}],
                         "uid": "u", "creationTimestamp": "t"},
            "data": {"k": "v"}, "status": {"x": 1}});
        let mut after = before.clone();
        after["metadata"]["resourceVersion"] = json!("2");
        after["status"] = json!({"x": 2});
        assert_eq!(changed_fields(Some(&before), &after), (vec![], false));
    }

    #[test]
    fn changed_fields_are_paths_with_odd_keys_quoted() {
        let before = json!({"metadata": {"labels": {"app.kubernetes.io/name": "a"}},
                            "spec": {"replicas": 1, "ports": [{"port": 80}, {"port": 81}]}});
        let after = json!({"metadata": {"labels": {"app.kubernetes.io/name": "b"}},
                           "spec": {"replicas": 2, "ports": [{"port": 80}, {"port": 82}], "new": true}});
        let (paths, truncated) = changed_fields(Some(&before), &after);
        assert_eq!(
            paths,
            vec![
                r#"metadata.labels["app.kubernetes.io/name"]"#,
                "spec.new",
                "spec.ports[1].port",
                "spec.replicas"
            ]
        );
        assert!(!truncated);
    }

    #[test]
    fn a_created_object_lists_its_leaves_and_a_long_diff_is_cut() {
        let after = json!({"kind": "ConfigMap", "data": {"a": "1", "b": "2"}});
        assert_eq!(
            changed_fields(None, &after).0,
            vec!["data.a", "data.b", "kind"]
        );
        let data: Map<String, Value> = (0..150).map(|i| (format!("k{i:03}"), json!(i))).collect();
        let (paths, truncated) = changed_fields(None, &json!({"data": data}));
        assert_eq!(paths.len(), MAX_CHANGED_FIELDS);
        assert!(truncated);
    }

    #[test]
    fn typed_and_nested_lists_are_read_item_by_item() {
        let text = "kind: ConfigMapList\nitems:\n- {kind: List, items: [{kind: RoleBinding, metadata: {namespace: kube-system}}]}\n- {kind: ConfigMap}\n";
        let kinds: Vec<Value> = documents(text.as_bytes())
            .unwrap()
            .into_iter()
            .map(|object| object["kind"].clone())
            .collect();
        assert_eq!(kinds, vec![json!("RoleBinding"), json!("ConfigMap")]);
        assert!(documents(b"kind: List\nitems: 3\n").is_err());
    }

    #[test]
    fn an_apply_that_wrote_nothing_leaves_its_managers_entry_alone() {
        let object = |time: &str| {
            json!({"metadata": {"managedFields": [
                {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status", "time": "t9"},
                {"manager": "deployer", "operation": "Apply", "time": time, "fieldsV1": {"f:data": {}}}
            ]}})
        };
        assert_eq!(
            applied_by(&object("t1"), "deployer"),
            applied_by(&object("t1"), "deployer")
        );
        assert_ne!(
            applied_by(&object("t1"), "deployer"),
            applied_by(&object("t2"), "deployer")
        );
        assert_eq!(applied_by(&object("t1"), "kube-controller-manager"), None);
    }

    #[test]
    fn a_secret_read_keeps_its_keys_not_its_values() {
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "data": {"password": "aHVudGVyMg=="},
                            "stringData": {"token": "t"}});
        let shown = redacted(secret);
        assert_eq!(shown["data"]["password"], "[redacted]");
        assert_eq!(shown["stringData"]["token"], "[redacted]");
        // kubectl apply's copy of the Secret, and one that is not JSON.
        let applied = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
                             "data": {"password": "aHVudGVyMg=="}})
        .to_string();
        for (annotation, expected) in [
            (
                applied,
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
                             "data": {"password": "[redacted]"}})
                .to_string(),
            ),
            ("password: aHVudGVyMg==".to_owned(), "[redacted]".to_owned()),
        ] {
            let secret = json!({"apiVersion": "v1", "kind": "Secret", "data": {"password": "aHVudGVyMg=="},
                                "metadata": {"annotations": {
                                    "kubectl.kubernetes.io/last-applied-configuration": annotation,
                                    "team": "a"}}});
            let shown = redacted(secret);
            let annotations = &shown["metadata"]["annotations"];
            assert_eq!(
                annotations["kubectl.kubernetes.io/last-applied-configuration"],
                expected.as_str()
            );
            assert_eq!(annotations["team"], "a");
            assert!(!shown.to_string().contains("aHVudGVyMg"), "{shown}");
        }
        let config = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "v"}});
        assert_eq!(redacted(config.clone()), config);
    }

    #[test]
    fn any_object_with_items_is_a_list_as_helm_s_client_reads_it() {
        // A ConfigMap with `items` is created as its items, never itself.
        let smuggled = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: decoy}\nitems:\n  - {apiVersion: v1, kind: Secret, metadata: {name: x, namespace: team-b}}\n";
        let read = documents(smuggled).unwrap();
        assert_eq!(read.len(), 1);
        assert_eq!(read[0]["kind"], "Secret");
        assert_eq!(read[0]["metadata"]["namespace"], "team-b");
        let not_a_list = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: odd}\nitems: 3\n";
        assert!(documents(not_a_list).is_err());
    }

    #[test]
    fn a_condition_is_read_in_every_spelling() {
        let expect = |kind: &str, status: &str| WantedCondition {
            kind: kind.into(),
            status: status.into(),
        };
        assert_eq!(
            WantedCondition::parse("Available"),
            Ok(expect("Available", "True"))
        );
        assert_eq!(
            WantedCondition::parse("condition=Ready=false"),
            Ok(expect("Ready", "False"))
        );
        assert!(WantedCondition::parse("Ready=maybe").is_err());
        assert!(WantedCondition::parse("").is_err());
        assert!(WantedCondition::parse("a b").is_err());
    }

    #[test]
    fn a_condition_of_an_older_generation_is_not_met() {
        let wanted = WantedCondition::parse("Available").unwrap();
        let mut object = json!({"metadata": {"generation": 2},
            "status": {"observedGeneration": 1,
                       "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"}]}});
        let seen = condition(&object, &wanted);
        assert!(!seen.met);
        assert_eq!(seen.status.as_deref(), Some("True"));
        object["status"]["observedGeneration"] = json!(2);
        assert!(condition(&object, &wanted).met);
        // A condition's own observedGeneration wins over the status's.
        object["status"]["conditions"][0]["observedGeneration"] = json!(1);
        assert!(!condition(&object, &wanted).met);
        let absent = WantedCondition::parse("Progressing").unwrap();
        assert!(!condition(&object, &absent).met);
    }

    fn deployment(generation: i64, observed: i64, counts: [i64; 3]) -> Value {
        json!({"metadata": {"generation": generation}, "spec": {"replicas": 2},
               "status": {"observedGeneration": observed, "updatedReplicas": counts[0],
                          "availableReplicas": counts[1], "replicas": counts[2]}})
    }

    #[test]
    fn a_deployment_is_complete_only_on_the_current_generation_with_every_count_equal() {
        let judge = |object: &Value| rollout("Deployment", object).unwrap().0;
        // The previous rollout's numbers, before the controller saw generation 3.
        assert!(
            matches!(judge(&deployment(3, 2, [2, 2, 2])), Rollout::Progressing(m) if m.contains("generation 3"))
        );
        assert!(
            matches!(judge(&deployment(3, 3, [1, 2, 3])), Rollout::Progressing(m) if m.contains("1 of 2 replicas updated"))
        );
        assert!(
            matches!(judge(&deployment(3, 3, [2, 1, 3])), Rollout::Progressing(m) if m.contains("old replica"))
        );
        assert!(
            matches!(judge(&deployment(3, 3, [2, 1, 2])), Rollout::Progressing(m) if m.contains("available"))
        );
        assert_eq!(judge(&deployment(3, 3, [2, 2, 2])), Rollout::Complete);
        let mut stuck = deployment(3, 3, [1, 1, 2]);
        stuck["status"]["conditions"] = json!([{"type": "Progressing", "status": "False",
            "reason": "ProgressDeadlineExceeded", "message": "ReplicaSet \"a\" has timed out"}]);
        assert!(matches!(judge(&stuck), Rollout::Failed(_)));
    }

    #[test]
    fn statefulsets_and_daemonsets_are_judged_by_their_own_counts() {
        let set = json!({"metadata": {"generation": 1}, "spec": {"replicas": 1},
            "status": {"observedGeneration": 1, "updatedReplicas": 1, "readyReplicas": 1,
                       "currentRevision": "a", "updateRevision": "b"}});
        assert!(matches!(
            rollout("StatefulSet", &set).unwrap().0,
            Rollout::Progressing(_)
        ));
        let daemons = json!({"metadata": {"generation": 1},
            "status": {"observedGeneration": 1, "desiredNumberScheduled": 2,
                       "updatedNumberScheduled": 2, "numberAvailable": 2}});
        assert_eq!(rollout("DaemonSet", &daemons).unwrap().0, Rollout::Complete);
        assert!(rollout("ConfigMap", &daemons).is_err());
    }
}
