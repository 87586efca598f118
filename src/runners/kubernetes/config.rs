use std::time::Duration;

/// The kubernetes runner's settings (defaults in the README).
#[derive(Clone, Debug)]
pub struct KubernetesConfig {
    /// `EXECPLANE_KUBERNETES_CONNECT_TIMEOUT` and
    /// `EXECPLANE_KUBERNETES_REQUEST_TIMEOUT`: how long a connection to an
    /// API server, and one request, may take.
    pub client: crate::runner::kit::kube::ClientSettings,
    /// `EXECPLANE_KUBERNETES_POLL_INTERVAL`: how often `wait` and
    /// `rollout.status` look at their object.
    pub poll_interval: Duration,
}

impl Default for KubernetesConfig {
    fn default() -> Self {
        Self {
            client: crate::runner::kit::kube::ClientSettings::default(),
            poll_interval: Duration::from_millis(500),
        }
    }
}
