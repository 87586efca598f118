//! The operator console (docs/INGRESS.md, "The console"): server-rendered
//! pages under `/console` on the ingress's HTTP port, for the principals of
//! the execute API. It reads what the execute API reads and acts through
//! the same functions (cancel, approve), so a principal can do nothing here
//! it could not do there, and is refused the same way.
//!
//! Every page is sent with a Content-Security-Policy that allows scripts,
//! styles and connections from the ingress itself only (no inline script);
//! every value is escaped by the templates; every state-changing form
//! carries the session's CSRF token, and the session cookie is HttpOnly and
//! `SameSite=Strict`.

pub mod pages;
pub mod session;
pub mod views;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Extension, Form, Router};
use maud::Markup;
use serde::Deserialize;
use uuid::Uuid;

use super::http::Client;
use super::{Ingress, IngressError};
use crate::policy::principals::{Principal, Role};
use crate::store::console::{AttemptFilter, Cursor};
use session::Session;

/// The session cookie's name.
pub const COOKIE: &str = "execplane_session";
/// Attempts on one page of the list.
pub const PAGE_SIZE: i64 = 50;
/// Bytes of a log artifact shown inline on the attempt page.
pub const LOG_PREVIEW_BYTES: usize = 64 * 1024;
/// Log artifacts larger than this are not read for a preview.
const MAX_PREVIEWED_LOG: i64 = 8 * 1024 * 1024;
/// How long the overview's DLQ count is reused.
const DLQ_COUNT_TTL: Duration = Duration::from_secs(15);

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

pub fn router() -> Router<Arc<Ingress>> {
    Router::new()
        .route("/console", get(overview))
        .route("/console/sign-in", get(sign_in_page).post(sign_in))
        .route("/console/sign-out", post(sign_out))
        .route("/console/attempts", get(attempts))
        .route("/console/attempts/{attempt_id}", get(attempt))
        .route("/console/attempts/{attempt_id}/live", get(live))
        .route(
            "/console/attempts/{attempt_id}/artifacts/{name}",
            get(artifact),
        )
        .route("/console/attempts/{attempt_id}/cancel", post(cancel))
        .route("/console/attempts/{attempt_id}/approve", post(approve))
        .route("/console/job", get(job))
        .route("/console/approvals", get(approvals))
        .route("/console/static/app.js", get(script))
        .route("/console/static/app.css", get(style))
        // Its forms are a key, a token, a reason: read before anyone is
        // known to be signed in, so held to a form's size, not to the
        // API's `EXECPLANE_INGRESS_MAX_BODY` (a thousand unsigned
        // connections trickling a MiB each).
        .layer(axum::extract::DefaultBodyLimit::max(MAX_FORM_BYTES))
        .layer(axum::middleware::from_fn(secure_headers))
}

/// The largest form the console reads.
const MAX_FORM_BYTES: usize = 16 * 1024;

/// Headers every console response carries; a form posted from another
/// site (`Sec-Fetch-Site: cross-site`, or an `Origin` that is not this
/// host) is refused before it is read, sign-in included (so no page
/// elsewhere can sign a browser in as someone else).
async fn secure_headers(request: Request, next: Next) -> Response {
    if request.method() == axum::http::Method::POST && cross_site(request.headers()) {
        crate::telemetry::metrics::ingress_auth_refused("console_cross_site");
        return IngressError::Forbidden("a form posted from another site".into()).into_response();
    }
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    // A download keeps its own (stricter) policy.
    if !headers.contains_key(header::CONTENT_SECURITY_POLICY) {
        headers.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CSP),
        );
    }
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

/// Whether a request comes from a page of another site: by the browser's
/// `Sec-Fetch-Site`, or (a browser without it) by `Origin` against the host
/// the browser asked for (`X-Forwarded-Host` behind a proxy; a cross-site
/// form cannot set that header).
fn cross_site(headers: &HeaderMap) -> bool {
    let text = |name: &str| {
        headers
            .get(name)
            .map(|value| value.to_str().unwrap_or("\u{0}").to_owned())
    };
    if let Some(site) = text("sec-fetch-site") {
        return site != "same-origin" && site != "none";
    }
    let Some(origin) = text("origin") else {
        return false;
    };
    let host = text("x-forwarded-host").or_else(|| text("host"));
    let origin_host = origin.split_once("://").map(|(_, rest)| rest.to_owned());
    origin_host.is_none() || origin_host != host
}

