//! The console's pages. maud escapes every value it splices in, so a job id
//! or a message holding markup is shown as text; nothing here writes a
//! value into a script, a style or an event handler attribute (the pages
//! carry no inline script at all: the Content-Security-Policy forbids it).

use axum::http::StatusCode;
use axum::response::sse::Event;
use maud::{html, Markup, DOCTYPE};
use serde_json::{json, Value};

use super::{may, SignedIn};
use crate::contract::{AttemptEvent, EventBody};
use crate::ingress::IngressError;
use crate::policy::principals::Role;
use crate::store::console::{
    AttemptFilter, AttemptsPage, AwaitingPlan, Overview, ENDED_READ_LIMIT, MAX_WALKED,
};
use crate::store::{ArtifactRow, ChainReport};

/// The states an attempt can be in, for the list's filter.
const STATES: [&str; 10] = [
    "queued",
    "leased",
    "running",
    "cancel_requested",
    "succeeded",
    "failed",
    "timed_out",
    "cancelled",
    "outcome_unknown",
    "rejected",
];

fn layout(signed: Option<&SignedIn>, title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · execplane" }
                link rel="stylesheet" href="/console/static/app.css";
                script src="/console/static/app.js" defer {}
            }
            body {
                header {
                    a.brand href="/console" { "execplane" }
                    @if let Some(signed) = signed {
                        nav {
                            a href="/console" { "Overview" }
                            a href="/console/attempts" { "Attempts" }
                            a href="/console/approvals" { "Approvals" }
                        }
                        span.who { "signed in as " strong #principal { (signed.principal.name) } }
                        form.inline method="post" action="/console/sign-out" {
                            input type="hidden" name="csrf" value=(signed.session.csrf);
                            button #sign-out type="submit" { "Sign out" }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

pub fn sign_in(error: Option<&str>) -> Markup {
    layout(
        None,
        "Sign in",
        html! {
            h1 { "Sign in" }
            @if let Some(error) = error {
                p.error #sign-in-error role="alert" { (error) }
            }
            form.card method="post" action="/console/sign-in" {
                label for="key" { "API key" }
                input #key type="password" name="key" autocomplete="current-password" required;
                button #sign-in type="submit" { "Sign in" }
            }
        },
    )
}

pub fn error(signed: Option<&SignedIn>, status: StatusCode, error: &IngressError) -> Markup {
    let body = error.body();
    let message = body["message"]
        .as_str()
        .map(str::to_owned)
        .or_else(|| {
            body["problems"].as_array().map(|problems| {
                problems
                    .iter()
                    .map(|problem| {
                        format!(
                            "{}: {}",
                            problem["path"].as_str().unwrap_or_default(),
                            problem["message"].as_str().unwrap_or_default()
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("; ")
            })
        })
        .unwrap_or_else(|| error.to_string());
    layout(
        signed,
        status.canonical_reason().unwrap_or("Error"),
        html! {
            h1 { (status.as_u16()) " " (status.canonical_reason().unwrap_or_default()) }
            p.error #error role="alert" { (message) }
            p { a href="/console" { "Back to the overview" } }
        },
    )
}

/// `dlq`: the dead-lettered count, `Some(None)` when the broker did not
/// answer, `None` for a principal that may not see it.
pub fn overview(signed: &SignedIn, counts: &Overview, dlq: Option<Option<i64>>) -> Markup {
    layout(
        Some(signed),
        "Overview",
        html! {
            h1 { "Overview" }
            div.grid {
                section.card {
                    h2 { "Attempts not yet ended" }
                    table #by-state {
                        thead { tr { th { "State" } th.num { "Attempts" } } }
                        tbody {
                            @for (state, count) in &counts.by_state {
                                tr data-state=(state) data-count=(count) {
                                    td { a href={ "/console/attempts?state=" (state) } { (badge(state)) } }
                                    td.num { (count) }
                                }
                            }
                        }
                    }
                }
                section.card {
                    @if counts.ended.capped {
                        h2 { "Ended since " (counts.ended.since.format("%H:%M:%S UTC")) }
                        p.muted {
                            "Only the newest " (ENDED_READ_LIMIT) " endings of the last hour are read."
                        }
                    } @else {
                        h2 { "Ended in the last hour" }
                    }
                    @if counts.ended.counts.is_empty() {
                        p.muted { "None." }
                    } @else {
                        table #ended {
                            thead { tr { th { "State" } th { "Failure category" } th.num { "Attempts" } } }
                            tbody {
                                @for (state, category, count) in &counts.ended.counts {
                                    tr {
                                        td { (badge(state)) }
                                        td { (category.as_deref().unwrap_or("—")) }
                                        td.num { (count) }
                                    }
                                }
                            }
                        }
                    }
                }
                section.card {
                    h2 { "Live runner instances" }
                    @if counts.runners.is_empty() {
                        p.muted { "None." }
                    } @else {
                        table #runners {
                            thead { tr { th { "Runner type" } th.num { "Instances" } th.num { "Capacity" } th.num { "In flight" } } }
                            tbody {
                                @for (runner_type, instances, capacity, in_flight) in &counts.runners {
                                    tr {
                                        td { (runner_type) }
                                        td.num { (instances) }
                                        td.num { (capacity) }
                                        td.num { (in_flight) }
                                    }
                                }
                            }
                        }
                    }
                }
                @if let Some(dlq) = dlq {
                    section.card {
                        h2 { "Dead-lettered in the last hour" }
                        p.big #dlq {
                            @match dlq {
                                Some(count) => (count),
                                None => span.muted { "the broker did not answer" },
                            }
                        }
                    }
                }
            }
        },
    )
}

/// A state as a coloured badge.
fn badge(state: &str) -> Markup {
    html! { span class={ "badge " (state) } { (state) } }
}

fn filter_query(filter: &AttemptFilter) -> String {
    let mut query = url::form_urlencoded::Serializer::new(String::new());
    for (name, value) in [
        ("state", &filter.state),
        ("operation", &filter.operation),
        ("tenant", &filter.tenant),
        ("runner_type", &filter.runner_type),
        ("job_id", &filter.job_id),
    ] {
        if let Some(value) = value {
            query.append_pair(name, value);
        }
    }
    query.finish()
}

fn job_link(job_id: &str) -> String {
    let mut query = url::form_urlencoded::Serializer::new(String::new());
    query.append_pair("id", job_id);
    format!("/console/job?{}", query.finish())
}

fn time(at: &chrono::DateTime<chrono::Utc>) -> Markup {
    html! { time datetime=(at.to_rfc3339()) { (at.format("%Y-%m-%d %H:%M:%S%.3f")) } }
}

pub fn attempts(signed: &SignedIn, filter: &AttemptFilter, found: &AttemptsPage) -> Markup {
    let (lines, next) = (&found.lines, found.next);
    let text = |value: &Option<String>| value.clone().unwrap_or_default();
    layout(
        Some(signed),
        "Attempts",
        html! {
            h1 { "Attempts" }
            form.filters method="get" action="/console/attempts" {
                label { "State "
                    select name="state" {
                        option value="" { "any" }
                        @for state in STATES {
                            option value=(state) selected[filter.state.as_deref() == Some(state)] { (state) }
                        }
                    }
                }
                label { "Operation " input name="operation" value=(text(&filter.operation)); }
                label { "Tenant " input name="tenant" value=(text(&filter.tenant)); }
                label { "Runner type " input name="runner_type" value=(text(&filter.runner_type)); }
                label { "Job id " input name="job_id" value=(text(&filter.job_id)); }
                button type="submit" { "Filter" }
            }
            table #attempts {
                thead { tr { th { "Created" } th { "Attempt" } th { "Job" } th { "Tenant" } th { "Operation" } th { "State" } th { "Failure" } } }
                tbody {
                    @for line in lines {
                        tr data-attempt=(line.attempt_id) {
                            td { (time(&line.created_at)) }
                            td { a.mono href={ "/console/attempts/" (line.attempt_id) } { (line.attempt_id.to_string()[..8]) } " #" (line.attempt_no) }
                            td { a href=(job_link(&line.job_id)) { (line.job_id) } }
                            td { (line.tenant) }
                            td { (line.operation) }
                            td { (badge(&line.status)) }
                            td { (line.failure_category.as_deref().unwrap_or("")) }
                        }
                    }
                }
            }
            @if found.sparse {
                p.muted { "Fewer than a page among the " (MAX_WALKED) " attempts before this point; older ones on the next page." }
            } @else if lines.is_empty() {
                p.muted { "No attempts." }
            }
            @if let Some(next) = next {
                p { a #next rel="next" href={ "/console/attempts?" (filter_query(filter)) "&after=" (next.encode()) } { "Older →" } }
            }
        },
    )
}

/// What the attempt page shows.
pub struct AttemptPage<'a> {
    pub row: &'a Value,
    pub spec: &'a Value,
    pub events: &'a [AttemptEvent],
    pub artifacts: &'a [ArtifactRow],
    pub logs: &'a [(String, String)],
    pub chain: &'a ChainReport,
}

fn text_of<'a>(value: &'a Value, field: &str) -> &'a str {
    value[field].as_str().unwrap_or_default()
}

/// "+850 ms", "+1.2 s", "+3 min 5 s".
fn delta(ms: i64) -> String {
    match ms {
        ..1_000 => format!("+{ms} ms"),
        1_000..60_000 => format!("+{:.1} s", ms as f64 / 1000.0),
        _ => format!("+{} min {} s", ms / 60_000, (ms % 60_000) / 1000),
    }
}

/// The state an attempt is in after `event`, where it changes it.
fn state_after(body: &EventBody) -> Option<&'static str> {
    Some(match body {
        EventBody::Created { .. } => "queued",
        EventBody::LeaseGranted { .. } => "leased",
        EventBody::Started { .. } => "running",
        EventBody::CancelRequested { .. } => "cancel_requested",
        EventBody::Rejected { .. } => "rejected",
        EventBody::Finished { outcome, .. } => {
            crate::contract::AttemptStatus::from(*outcome).as_str()
        }
        _ => return None,
    })
}

