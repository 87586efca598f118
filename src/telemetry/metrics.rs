//! Metric names, their descriptions, and the helpers that record them.
//! Label sets are bounded: event kinds, terminal states, timer kinds,
//! topics — never an attempt, job or instance id.

use std::net::SocketAddr;

use metrics::{
    counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Unit,
};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use crate::contract::{AttemptEvent, EventBody, TerminalOutcome};

pub const INTAKE_BATCH_RECORDS: &str = "execplane_intake_batch_records";
pub const INTAKE_TRANSACTION_SECONDS: &str = "execplane_intake_transaction_seconds";
pub const INTAKE_LAG_SECONDS: &str = "execplane_intake_lag_seconds";
pub const EVENTS_APPENDED: &str = "execplane_events_appended_total";
pub const ATTEMPTS_ENDED: &str = "execplane_attempts_ended_total";
pub const ATTEMPTS: &str = "execplane_attempts";
pub const LEASE_GRANTS: &str = "execplane_lease_grants_total";
pub const LEASE_EXPIRIES: &str = "execplane_lease_expiries_total";
pub const FENCED_REPORTS: &str = "execplane_fenced_reports_total";
pub const TIMERS_FIRED: &str = "execplane_timers_fired_total";
pub const DLQ_RECORDS: &str = "execplane_dlq_records_total";
pub const INTAKE_ISOLATED: &str = "execplane_intake_isolated_records_total";
pub const CALLBACK_ATTEMPTS: &str = "execplane_callback_attempts_total";
pub const CALLBACK_FAILURES: &str = "execplane_callback_failures_total";
pub const OUTBOX_BACKLOG: &str = "execplane_outbox_backlog";
pub const OUTBOX_PUBLISHED: &str = "execplane_outbox_published_total";
pub const OUTBOX_PUBLISH_SECONDS: &str = "execplane_outbox_publish_seconds";
pub const RUNNER_IN_FLIGHT: &str = "execplane_runner_attempts_in_flight";
pub const RUNNER_SELF_FENCES: &str = "execplane_runner_self_fences_total";
pub const RUNNER_DUPLICATE_WORK: &str = "execplane_runner_duplicate_work_items_total";
pub const INGRESS_REQUESTS: &str = "execplane_ingress_requests_total";
pub const INGRESS_REQUEST_SECONDS: &str = "execplane_ingress_request_seconds";
pub const INGRESS_AUTH_REFUSALS: &str = "execplane_ingress_auth_refusals_total";
pub const INGRESS_CONNECTIONS_REFUSED: &str = "execplane_ingress_connections_refused_total";
pub const INGRESS_CONNECTIONS_TIMED_OUT: &str = "execplane_ingress_connections_timed_out_total";
pub const INGRESS_CONNECTIONS_EVICTED: &str = "execplane_ingress_connections_evicted_total";
pub const INGRESS_SESSIONS: &str = "execplane_ingress_executor_sessions";
pub const INGRESS_WORK_HANDED: &str = "execplane_ingress_work_handed_total";
pub const CONSUMER_LAG: &str = "execplane_consumer_lag_records";
pub const POLICY_RELOADS: &str = "execplane_policy_reloads_total";
pub const LOG_LINES_DROPPED: &str = "execplane_log_lines_dropped_total";

fn describe() {
    describe_counter!(
        POLICY_RELOADS,
        Unit::Count,
        "operator policy file reloads, by outcome (applied, refused: the file had problems and the policy in force was kept)"
    );
    describe_ingress();
    describe_dispatcher();
    describe_relay();
    describe_runners();
}

/// The metrics of the ingress.
fn describe_ingress() {
    describe_counter!(
        INGRESS_REQUESTS,
        Unit::Count,
        "ingress requests, by transport, route (the route template or TCP op) and HTTP status"
    );
    describe_histogram!(
        INGRESS_REQUEST_SECONDS,
        Unit::Seconds,
        "ingress request duration, by transport"
    );
    describe_counter!(
        INGRESS_AUTH_REFUSALS,
        Unit::Count,
        "ingress requests refused before reaching a handler or by policy, by reason"
    );
    describe_counter!(
        INGRESS_CONNECTIONS_REFUSED,
        Unit::Count,
        "connections closed at accept for exceeding the per-peer limit, by transport"
    );
    describe_counter!(
        INGRESS_CONNECTIONS_EVICTED,
        Unit::Count,
        "connections that had presented no key, closed at the global cap to make room for a new one"
    );
    describe_counter!(
        INGRESS_CONNECTIONS_TIMED_OUT,
        Unit::Count,
        "TCP connections closed for a half-sent frame or idleness"
    );
    describe_gauge!(
        INGRESS_SESSIONS,
        Unit::Count,
        "executor sessions this ingress announces presence for"
    );
    describe_counter!(
        INGRESS_WORK_HANDED,
        Unit::Count,
        "leased attempts handed to executors on poll"
    );
}

