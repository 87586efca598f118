use std::time::Duration;

/// The kubernetes runner's settings (defaults in the README).
#[derive(Clone, Debug)]
pub struct KubernetesConfig {
    /// `EXECPLANE_KUBERNETES_CONNECT_TIMEOUT`: the longest a connection to
    /// an API server may take.
    pub connect_timeout: Duration,
    /// `EXECPLANE_KUBERNETES_REQUEST_TIMEOUT`: the longest one API request
    /// may take to answer.
    pub request_timeout: Duration,
    /// `EXECPLANE_KUBERNETES_POLL_INTERVAL`: how often `wait` and
    /// `rollout.status` look at their object.
    pub poll_interval: Duration,
    /// The operator's policy: the cluster catalogue and the tenant's
    /// clusters, namespaces and scope, checked again here before each call.
    pub policy: crate::policy::SharedPolicy,
}

impl Default for KubernetesConfig {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            poll_interval: Duration::from_millis(500),
            policy: crate::policy::SharedPolicy::default(),
        }
    }
}
