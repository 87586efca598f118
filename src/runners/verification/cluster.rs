//! The Kubernetes probes: a named condition on an object
//! (`verify.kubernetes.condition`) and whether the cluster serves a kind
//! with the verbs asked for (`verify.resource.capability`). Both only read:
//! discovery and GET, through the kubernetes runner's client (the
//! operator's endpoint and CAs, the attempt's credentials from Vault).

use std::time::{Duration, Instant};

use serde_json::json;

use super::probes::{Assertion, Sample};
use crate::contract::ops::WantedCondition;
use crate::contract::ops::{VerifyCapability, VerifyKubernetesCondition};
use crate::policy::OperationRules;
use crate::runner::kit::kube::judge;
use crate::runner::kit::kube::Kinds;

/// The most of an API server's message a sample quotes.
const MAX_MESSAGE: usize = 1024;

/// A call's error as a sample's: an answer from the API server means the
/// cluster was reached.
fn failed_call(sample: &mut Sample, what: &str, error: kube::Error) {
    sample.reached = matches!(error, kube::Error::Api(_));
    let message = match error {
        kube::Error::Api(status) => format!(
            "{what}: the API server answered {} {}: {}",
            status.code, status.reason, status.message
        ),
        other => format!("{what}: {other}"),
    };
    sample.error = Some(crate::contract::limits::shortened(&message, MAX_MESSAGE));
}

pub struct Probe<'a> {
    pub client: &'a kube::Client,
    pub rules: &'a OperationRules,
    pub timeout: Duration,
}

impl Probe<'_> {
    /// One look at the object: is the condition what was asked, on the
    /// current generation?
    pub async fn condition(&self, inputs: &VerifyKubernetesCondition, n: u32) -> Sample {
        let mut sample = Sample::new(n);
        let started = Instant::now();
        let wanted =
            crate::contract::ops::kubernetes::wanted(&inputs.condition, &inputs.conditions);
        let object = &inputs.object;
        let looked = tokio::time::timeout(self.timeout, async {
            let resolved = match Kinds::default()
                .resolve(self.client, &object.api_version, &object.kind)
                .await
            {
                Ok(Some(resolved)) => resolved,
                Ok(None) => {
                    sample.reached = true;
                    sample.error = Some(format!(
                        "inputs.object: the cluster serves no kind `{}` in `{}`",
                        object.kind, object.api_version
                    ));
                    return;
                }
                Err(error) => {
                    failed_call(&mut sample, "discovery", error);
                    return;
                }
            };
            let namespace = resolved.namespaced.then(|| {
                object
                    .namespace
                    .clone()
                    .unwrap_or_else(|| inputs.namespace.clone())
            });
            if let Err(refusal) = self.rules.kubernetes_object(
                &inputs.cluster.name,
                &object.kind,
                &object.name,
                namespace.as_deref(),
            ) {
                sample.refused_by_policy = true;
                sample.error = Some(format!("inputs.object: {refusal}"));
                return;
            }
            let api: kube::Api<kube::api::DynamicObject> = match &namespace {
                Some(namespace) => {
                    kube::Api::namespaced_with(self.client.clone(), namespace, &resolved.resource)
                }
                None => kube::Api::all_with(self.client.clone(), &resolved.resource),
            };
            match api.get_opt(&object.name).await {
                Ok(found) => {
                    sample.reached = true;
                    let found = found.and_then(|found| serde_json::to_value(found).ok());
                    judge_condition(&mut sample, found.as_ref(), &wanted, inputs.any);
                }
                Err(error) => failed_call(&mut sample, "read", error),
            }
        })
        .await;
        if looked.is_err() {
            sample.error = Some(format!("no answer within {} ms", self.timeout.as_millis()));
        }
        sample.latency_ms = started.elapsed().as_millis() as u64;
        sample
    }

    /// Does the cluster serve the kind, with every verb asked for?
    pub async fn capability(&self, inputs: &VerifyCapability, n: u32) -> Sample {
        let mut sample = Sample::new(n);
        let started = Instant::now();
        let (api_version, kind) = (&inputs.resource.api_version, &inputs.resource.kind);
        let asked = tokio::time::timeout(
            self.timeout,
            Kinds::default().resolve(self.client, api_version, kind),
        )
        .await;
        sample.latency_ms = started.elapsed().as_millis() as u64;
        match asked {
            Err(_) => {
                sample.error = Some(format!("no answer within {} ms", self.timeout.as_millis()));
            }
            Ok(Ok(Some(resolved))) => {
                sample.reached = true;
                sample.observed = json!({
                    "api_version": api_version, "kind": kind,
                    "resource": resolved.resource.plural,
                    "namespaced": resolved.namespaced,
                    "verbs": resolved.verbs,
                });
                sample.assertions.push(Assertion {
                    name: "served".into(),
                    expected: true.into(),
                    actual: true.into(),
                    passed: true,
                });
                let missing: Vec<&String> = inputs
                    .verbs
                    .iter()
                    .filter(|verb| !resolved.verbs.contains(verb))
                    .collect();
                if !inputs.verbs.is_empty() {
                    sample.assertions.push(Assertion {
                        name: "verbs".into(),
                        expected: json!(inputs.verbs),
                        actual: json!(resolved.verbs),
                        passed: missing.is_empty(),
                    });
                }
            }
            // Not served: the cluster answered, and the answer is no.
            Ok(Ok(None)) => {
                sample.reached = true;
                sample.observed = json!({"api_version": api_version, "kind": kind});
                sample.assertions.push(Assertion {
                    name: "served".into(),
                    expected: true.into(),
                    actual: false.into(),
                    passed: false,
                });
            }
            Ok(Err(error)) => failed_call(&mut sample, "discovery", error),
        }
        sample
    }
}

