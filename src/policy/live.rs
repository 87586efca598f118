//! The policy in force, shared by every task of a process and replaced
//! whole when its file changes: checked every few seconds and at once on
//! SIGHUP. A file with problems is refused (logged, counted) and the policy
//! in force stays, so a typo never opens or closes anything by itself.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use super::OperatorPolicy;

/// How often the file is read for a change.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(2);

/// A handle on the policy in force; clones share it.
#[derive(Clone, Debug, Default)]
pub struct SharedPolicy {
    current: Arc<RwLock<Arc<OperatorPolicy>>>,
    /// The file it was read from (none: the built-in defaults, fixed).
    path: Option<PathBuf>,
    /// Secret locations reserved in every policy read ([`OperatorPolicy::reserve_secrets`]).
    reserved_secrets: Vec<(String, String)>,
}

impl PartialEq for SharedPolicy {
    fn eq(&self, other: &Self) -> bool {
        self.path == other.path && self.current().digest() == other.current().digest()
    }
}

impl Eq for SharedPolicy {}

impl From<OperatorPolicy> for SharedPolicy {
    /// A policy that never changes (tests, the built-in defaults).
    fn from(policy: OperatorPolicy) -> Self {
        Self {
            current: Arc::new(RwLock::new(Arc::new(policy))),
            path: None,
            reserved_secrets: Vec::new(),
        }
    }
}

impl SharedPolicy {
    /// The policy of `path`, as read now; reloaded from there later.
    pub fn from_file(path: &Path) -> Result<Self, Vec<String>> {
        let policy = OperatorPolicy::load_all(path)?;
        Ok(Self {
            current: Arc::new(RwLock::new(Arc::new(policy))),
            path: Some(path.to_owned()),
            reserved_secrets: Vec::new(),
        })
    }

    /// Reserves a secret location in the policy in force and in every one
    /// read later: execplane's own (the callback signing secrets), which no
    /// tenant reads or writes whatever the file says.
    pub fn reserving_secrets(mut self, location: (String, String)) -> Self {
        self.reserved_secrets.push(location);
        let mut policy = (*self.current()).clone();
        for location in &self.reserved_secrets {
            policy.reserve_secrets(location.clone());
        }
        self.swap(policy);
        self
    }

    fn swap(&self, policy: OperatorPolicy) {
        let mut current = match self.current.write() {
            Ok(current) => current,
            Err(poisoned) => poisoned.into_inner(),
        };
        *current = Arc::new(policy);
    }

    /// The policy in force now. Take it once per decision: a reload
    /// between two reads would check one JobSpec against two policies.
    pub fn current(&self) -> Arc<OperatorPolicy> {
        match self.current.read() {
            Ok(current) => current.clone(),
            // A writer never panics while holding the lock (it only swaps).
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Reads the file again; replaces the policy when the file changed and
    /// has no problem. `Ok(true)`: a new policy is in force.
    pub fn reload(&self) -> Result<bool, Vec<String>> {
        let Some(path) = &self.path else {
            return Ok(false);
        };
        // Read once: the digest compared is the digest of what is parsed.
        let text = std::fs::read_to_string(path).map_err(|error| {
            vec![format!(
                "cannot read the policy file {}: {error}",
                path.display()
            )]
        })?;
        let digest = format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes())));
        if digest == self.current().digest() {
            return Ok(false);
        }
        let mut policy = OperatorPolicy::parse_file(path, &text)?;
        for location in &self.reserved_secrets {
            policy.reserve_secrets(location.clone());
        }
        self.swap(policy);
        Ok(true)
    }

    /// Reloads on a change of the file (every [`RELOAD_INTERVAL`]) and on
    /// SIGHUP, until `shutdown`. Nothing to do without a file.
    pub async fn watch(self, shutdown: CancellationToken) {
        let Some(path) = self.path.clone() else {
            return;
        };
        let mut hangups =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
        let mut interval = tokio::time::interval(RELOAD_INTERVAL);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let hangup = async {
                match hangups.as_mut() {
                    Some(signal) => signal.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = interval.tick() => {}
                _ = hangup => info!(file = %path.display(), "SIGHUP: reading the policy file"),
            }
            match self.reload() {
                Ok(false) => {}
                Ok(true) => {
                    crate::telemetry::metrics::policy_reloaded(true);
                    info!(file = %path.display(), digest = %self.current().digest(), "operator policy reloaded");
                }
                Err(problems) => {
                    crate::telemetry::metrics::policy_reloaded(false);
                    error!(
                        file = %path.display(),
                        digest = %self.current().digest(),
                        problems = %problems.join("; "),
                        "operator policy file refused; the policy in force stays"
                    );
                    // Said once per version of the bad file, not every tick.
                    if let Ok(text) = std::fs::read(&path) {
                        self.wait_for_change(&path, &text, &shutdown).await;
                    }
                }
            }
        }
    }

    /// Waits until the file differs from `seen` (or shutdown).
    async fn wait_for_change(&self, path: &Path, seen: &[u8], shutdown: &CancellationToken) {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(RELOAD_INTERVAL) => {}
            }
            match std::fs::read(path) {
                Ok(text) if text == seen => {}
                _ => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_file_replaces_the_policy_and_a_bad_one_keeps_it() {
        let dir = std::env::temp_dir().join(format!("execplane-policy-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("policy.yaml");
        std::fs::write(&path, "defaults:\n  operations: ['verify.*']\n").unwrap();
        let shared = SharedPolicy::from_file(&path).unwrap();
        let first = shared.current().digest().to_owned();
        assert_eq!(shared.reload(), Ok(false), "unchanged");
        std::fs::write(&path, "defaults:\n  operations: ['verify.tcp.connect']\n").unwrap();
        assert_eq!(shared.reload(), Ok(true));
        let second = shared.current().digest().to_owned();
        assert_ne!(first, second);
        std::fs::write(&path, "defaults:\n  operations: ['helm.explode']\n").unwrap();
        assert!(shared.reload().is_err());
        assert_eq!(
            shared.current().digest(),
            second,
            "a bad file keeps the policy in force"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