/// The metrics of the dispatcher (intake, timers, callbacks, consumer lag).
fn describe_dispatcher() {
    describe_gauge!(
        CONSUMER_LAG,
        Unit::Count,
        "records the dispatcher's intake has yet to read, by topic (high watermark minus position, summed over its partitions)"
    );
    describe_histogram!(
        INTAKE_BATCH_RECORDS,
        Unit::Count,
        "records decided per intake transaction"
    );
    describe_histogram!(
        INTAKE_TRANSACTION_SECONDS,
        Unit::Seconds,
        "duration of one intake transaction (decide + append + commit)"
    );
    describe_gauge!(INTAKE_LAG_SECONDS, Unit::Seconds, "how far behind the newest runner report and command intake is (now minus the last instant it had decided everything)");
    describe_counter!(
        EVENTS_APPENDED,
        Unit::Count,
        "attempt events appended, by kind"
    );
    describe_counter!(
        ATTEMPTS_ENDED,
        Unit::Count,
        "attempts that reached a terminal state, by state"
    );
    describe_gauge!(
        ATTEMPTS,
        Unit::Count,
        "attempts not yet ended, by state (refreshed every 15 s; ended ones are execplane_attempts_ended_total)"
    );
    describe_counter!(LEASE_GRANTS, Unit::Count, "leases granted");
    describe_counter!(
        LEASE_EXPIRIES,
        Unit::Count,
        "leases taken back by the heartbeat timer"
    );
    describe_counter!(
        FENCED_REPORTS,
        Unit::Count,
        "runner reports refused for a stale epoch or instance"
    );
    describe_counter!(
        TIMERS_FIRED,
        Unit::Count,
        "timers that ended an attempt, by timer"
    );
    describe_counter!(
        DLQ_RECORDS,
        Unit::Count,
        "records copied to the dead-letter topic"
    );
    describe_counter!(
        INTAKE_ISOLATED,
        Unit::Count,
        "records the store refused alone after their batch failed (dead-lettered)"
    );
    describe_counter!(
        CALLBACK_ATTEMPTS,
        Unit::Count,
        "HTTP callback deliveries tried"
    );
    describe_counter!(
        CALLBACK_FAILURES,
        Unit::Count,
        "HTTP callback deliveries that failed"
    );
}

/// The metrics of the relay (named `outbox` since before the log was one
/// of its sources).
fn describe_relay() {
    describe_gauge!(OUTBOX_BACKLOG, Unit::Count, "records waiting to be published (events past the relay's cursor, outbox rows), as of the relay's last read (capped at its batch size for each)");
    describe_counter!(OUTBOX_PUBLISHED, Unit::Count, "records published, by topic");
    describe_histogram!(
        OUTBOX_PUBLISH_SECONDS,
        Unit::Seconds,
        "duration of one relay round: produce and await the broker's acknowledgements"
    );
}

/// The metrics of runner instances.
fn describe_runners() {
    describe_counter!(
        RUNNER_DUPLICATE_WORK,
        Unit::Count,
        "work items delivered again for a lease this instance already started (not started twice)"
    );
    describe_gauge!(
        RUNNER_IN_FLIGHT,
        Unit::Count,
        "attempts running on this runner instance"
    );
    describe_counter!(
        RUNNER_SELF_FENCES,
        Unit::Count,
        "attempts a runner stopped because its lease deadline passed without an extension"
    );
    describe_counter!(
        LOG_LINES_DROPPED,
        Unit::Count,
        "log lines dropped because standard error was not read fast enough"
    );
}

static HANDLE: std::sync::OnceLock<PrometheusHandle> = std::sync::OnceLock::new();

/// Installs the Prometheus recorder (once per process) and, when `listen`
/// is given, serves `/metrics`, `/healthz` (the process answers) and
/// `/readyz` ([`super::health`]) there. A port already taken (several roles
/// on one machine) logs a warning instead of failing the process: the
/// metrics are still recorded, and the ingress serves them too.
pub fn init(listen: Option<SocketAddr>) {
    if HANDLE.get().is_none() {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        if metrics::set_global_recorder(recorder).is_ok() {
            let _ = HANDLE.set(handle.clone());
            describe();
            describe_artifacts();
            tokio::spawn(async move {
                let mut ticker = tokio::time::interval(std::time::Duration::from_secs(5));
                loop {
                    ticker.tick().await;
                    counter!(LOG_LINES_DROPPED).absolute(super::log_lines_dropped());
                    handle.run_upkeep();
                }
            });
        }
    }
    let Some(address) = listen else {
        return;
    };
    tokio::spawn(async move {
        let listener = match tokio::net::TcpListener::bind(address).await {
            Ok(listener) => listener,
            Err(error) => {
                tracing::warn!(%error, %address, "metrics endpoint not started; metrics are still recorded");
                return;
            }
        };
        tracing::info!(%address, "metrics on /metrics, health on /healthz and /readyz");
        let app = axum::Router::new()
            .route(
                "/metrics",
                axum::routing::get(|| async {
                    (
                        [(
                            axum::http::header::CONTENT_TYPE,
                            "text/plain; version=0.0.4; charset=utf-8",
                        )],
                        render(),
                    )
                }),
            )
            .route("/healthz", axum::routing::get(|| async { "ok\n" }))
            .route(
                "/readyz",
                axum::routing::get(|| async { super::health::readyz() }),
            );
        if let Err(error) = axum::serve(listener, app).await {
            tracing::warn!(%error, "metrics endpoint stopped");
        }
    });
}

