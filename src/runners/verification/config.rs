use std::collections::BTreeSet;
use std::time::Duration;

/// Probes compiled into the runner for tests and demos (with `echo`): an
/// allowlist names them to run them, and none does by default.
pub const BUILTIN_PROBES: [&str; 3] = ["sleep", "hang", "fail"];

#[derive(Clone, Debug)]
pub struct VerificationConfig {
    /// `EXECPLANE_VERIFY_PROBES`: the allowlist of `custom.probe` ids.
    pub allowed_probes: BTreeSet<String>,
    /// Per-sample timeout when the inputs name none.
    pub default_timeout: Duration,
    /// `EXECPLANE_VERIFY_MAX_TIMEOUT`: the longest per-sample timeout a
    /// JobSpec may ask for; longer ones are cut to it.
    pub max_timeout: Duration,
    /// `EXECPLANE_VERIFY_MAX_BODY_BYTES`: the most response body bytes an
    /// HTTP sample reads (assertions judge that prefix).
    pub max_body_bytes: usize,
    /// `EXECPLANE_VERIFY_PROBE_DIR`: an allowlisted custom probe id that is
    /// not built in runs `<dir>/<id>` as a tool process.
    pub probe_dir: Option<std::path::PathBuf>,
    /// How the Kubernetes probes talk to a cluster (the kubernetes
    /// runner's settings).
    pub kubernetes: crate::runner::kit::kube::ClientSettings,
}

impl Default for VerificationConfig {
    fn default() -> Self {
        Self {
            allowed_probes: BUILTIN_PROBES
                .iter()
                .map(|probe| (*probe).to_owned())
                .collect(),
            default_timeout: Duration::from_secs(5),
            max_timeout: Duration::from_secs(60),
            max_body_bytes: 1024 * 1024,
            probe_dir: None,
            kubernetes: crate::runner::kit::kube::ClientSettings::default(),
        }
    }
}
