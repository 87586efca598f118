use std::path::PathBuf;

/// The opentofu runner's settings (defaults in the README).
#[derive(Clone, Debug)]
pub struct TofuConfig {
    /// `EXECPLANE_TOFU_BIN`: the Terraform-compatible CLI (`tofu` or
    /// `terraform`).
    pub cli: PathBuf,
    /// `EXECPLANE_TOFU_PROVIDER_MIRROR`: a filesystem mirror of providers;
    /// when set, providers are installed from it only (offline).
    pub provider_mirror: Option<PathBuf>,
    /// `EXECPLANE_TOFU_STATE_DIR`: where the `local` backend's states live,
    /// one directory per tenant and module.
    pub state_dir: PathBuf,
}

impl Default for TofuConfig {
    fn default() -> Self {
        Self {
            cli: PathBuf::from("/usr/local/bin/tofu"),
            provider_mirror: None,
            state_dir: PathBuf::from("/var/lib/execplane/opentofu-state"),
        }
    }
}