/// A signed-in request: who, and its session.
pub struct SignedIn {
    pub principal: Principal,
    pub session: Session,
}

fn cookie_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.to_owned())
}

/// Why a request has no principal.
enum NotSignedIn {
    /// No session, or it ended: the browser is sent to sign in.
    SignIn,
    /// The execute API, and so the console, is off.
    Off,
}

impl IntoResponse for NotSignedIn {
    fn into_response(self) -> Response {
        match self {
            NotSignedIn::SignIn => Redirect::to("/console/sign-in").into_response(),
            NotSignedIn::Off => {
                IngressError::NotFound(super::http::EXECUTE_API_OFF.into()).into_response()
            }
        }
    }
}

/// The principal of the request's live session, if any.
pub(super) fn session_principal(ingress: &Ingress, headers: &HeaderMap) -> Option<Principal> {
    signed_in(ingress, headers)
        .ok()
        .map(|signed| signed.principal)
}

/// The request's session and principal.
fn signed_in(ingress: &Ingress, headers: &HeaderMap) -> Result<SignedIn, NotSignedIn> {
    if !ingress.api_on() {
        return Err(NotSignedIn::Off);
    }
    let token = cookie_token(headers).ok_or(NotSignedIn::SignIn)?;
    let session = ingress.sessions.get(&token).ok_or(NotSignedIn::SignIn)?;
    let principal = ingress
        .principal_of_session(&session.principal, &session.key_digest)
        .ok_or_else(|| {
            // Its principal left the policy, or its key changed.
            ingress.sessions.end(&token);
            NotSignedIn::SignIn
        })?;
    Ok(SignedIn { principal, session })
}

/// Whether the browser reached the ingress over TLS (through a trusted
/// proxy that says so): only then is the cookie `Secure`.
fn over_tls(ingress: &Ingress, headers: &HeaderMap) -> bool {
    ingress.config.resolver.trust_proxy
        && headers
            .get("x-forwarded-proto")
            .and_then(|value| value.to_str().ok())
            .is_some_and(|proto| proto.eq_ignore_ascii_case("https"))
}

/// A page, or an error page with the error's status.
fn page(result: Result<Markup, IngressError>, signed: &SignedIn) -> Response {
    match result {
        Ok(markup) => axum::response::Html(markup.into_string()).into_response(),
        Err(error) => error_page(error, Some(signed)),
    }
}

fn error_page(error: IngressError, signed: Option<&SignedIn>) -> Response {
    let status = StatusCode::from_u16(error.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = pages::error(signed, status, &error);
    (status, axum::response::Html(body.into_string())).into_response()
}

async fn sign_in_page(State(ingress): State<Arc<Ingress>>, headers: HeaderMap) -> Response {
    if signed_in(&ingress, &headers).is_ok() {
        return Redirect::to("/console").into_response();
    }
    axum::response::Html(pages::sign_in(None).into_string()).into_response()
}

#[derive(Deserialize)]
struct SignInForm {
    key: String,
}

async fn sign_in(
    State(ingress): State<Arc<Ingress>>,
    axum::Extension(Client(client)): axum::Extension<Client>,
    headers: HeaderMap,
    form: Result<Form<SignInForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    use sha2::{Digest, Sha256};
    let refuse = |status: StatusCode, message: &str| {
        (
            status,
            axum::response::Html(pages::sign_in(Some(message)).into_string()),
        )
            .into_response()
    };
    if !ingress.sessions.may_try(client) {
        crate::telemetry::metrics::ingress_auth_refused("console_sign_in_throttled");
        return refuse(
            StatusCode::TOO_MANY_REQUESTS,
            "Too many failed sign-ins from this address: wait a minute.",
        );
    }
    let form = match form {
        Ok(Form(form)) => form,
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return refuse(StatusCode::PAYLOAD_TOO_LARGE, "The form is too large.");
        }
        Err(_) => return refuse(StatusCode::BAD_REQUEST, "Enter an API key."),
    };
    let key = form.key.trim().as_bytes();
    match ingress.principal_of(key) {
        Ok(Some(principal)) => {
            let digest: [u8; 32] = Sha256::digest(key).into();
            let (token, _) = ingress.sessions.start(&principal.name, digest);
            tracing::info!(principal = %principal.name, %client, "console sign-in");
            let cookie = format!(
                "{COOKIE}={token}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={}{}",
                session::LIFETIME.as_secs(),
                if over_tls(&ingress, &headers) {
                    "; Secure"
                } else {
                    ""
                }
            );
            let mut response = Redirect::to("/console").into_response();
            if let Ok(value) = HeaderValue::from_str(&cookie) {
                response.headers_mut().insert(header::SET_COOKIE, value);
            }
            response
        }
        Ok(None) => refuse(StatusCode::NOT_FOUND, "The console is off on this ingress."),
        Err(_) => {
            ingress.sessions.failed(client);
            crate::telemetry::metrics::ingress_auth_refused("console_key_wrong");
            tracing::warn!(%client, "console sign-in refused: unknown key");
            refuse(StatusCode::UNAUTHORIZED, "That key is not known here.")
        }
    }
}

