//! The typed inputs of every operation, one struct per operation, and the
//! typed results, in a file per runner: each runner's vocabulary in its
//! own place, with the union of its operations' inputs that the runner SDK
//! hands that runner's executor (`docs/RUNNERS.md`). Unknown fields are refused, so a
//! misspelt input is an error rather than a silently ignored setting.
//!
//! Wherever a credential may appear the type is a JSON value so that it can be
//! a `{"$secret": "<name>"}` reference; [`super::validate_jobspec`] refuses a
//! literal there.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::key_kind::KeyKind;
use super::Operation;

pub type Vars = BTreeMap<String, Value>;

/// A versioned package (Ansible content, Terraform module) by reference.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PackageRef {
    pub name: String,
    pub version: String,
    #[serde(default)]
    pub digest: Option<String>,
}

/// A cluster by name; its credentials come only from Vault.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterRef {
    pub name: String,
    /// Must be a `{"$secret": ...}` reference (kubeconfig or token).
    pub credentials: Value,
}

/// A secret of the tenant's Vault path (KV v2) a runner writes: under the
/// operator's `secret_prefixes` for the tenant, as a secret it reads.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretLocation {
    pub mount: String,
    pub path: String,
}

impl SecretLocation {
    /// The longest mount or path.
    pub const MAX_BYTES: usize = 256;

    /// What is wrong with it, at `field`: as a secret reference's mount
    /// and path ([`super::limits::is_store_path`]), and at most
    /// [`Self::MAX_BYTES`] each.
    pub fn problems(&self, field: &str) -> Vec<super::Problem> {
        [("mount", &self.mount), ("path", &self.path)]
            .into_iter()
            .filter(|(_, value)| {
                value.len() > Self::MAX_BYTES || !super::limits::is_store_path(value)
            })
            .map(|(name, _)| {
                let message = format!(
                    "{}; at most {} bytes",
                    super::limits::STORE_PATH,
                    Self::MAX_BYTES
                );
                super::Problem::new(format!("{field}.{name}"), message)
            })
            .collect()
    }
}

#[cfg(feature = "testkit")]
pub use self::testkit::*;
pub use self::{ansible::*, helm::*, kubernetes::*, opentofu::*, ssh::*, verification::*};