/// The process's metrics in Prometheus text exposition format.
pub fn render() -> String {
    HANDLE
        .get()
        .map(PrometheusHandle::render)
        .unwrap_or_default()
}

/// The families of `upstream` that `local` does not already have, so that
/// the two concatenated stay one valid exposition (a family appears once).
pub fn merge_exposition(local: &str, upstream: &str) -> String {
    fn family(line: &str) -> Option<&str> {
        let name = if let Some(rest) = line
            .strip_prefix("# HELP ")
            .or_else(|| line.strip_prefix("# TYPE "))
        {
            rest.split_whitespace().next()?
        } else if line.starts_with('#') || line.trim().is_empty() {
            return None;
        } else {
            line.split(|c: char| c == '{' || c.is_whitespace()).next()?
        };
        // Summary and histogram samples belong to their base family.
        Some(
            ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix))
                .unwrap_or(name),
        )
    }
    let known: std::collections::HashSet<&str> = local.lines().filter_map(family).collect();
    let mut merged = String::new();
    for line in upstream.lines() {
        if family(line).is_some_and(|name| known.contains(name)) {
            continue;
        }
        merged.push_str(line);
        merged.push('\n');
    }
    merged
}

/// Counts what a committed batch appended.
pub fn record_events(events: &[AttemptEvent]) {
    for event in events {
        counter!(EVENTS_APPENDED, "kind" => event.body.kind()).increment(1);
        match &event.body {
            EventBody::LeaseGranted { .. } => counter!(LEASE_GRANTS).increment(1),
            EventBody::ReportFenced { .. } => counter!(FENCED_REPORTS).increment(1),
            EventBody::Rejected { .. } => {
                counter!(ATTEMPTS_ENDED, "state" => "rejected").increment(1)
            }
            EventBody::Finished {
                outcome,
                timer,
                category,
                ..
            } => {
                let state = match outcome {
                    TerminalOutcome::Succeeded => "succeeded",
                    TerminalOutcome::Failed => "failed",
                    TerminalOutcome::TimedOut => "timed_out",
                    TerminalOutcome::Cancelled => "cancelled",
                    TerminalOutcome::OutcomeUnknown => "outcome_unknown",
                };
                counter!(ATTEMPTS_ENDED, "state" => state).increment(1);
                if let Some(timer) = timer {
                    counter!(TIMERS_FIRED, "timer" => timer.as_str()).increment(1);
                    if *timer == crate::contract::TimerKind::Heartbeat && category.is_some() {
                        counter!(LEASE_EXPIRIES).increment(1);
                    }
                }
            }
            _ => {}
        }
    }
}

pub fn intake_batch(records: usize, seconds: f64) {
    histogram!(INTAKE_BATCH_RECORDS).record(records as f64);
    histogram!(INTAKE_TRANSACTION_SECONDS).record(seconds);
}

pub fn intake_lag(seconds: f64) {
    gauge!(INTAKE_LAG_SECONDS).set(seconds);
}

pub fn dead_lettered() {
    counter!(DLQ_RECORDS).increment(1);
}

pub fn runner_duplicate_work() {
    counter!(RUNNER_DUPLICATE_WORK).increment(1);
}

pub fn intake_isolated() {
    counter!(INTAKE_ISOLATED).increment(1);
}

pub fn callback(delivered: bool) {
    counter!(CALLBACK_ATTEMPTS).increment(1);
    if !delivered {
        counter!(CALLBACK_FAILURES).increment(1);
    }
}

pub fn outbox_round(backlog: usize, published: &[String], seconds: f64) {
    gauge!(OUTBOX_BACKLOG).set(backlog as f64);
    if published.is_empty() {
        return;
    }
    for topic in published {
        counter!(OUTBOX_PUBLISHED, "topic" => topic.clone()).increment(1);
    }
    histogram!(OUTBOX_PUBLISH_SECONDS).record(seconds);
}

