//! What a process's `/readyz` answers (docs/OPERATIONS.md, "Health"):
//! named conditions its roles hold, each ready or not ready with a reason
//! an operator can act on. A role that waits for its brokers, or lost
//! them, or is draining, says so here instead of exiting; the process is
//! ready when every condition is. A warning (a runner `serve` left out
//! because its tool is missing, say) leaves it ready and is shown.

use std::collections::BTreeMap;
use std::sync::Mutex;

#[derive(Clone, Debug, PartialEq, Eq)]
enum State {
    Ready,
    Warning(String),
    NotReady(String),
}

static CONDITIONS: Mutex<BTreeMap<String, State>> = Mutex::new(BTreeMap::new());

fn set(name: &str, state: State) {
    let mut conditions = CONDITIONS
        .lock()
        .unwrap_or_else(|poison| poison.into_inner());
    if conditions.get(name) != Some(&state) {
        match &state {
            State::Ready => tracing::info!(condition = name, "ready"),
            State::Warning(why) => {
                tracing::warn!(condition = name, why = %why, "ready, with a warning")
            }
            State::NotReady(why) => tracing::info!(condition = name, why = %why, "not ready"),
        }
        conditions.insert(name.to_owned(), state);
    }
}

/// `name` holds.
pub fn ready(name: &str) {
    set(name, State::Ready);
}

/// `name` holds, but an operator should know `why`.
pub fn warning(name: &str, why: impl Into<String>) {
    set(name, State::Warning(why.into()));
}

/// `name` does not hold, because `why`.
pub fn not_ready(name: &str, why: impl Into<String>) {
    set(name, State::NotReady(why.into()));
}

/// `Ok` with the warnings when every condition holds (and at least one
/// was named), else each one that does not; both as `name: why`.
pub fn report() -> Result<Vec<String>, Vec<String>> {
    let conditions = CONDITIONS
        .lock()
        .unwrap_or_else(|poison| poison.into_inner());
    if conditions.is_empty() {
        return Err(vec!["starting".to_owned()]);
    }
    let (mut warnings, mut failing) = (Vec::new(), Vec::new());
    for (name, state) in conditions.iter() {
        match state {
            State::Ready => {}
            State::Warning(why) => warnings.push(format!("{name}: {why}")),
            State::NotReady(why) => failing.push(format!("{name}: {why}")),
        }
    }
    if failing.is_empty() {
        Ok(warnings)
    } else {
        Err(failing)
    }
}

/// The `/readyz` answer: status and body, one `warning:` line per warning.
pub fn readyz() -> (axum::http::StatusCode, String) {
    match report() {
        Ok(warnings) => {
            let mut body = String::from("ready\n");
            for warning in warnings {
                body.push_str(&format!("warning: {warning}\n"));
            }
            (axum::http::StatusCode::OK, body)
        }
        Err(failing) => (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {}\n", failing.join("; ")),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_when_every_named_condition_holds() {
        // The registry is the process's: this test owns its own names.
        not_ready("test kafka", "waiting for the brokers");
        ready("test runner");
        warning("test helm runner", "left out: helm is missing");
        let failing = report().unwrap_err();
        assert!(
            failing.contains(&"test kafka: waiting for the brokers".to_owned()),
            "{failing:?}"
        );
        assert!(!failing.iter().any(|line| line.starts_with("test runner")));
        ready("test kafka");
        // Other tests of this process may hold conditions of their own.
        match report() {
            Ok(warnings) => assert!(
                warnings.contains(&"test helm runner: left out: helm is missing".to_owned()),
                "{warnings:?}"
            ),
            Err(failing) => assert!(
                failing.iter().all(|line| !line.starts_with("test ")),
                "{failing:?}"
            ),
        }
    }
}