#[derive(Deserialize)]
struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

/// The CSRF check of every state-changing form.
fn csrf_checked(signed: &SignedIn, presented: &str) -> Result<(), IngressError> {
    if signed.session.csrf_matches(presented) {
        Ok(())
    } else {
        crate::telemetry::metrics::ingress_auth_refused("console_csrf");
        tracing::warn!(principal = %signed.principal.name, "console form without its CSRF token refused");
        Err(IngressError::Forbidden(
            "the form's CSRF token is missing or wrong: reload the page and try again".into(),
        ))
    }
}

async fn sign_out(
    State(ingress): State<Arc<Ingress>>,
    headers: HeaderMap,
    Form(form): Form<CsrfForm>,
) -> Response {
    let signed = match signed_in(&ingress, &headers) {
        Ok(signed) => signed,
        Err(why) => return why.into_response(),
    };
    if let Err(error) = csrf_checked(&signed, &form.csrf) {
        return error_page(error, Some(&signed));
    }
    if let Some(token) = cookie_token(&headers) {
        ingress.sessions.end(&token);
    }
    let mut response = Redirect::to("/console/sign-in").into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static(
            "execplane_session=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0",
        ),
    );
    response
}

/// Runner instances count as live this long after their last presence.
const PRESENCE_FRESH: chrono::Duration = chrono::Duration::seconds(30);

async fn overview(State(ingress): State<Arc<Ingress>>, headers: HeaderMap) -> Response {
    let signed = match signed_in(&ingress, &headers) {
        Ok(signed) => signed,
        Err(why) => return why.into_response(),
    };
    let tenants = signed.principal.readable_tenants();
    let result = async {
        let counts = ingress
            .store
            .console_overview(tenants.as_deref(), chrono::Utc::now() - PRESENCE_FRESH)
            .await?;
        // The dead-letter topic holds every tenant's refusals: counted
        // for a principal of every tenant only.
        let dlq = match tenants {
            None => Some(ingress.dlq_last_hour().await),
            Some(_) => None,
        };
        Ok(pages::overview(&signed, &counts, dlq))
    }
    .await;
    page(result, &signed)
}

#[derive(Deserialize)]
struct ListQuery {
    #[serde(flatten)]
    filter: AttemptFilter,
    #[serde(default)]
    after: Option<String>,
}

async fn attempts(
    State(ingress): State<Arc<Ingress>>,
    headers: HeaderMap,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let signed = match signed_in(&ingress, &headers) {
        Ok(signed) => signed,
        Err(why) => return why.into_response(),
    };
    let result = async {
        let Query(mut query) = query.map_err(|rejection| {
            IngressError::BadRequest(vec![crate::contract::Problem::new(
                "query",
                rejection.body_text(),
            )])
        })?;
        // An empty field of the filter form is no filter; a field Postgres
        // cannot hold is refused.
        for value in [
            &mut query.filter.state,
            &mut query.filter.operation,
            &mut query.filter.tenant,
            &mut query.filter.runner_type,
            &mut query.filter.job_id,
        ] {
            if value.as_deref().is_some_and(|text| text.trim().is_empty()) {
                *value = None;
            }
            if value.as_deref().is_some_and(|text| text.contains('\0')) {
                return Err(IngressError::BadRequest(vec![
                    crate::contract::Problem::new("query", "a filter holds U+0000"),
                ]));
            }
        }
        let cursor = match query.after.as_deref().filter(|text| !text.is_empty()) {
            None => None,
            Some(text) => Some(Cursor::decode(text).ok_or_else(|| {
                IngressError::BadRequest(vec![crate::contract::Problem::new(
                    "after",
                    "not a cursor of this list",
                )])
            })?),
        };
        let tenants = signed.principal.readable_tenants();
        let found = ingress
            .store
            .console_attempts(tenants.as_deref(), &query.filter, cursor, PAGE_SIZE)
            .await?;
        Ok(pages::attempts(&signed, &query.filter, &found))
    }
    .await;
    page(result, &signed)
}

