//! The one rule for "does this lease still accept a report from this
//! instance under this epoch": `decide` fences reports by it, and the
//! ingress answers executors' `lease_valid` by it.

use crate::contract::UnixMillis;

/// What fencing needs to know of an attempt's lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseFacts<'a> {
    pub epoch: u64,
    pub runner_instance: &'a str,
    pub active: bool,
    pub expires_at: UnixMillis,
}

/// Why a report from `instance` under `epoch` is not accepted, or `None`
/// when it is. `terminal` names the attempt's status when it has ended.
/// With `now`, a lease past its deadline refuses too (the dispatcher leaves
/// expiry to its timers: a report decided late but sent in time counts).
pub fn lease_refusal(
    terminal: Option<&str>,
    lease: Option<LeaseFacts<'_>>,
    epoch: u64,
    instance: &str,
    now: Option<UnixMillis>,
) -> Option<String> {
    if let Some(status) = terminal {
        return Some(format!("the attempt is already {status}"));
    }
    let Some(lease) = lease.filter(|lease| lease.active) else {
        return Some("the attempt has no active lease".to_owned());
    };
    if lease.epoch != epoch {
        return Some(format!(
            "lease epoch {epoch} is stale; the current epoch is {}",
            lease.epoch
        ));
    }
    if lease.runner_instance != instance {
        return Some(format!(
            "lease epoch {} belongs to instance {}",
            lease.epoch, lease.runner_instance
        ));
    }
    if now.is_some_and(|now| lease.expires_at <= now) {
        return Some(format!("lease epoch {} has expired", lease.epoch));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_accepts_only_its_own_epoch_and_instance_while_active() {
        let lease = LeaseFacts {
            epoch: 3,
            runner_instance: "r-1",
            active: true,
            expires_at: 10_000,
        };
        assert_eq!(lease_refusal(None, Some(lease), 3, "r-1", None), None);
        assert_eq!(
            lease_refusal(None, Some(lease), 3, "r-1", Some(9_999)),
            None
        );
        assert!(lease_refusal(None, Some(lease), 2, "r-1", None)
            .unwrap()
            .contains("stale"));
        assert!(lease_refusal(None, Some(lease), 3, "r-2", None)
            .unwrap()
            .contains("belongs to"));
        assert!(lease_refusal(None, Some(lease), 3, "r-1", Some(10_000))
            .unwrap()
            .contains("expired"));
        assert!(
            lease_refusal(Some("succeeded"), Some(lease), 3, "r-1", None)
                .unwrap()
                .contains("already succeeded")
        );
        let revoked = LeaseFacts {
            active: false,
            ..lease
        };
        assert!(lease_refusal(None, Some(revoked), 3, "r-1", None)
            .unwrap()
            .contains("no active lease"));
        assert!(lease_refusal(None, None, 3, "r-1", None).is_some());
    }
}