/// Declares [`OperationInputs`] from its variants, each named as its
/// [`Operation`] and holding that operation's inputs, with the parse that
/// reads a JobSpec's inputs into it: the list is written once, and an
/// operation without a variant (or a variant without an operation) does
/// not compile.
macro_rules! operation_inputs {
    ($($(#[$attr:meta])* $variant:ident($inner:ty),)+) => {
        /// The inputs of a JobSpec, typed by its operation.
        #[derive(Clone, Debug, PartialEq)]
        pub enum OperationInputs {
            $($(#[$attr])* $variant($inner),)+
        }

        impl OperationInputs {
            /// Reads `inputs` as the typed inputs of `operation`. The error
            /// carries the path inside `inputs` (e.g. `expect.status`) and
            /// serde's reason.
            pub fn parse(operation: Operation, inputs: &Value) -> Result<Self, (String, String)> {
                Ok(match operation {
                    $($(#[$attr])* Operation::$variant => Self::$variant(typed(inputs)?),)+
                })
            }
        }
    };
}

/// `inputs` as a `T`, or the path inside it and serde's reason.
fn typed<T: serde::de::DeserializeOwned>(inputs: &Value) -> Result<T, (String, String)> {
    serde_path_to_error::deserialize(inputs).map_err(|error| {
        let path = error.path().to_string();
        let path = if path == "." { String::new() } else { path };
        (path, error.into_inner().to_string())
    })
}

operation_inputs! {
    AnsiblePlaybookRun(AnsiblePlaybook),
    AnsibleRoleRun(AnsibleRole),
    AnsibleInventoryValidate(AnsibleInventoryValidate),
    AnsibleCheckModeRun(AnsiblePlaybook),
    KubernetesManifestApply(KubernetesApply),
    KubernetesManifestDelete(KubernetesDelete),
    KubernetesWait(KubernetesWait),
    KubernetesRolloutStatus(KubernetesObject),
    KubernetesResourcePatch(KubernetesPatch),
    KubernetesResourceRead(KubernetesObject),
    HelmInstall(HelmRelease),
    HelmUpgrade(HelmRelease),
    HelmRollback(HelmRollback),
    HelmUninstall(HelmReleaseRef),
    HelmTest(HelmTestInputs),
    HelmTemplate(HelmTemplate),
    OpentofuPlan(TofuModule),
    OpentofuApply(TofuApply),
    OpentofuDestroy(TofuModule),
    OpentofuOutput(TofuModule),
    OpentofuStateInspect(TofuModule),
    SshCommandRun(SshCommand),
    SshFileUpload(SshUpload),
    SshFileDownload(SshDownload),
    SshServiceRestart(SshServiceRestart),
    SshSystemFactCollect(SshFacts),
    VerifyHttpEndpoint(VerifyHttp),
    VerifyTcpConnect(VerifyTcp),
    VerifyKubernetesCondition(VerifyKubernetesCondition),
    VerifyPostgresReady(VerifyPostgres),
    VerifyResourceCapability(VerifyCapability),
    VerifyCustomProbe(VerifyCustom),
    VerifyAttemptOutput(VerifyAttemptOutput),
    #[cfg(feature = "testkit")]
    TestkitEchoRun(TestkitEcho),
}

/// The inputs of one runner's operations: [`OperationInputs`] narrowed to
/// that runner's variants. The runner SDK parses a JobSpec's inputs once,
/// checks them, and hands the executor this; the variants of other runners
/// come back as the error.
pub trait RunnerInputs: TryFrom<OperationInputs, Error = OperationInputs> + Send + 'static {
    /// The operations it holds the inputs of, one per variant.
    const OPERATIONS: &'static [Operation];
}

/// Declares a runner's inputs enum from its variants, each named as its
/// [`Operation`] and holding that operation's inputs, with the narrowing
/// from [`OperationInputs`]: a variant no operation has does not compile.
macro_rules! runner_inputs {
    ($(#[$meta:meta])* $name:ident { $($variant:ident($inner:ty),)+ }) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq)]
        pub enum $name {
            $($variant($inner),)+
        }

        impl TryFrom<crate::contract::ops::OperationInputs> for $name {
            type Error = crate::contract::ops::OperationInputs;

            fn try_from(inputs: crate::contract::ops::OperationInputs) -> Result<Self, Self::Error> {
                match inputs {
                    $(crate::contract::ops::OperationInputs::$variant(inner) => Ok(Self::$variant(inner)),)+
                    #[allow(unreachable_patterns)]
                    other => Err(other),
                }
            }
        }

        impl crate::contract::RunnerInputs for $name {
            const OPERATIONS: &'static [crate::contract::Operation] =
                &[$(crate::contract::Operation::$variant,)+];
        }
    };
}
use runner_inputs;

/// What an operation's inputs name that the operator's policy rules on
/// (`policy::rules`): each runner says which of these its inputs name, the
/// policy judges each kind the same whichever runner names it.
#[derive(Debug)]
pub enum Governed<'a> {
    AnsiblePlaybook(&'a AnsiblePlaybook),
    AnsibleRole(&'a AnsibleRole),
    /// A package alone (an inventory check reads no playbook of it).
    AnsiblePackage(&'a PackageRef),
    Manifests(&'a KubernetesApply),
    Deletions(&'a KubernetesDelete),
    /// One object of a namespace of a cluster.
    Object {
        cluster: &'a ClusterRef,
        namespace: &'a str,
        object: &'a ObjectRef,
    },
    /// A namespace of a cluster, as a whole.
    Namespace {
        cluster: &'a ClusterRef,
        namespace: &'a str,
    },
    Chart(&'a ChartRef),
    TofuModule(&'a TofuModule),
    SshCommand(&'a SshCommand),
    /// A field of an ssh template the inputs fill.
    SshField {
        template: &'a str,
        field: &'static str,
        value: Value,
    },
    SshFacts(&'a SshFacts),
    /// A secret the runner writes to the tenant's Vault path, and the
    /// input that names it.
    SecretWrite {
        field: &'static str,
        location: &'a SecretLocation,
    },
}

/// What a runner's vocabulary says of its inputs beyond their shape, on
/// its inputs enum in its own file: each method matches every operation of
/// the runner, so an operation added without saying what it acts on and
/// what the policy rules on does not compile.
pub trait Vocabulary: RunnerInputs {
    /// The keys its inputs name besides its targets (`target_keys`).
    fn target_keys(&self, tenant: &str) -> Vec<(KeyKind, String)>;

    /// What in its inputs the operator's policy rules on.
    fn governed(&self) -> Vec<Governed<'_>>;

    /// The contract's gates on the JobSpec's own flags for `operation`.
    fn flag_problems(
        _operation: Operation,
        _flags: &super::PolicyFlags,
        _inputs: Option<&Value>,
    ) -> Vec<super::Problem> {
        Vec::new()
    }

    /// Whether `result` is a result of `operation` (docs/OPERATIONS.md).
    fn result_problem(operation: Operation, result: &Value) -> Result<(), String>;
}

/// Declares [`ByRunner`] and the dispatch by runner type from each runner
/// type's inputs enum and module, the one list of runners' vocabularies: a
/// [`RunnerType`](super::RunnerType) without its inputs does not compile.
macro_rules! runners {
    ($($(#[$attr:meta])* $runner:ident($inputs:ty) in $module:ident,)+) => {
        /// A JobSpec's inputs narrowed to its runner's.
        #[derive(Clone, Debug, PartialEq)]
        pub enum ByRunner {
            $($(#[$attr])* $runner($inputs),)+
        }

        impl ByRunner {
            /// `inputs` of `operation`, parsed and narrowed to its runner's;
            /// none when they do not parse (intake refuses them).
            pub fn parse(operation: Operation, inputs: &Value) -> Option<Self> {
                let inputs = OperationInputs::parse(operation, inputs).ok()?;
                $(
                    $(#[$attr])*
                    let inputs = match <$inputs>::try_from(inputs) {
                        Ok(narrowed) => return Some(Self::$runner(narrowed)),
                        Err(other) => other,
                    };
                )+
                // Every variant is some runner's (the test below).
                drop(inputs);
                None
            }

            pub fn target_keys(&self, tenant: &str) -> Vec<(KeyKind, String)> {
                match self {
                    $($(#[$attr])* Self::$runner(inputs) => inputs.target_keys(tenant),)+
                }
            }

            pub fn governed(&self) -> Vec<Governed<'_>> {
                match self {
                    $($(#[$attr])* Self::$runner(inputs) => inputs.governed(),)+
                }
            }
        }

        /// What intake checks of typed inputs beyond their shape, each
        /// runner's checks in its own file (names that become request paths
        /// are checked by `kube_names`, for the three runners that make
        /// them).
        pub(super) fn problems_of(inputs: &OperationInputs) -> Vec<super::Problem> {
            let mut problems = Vec::new();
            $($(#[$attr])* problems.extend($module::problems_of(inputs));)+
            problems
        }

        /// The operations `runner`'s inputs hold, one per variant.
        pub fn operations_of(runner: super::RunnerType) -> &'static [Operation] {
            match runner {
                $($(#[$attr])* super::RunnerType::$runner => <$inputs as RunnerInputs>::OPERATIONS,)+
            }
        }

        /// The contract's gates on a JobSpec's own flags, each runner's in
        /// its own file.
        pub(super) fn flag_problems(
            operation: Operation,
            flags: &super::PolicyFlags,
            inputs: Option<&Value>,
        ) -> Vec<super::Problem> {
            match operation.runner_type() {
                $($(#[$attr])* super::RunnerType::$runner => <$inputs as Vocabulary>::flag_problems(operation, flags, inputs),)+
            }
        }

        /// Whether `result` is a result of `operation` (docs/OPERATIONS.md),
        /// each runner's result types in its own file; the problem when it
        /// is not. The runner SDK checks every result with it before
        /// reporting it.
        pub fn check_result(operation: Operation, result: &Value) -> Result<(), String> {
            match operation.runner_type() {
                $($(#[$attr])* super::RunnerType::$runner => <$inputs as Vocabulary>::result_problem(operation, result),)+
            }
        }
    };
}

runners! {
    Ansible(AnsibleInputs) in ansible,
    Kubernetes(KubernetesInputs) in kubernetes,
    Helm(HelmInputs) in helm,
    Opentofu(TofuInputs) in opentofu,
    Ssh(SshInputs) in ssh,
    Verification(VerifyInputs) in verification,
    #[cfg(feature = "testkit")]
    Testkit(TestkitInputs) in testkit,
}

/// The key of a namespace of a cluster: every object in it.
fn namespace_key(cluster: &ClusterRef, namespace: &str) -> Vec<(KeyKind, String)> {
    vec![(KeyKind::Namespace, format!("{}/{namespace}", cluster.name))]
}

/// Whether `result` reads as a `T`; the path and reason when it does not.
fn shaped<T: serde::de::DeserializeOwned>(result: &Value) -> Result<(), String> {
    serde_path_to_error::deserialize::<_, T>(result)
        .map(drop)
        .map_err(|error| format!("{}: {}", error.path(), error.inner()))
}

pub mod ansible;
pub mod helm;
pub mod kubernetes;
pub mod opentofu;
pub mod ssh;
#[cfg(feature = "testkit")]
pub mod testkit;
pub mod verification;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::RunnerType;

    /// The apply gate, case by case: which field is refused (none: it
    /// passes), as intake and the runner SDK both refuse it.
    #[test]
    fn an_apply_runs_only_the_approved_plan_or_an_explicit_one() {
        let approved = format!("sha256:{}", "ab".repeat(32));
        let other = format!("sha256:{}", "cd".repeat(32));
        // (approved digest, plan artifact, explicit, the field refused)
        type Case<'a> = (Option<&'a str>, Option<&'a str>, bool, Option<&'a str>);
        let cases: [Case; 10] = [
            (None, None, false, Some("policy.approved_plan_digest")),
            // An approved digest with its artifact null or not a digest:
            // never a fresh plan applied in the approved one's name.
            (
                Some(&approved),
                Some("null"),
                false,
                Some("inputs.plan_artifact"),
            ),
            (
                Some(&approved),
                Some("5"),
                false,
                Some("inputs.plan_artifact"),
            ),
            (
                None,
                Some(&approved),
                false,
                Some("policy.approved_plan_digest"),
            ),
            (None, None, true, None),
            (None, Some(&approved), true, Some("inputs.plan_artifact")),
            (Some(&approved), None, false, Some("inputs.plan_artifact")),
            (Some(&approved), Some(&approved), false, None),
            (
                Some(&approved),
                Some(&approved.to_uppercase()[7..]),
                false,
                None,
            ),
            (
                Some(&approved),
                Some(&other),
                true,
                Some("inputs.plan_artifact"),
            ),
        ];
        for (digest, artifact, explicit, refused) in cases {
            let flags = crate::contract::PolicyFlags {
                approved_plan_digest: digest.map(str::to_owned),
                explicit_command: explicit,
                ..Default::default()
            };
            let inputs = match artifact {
                Some("null") => serde_json::json!({"plan_artifact": null}),
                Some("5") => serde_json::json!({"plan_artifact": 5}),
                Some(artifact) => serde_json::json!({"plan_artifact": artifact}),
                None => serde_json::json!({}),
            };
            let problems = flag_problems(Operation::OpentofuApply, &flags, Some(&inputs));
            let paths: Vec<&str> = problems
                .iter()
                .map(|problem| problem.path.as_str())
                .collect();
            assert_eq!(
                paths,
                refused.into_iter().collect::<Vec<_>>(),
                "{digest:?} {artifact:?} explicit={explicit}"
            );
        }
        let elevated = |elevated| crate::contract::PolicyFlags {
            elevated,
            ..Default::default()
        };
        assert_eq!(
            flag_problems(Operation::OpentofuDestroy, &elevated(false), None).len(),
            1
        );
        assert!(flag_problems(Operation::OpentofuDestroy, &elevated(true), None).is_empty());
    }

    #[test]
    fn a_secret_location_is_plain_segments() {
        let problems = |mount: &str, path: &str| {
            let location = SecretLocation {
                mount: mount.into(),
                path: path.into(),
            };
            location
                .problems("inputs.to")
                .into_iter()
                .map(|problem| problem.path)
                .collect::<Vec<_>>()
        };
        assert!(problems("secret", "team-a/outputs/x_1.v2").is_empty());
        assert!(problems("/secret/", "/team-a/x/").is_empty());
        for path in [
            "team-a/../team-b",
            "team-a//x",
            "./x",
            "",
            "team a",
            "x?y",
            "x#k",
        ] {
            assert_eq!(problems("secret", path), ["inputs.to.path"], "{path:?}");
        }
        assert_eq!(problems("..", "x"), ["inputs.to.mount"]);
        assert_eq!(problems("secret", &"a".repeat(257)), ["inputs.to.path"]);
    }

    #[test]
    fn each_runner_s_inputs_hold_exactly_the_operations_of_its_type() {
        for &runner in RunnerType::ALL {
            let held = operations_of(runner).to_vec();
            let all: Vec<Operation> = Operation::ALL
                .iter()
                .copied()
                .filter(|operation| operation.runner_type() == runner)
                .collect();
            assert_eq!(held, all, "{runner}");
        }
    }
}
