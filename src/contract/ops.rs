//! Each runner's vocabulary in a file of its own: the inputs of its
//! operations, and their union, which is what the runner SDK hands that
//! runner's executor (`docs/RUNNERS.md`).

use super::{Operation, OperationInputs};

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

        impl TryFrom<crate::contract::OperationInputs> for $name {
            type Error = crate::contract::OperationInputs;

            fn try_from(inputs: crate::contract::OperationInputs) -> Result<Self, Self::Error> {
                match inputs {
                    $(crate::contract::OperationInputs::$variant(inner) => Ok(Self::$variant(inner)),)+
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