fn attempt_id(text: &str) -> Result<Uuid, IngressError> {
    Uuid::parse_str(text).map_err(|_| {
        IngressError::NotFound(format!(
            "attempt {}",
            crate::contract::limits::loggable(text)
        ))
    })
}

async fn attempt(
    State(ingress): State<Arc<Ingress>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let signed = match signed_in(&ingress, &headers) {
        Ok(signed) => signed,
        Err(why) => return why.into_response(),
    };
    let result = async {
        let attempt_id = attempt_id(&id)?;
        let row = ingress
            .readable_attempt(&signed.principal, attempt_id)
            .await?;
        let events = ingress.events_after(attempt_id, 0).await?;
        let artifacts = ingress.store.artifacts_of(attempt_id).await?;
        let tenant = row["tenant"].as_str().unwrap_or_default();
        let logs = ingress.log_previews(tenant, &artifacts).await;
        let chain = ingress.store.verify_chain(Some(attempt_id)).await?;
        let job_id = row["job_id"].as_str().unwrap_or_default();
        let spec = ingress
            .store
            .job_json(job_id)
            .await?
            .map(|job| job["job"]["spec"].clone())
            .unwrap_or_default();
        Ok(pages::attempt(
            &signed,
            &pages::AttemptPage {
                row: &row,
                spec: &spec,
                events: &events,
                artifacts: &artifacts,
                logs: &logs,
                chain: &chain,
            },
        ))
    }
    .await;
    page(result, &signed)
}

#[derive(Deserialize)]
struct LiveQuery {
    #[serde(default)]
    after: i64,
}

/// The attempt's events after `after`, live (the execute API's stream, in
/// the console's shape: one JSON line a page can show as it is).
async fn live(
    State(ingress): State<Arc<Ingress>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(query): Query<LiveQuery>,
) -> Response {
    let signed = match signed_in(&ingress, &headers) {
        Ok(signed) => signed,
        Err(why) => return why.into_response(),
    };
    let attempt_id = match attempt_id(&id) {
        Ok(attempt_id) => attempt_id,
        Err(error) => return error.into_response(),
    };
    let row = match ingress
        .readable_attempt(&signed.principal, attempt_id)
        .await
    {
        Ok(row) => row,
        Err(error) => return error.into_response(),
    };
    let reader = super::http::Reader {
        principal: signed.principal,
        tenant: row["tenant"].as_str().unwrap_or_default().to_owned(),
        session: cookie_token(&headers),
    };
    super::http::live(
        ingress,
        reader,
        attempt_id,
        query.after.max(0),
        pages::live_event,
    )
}

async fn artifact(
    State(ingress): State<Arc<Ingress>>,
    connection: Option<Extension<super::http::SlotHandle>>,
    headers: HeaderMap,
    Path((id, name)): Path<(String, String)>,
) -> Response {
    let signed = match signed_in(&ingress, &headers) {
        Ok(signed) => signed,
        Err(why) => return why.into_response(),
    };
    let result = async {
        ingress
            .artifact(&signed.principal, attempt_id(&id)?, &name)
            .await
    }
    .await;
    match result {
        Ok(download) => super::http::artifact_response(
            download,
            connection.map(|Extension(handle)| handle),
            ingress.config.download_timeout,
        ),
        Err(error) => error_page(error, Some(&signed)),
    }
}

/// The fields of the attempt page's forms (each form sends its own).
#[derive(Deserialize)]
struct ActionForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    plan_digest: String,
}