pub fn attempts_by_state(counts: &[(String, i64)]) {
    for (state, count) in counts {
        gauge!(ATTEMPTS, "state" => state.clone()).set(*count as f64);
    }
}

pub fn runner_in_flight(count: u32) {
    gauge!(RUNNER_IN_FLIGHT).set(f64::from(count));
}

pub fn policy_reloaded(applied: bool) {
    let outcome = if applied { "applied" } else { "refused" };
    counter!(POLICY_RELOADS, "outcome" => outcome).increment(1);
}

pub fn runner_self_fenced() {
    counter!(RUNNER_SELF_FENCES).increment(1);
}

pub fn ingress_request(transport: &'static str, route: &str, status: u16, seconds: f64) {
    counter!(INGRESS_REQUESTS, "transport" => transport, "route" => route.to_owned(), "status" => status.to_string()).increment(1);
    histogram!(INGRESS_REQUEST_SECONDS, "transport" => transport).record(seconds);
}

pub fn ingress_auth_refused(reason: &'static str) {
    counter!(INGRESS_AUTH_REFUSALS, "reason" => reason).increment(1);
}

pub fn ingress_refused(reason: &'static str) {
    ingress_auth_refused(reason);
}

pub fn ingress_connection_refused(transport: &'static str) {
    counter!(INGRESS_CONNECTIONS_REFUSED, "transport" => transport).increment(1);
}

pub fn ingress_connection_evicted() {
    counter!(INGRESS_CONNECTIONS_EVICTED).increment(1);
}

pub fn ingress_connection_timed_out(transport: &'static str) {
    counter!(INGRESS_CONNECTIONS_TIMED_OUT, "transport" => transport).increment(1);
}

pub fn ingress_sessions(count: usize) {
    gauge!(INGRESS_SESSIONS).set(count as f64);
}

pub fn ingress_work_handed(count: usize) {
    if count > 0 {
        counter!(INGRESS_WORK_HANDED).increment(count as u64);
    }
}

pub fn consumer_lag(topic: &str, records: i64) {
    gauge!(CONSUMER_LAG, "topic" => topic.to_owned()).set(records as f64);
}

pub const ARTIFACT_DETECTIONS: &str = "execplane_artifact_detections_total";
pub const ARTIFACT_BACKLOG: &str = "execplane_artifact_backlog";
pub const ARTIFACTS_STORED: &str = "execplane_artifacts_stored_total";
pub const ARTIFACT_STORE_FAILURES: &str = "execplane_artifact_store_failures_total";
pub const ARTIFACT_DIGEST_MISMATCHES: &str = "execplane_artifact_digest_mismatches_total";

pub(crate) fn describe_artifacts() {
    describe_counter!(
        ARTIFACT_DETECTIONS,
        Unit::Count,
        "secret-shaped text the artifact worker masked, by detector"
    );
    describe_gauge!(
        ARTIFACT_BACKLOG,
        Unit::Count,
        "ended attempts whose artifacts are not stored yet"
    );
    describe_counter!(
        ARTIFACTS_STORED,
        Unit::Count,
        "artifacts stored and recorded, by retention class"
    );
    describe_counter!(
        ARTIFACT_STORE_FAILURES,
        Unit::Count,
        "artifact writes the storage refused or did not answer"
    );
    describe_counter!(
        ARTIFACT_DIGEST_MISMATCHES,
        Unit::Count,
        "artifact downloads refused: the stored bytes do not match the recorded sha256"
    );
}

pub fn artifact_detection(detector: &'static str, count: usize) {
    counter!(ARTIFACT_DETECTIONS, "detector" => detector).increment(count as u64);
}

pub fn artifact_backlog(count: i64) {
    gauge!(ARTIFACT_BACKLOG).set(count as f64);
}

pub fn artifact_stored(class: &'static str) {
    counter!(ARTIFACTS_STORED, "class" => class).increment(1);
}

pub fn artifact_store_failed() {
    counter!(ARTIFACT_STORE_FAILURES).increment(1);
}

pub fn artifact_digest_mismatch() {
    counter!(ARTIFACT_DIGEST_MISMATCHES).increment(1);
}

#[cfg(test)]
mod tests {
    #[test]
    fn merged_exposition_repeats_no_family() {
        let local =
            "# TYPE a counter\na 1\n# TYPE h summary\nh{quantile=\"0.5\"} 1\nh_sum 1\nh_count 1\n";
        let upstream =
            "# TYPE a counter\na 2\n# TYPE b gauge\nb{x=\"1\"} 3\n# TYPE h summary\nh_count 4\n";
        assert_eq!(
            super::merge_exposition(local, upstream),
            "# TYPE b gauge\nb{x=\"1\"} 3\n"
        );
    }
}
