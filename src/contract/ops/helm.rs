//! The inputs of the helm runner's operations, and their union: what the runner
//! SDK hands that runner's executor.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{ClusterRef, OperationInputs, Vars};
use super::{Governed, KeyKind};
use crate::contract::artifact_ref::InputRef;
use crate::contract::{Operation, PolicyFlags, Problem};

/// The most values artifacts one operation merges.
pub const MAX_VALUES_ARTIFACTS: usize = 16;

/// A chart from an approved source, pinned.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChartRef {
    pub repository: String,
    pub name: String,
    pub version: String,
    #[serde(default)]
    pub digest: Option<String>,
    /// How to log in to a classic (HTTP) chart repository: HTTP basic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login: Option<RepositoryLogin>,
}

/// A chart repository's or registry's login: HTTP basic, a TLS client
/// certificate, a CA to trust, or several. The runner writes it to the
/// attempt's own helm configuration and 0600 files in its working
/// directory: never to an argument vector or a log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepositoryLogin {
    /// Text, or a `{"$secret": ...}` reference; with `password`.
    #[serde(default)]
    pub username: Option<Value>,
    /// A `{"$secret": ...}` reference (a literal is refused by name).
    #[serde(default)]
    pub password: Option<Value>,
    /// A client certificate (PEM), text or a reference; with `client_key`.
    #[serde(default)]
    pub client_cert: Option<Value>,
    /// Its private key (PEM): a `{"$secret": ...}` reference.
    #[serde(default)]
    pub client_key: Option<Value>,
    /// The CA (PEM) the repository's certificate must chain to, text or a
    /// reference; the system's roots when absent.
    #[serde(default)]
    pub ca: Option<Value>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HelmRelease {
    pub cluster: ClusterRef,
    pub release: String,
    pub namespace: String,
    pub chart: ChartRef,
    /// Values files stored as the tenant's input artifacts, merged in
    /// order; `values` go on top.
    #[serde(default)]
    pub values_artifacts: Vec<InputRef>,
    #[serde(default)]
    pub values: Vars,
    /// helm's `--wait`: until the release's resources are ready.
    #[serde(default)]
    pub wait: bool,
    /// helm's `--atomic`: a failed install is uninstalled, a failed upgrade
    /// rolled back (implies `wait`).
    #[serde(default)]
    pub atomic: bool,
    /// helm's `--wait-for-jobs`: `wait`, and until the release's Jobs
    /// completed.
    #[serde(default)]
    pub wait_for_jobs: bool,
    /// How long helm waits (`--timeout`), at most what the attempt's
    /// `start_to_close` leaves; that when absent. Its expiry before the
    /// deadline is `verification_failed` (the release did not become
    /// ready), at the deadline `timeout`.
    #[serde(default)]
    pub timeout: Option<crate::contract::DurationMs>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HelmRollback {
    pub cluster: ClusterRef,
    pub release: String,
    pub namespace: String,
    pub revision: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HelmReleaseRef {
    pub cluster: ClusterRef,
    pub release: String,
    pub namespace: String,
}

/// `helm.test`: a release's test hooks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HelmTestInputs {
    pub cluster: ClusterRef,
    pub release: String,
    pub namespace: String,
    /// A release with no test hooks succeeds (else it fails: nothing was
    /// verified).
    #[serde(default)]
    pub allow_no_tests: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HelmTemplate {
    pub release: String,
    pub namespace: String,
    pub chart: ChartRef,
    /// As [`HelmRelease::values_artifacts`].
    #[serde(default)]
    pub values_artifacts: Vec<InputRef>,
    #[serde(default)]
    pub values: Vars,
}

super::runner_inputs! {
    /// The inputs of the helm runner's operations.
    HelmInputs {
    HelmInstall(HelmRelease),
    HelmUpgrade(HelmRelease),
    HelmRollback(HelmRollback),
    HelmUninstall(HelmReleaseRef),
    HelmTest(HelmTestInputs),
    HelmTemplate(HelmTemplate),
    }
}

impl super::Vocabulary for HelmInputs {
    /// The release it acts on; rendering touches nothing.
    fn target_keys(&self, _tenant: &str) -> Vec<(KeyKind, String)> {
        let (cluster, namespace, release) = match self {
            Self::HelmInstall(helm) | Self::HelmUpgrade(helm) => {
                (&helm.cluster, &helm.namespace, &helm.release)
            }
            Self::HelmRollback(helm) => (&helm.cluster, &helm.namespace, &helm.release),
            Self::HelmUninstall(HelmReleaseRef {
                cluster,
                namespace,
                release,
            })
            | Self::HelmTest(HelmTestInputs {
                cluster,
                namespace,
                release,
                ..
            }) => (cluster, namespace, release),
            Self::HelmTemplate(_) => return Vec::new(),
        };
        vec![(
            KeyKind::Release,
            format!("{}/{namespace}/{release}", cluster.name),
        )]
    }

    /// The namespace it acts in and the chart it installs.
    fn governed(&self) -> Vec<Governed<'_>> {
        let namespace = |cluster, namespace| Governed::Namespace { cluster, namespace };
        match self {
            Self::HelmInstall(release) | Self::HelmUpgrade(release) => vec![
                namespace(&release.cluster, &release.namespace),
                Governed::Chart(&release.chart),
            ],
            Self::HelmRollback(rollback) => vec![namespace(&rollback.cluster, &rollback.namespace)],
            Self::HelmUninstall(HelmReleaseRef {
                cluster,
                namespace: name,
                ..
            })
            | Self::HelmTest(HelmTestInputs {
                cluster,
                namespace: name,
                ..
            }) => vec![namespace(cluster, name)],
            Self::HelmTemplate(template) => vec![Governed::Chart(&template.chart)],
        }
    }

    /// A rollback only as an explicit command.
    fn flag_problems(
        operation: Operation,
        flags: &PolicyFlags,
        _inputs: Option<&Value>,
    ) -> Vec<Problem> {
        match operation {
            Operation::HelmRollback if !flags.explicit_command => vec![Problem::new(
                "policy.explicit_command",
                "helm.rollback runs only as an explicit control-plane command (`policy.explicit_command: true`)",
            )],
            _ => Vec::new(),
        }
    }

    fn result_problem(_: Operation, result: &Value) -> Result<(), String> {
        super::shaped::<HelmResult>(result)
    }
}

/// What intake checks of a helm operation's inputs beyond their shape
/// (the chart's name and version: `kube_names`): a login only for a
/// classic repository, its username text; a bounded list of values
/// artifacts.
pub(super) fn problems_of(inputs: &OperationInputs) -> Vec<Problem> {
    use OperationInputs as I;
    let (chart, values_artifacts) = match inputs {
        I::HelmInstall(release) | I::HelmUpgrade(release) => {
            (&release.chart, &release.values_artifacts)
        }
        I::HelmTemplate(template) => (&template.chart, &template.values_artifacts),
        _ => return Vec::new(),
    };
    let mut problems = Vec::new();
    if values_artifacts.len() > MAX_VALUES_ARTIFACTS {
        problems.push(Problem::new(
            "inputs.values_artifacts",
            format!("at most {MAX_VALUES_ARTIFACTS}"),
        ));
    }
    if let Some(login) = &chart.login {
        let known = ["https://", "http://", "oci://"]
            .iter()
            .any(|scheme| chart.repository.starts_with(scheme));
        if !known {
            problems.push(Problem::new(
                "inputs.chart.login",
                "a login is for a classic chart repository (`https://…`) or an OCI registry (`oci://…`)",
            ));
        }
        if login.username.is_some() != login.password.is_some()
            || login.client_cert.is_some() != login.client_key.is_some()
        {
            problems.push(Problem::new(
                "inputs.chart.login",
                "`username` goes with `password`, `client_cert` with `client_key`",
            ));
        }
        if login.username.is_none() && login.client_cert.is_none() && login.ca.is_none() {
            problems.push(Problem::new(
                "inputs.chart.login",
                "a login says something: `username` and `password`, `client_cert` and `client_key`, or `ca`",
            ));
        }
        let username_fine = match &login.username {
            None => true,
            Some(Value::String(name)) => {
                (1..=256).contains(&name.len()) && !name.chars().any(char::is_control)
            }
            Some(Value::Object(reference)) => reference.contains_key("$secret"),
            _ => false,
        };
        if !username_fine {
            problems.push(Problem::new(
                "inputs.chart.login.username",
                "1-256 characters without control characters, or a `{\"$secret\": …}` reference",
            ));
        }
    }
    problems
}

// Results (docs/OPERATIONS.md): what its executor reports.

/// The result of every `helm.*` operation: the release as helm reports it
/// after the operation, the objects of its rendered manifests (stored as
/// the output `rendered-manifests.yaml`) and its test hooks' last runs.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HelmResult {
    pub release: String,
    pub namespace: String,
    /// `<name>-<version>` of the chart used (install, upgrade, template).
    pub chart: Option<String>,
    /// The chart archive's digest, when pinned.
    pub chart_digest: Option<String>,
    /// The release's revision after the operation.
    pub revision: Option<u32>,
    /// `deployed`, `failed`, `uninstalled`, ...
    pub status: Option<String>,
    pub description: Option<String>,
    /// The chart's NOTES (at most 4 KiB).
    pub notes: Option<String>,
    pub objects: Vec<HelmObject>,
    /// The output holding the rendered manifests.
    pub manifests: Option<String>,
    /// The test hooks and how their last run ended.
    pub tests: Vec<HelmTestRun>,
}