/// The sample's judgement of the object read (none: it does not exist):
/// what it shows, and whether the condition is what was asked on its
/// current generation.
fn judge_condition(
    sample: &mut Sample,
    found: Option<&serde_json::Value>,
    wanted: &[WantedCondition],
    any: bool,
) {
    let each: Vec<String> = wanted
        .iter()
        .map(|wanted| format!("{}={}", wanted.kind, wanted.status))
        .collect();
    let expected = match (each.as_slice(), any) {
        ([one], _) => one.clone(),
        (_, false) => each.join(", "),
        (_, true) => format!("any of {}", each.join(", ")),
    };
    let Some(found) = found else {
        sample.observed = json!({"exists": false});
        sample.assertions.push(Assertion {
            name: "condition".into(),
            expected: expected.into(),
            actual: "the object does not exist".into(),
            passed: false,
        });
        return;
    };
    let seen = judge::conditions(found, wanted, any);
    let current = match (seen.generation, seen.observed_generation) {
        (Some(generation), Some(observed)) => observed >= generation,
        _ => true,
    };
    sample.observed = json!({
        "exists": true,
        "uid": found.pointer("/metadata/uid"),
        "resource_version": found.pointer("/metadata/resourceVersion"),
        "generation": seen.generation,
        "observed_generation": seen.observed_generation,
        "status": seen.status,
        "reason": seen.reason,
        "message": seen.message,
    });
    // One condition's status is its own; a set's is `Type=Status` joined.
    let shown = seen.status.as_ref().map(|status| match wanted {
        [one] => format!("{}={status}", one.kind),
        _ => status.clone(),
    });
    let actual = match (shown, current) {
        (None, _) => "not reported".to_owned(),
        (Some(shown), true) => shown,
        (Some(shown), false) => format!(
            "{shown} of an older generation ({} observed, {} current)",
            seen.observed_generation.unwrap_or_default(),
            seen.generation.unwrap_or_default()
        ),
    };
    sample.assertions.push(Assertion {
        name: "condition".into(),
        expected: expected.into(),
        actual: actual.into(),
        passed: seen.met,
    });
}