/// One timeline entry, as the page and its live stream show it.
pub fn entry(event: &AttemptEvent, previous_at: Option<i64>) -> Value {
    let body = serde_json::to_value(&event.body).unwrap_or_default();
    let at = chrono::DateTime::from_timestamp_millis(event.occurred_at).unwrap_or_default();
    json!({
        "seq": event.seq,
        "kind": event.body.kind(),
        "at": at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "delta": previous_at.map(|previous| delta(event.occurred_at - previous)),
        "epoch": body["epoch"].as_u64(),
        "runner_instance": body["runner_instance"].as_str(),
        "summary": event.summary(),
        "state": state_after(&event.body),
        "percent": body["percent"].as_u64(),
        "terminal": event.body.is_terminal(),
    })
}

/// The console's live event: one timeline entry as JSON (the page's
/// script puts each field in as text). `occurred_at` of the entry before
/// is not known to the stream, so live entries carry no delta; the page
/// computes it.
pub fn live_event(event: &AttemptEvent) -> Event {
    Event::default()
        .id(event.seq.to_string())
        .json_data(entry(event, None))
        .unwrap_or_else(|_| Event::default().comment("unencodable event"))
}

fn timeline_item(entry: &Value) -> Markup {
    html! {
        li data-seq=(entry["seq"]) data-kind=(text_of(entry, "kind")) data-at=(text_of(entry, "at")) {
            span.dot {}
            time { (text_of(entry, "at")) }
            span.delta { (entry["delta"].as_str().unwrap_or("")) }
            span.kind { (text_of(entry, "kind")) }
            @if let Some(epoch) = entry["epoch"].as_u64() { span.epoch { "epoch " (epoch) } }
            @if let Some(instance) = entry["runner_instance"].as_str() { span.instance { (instance) } }
            div.summary { (text_of(entry, "summary")) }
        }
    }
}