/// One object of a release's rendered manifests.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HelmObject {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub namespace: Option<String>,
}

/// One test hook of a release.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HelmTestRun {
    pub name: String,
    /// `Succeeded`, `Failed`, `Running`; `None`: never run.
    pub phase: Option<String>,
    pub started_at: Option<String>,
    pub completed_at: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn problems(chart: Value, extra: Value) -> Vec<String> {
        let mut inputs = json!({"release": "web", "namespace": "team-a", "chart": chart});
        for (key, value) in extra.as_object().unwrap() {
            inputs[key] = value.clone();
        }
        let inputs = OperationInputs::parse(Operation::HelmTemplate, &inputs).unwrap();
        problems_of(&inputs)
            .into_iter()
            .map(|problem| problem.path)
            .collect()
    }

    #[test]
    fn a_login_is_for_a_repository_or_a_registry_and_values_artifacts_are_bounded() {
        let login = json!({"username": "ci", "password": {"$secret": "repo"}});
        let chart = |repository: &str, login: &Value| json!({"repository": repository, "name": "web", "version": "1.0.0", "login": login});
        assert!(problems(chart("https://charts.example.com", &login), json!({})).is_empty());
        assert!(problems(
            chart("oci://registry.example.com/charts", &login),
            json!({})
        )
        .is_empty());
        assert_eq!(
            problems(chart("artifact", &login), json!({})),
            ["inputs.chart.login"]
        );
        for username in [json!(""), json!("a\nb"), json!(5), json!({"other": 1})] {
            let login = json!({"username": username, "password": {"$secret": "repo"}});
            assert_eq!(
                problems(chart("https://charts.example.com", &login), json!({})),
                ["inputs.chart.login.username"],
                "{username}"
            );
        }
        let digest = format!("sha256:{}", "ab".repeat(32));
        let many = vec![digest; MAX_VALUES_ARTIFACTS + 1];
        assert_eq!(
            problems(
                chart("https://charts.example.com", &login),
                json!({"values_artifacts": many})
            ),
            ["inputs.values_artifacts"]
        );
    }
}
