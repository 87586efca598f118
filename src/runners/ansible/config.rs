use std::path::PathBuf;
use std::time::Duration;

#[derive(Clone, Debug)]
pub struct AnsibleConfig {
    /// `EXECPLANE_ANSIBLE_BIN_DIR`: where `ansible-playbook` and
    /// `ansible-inventory` are.
    pub bin_dir: PathBuf,
    /// `EXECPLANE_SSH_CONNECT_TIMEOUT`: the longest one connection may take.
    pub connect_timeout: Duration,
}

impl Default for AnsibleConfig {
    fn default() -> Self {
        Self {
            bin_dir: PathBuf::from("/usr/bin"),
            connect_timeout: Duration::from_secs(10),
        }
    }
}
