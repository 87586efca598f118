use std::collections::BTreeSet;
use std::time::Duration;

/// Probes compiled into the runner; `verify.custom.probe` runs only these,
/// and only those the operator allows.
pub const BUILTIN_PROBES: [&str; 3] = ["sleep", "hang", "fail"];

#[derive(Clone, Debug)]
pub struct VerificationConfig {
    /// `EXECPLANE_VERIFY_PROBES`: the allowlist of `custom.probe` ids.
    pub allowed_probes: BTreeSet<String>,
    /// Per-sample timeout when the inputs name none.
    pub default_timeout: Duration,
}

impl Default for VerificationConfig {
    fn default() -> Self {
        Self {
            allowed_probes: BUILTIN_PROBES
                .iter()
                .map(|probe| (*probe).to_owned())
                .collect(),
            default_timeout: Duration::from_secs(5),
        }
    }
}
