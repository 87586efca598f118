//! The inputs of the verification runner's operations, and their union: what the runner
//! SDK hands that runner's executor.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::kubernetes::ObjectRef;
use super::OperationInputs;
use super::{ClusterRef, Vars};
use super::{Governed, KeyKind};
use crate::contract::DurationMs;
use crate::contract::{FailureCategory, Operation, Problem};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpExpect {
    #[serde(default)]
    pub status: Option<u16>,
    #[serde(default)]
    pub body_contains: Option<String>,
    #[serde(default)]
    pub max_latency_ms: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyHttp {
    pub url: String,
    #[serde(default = "default_method")]
    pub method: String,
    #[serde(default)]
    pub headers: Vars,
    #[serde(default)]
    pub body: Option<String>,
    #[serde(default)]
    pub expect: HttpExpect,
    #[serde(default)]
    pub timeout: Option<DurationMs>,
}

fn default_method() -> String {
    "GET".to_owned()
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyTcp {
    pub host: String,
    pub port: u16,
    #[serde(default)]
    pub timeout: Option<DurationMs>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyKubernetesCondition {
    pub cluster: ClusterRef,
    pub namespace: String,
    pub object: ObjectRef,
    pub condition: super::kubernetes::WantedCondition,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyPostgres {
    pub host: String,
    #[serde(default = "default_pg_port")]
    pub port: u16,
    pub database: String,
    pub user: String,
    #[serde(default)]
    pub password: Option<Value>,
}

fn default_pg_port() -> u16 {
    5432
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyCapability {
    pub cluster: ClusterRef,
    pub resource: ResourceKind,
    pub verbs: Vec<String>,
    #[serde(default)]
    pub namespace: Option<String>,
}

/// A kind as `<apiVersion>/<Kind>` (`apps/v1/Deployment`, `v1/ConfigMap`),
/// read in two.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceKind {
    pub api_version: String,
    pub kind: String,
}

impl ResourceKind {
    pub fn parse(resource: &str) -> Result<Self, String> {
        match resource.rsplit_once('/') {
            Some((api_version, kind))
                if !kind.is_empty()
                    && api_version.split('/').count() <= 2
                    && api_version.split('/').all(|part| !part.is_empty())
                    && kind.bytes().all(|b| b.is_ascii_alphanumeric()) =>
            {
                Ok(Self {
                    api_version: api_version.to_owned(),
                    kind: kind.to_owned(),
                })
            }
            _ => Err(format!(
                "`{}` is not <apiVersion>/<Kind> (e.g. `apps/v1/Deployment`, `v1/ConfigMap`)",
                crate::contract::limits::loggable(resource)
            )),
        }
    }
}

/// Written as in a JobSpec, `<apiVersion>/<Kind>`.
impl Serialize for ResourceKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&format_args!("{}/{}", self.api_version, self.kind))
    }
}

/// Read from a JobSpec's text: one that does not parse is refused with
/// [`ResourceKind::parse`]'s reason.
impl<'de> Deserialize<'de> for ResourceKind {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyCustom {
    /// An allowlisted probe id.
    pub probe_id: String,
    #[serde(default)]
    pub args: Vars,
}

super::runner_inputs! {
    /// The inputs of the verification runner's operations.
    VerifyInputs {
    VerifyHttpEndpoint(VerifyHttp),
    VerifyTcpConnect(VerifyTcp),
    VerifyKubernetesCondition(VerifyKubernetesCondition),
    VerifyPostgresReady(VerifyPostgres),
    VerifyResourceCapability(VerifyCapability),
    VerifyCustomProbe(VerifyCustom),
    }
}

impl super::Vocabulary for VerifyInputs {
    /// The namespace a cluster check reads; probes of targets add nothing.
    fn target_keys(&self, _tenant: &str) -> Vec<(KeyKind, String)> {
        match self {
            Self::VerifyKubernetesCondition(verify) => {
                super::namespace_key(&verify.cluster, &verify.namespace)
            }
            Self::VerifyHttpEndpoint(_)
            | Self::VerifyTcpConnect(_)
            | Self::VerifyPostgresReady(_)
            | Self::VerifyResourceCapability(_)
            | Self::VerifyCustomProbe(_) => Vec::new(),
        }
    }

    /// The cluster objects and namespaces it reads.
    fn governed(&self) -> Vec<Governed<'_>> {
        match self {
            Self::VerifyKubernetesCondition(condition) => vec![Governed::Object {
                cluster: &condition.cluster,
                namespace: &condition.namespace,
                object: &condition.object,
            }],
            Self::VerifyResourceCapability(capability) => vec![Governed::Namespace {
                cluster: &capability.cluster,
                namespace: capability.namespace.as_deref().unwrap_or("default"),
            }],
            Self::VerifyHttpEndpoint(_)
            | Self::VerifyTcpConnect(_)
            | Self::VerifyPostgresReady(_)
            | Self::VerifyCustomProbe(_) => Vec::new(),
        }
    }

    fn result_problem(operation: Operation, result: &Value) -> Result<(), String> {
        result_problem(operation, result)
    }
}

/// What intake checks of a verification's inputs beyond their shape: an
/// HTTP probe's URL is http(s), a custom probe names one.
pub(super) fn problems_of(inputs: &OperationInputs) -> Vec<Problem> {
    match inputs {
        OperationInputs::VerifyHttpEndpoint(http)
            if !(http.url.starts_with("http://") || http.url.starts_with("https://")) =>
        {
            vec![Problem::new(
                "inputs.url",
                "must be an http:// or https:// URL",
            )]
        }
        OperationInputs::VerifyCustomProbe(probe) if probe.probe_id.trim().is_empty() => {
            vec![Problem::new("inputs.probe_id", "must not be empty")]
        }
        _ => Vec::new(),
    }
}

// Results (docs/OPERATIONS.md): what its executor reports.

/// The result of every verification operation: the samples taken, whether
/// the last one passed, and the failure category the runner recommends.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerificationEvidence {
    pub operation: String,
    pub samples: Vec<EvidenceSample>,
    pub passed: bool,
    pub recommended_failure_category: Option<FailureCategory>,
}

