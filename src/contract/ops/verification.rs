//! The inputs of the verification runner's operations, and their union: what the runner
//! SDK hands that runner's executor.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::kubernetes::ObjectRef;
use super::OperationInputs;
use super::{ClusterRef, Vars};
use crate::contract::DurationMs;
use crate::contract::Problem;

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
    pub condition: String,
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
    pub resource: String,
    pub verbs: Vec<String>,
    #[serde(default)]
    pub namespace: Option<String>,
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
