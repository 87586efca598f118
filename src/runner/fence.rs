//! The runner's lease rules as a pure struct (no clock reads, no I/O): when
//! an attempt must fence itself, which extensions count, and what it
//! reports once its tool was stopped for a reason. The attempt loop asks;
//! the rules are tested here without a broker.

use std::time::Duration;

use super::ExecutionOutcome;
use crate::contract::{FailureCategory, ReportedOutcome};

/// One attempt's view of its lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseGuard {
    /// Milliseconds before the deadline at which the runner stops itself.
    margin_ms: i64,
    /// The lease deadline (epoch milliseconds), as last extended.
    expires_at: i64,
}

impl LeaseGuard {
    /// A lease of heartbeat TTL `ttl` that expires at `expires_at`.
    pub fn new(ttl: Duration, expires_at: i64) -> Self {
        let margin = super::fence_margin(ttl);
        Self {
            margin_ms: i64::try_from(margin.as_millis()).unwrap_or(i64::MAX),
            expires_at,
        }
    }

    /// When the runner must have stopped its tool (epoch milliseconds):
    /// before the deadline, so nobody else can be granted the attempt while
    /// this runner still acts.
    pub fn fence_at(&self) -> i64 {
        self.expires_at.saturating_sub(self.margin_ms)
    }

    /// Whether the runner must fence itself at `now`.
    pub fn must_fence(&self, now: i64) -> bool {
        now >= self.fence_at()
    }

    /// What a stop asked for at `now` amounts to: once the fence has
    /// passed, the runner fences itself whatever it was asked (a pause can
    /// deliver the revocation before the fence's timer fires; the attempt
    /// must still say it stopped on its own deadline).
    pub fn settle(&self, asked: Stopping, now: i64) -> Stopping {
        if self.must_fence(now) {
            Stopping::Fenced
        } else {
            asked
        }
    }

    /// An extension read from the partition at `now`. It counts only
    /// before the fence: once the fence passed (a pause, a cut link) the
    /// runner cannot know its lease is still its own, and it stops
    /// whatever arrives. A deadline never moves back. True when it counted.
    pub fn extend(&mut self, expires_at: i64, now: i64) -> bool {
        if self.must_fence(now) {
            return false;
        }
        if expires_at > self.expires_at {
            self.expires_at = expires_at;
        }
        true
    }
}

/// Why the attempt's tool was stopped before it finished.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stopping {
    /// The lease deadline came without an extension.
    Fenced,
    /// The dispatcher already ended the attempt.
    Revoked,
    /// The control plane asked, for this reason.
    Cancelled(String),
    /// The runner is shutting down (its drain timed out).
    ShutDown,
}

impl Stopping {
    /// What the attempt reports after its tool was stopped; `finished` is
    /// what the tool returned within its grace, if it did. `None`: report
    /// nothing (the lease is not this runner's any more).
    pub fn report(&self, finished: Option<ExecutionOutcome>) -> Option<ExecutionOutcome> {
        match self {
            Stopping::Revoked => None,
            Stopping::Fenced => Some(ExecutionOutcome::failed(
                FailureCategory::LeaseLost,
                "self-fenced: the lease deadline passed without an extension; the tool was stopped",
                None,
            )),
            // A tool that finished anyway reports what it did.
            Stopping::Cancelled(_)
                if finished
                    .as_ref()
                    .is_some_and(|outcome| outcome.outcome == ReportedOutcome::Succeeded) =>
            {
                finished
            }
            Stopping::Cancelled(reason) => Some(ExecutionOutcome {
                outcome: ReportedOutcome::Cancelled,
                category: Some(FailureCategory::Cancelled),
                message: format!("cancelled: {reason}"),
                result_json: None,
            }),
            Stopping::ShutDown => Some(ExecutionOutcome::failed(
                FailureCategory::Infrastructure,
                "the runner shut down before the attempt finished",
                None,
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(10);

    #[test]
    fn a_runner_paused_past_its_fence_stops_whatever_arrives_after() {
        let mut guard = LeaseGuard::new(TTL, 10_000);
        assert_eq!(
            guard.fence_at(),
            9_000,
            "a tenth of the TTL before the deadline"
        );
        assert!(!guard.must_fence(8_999));
        assert!(guard.must_fence(9_000), "at the fence instant itself");
        // SIGSTOP for 30 s: on waking, the fence has passed, and the
        // extension the dispatcher sent meanwhile no longer counts.
        assert!(guard.must_fence(38_000));
        assert!(!guard.extend(48_000, 38_000));
        assert!(guard.must_fence(38_000));
        // The revocation read on waking does not hide the fence.
        assert_eq!(guard.settle(Stopping::Revoked, 38_000), Stopping::Fenced);
        assert_eq!(guard.settle(Stopping::Revoked, 8_000), Stopping::Revoked);
        assert_eq!(
            guard.settle(Stopping::Cancelled("x".into()), 8_000),
            Stopping::Cancelled("x".into())
        );
    }

    #[test]
    fn an_extension_in_time_moves_the_fence_and_never_back() {
        let mut guard = LeaseGuard::new(TTL, 10_000);
        assert!(guard.extend(20_000, 6_000));
        assert_eq!(guard.fence_at(), 19_000);
        assert!(!guard.must_fence(18_000));
        // A stale extension (re-published, out of order) moves nothing back.
        assert!(guard.extend(15_000, 7_000));
        assert_eq!(guard.fence_at(), 19_000);
        // The margin is at least 250 ms, however short the TTL.
        assert_eq!(
            LeaseGuard::new(Duration::from_secs(1), 10_000).fence_at(),
            9_750
        );
    }

    #[test]
    fn each_stop_reports_what_happened() {
        let succeeded = ExecutionOutcome::succeeded("done", serde_json::json!({}));
        let failed = ExecutionOutcome::failed(FailureCategory::RunnerError, "broke", None);
        // A cancel during a drain: cancelled, unless the tool finished first.
        let cancel = Stopping::Cancelled("operator".into());
        let report = cancel.report(None).unwrap();
        assert_eq!(
            (report.outcome, report.message.as_str()),
            (ReportedOutcome::Cancelled, "cancelled: operator")
        );
        assert_eq!(cancel.report(Some(succeeded.clone())), Some(succeeded));
        assert_eq!(
            cancel.report(Some(failed)).unwrap().outcome,
            ReportedOutcome::Cancelled
        );
        assert_eq!(
            Stopping::Revoked.report(None),
            None,
            "a revoked lease reports nothing"
        );
        assert_eq!(
            Stopping::Fenced.report(None).unwrap().category,
            Some(FailureCategory::LeaseLost)
        );
        assert_eq!(
            Stopping::ShutDown.report(None).unwrap().category,
            Some(FailureCategory::Infrastructure)
        );
    }
}