/// One sample of a verification.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvidenceSample {
    /// 1, 2, ... in the order taken.
    pub n: u32,
    /// When it was taken (RFC 3339).
    pub at: String,
    pub latency_ms: u64,
    /// Something answered (false: refused, timed out, unresolvable).
    pub reached: bool,
    /// What the probe saw (per operation; see docs/OPERATIONS.md).
    pub observed: Value,
    pub assertions: Vec<EvidenceAssertion>,
    pub error: Option<String>,
    /// The operator's destination policy refused the connection.
    #[serde(default)]
    pub refused_by_policy: bool,
}

/// One assertion of a sample.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvidenceAssertion {
    pub name: String,
    pub expected: Value,
    pub actual: Value,
    pub passed: bool,
}
/// Whether `result` is the evidence of `operation`; the problem when not.
pub(super) fn result_problem(operation: Operation, result: &Value) -> Result<(), String> {
    let evidence: VerificationEvidence = serde_path_to_error::deserialize(result)
        .map_err(|error| format!("{}: {}", error.path(), error.inner()))?;
    if evidence.operation != operation.as_str() {
        return Err(format!(
            "operation: `{}`, not `{operation}`",
            evidence.operation
        ));
    }
    if evidence.passed == evidence.recommended_failure_category.is_some() {
        return Err(
            "recommended_failure_category: set exactly when the verification did not pass".into(),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resource_is_an_api_version_and_a_kind() {
        let parts =
            |text: &str| ResourceKind::parse(text).map(|kind| (kind.api_version, kind.kind));
        assert_eq!(
            parts("apps/v1/Deployment"),
            Ok(("apps/v1".into(), "Deployment".into()))
        );
        assert_eq!(parts("v1/ConfigMap"), Ok(("v1".into(), "ConfigMap".into())));
        for bad in ["Deployment", "/v1/X", "a/b/c/Kind", "v1/", "v1/Config Map"] {
            assert!(ResourceKind::parse(bad).is_err(), "{bad}");
        }
    }
    use crate::contract::ops::check_result;
    use serde_json::json;

    fn evidence(passed: bool, recommended: Value) -> Value {
        json!({
            "operation": "verify.tcp.connect", "passed": passed,
            "recommended_failure_category": recommended,
            "samples": [{"n": 1, "at": "2026-12-01T00:00:00Z", "latency_ms": 3, "reached": true,
                         "observed": {"peer": "127.0.0.1:5432"}, "assertions": [], "error": null}]
        })
    }

    #[test]
    fn a_verification_result_has_the_documented_shape() {
        let op = Operation::VerifyTcpConnect;
        assert_eq!(check_result(op, &evidence(true, Value::Null)), Ok(()));
        assert_eq!(
            check_result(op, &evidence(false, json!("target_unreachable"))),
            Ok(())
        );
        assert!(check_result(op, &evidence(false, Value::Null)).is_err());
        assert!(
            check_result(Operation::VerifyHttpEndpoint, &evidence(true, Value::Null))
                .unwrap_err()
                .contains("operation")
        );
        let mut extra = evidence(true, Value::Null);
        extra["samples"][0]["surprise"] = json!(1);
        assert!(check_result(op, &extra).unwrap_err().contains("samples[0]"));
        assert!(check_result(op, &json!({"ok": true})).is_err());
    }
}