/// What a form on an attempt asks for.
#[derive(Clone, Copy)]
enum Action {
    Cancel,
    Approve,
}

async fn cancel(
    state: State<Arc<Ingress>>,
    headers: HeaderMap,
    id: Path<String>,
    form: Result<Form<ActionForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    act(state, headers, id, form, Action::Cancel).await
}

async fn approve(
    state: State<Arc<Ingress>>,
    headers: HeaderMap,
    id: Path<String>,
    form: Result<Form<ActionForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    act(state, headers, id, form, Action::Approve).await
}

/// A form posted on an attempt: the session's CSRF token checked, then the
/// execute API's own cancel or approve as the signed-in principal (so its
/// checks and refusals are the API's), then back to the attempt's page.
async fn act(
    State(ingress): State<Arc<Ingress>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    form: Result<Form<ActionForm>, axum::extract::rejection::FormRejection>,
    action: Action,
) -> Response {
    let signed = match signed_in(&ingress, &headers) {
        Ok(signed) => signed,
        Err(why) => return why.into_response(),
    };
    let result = async {
        let Form(form) = form.map_err(|rejection| {
            IngressError::BadRequest(vec![crate::contract::Problem::new(
                "form",
                rejection.body_text(),
            )])
        })?;
        csrf_checked(&signed, &form.csrf)?;
        let attempt_id = attempt_id(&id)?;
        match action {
            Action::Cancel => {
                let reason = Some(form.reason.trim().to_owned())
                    .filter(|reason| !reason.is_empty())
                    .unwrap_or_else(|| "cancelled in the console".into());
                let request = super::api::CancelRequest {
                    reason: Some(reason),
                    requested_by: None,
                    grace_ms: None,
                };
                ingress
                    .cancel(&signed.principal, attempt_id, request, None)
                    .await?;
            }
            Action::Approve => {
                let request = super::api::ApproveRequest {
                    plan_digest: form.plan_digest,
                    approved_by: None,
                };
                ingress
                    .approve(&signed.principal, attempt_id, request, None)
                    .await?;
            }
        }
        Ok(attempt_id)
    }
    .await;
    match result {
        Ok(attempt_id) => Redirect::to(&format!("/console/attempts/{attempt_id}")).into_response(),
        Err(error) => error_page(error, Some(&signed)),
    }
}

#[derive(Deserialize)]
struct JobQuery {
    id: String,
}

async fn job(
    State(ingress): State<Arc<Ingress>>,
    headers: HeaderMap,
    Query(query): Query<JobQuery>,
) -> Response {
    let signed = match signed_in(&ingress, &headers) {
        Ok(signed) => signed,
        Err(why) => return why.into_response(),
    };
    let result = async {
        let job = ingress.job(&signed.principal, &query.id).await?;
        Ok(pages::job(&signed, &job))
    }
    .await;
    page(result, &signed)
}

/// Plans awaiting approval shown at once.
const APPROVALS_SHOWN: i64 = 100;

async fn approvals(State(ingress): State<Arc<Ingress>>, headers: HeaderMap) -> Response {
    let signed = match signed_in(&ingress, &headers) {
        Ok(signed) => signed,
        Err(why) => return why.into_response(),
    };
    let result = async {
        let tenants = signed.principal.readable_tenants();
        let plans = ingress
            .store
            .plans_awaiting_approval(tenants.as_deref(), APPROVALS_SHOWN)
            .await?;
        Ok(pages::approvals(&signed, &plans))
    }
    .await;
    page(result, &signed)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        body,
    )
        .into_response()
}

async fn script() -> Response {
    asset(
        "text/javascript; charset=utf-8",
        include_str!("console/app.js"),
    )
}

async fn style() -> Response {
    asset("text/css; charset=utf-8", include_str!("console/app.css"))
}