pub fn attempt(signed: &SignedIn, page: &AttemptPage<'_>) -> Markup {
    let row = page.row;
    let attempt_id = text_of(row, "attempt_id");
    let tenant = text_of(row, "tenant");
    let status = text_of(row, "status");
    let terminal = crate::contract::AttemptStatus::parse(status).is_some_and(|s| s.is_terminal());
    let operation = text_of(row, "operation");
    let mut previous = None;
    let entries: Vec<Value> = page
        .events
        .iter()
        .map(|event| {
            let entry = entry(event, previous);
            previous = Some(event.occurred_at);
            entry
        })
        .collect();
    let last_seq = page.events.last().map_or(0, |event| event.seq);
    let callback = page
        .events
        .iter()
        .rev()
        .find_map(|event| match &event.body {
            EventBody::CallbackRecorded {
                url,
                delivered,
                attempts,
                http_status,
                error,
                ..
            } => Some((
                url.clone(),
                *delivered,
                *attempts,
                *http_status,
                error.clone(),
            )),
            _ => None,
        });
    let approval = &row["plan_approval"];
    let plan_digest = super::views::plan_digest(row["result_json"].as_str());
    layout(
        Some(signed),
        &format!("Attempt {attempt_id}"),
        html! {
            h1 { "Attempt " span.mono { (attempt_id) } }
            div.grid {
                section.card {
                    dl.facts {
                        dt { "State" } dd { span #status class={ "badge " (status) } { (status) } }
                        dt { "Job" } dd { a #job href=(job_link(text_of(row, "job_id"))) { (text_of(row, "job_id")) } " · attempt " (row["attempt_no"]) }
                        dt { "Tenant" } dd { (tenant) }
                        dt { "Operation" } dd { (operation) }
                        dt { "Runner type" } dd { (text_of(row, "runner_type")) }
                        dt { "Requested by" } dd { (text_of(page.spec, "requested_by")) }
                        dt { "Created" } dd { (text_of(row, "created_at")) }
                        @if let Some(at) = row["started_at"].as_str() { dt { "Started" } dd { (at) } }
                        @if let Some(at) = row["finished_at"].as_str() { dt { "Finished" } dd { (at) } }
                        @if let Some(category) = row["failure_category"].as_str() {
                            dt { "Failure" } dd #failure-category { (category) }
                        }
                        @if let Some(message) = row["message"].as_str().filter(|m| !m.is_empty()) {
                            dt { "Message" } dd #message { (message) }
                        }
                        @if let Some(reason) = row["cancel_reason"].as_str() {
                            dt { "Cancel" } dd { (reason) " — " (text_of(row, "cancel_requested_by")) }
                        }
                        @if let Some((url, delivered, attempts, http_status, error)) = &callback {
                            dt { "Callback" } dd #callback {
                                (if *delivered { "delivered" } else { "not delivered" }) " to " span.mono { (url) }
                                " after " (attempts) " attempt(s)"
                                @if let Some(code) = http_status { " · HTTP " (code) }
                                @if let Some(error) = error { " · " (error) }
                            }
                        }
                        @if !approval.is_null() {
                            dt { "Plan approved" } dd #approval { "by " (approvers(approval)) }
                        }
                        dt { "Hash chain" } dd {
                            @match &page.chain.first_break {
                                None => span #chain .badge.succeeded { "intact · " (page.chain.events) " events" },
                                Some(broken) => span #chain .badge.failed { "broken: " (broken.to_string()) },
                            }
                        }
                    }
                    @if !terminal {
                        progress #progress max="100" value=(row["progress_percent"].as_u64().unwrap_or(0)) {}
                        p #progress-message .muted { (row["progress"].as_str().unwrap_or("")) }
                    }
                }
                @if !terminal && may(signed, Role::Operator, tenant) {
                    section.card {
                        h2 { "Cancel" }
                        form #cancel-form method="post" action={ "/console/attempts/" (attempt_id) "/cancel" } {
                            input type="hidden" name="csrf" value=(signed.session.csrf);
                            label for="reason" { "Reason" }
                            input #reason name="reason" maxlength="1024" placeholder="why it is cancelled";
                            button #cancel .danger type="submit" { "Cancel attempt" }
                        }
                    }
                }
                @if let Some(digest) = plan_digest.as_deref().filter(|_| operation == "opentofu.plan" && status == "succeeded" && approval.is_null()) {
                    @if may(signed, Role::Approver, tenant) {
                        section.card {
                            h2 { "Approve this plan" }
                            (approve_form(signed, attempt_id, digest))
                        }
                    }
                }
            }
            (super::views::result(operation, row["result_json"].as_str()))
            h2 { "Timeline" }
            ol #timeline data-attempt=(attempt_id) data-after=(last_seq) data-live=(if terminal { "false" } else { "true" }) {
                @for entry in &entries { (timeline_item(entry)) }
            }
            @if terminal && entries.len() >= crate::ingress::api::EVENTS_PAGE {
                p.muted { "The first " (entries.len()) " events; the rest are paged by the API's " code { "/v1/attempts/" (attempt_id) "/events?after=" } "." }
            }
            h2 { "Artifacts" }
            @if page.artifacts.is_empty() {
                p.muted { "None yet." }
            } @else {
                table #artifacts {
                    thead { tr { th { "Name" } th { "Class" } th.num { "Size" } th { "sha256" } th { "Producer" } } }
                    tbody {
                        @for artifact in page.artifacts {
                            tr data-name=(artifact.name) {
                                td { a download href={ "/console/attempts/" (attempt_id) "/artifacts/" (artifact.name) } { (artifact.name) } }
                                td { (artifact.retention_class) }
                                td.num { (artifact.size) }
                                td.mono.digest { (artifact.sha256) }
                                td { (artifact.producer) }
                            }
                        }
                    }
                }
            }
            @for (name, text) in page.logs {
                details.log open {
                    summary { (name) }
                    pre { (text) }
                }
            }
        },
    )
}

