use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The kinds of runner. Each has its own work topic, `exec.work.<type>.v1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunnerType {
    Ansible,
    Kubernetes,
    Helm,
    Opentofu,
    Ssh,
    Verification,
    /// The runner the tests define with the runner kit alone
    /// (`tests/testkit.rs`, `docs/RUNNERS.md`): built only with the
    /// `testkit` feature, never in a release.
    #[cfg(feature = "testkit")]
    Testkit,
}

impl RunnerType {
    /// The types a release runs: `serve` runs each, and each has its work
    /// topic in `topology/topics.yaml` and its name in the API.
    pub const CATALOG: [RunnerType; 6] = [
        RunnerType::Ansible,
        RunnerType::Kubernetes,
        RunnerType::Helm,
        RunnerType::Opentofu,
        RunnerType::Ssh,
        RunnerType::Verification,
    ];

    /// Every type of this build: the catalog, and a type the tests define
    /// (`docs/RUNNERS.md`) when built with the `testkit` feature.
    pub const ALL: &'static [RunnerType] = &[
        RunnerType::Ansible,
        RunnerType::Kubernetes,
        RunnerType::Helm,
        RunnerType::Opentofu,
        RunnerType::Ssh,
        RunnerType::Verification,
        #[cfg(feature = "testkit")]
        RunnerType::Testkit,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            RunnerType::Ansible => "ansible",
            RunnerType::Kubernetes => "kubernetes",
            RunnerType::Helm => "helm",
            RunnerType::Opentofu => "opentofu",
            RunnerType::Ssh => "ssh",
            RunnerType::Verification => "verification",
            #[cfg(feature = "testkit")]
            RunnerType::Testkit => "testkit",
        }
    }
}

impl fmt::Display for RunnerType {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.as_str())
    }
}

impl FromStr for RunnerType {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        RunnerType::ALL
            .iter()
            .copied()
            .find(|runner| runner.as_str() == text)
            .ok_or_else(|| format!("unknown runner type `{text}`"))
    }
}

macro_rules! operations {
    ($( $(#[$attr:meta])* $variant:ident => $name:literal, $runner:ident, idempotent = $idempotent:literal, implemented = $implemented:literal; )*) => {
        /// Every operation execplane can run, named exactly `<runner>.<op>`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Operation { $( $(#[$attr])* $variant, )* }

        impl Operation {
            pub const ALL: &'static [Operation] = &[ $( $(#[$attr])* Operation::$variant, )* ];

            /// The wire name, e.g. `verify.http.endpoint`.
            pub const fn as_str(self) -> &'static str {
                match self { $( $(#[$attr])* Operation::$variant => $name, )* }
            }

            pub const fn runner_type(self) -> RunnerType {
                match self { $( $(#[$attr])* Operation::$variant => RunnerType::$runner, )* }
            }

            /// Whether running it twice has the same effect as running it once.
            /// A started attempt of an operation that is not idempotent whose
            /// lease is lost ends `outcome_unknown` and is never retried.
            pub const fn is_idempotent(self) -> bool {
                match self { $( $(#[$attr])* Operation::$variant => $idempotent, )* }
            }

            /// Whether a runner of this release runs it. The contract
            /// names operations before their runner lands; one nobody runs
            /// is refused at intake (`rejected (contract)`), never left to
            /// wait for `schedule_to_start`. Each runner's executor lists
            /// exactly the implemented operations of its type (tested).
            pub const fn is_implemented(self) -> bool {
                match self { $( $(#[$attr])* Operation::$variant => $implemented, )* }
            }
        }
    };
}

operations! {
    AnsiblePlaybookRun => "ansible.playbook.run", Ansible, idempotent = false, implemented = true;
    AnsibleRoleRun => "ansible.role.run", Ansible, idempotent = false, implemented = true;
    AnsibleInventoryValidate => "ansible.inventory.validate", Ansible, idempotent = true, implemented = true;
    AnsibleCheckModeRun => "ansible.check_mode.run", Ansible, idempotent = true, implemented = true;
    KubernetesManifestApply => "kubernetes.manifest.apply", Kubernetes, idempotent = false, implemented = true;
    KubernetesManifestDelete => "kubernetes.manifest.delete", Kubernetes, idempotent = false, implemented = true;
    KubernetesWait => "kubernetes.wait", Kubernetes, idempotent = true, implemented = true;
    KubernetesRolloutStatus => "kubernetes.rollout.status", Kubernetes, idempotent = true, implemented = true;
    KubernetesResourcePatch => "kubernetes.resource.patch", Kubernetes, idempotent = false, implemented = true;
    KubernetesResourceRead => "kubernetes.resource.read", Kubernetes, idempotent = true, implemented = true;
    HelmInstall => "helm.install", Helm, idempotent = false, implemented = true;
    HelmUpgrade => "helm.upgrade", Helm, idempotent = false, implemented = true;
    HelmRollback => "helm.rollback", Helm, idempotent = false, implemented = true;
    HelmUninstall => "helm.uninstall", Helm, idempotent = false, implemented = true;
    HelmTest => "helm.test", Helm, idempotent = true, implemented = true;
    HelmTemplate => "helm.template", Helm, idempotent = true, implemented = true;
    OpentofuPlan => "opentofu.plan", Opentofu, idempotent = true, implemented = true;
    OpentofuApply => "opentofu.apply", Opentofu, idempotent = false, implemented = true;
    OpentofuDestroy => "opentofu.destroy", Opentofu, idempotent = false, implemented = true;
    OpentofuOutput => "opentofu.output", Opentofu, idempotent = true, implemented = true;
    OpentofuStateInspect => "opentofu.state.inspect", Opentofu, idempotent = true, implemented = true;
    SshCommandRun => "ssh.command.run", Ssh, idempotent = false, implemented = true;
    SshFileUpload => "ssh.file.upload", Ssh, idempotent = false, implemented = true;
    SshFileDownload => "ssh.file.download", Ssh, idempotent = true, implemented = true;
    SshServiceRestart => "ssh.service.restart", Ssh, idempotent = false, implemented = true;
    SshSystemFactCollect => "ssh.system.fact.collect", Ssh, idempotent = true, implemented = true;
    VerifyHttpEndpoint => "verify.http.endpoint", Verification, idempotent = true, implemented = true;
    VerifyTcpConnect => "verify.tcp.connect", Verification, idempotent = true, implemented = true;
    VerifyKubernetesCondition => "verify.kubernetes.condition", Verification, idempotent = true, implemented = true;
    VerifyPostgresReady => "verify.postgres.ready", Verification, idempotent = true, implemented = true;
    VerifyResourceCapability => "verify.resource.capability", Verification, idempotent = true, implemented = true;
    VerifyCustomProbe => "verify.custom.probe", Verification, idempotent = true, implemented = true;
    VerifyAttemptOutput => "verify.attempt.output", Verification, idempotent = true, implemented = true;
    #[cfg(feature = "testkit")]
    TestkitEchoRun => "testkit.echo.run", Testkit, idempotent = true, implemented = true;
}

impl Operation {
    /// The operations of the catalog's types (`RunnerType::CATALOG`): what
    /// a release runs and lists (`execplane operations`).
    pub fn catalog() -> impl Iterator<Item = Operation> {
        Operation::ALL
            .iter()
            .copied()
            .filter(|operation| RunnerType::CATALOG.contains(&operation.runner_type()))
    }

    /// Every implemented operation of `runner`.
    pub fn implemented_by(runner: RunnerType) -> impl Iterator<Item = Operation> {
        Operation::ALL.iter().copied().filter(move |operation| {
            operation.runner_type() == runner && operation.is_implemented()
        })
    }

    /// The problem a JobSpec naming an operation no runner runs is refused
    /// with, at intake and at every edge that checks a JobSpec first.
    pub fn not_implemented(self) -> Option<super::Problem> {
        (!self.is_implemented()).then(|| {
            super::Problem::new(
                "operation",
                format!(
                    "`{self}` is not implemented: no {} runner of this release runs it \
                     (`execplane operations` lists what runs)",
                    self.runner_type()
                ),
            )
        })
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.as_str())
    }
}

impl FromStr for Operation {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        Operation::ALL
            .iter()
            .copied()
            .find(|operation| operation.as_str() == text)
            .ok_or_else(|| {
                let runner = text.split('.').next().unwrap_or_default();
                let known: Vec<&str> = Operation::ALL
                    .iter()
                    .filter(|operation| {
                        operation.as_str().starts_with(runner) && !runner.is_empty()
                    })
                    .map(|operation| operation.as_str())
                    .collect();
                if known.is_empty() {
                    format!("unknown operation `{text}`")
                } else {
                    format!(
                        "unknown operation `{text}`; known for `{runner}`: {}",
                        known.join(", ")
                    )
                }
            })
    }
}

impl Serialize for Operation {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Operation {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_map_to_their_runner() {
        assert_eq!(Operation::catalog().count(), 33);
        for operation in Operation::ALL {
            assert_eq!(operation.as_str().parse::<Operation>().unwrap(), *operation);
            let prefix = operation.as_str().split('.').next().unwrap();
            let expected = if prefix == "verify" {
                "verification"
            } else {
                prefix
            };
            assert_eq!(operation.runner_type().as_str(), expected, "{operation}");
        }
    }

    #[test]
    fn every_operation_of_the_catalog_is_implemented() {
        for operation in Operation::ALL {
            assert!(operation.not_implemented().is_none(), "{operation}");
        }
        assert_eq!(Operation::implemented_by(RunnerType::Opentofu).count(), 5);
    }

    #[test]
    fn unknown_operation_names_the_known_ones() {
        let error = "helm.explode".parse::<Operation>().unwrap_err();
        assert!(error.contains("helm.install"), "{error}");
    }
}