impl Ingress {
    /// The first [`LOG_PREVIEW_BYTES`] of each log artifact (as stored,
    /// so masked as stored), by name; one that cannot be read or fails its
    /// digest is left out (its download link says why).
    async fn log_previews(
        &self,
        tenant: &str,
        artifacts: &[crate::store::ArtifactRow],
    ) -> Vec<(String, String)> {
        use crate::artifacts::ArtifactStorage;
        let mut previews = Vec::new();
        for row in artifacts.iter().filter(|row| row.name.ends_with(".log")) {
            if row.size > MAX_PREVIEWED_LOG {
                previews.push((
                    row.name.clone(),
                    format!("({} bytes: too large to show here; download it)", row.size),
                ));
                continue;
            }
            // Read whole to check its digest: one of the downloads' slots,
            // within the tenant's share of them.
            let Some(_tenant_slot) = self.tenant_downloads.take(tenant) else {
                continue;
            };
            let Ok(Ok(_slot)) =
                tokio::time::timeout(Duration::from_secs(5), self.downloads.acquire()).await
            else {
                continue;
            };
            let Ok(bytes) = self.storage.get(&row.storage_key).await else {
                continue;
            };
            if crate::artifacts::sha256_hex(&bytes) != row.sha256 {
                continue;
            }
            let shown = &bytes[..bytes.len().min(LOG_PREVIEW_BYTES)];
            previews.push((
                row.name.clone(),
                String::from_utf8_lossy(shown).into_owned(),
            ));
        }
        previews
    }

    /// Records produced to the DLQ in the last hour, all partitions (from
    /// the broker's offsets by time); `None` when the broker did not say.
    /// Asked at most every [`DLQ_COUNT_TTL`], by one request at a time.
    async fn dlq_last_hour(self: &Arc<Self>) -> Option<i64> {
        let this = self.clone();
        let ask = async move { this.count_dlq().await };
        self.dlq_count.get(DLQ_COUNT_TTL, ask).await
    }

    async fn count_dlq(&self) -> Option<i64> {
        let kafka = self.kafka.clone();
        tokio::task::spawn_blocking(move || -> anyhow::Result<i64> {
            use rdkafka::consumer::Consumer;
            use rdkafka::{Offset, TopicPartitionList};
            let consumer = kafka.assigned_consumer()?;
            let topic = kafka.topic(crate::contract::topics::DLQ);
            let partitions = crate::kafka::partition_count(&consumer, &topic)?;
            let since = chrono::Utc::now().timestamp_millis() - 3_600_000;
            let mut list = TopicPartitionList::new();
            for partition in 0..partitions {
                list.add_partition_offset(&topic, partition, Offset::Offset(since))?;
            }
            let found = consumer.offsets_for_times(list, Duration::from_secs(3))?;
            let mut total = 0;
            for partition in 0..partitions {
                let (_, high) = crate::kafka::watermarks(&consumer, &topic, partition)?;
                let from = match found
                    .find_partition(&topic, partition)
                    .map(|element| element.offset())
                {
                    Some(Offset::Offset(offset)) => offset,
                    // No record at or after the time: none in the hour.
                    _ => high,
                };
                total += (high - from).max(0);
            }
            Ok(total)
        })
        .await
        .ok()?
        .map_err(|error| tracing::debug!(%error, "DLQ count unavailable"))
        .ok()
    }
}

/// Which role a page's controls need, for the templates.
pub fn may(signed: &SignedIn, role: Role, tenant: &str) -> bool {
    signed.principal.may(role, tenant)
}

#[cfg(test)]
mod tests {
    use super::cross_site;
    use axum::http::HeaderMap;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn forms_from_another_site_are_told_apart() {
        for (pairs, cross) in [
            (vec![("sec-fetch-site", "same-origin")], false),
            (vec![("sec-fetch-site", "none")], false),
            (vec![("sec-fetch-site", "same-site")], true),
            (
                vec![
                    ("sec-fetch-site", "cross-site"),
                    ("origin", "http://h:1"),
                    ("host", "h:1"),
                ],
                true,
            ),
            (vec![("origin", "http://h:1"), ("host", "h:1")], false),
            (vec![("origin", "http://evil:1"), ("host", "h:1")], true),
            (vec![("origin", "null"), ("host", "h:1")], true),
            (
                vec![
                    ("origin", "https://console.example"),
                    ("host", "10.0.0.5:3000"),
                    ("x-forwarded-host", "console.example"),
                ],
                false,
            ),
            (vec![("host", "h:1")], false),
        ] {
            assert_eq!(cross_site(&headers(&pairs)), cross, "{pairs:?}");
        }
    }
}
