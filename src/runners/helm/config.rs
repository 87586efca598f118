use std::path::PathBuf;

/// The helm runner's settings (defaults in the README).
#[derive(Clone, Debug)]
pub struct HelmConfig {
    /// `EXECPLANE_HELM_BIN`: the helm 3 CLI.
    pub helm: PathBuf,
    /// How the runner reads the cluster itself (discovery, to check the
    /// objects a chart renders before helm installs them).
    pub kubernetes: crate::runner::kit::kube::ClientSettings,
}

impl Default for HelmConfig {
    fn default() -> Self {
        Self {
            helm: PathBuf::from("/usr/local/bin/helm"),
            kubernetes: crate::runner::kit::kube::ClientSettings::default(),
        }
    }
}
