//! Metric names, their descriptions, and the helpers that record them.
//! Label sets are bounded: event kinds, terminal states, timer kinds,
//! topics — never an attempt, job or instance id.

use std::net::SocketAddr;

use metrics::{
    counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Unit,
};
use metrics_exporter_prometheus::PrometheusBuilder;

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
pub const CALLBACK_ATTEMPTS: &str = "execplane_callback_attempts_total";
pub const CALLBACK_FAILURES: &str = "execplane_callback_failures_total";
pub const OUTBOX_BACKLOG: &str = "execplane_outbox_backlog";
pub const OUTBOX_PUBLISHED: &str = "execplane_outbox_published_total";
pub const OUTBOX_PUBLISH_SECONDS: &str = "execplane_outbox_publish_seconds";
pub const RUNNER_IN_FLIGHT: &str = "execplane_runner_attempts_in_flight";
pub const RUNNER_SELF_FENCES: &str = "execplane_runner_self_fences_total";

fn describe() {
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
        "attempts in the projection, by state (refreshed every 15 s)"
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
        CALLBACK_ATTEMPTS,
        Unit::Count,
        "HTTP callback deliveries tried"
    );
    describe_counter!(
        CALLBACK_FAILURES,
        Unit::Count,
        "HTTP callback deliveries that failed"
    );
    describe_gauge!(OUTBOX_BACKLOG, Unit::Count, "outbox rows waiting to be published, as of the relay's last read (capped at its batch size)");
    describe_counter!(
        OUTBOX_PUBLISHED,
        Unit::Count,
        "outbox rows published, by topic"
    );
    describe_histogram!(
        OUTBOX_PUBLISH_SECONDS,
        Unit::Seconds,
        "duration of one relay round: produce and await the broker's acknowledgements"
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
}

/// Installs the Prometheus recorder and, when `listen` is given, serves
/// `/metrics` there. A port already taken (several roles on one machine)
/// keeps the recorder and logs a warning instead of failing the process.
pub fn init(listen: Option<SocketAddr>) {
    let result = match listen {
        Some(address) => PrometheusBuilder::new()
            .with_http_listener(address)
            .install()
            .map(|()| Some(address)),
        None => PrometheusBuilder::new().install_recorder().map(|_| None),
    };
    match result {
        Ok(Some(address)) => tracing::info!(%address, "metrics on /metrics"),
        Ok(None) => {}
        Err(error) => {
            tracing::warn!(%error, "metrics endpoint not started; metrics are still recorded");
            let _ = PrometheusBuilder::new().install_recorder();
        }
    }
    describe();
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

pub fn runner_self_fenced() {
    counter!(RUNNER_SELF_FENCES).increment(1);
}
