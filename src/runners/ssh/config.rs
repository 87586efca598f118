use std::path::PathBuf;
use std::time::Duration;

#[derive(Clone, Debug)]
pub struct SshConfig {
    /// `EXECPLANE_SSH_CLIENT`: the OpenSSH client.
    pub client: PathBuf,
    /// `EXECPLANE_SSH_CONNECT_TIMEOUT`: the longest a connection may take.
    pub connect_timeout: Duration,
    /// `EXECPLANE_SFTP_CLIENT`: the OpenSSH sftp client (file transfers).
    pub sftp_client: PathBuf,
}

impl Default for SshConfig {
    fn default() -> Self {
        Self {
            client: PathBuf::from("/usr/bin/ssh"),
            connect_timeout: Duration::from_secs(10),
            sftp_client: PathBuf::from("/usr/bin/sftp"),
        }
    }
}