/// Who approved a plan (`plan_approval.approved_by`, a list).
fn approvers(approval: &Value) -> String {
    approval["approved_by"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

fn approve_form(signed: &SignedIn, attempt_id: &str, digest: &str) -> Markup {
    html! {
        form.approve method="post" action={ "/console/attempts/" (attempt_id) "/approve" } {
            input type="hidden" name="csrf" value=(signed.session.csrf);
            input type="hidden" name="plan_digest" value=(digest);
            p.mono.digest { (digest) }
            button .approve type="submit" { "Approve" }
        }
    }
}

pub fn job(signed: &SignedIn, job: &Value) -> Markup {
    let row = &job["job"];
    let attempts = job["attempts"].as_array().cloned().unwrap_or_default();
    layout(
        Some(signed),
        &format!("Job {}", text_of(row, "job_id")),
        html! {
            h1 { "Job " span #job-id { (text_of(row, "job_id")) } }
            dl.facts.card {
                dt { "Tenant" } dd { (text_of(row, "tenant")) }
                dt { "Operation" } dd { (text_of(row, "operation")) }
                dt { "State" } dd { (badge(text_of(row, "status"))) }
                dt { "Requested by" } dd { (text_of(&row["spec"], "requested_by")) }
                dt { "Created" } dd { (text_of(row, "created_at")) }
            }
            h2 { "Attempts" }
            table #job-attempts {
                thead { tr { th { "#" } th { "Attempt" } th { "State" } th { "Why it ended" } } }
                tbody {
                    @for attempt in &attempts {
                        tr {
                            td { (attempt["attempt_no"]) }
                            td { a.mono href={ "/console/attempts/" (text_of(attempt, "attempt_id")) } { (text_of(attempt, "attempt_id")) } }
                            td { (badge(text_of(attempt, "status"))) }
                            td {
                                @if let Some(category) = attempt["failure_category"].as_str() { strong { (category) } ": " }
                                (attempt["message"].as_str().unwrap_or(""))
                            }
                        }
                    }
                }
            }
        },
    )
}

pub fn approvals(signed: &SignedIn, plans: &[AwaitingPlan]) -> Markup {
    layout(
        Some(signed),
        "Approvals",
        html! {
            h1 { "Plans awaiting approval" }
            @if plans.is_empty() { p.muted #no-plans { "None." } }
            @for plan in plans {
                @let spec = plan.spec.clone().unwrap_or_default();
                @let digest = super::views::plan_digest(plan.result_json.as_deref());
                section.card.plan data-attempt=(plan.attempt_id) {
                    h2 { a href={ "/console/attempts/" (plan.attempt_id) } { (plan.job_id) } }
                    dl.facts {
                        dt { "Tenant" } dd { (plan.tenant) }
                        dt { "Module" } dd { (spec["inputs"]["package"]["name"].as_str().unwrap_or("")) }
                        dt { "Workspace" } dd { (spec["inputs"]["workspace"].as_str().unwrap_or("default")) }
                        dt { "Asked by" } dd { (plan.requested_by.as_deref().unwrap_or("")) }
                    }
                    (super::views::result("opentofu.plan", plan.result_json.as_deref()))
                    @if let Some(digest) = digest.as_deref() {
                        @if may(signed, Role::Approver, &plan.tenant) {
                            (approve_form(signed, &plan.attempt_id.to_string(), digest))
                        }
                    }
                }
            }
        },
    )
}
