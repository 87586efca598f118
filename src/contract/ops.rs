//! The typed inputs of every operation, one struct per operation, in a
//! file per runner: each runner's vocabulary in its own place, with the
//! union of its operations' inputs that the runner SDK hands that
//! runner's executor (`docs/RUNNERS.md`). Unknown fields are refused, so a
//! misspelt input is an error rather than a silently ignored setting.
//!
//! Wherever a credential may appear the type is a JSON value so that it can be
//! a `{"$secret": "<name>"}` reference; [`super::validate_jobspec`] refuses a
//! literal there.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

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

pub use self::{ansible::*, helm::*, kubernetes::*, opentofu::*, ssh::*, verification::*};

/// The inputs of a JobSpec, typed by its operation.
#[derive(Clone, Debug, PartialEq)]
pub enum OperationInputs {
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
    HelmTest(HelmReleaseRef),
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
}

impl OperationInputs {
    /// Reads `inputs` as the typed inputs of `operation`. The error carries
    /// the path inside `inputs` (e.g. `expect.status`) and serde's reason.
    pub fn parse(operation: Operation, inputs: &Value) -> Result<Self, (String, String)> {
        fn typed<T: serde::de::DeserializeOwned>(inputs: &Value) -> Result<T, (String, String)> {
            serde_path_to_error::deserialize(inputs).map_err(|error| {
                let path = error.path().to_string();
                let path = if path == "." { String::new() } else { path };
                (path, error.into_inner().to_string())
            })
        }
        use Operation as O;
        use OperationInputs as I;
        Ok(match operation {
            O::AnsiblePlaybookRun => I::AnsiblePlaybookRun(typed(inputs)?),
            O::AnsibleRoleRun => I::AnsibleRoleRun(typed(inputs)?),
            O::AnsibleInventoryValidate => I::AnsibleInventoryValidate(typed(inputs)?),
            O::AnsibleCheckModeRun => I::AnsibleCheckModeRun(typed(inputs)?),
            O::KubernetesManifestApply => I::KubernetesManifestApply(typed(inputs)?),
            O::KubernetesManifestDelete => I::KubernetesManifestDelete(typed(inputs)?),
            O::KubernetesWait => I::KubernetesWait(typed(inputs)?),
            O::KubernetesRolloutStatus => I::KubernetesRolloutStatus(typed(inputs)?),
            O::KubernetesResourcePatch => I::KubernetesResourcePatch(typed(inputs)?),
            O::KubernetesResourceRead => I::KubernetesResourceRead(typed(inputs)?),
            O::HelmInstall => I::HelmInstall(typed(inputs)?),
            O::HelmUpgrade => I::HelmUpgrade(typed(inputs)?),
            O::HelmRollback => I::HelmRollback(typed(inputs)?),
            O::HelmUninstall => I::HelmUninstall(typed(inputs)?),
            O::HelmTest => I::HelmTest(typed(inputs)?),
            O::HelmTemplate => I::HelmTemplate(typed(inputs)?),
            O::OpentofuPlan => I::OpentofuPlan(typed(inputs)?),
            O::OpentofuApply => I::OpentofuApply(typed(inputs)?),
            O::OpentofuDestroy => I::OpentofuDestroy(typed(inputs)?),
            O::OpentofuOutput => I::OpentofuOutput(typed(inputs)?),
            O::OpentofuStateInspect => I::OpentofuStateInspect(typed(inputs)?),
            O::SshCommandRun => I::SshCommandRun(typed(inputs)?),
            O::SshFileUpload => I::SshFileUpload(typed(inputs)?),
            O::SshFileDownload => I::SshFileDownload(typed(inputs)?),
            O::SshServiceRestart => I::SshServiceRestart(typed(inputs)?),
            O::SshSystemFactCollect => I::SshSystemFactCollect(typed(inputs)?),
            O::VerifyHttpEndpoint => I::VerifyHttpEndpoint(typed(inputs)?),
            O::VerifyTcpConnect => I::VerifyTcpConnect(typed(inputs)?),
            O::VerifyKubernetesCondition => I::VerifyKubernetesCondition(typed(inputs)?),
            O::VerifyPostgresReady => I::VerifyPostgresReady(typed(inputs)?),
            O::VerifyResourceCapability => I::VerifyResourceCapability(typed(inputs)?),
            O::VerifyCustomProbe => I::VerifyCustomProbe(typed(inputs)?),
        })
    }
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

pub mod ansible;
pub mod helm;
pub mod kubernetes;
pub mod opentofu;
pub mod ssh;
pub mod verification;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::RunnerType;

    fn operations_of<I: RunnerInputs>() -> Vec<Operation> {
        I::OPERATIONS.to_vec()
    }

    #[test]
    fn each_runner_s_inputs_hold_exactly_the_operations_of_its_type() {
        for runner in RunnerType::ALL {
            let held = match runner {
                RunnerType::Ansible => operations_of::<ansible::AnsibleInputs>(),
                RunnerType::Kubernetes => operations_of::<kubernetes::KubernetesInputs>(),
                RunnerType::Helm => operations_of::<helm::HelmInputs>(),
                RunnerType::Opentofu => operations_of::<opentofu::TofuInputs>(),
                RunnerType::Ssh => operations_of::<ssh::SshInputs>(),
                RunnerType::Verification => operations_of::<verification::VerifyInputs>(),
            };
            let all: Vec<Operation> = Operation::ALL
                .iter()
                .copied()
                .filter(|operation| operation.runner_type() == runner)
                .collect();
            assert_eq!(held, all, "{runner}");
        }
    }
}
