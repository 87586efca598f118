//! The operator console and the principals of the execute API
//! (docs/INGRESS.md, "The console"; docs/SECURITY.md, "Principals"), in a
//! real headless Chromium driven over WebDriver: each principal sees its
//! own tenants only, forms act only with their session's CSRF token, a
//! running attempt's timeline grows without a reload, artifacts download
//! with their recorded digest (and a tampered one is refused), and what a
//! JobSpec or a runner wrote is shown as text.

mod common;

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use sqlx::PgPool;
use uuid::Uuid;

use common::browser::Browser;
use common::ingress::{call, start, Ingress};
use common::pipeline::{job, Pipeline, LOOPBACK_POLICY};

const WAIT: Duration = Duration::from_secs(90);
const VIEWER_A: &str = "viewer-key-of-team-a-0123456789";
const OPERATOR_A: &str = "operator-key-of-team-a-0123456789";
const OPERATOR_B: &str = "operator-key-of-team-b-0123456789";
/// Markup a job id and a failure message carry: shown as text, never run.
const MARKUP: &str = "<script>window.pwned=1</script>\"><img src=x onerror=\"window.pwned=2\">";

fn digest(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

fn policy() -> String {
    format!(
        "{LOOPBACK_POLICY}principals:\n  \
           viewer-a: {{key_sha256: \"{}\", roles: {{team-a: [viewer]}}}}\n  \
           ops-a: {{key_sha256: \"{}\", roles: {{team-a: [operator]}}}}\n  \
           ops-b: {{key_sha256: \"{}\", roles: {{team-b: [operator]}}}}\n",
        digest(VIEWER_A),
        digest(OPERATOR_A),
        digest(OPERATOR_B)
    )
}

fn probe(tenant: &str, requested_by: &str, probe: &str, args: Value) -> Value {
    let mut spec = serde_json::to_value(job(
        "verify.custom.probe",
        json!({"probe_id": probe, "args": args}),
        json!({"retry": {"max_attempts": 1}}),
    ))
    .unwrap();
    spec["tenant"] = json!(tenant);
    spec["requested_by"] = json!(requested_by);
    // In the tenant's namespace of job ids, as the execute API asks.
    spec["job_id"] = json!(format!("{tenant}/{}", Uuid::new_v4().simple()));
    spec
}

async fn submit(ingress: &Ingress, key: &str, spec: &Value) -> (u16, Value) {
    call(
        Method::POST,
        &ingress.url("/v1/jobs"),
        Some(key),
        None,
        &[],
        Some(serde_json::to_vec(spec).unwrap()),
    )
    .await
}

/// A client that holds a console session cookie, as the browser does.
struct Session {
    client: reqwest::Client,
    cookie: String,
}

impl Session {
    /// Signs in with `key` over plain HTTP.
    async fn sign_in(ingress: &Ingress, key: &str) -> Self {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let response = client
            .post(ingress.url("/console/sign-in"))
            .form(&[("key", key)])
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 303, "sign-in redirects to the overview");
        let cookie = response.headers()["set-cookie"]
            .to_str()
            .unwrap()
            .to_owned();
        for attribute in ["HttpOnly", "SameSite=Strict", "Path=/console"] {
            assert!(cookie.contains(attribute), "{cookie}");
        }
        let cookie = cookie.split(';').next().unwrap().to_owned();
        Self { client, cookie }
    }

    async fn get(&self, url: &str) -> (u16, String) {
        let response = self
            .client
            .get(url)
            .header("cookie", &self.cookie)
            .send()
            .await
            .unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    }

    async fn post(&self, url: &str, form: &[(&str, &str)]) -> u16 {
        self.client
            .post(url)
            .header("cookie", &self.cookie)
            .form(form)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    }

    /// The CSRF token the session's pages carry.
    async fn csrf(&self, ingress: &Ingress) -> String {
        let (_, page) = self.get(&ingress.url("/console")).await;
        let at = page
            .find("name=\"csrf\" value=\"")
            .expect("a form with the token")
            + 19;
        page[at..at + 64].to_owned()
    }
}

async fn status_of(pool: &PgPool, attempt_id: Uuid) -> String {
    sqlx::query_scalar("SELECT status FROM attempts WHERE attempt_id = $1")
        .bind(attempt_id)
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn sign_in(browser: &Browser, ingress: &Ingress, key: &str) {
    browser.goto(&ingress.url("/console")).await;
    if !browser.all("#sign-out").await.is_empty() {
        browser.click("#sign-out").await;
    }
    browser.find("#key").await;
    browser.type_into("#key", key).await;
    browser.click("#sign-in").await;
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn the_console_shows_each_principal_its_own_tenants_and_acts_only_with_its_token(
    pool: PgPool,
) {
    let mut pipeline = Pipeline::new(&pool).await;
    let policy_file = pipeline.dir.join("principals.yaml");
    std::fs::write(&policy_file, policy()).unwrap();
    pipeline.set_env("EXECPLANE_POLICY_FILE", policy_file.to_str().unwrap());
    pipeline.spawn(&["dispatcher"], &[]);
    pipeline.spawn(&["relay"], &[]);
    pipeline.spawn(
        &["artifact-worker"],
        &[("EXECPLANE_ARTIFACT_GRACE", "300ms")],
    );
    let ingress = start(&mut pipeline, &["ingress"], &[]).await;

    // No runner yet: a job whose id is markup stays queued, and is
    // cancelled with a reason that is markup too.
    let mut hostile = probe("team-a", "ops-a", "sleep", json!({"seconds": 1}));
    hostile["job_id"] = json!(format!("team-a/{MARKUP}"));
    assert_eq!(submit(&ingress, OPERATOR_A, &hostile).await.0, 202);

    // The API: each key speaks for its own principal and tenants only.
    let team_b = probe("team-b", "ops-b", "sleep", json!({"seconds": 0.1}));
    assert_eq!(submit(&ingress, OPERATOR_B, &team_b).await.0, 202);
    let (status, body) = submit(&ingress, OPERATOR_A, &team_b).await;
    assert_eq!(status, 403, "team-a's operator submits for team-b: {body}");
    let (status, body) = submit(
        &ingress,
        VIEWER_A,
        &probe("team-a", "viewer-a", "sleep", json!({})),
    )
    .await;
    assert_eq!(status, 403, "a viewer submits: {body}");
    let (status, body) = submit(
        &ingress,
        OPERATOR_A,
        &probe("team-a", "someone-else", "sleep", json!({})),
    )
    .await;
    assert_eq!(status, 403, "requested_by names another principal: {body}");
    let (status, _) = submit(&ingress, common::ingress::API_KEY, &team_b).await;
    assert_eq!(status, 401, "with principals, the shared key opens nothing");
    // A job id outside the tenant's namespace: team-a's operator cannot
    // take an id team-b's jobs would use (and have them refused as taken).
    for taken in [
        format!("team-b/{}", Uuid::new_v4().simple()),
        "deploy-1".to_owned(),
    ] {
        let mut squatter = probe("team-a", "ops-a", "sleep", json!({}));
        squatter["job_id"] = json!(taken);
        let (status, body) = submit(&ingress, OPERATOR_A, &squatter).await;
        assert_eq!(status, 400, "{taken}: {body}");
        assert!(body.to_string().contains("team-a/"), "{body}");
    }
    // Nor a command id another tenant could work out (a name-based one).
    let mut predictable = probe("team-a", "ops-a", "sleep", json!({}));
    predictable["command_id"] = json!(Uuid::new_v5(&Uuid::NAMESPACE_URL, b"deploy-1").to_string());
    let (status, body) = submit(&ingress, OPERATOR_A, &predictable).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("command_id"), "{body}");

    let hostile_id = pipeline
        .wait_status(hostile["job_id"].as_str().unwrap(), "queued", WAIT)
        .await;
    let team_b_id = pipeline
        .wait_status(team_b["job_id"].as_str().unwrap(), "queued", WAIT)
        .await;
    for (key, attempt, expected) in [
        (VIEWER_A, team_b_id, 404),
        (OPERATOR_A, team_b_id, 404),
        (OPERATOR_B, team_b_id, 200),
        (VIEWER_A, hostile_id, 200),
        (OPERATOR_B, hostile_id, 404),
    ] {
        for path in ["", "/events", "/artifacts"] {
            let url = ingress.url(&format!("/v1/attempts/{attempt}{path}"));
            let (status, body) = call(Method::GET, &url, Some(key), None, &[], None).await;
            assert_eq!(status, expected, "{url}: {body}");
        }
    }
    let job_url = ingress.url(&format!("/v1/jobs/{}", team_b["job_id"].as_str().unwrap()));
    let (status, _) = call(Method::GET, &job_url, Some(VIEWER_A), None, &[], None).await;
    assert_eq!(status, 404, "another tenant's job");
    let cancel_url = ingress.url(&format!("/v1/attempts/{hostile_id}/cancel"));
    let (status, body) = call(
        Method::POST,
        &cancel_url,
        Some(VIEWER_A),
        None,
        &[],
        Some(b"{}".to_vec()),
    )
    .await;
    assert_eq!(status, 403, "a viewer cancels: {body}");

    let browser = Browser::start().await;
    // A wrong key: refused, still signing in.
    browser.goto(&ingress.url("/console/attempts")).await;
    assert!(
        browser.url().await.ends_with("/console/sign-in"),
        "no session: sign in first"
    );
    browser.type_into("#key", "not-a-key-of-anyone-0000").await;
    browser.click("#sign-in").await;
    assert!(browser
        .text_of("#sign-in-error")
        .await
        .contains("not known"));
    assert!(browser.url().await.ends_with("/console/sign-in"));

    // team-a's operator cancels the queued hostile job with a hostile reason.
    sign_in(&browser, &ingress, OPERATOR_A).await;
    assert_eq!(browser.text_of("#principal").await, "ops-a");
    browser
        .goto(&ingress.url(&format!("/console/attempts/{hostile_id}")))
        .await;
    browser.type_into("#reason", MARKUP).await;
    browser.click("#cancel").await;
    pipeline
        .wait("the hostile job to be cancelled", WAIT, || async {
            status_of(&pool, hostile_id).await == "cancelled"
        })
        .await;
    browser
        .goto(&ingress.url(&format!("/console/attempts/{hostile_id}")))
        .await;
    assert_eq!(browser.text_of("#status").await, "cancelled");
    assert_eq!(
        browser.text_of("#job").await,
        format!("team-a/{MARKUP}"),
        "the job id, as text"
    );
    let message = browser.text_of("#message").await;
    assert!(
        message.contains("by ops-a") && message.contains(MARKUP),
        "{message}"
    );
    let dom = browser
        .script(
            "return [document.querySelectorAll('img').length, \
                     document.querySelectorAll('script:not([src])').length, \
                     document.querySelectorAll('script').length, window.pwned === undefined]",
            json!([]),
        )
        .await;
    assert_eq!(dom, json!([0, 0, 1, true]), "markup became elements");

    // Now a runner: a sleeping attempt's page follows it live.
    pipeline.spawn(
        &["runner", "verification"],
        &[("EXECPLANE_VERIFY_PROBES", "sleep,hang")],
    );
    pipeline.wait_runners(1).await;
    let sleeper = probe("team-a", "ops-a", "sleep", json!({"seconds": 6}));
    assert_eq!(submit(&ingress, OPERATOR_A, &sleeper).await.0, 202);
    let sleeper_id = pipeline
        .wait_status(sleeper["job_id"].as_str().unwrap(), "running", WAIT)
        .await;
    browser
        .goto(&ingress.url(&format!("/console/attempts/{sleeper_id}")))
        .await;
    browser.find("#timeline li[data-kind=\"started\"]").await;
    browser
        .script("window.sameDocument = true; return true", json!([]))
        .await;
    assert!(browser
        .all("#timeline li[data-kind=\"finished\"]")
        .await
        .is_empty());
    browser
        .wait_until(
            "finished to appear",
            "return document.querySelector('#timeline li[data-kind=\"finished\"]') !== null",
        )
        .await;
    assert_eq!(
        browser
            .script("return window.sameDocument === true", json!([]))
            .await,
        json!(true),
        "the page was not reloaded"
    );
    assert_eq!(browser.text_of("#status").await, "succeeded");

    // A hanging attempt: a form post without the token changes nothing;
    // the button cancels it.
    let hanger = probe("team-a", "ops-a", "hang", json!({}));
    assert_eq!(submit(&ingress, OPERATOR_A, &hanger).await.0, 202);
    let hanger_id = pipeline
        .wait_status(hanger["job_id"].as_str().unwrap(), "running", WAIT)
        .await;
    let operator = Session::sign_in(&ingress, OPERATOR_A).await;
    let cancel_form = ingress.url(&format!("/console/attempts/{hanger_id}/cancel"));
    for form in [
        vec![("reason", "no token")],
        vec![("reason", "wrong token"), ("csrf", "0")],
    ] {
        assert_eq!(operator.post(&cancel_form, &form).await, 403);
    }
    // A form from another site: refused before it is read, token or not.
    let token = operator.csrf(&ingress).await;
    let status = operator
        .client
        .post(&cancel_form)
        .header("cookie", &operator.cookie)
        .header("origin", "http://elsewhere.example")
        .form(&[("csrf", token.as_str()), ("reason", "from elsewhere")])
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 403, "a cross-site form");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(status_of(&pool, hanger_id).await, "running");
    browser
        .goto(&ingress.url(&format!("/console/attempts/{hanger_id}")))
        .await;
    browser.type_into("#reason", "stuck").await;
    browser.click("#cancel").await;
    pipeline
        .wait("the hanging attempt to be cancelled", WAIT, || async {
            status_of(&pool, hanger_id).await == "cancelled"
        })
        .await;

    // The sleeper's artifacts: each link downloads the recorded bytes.
    pipeline
        .wait("the sleeper's artifacts", WAIT, || async {
            !artifacts(&pool, sleeper_id).await.is_empty()
        })
        .await;
    browser
        .goto(&ingress.url(&format!("/console/attempts/{sleeper_id}")))
        .await;
    let links = browser
        .script(
            "return Array.from(document.querySelectorAll('#artifacts a[download]')).map(a => a.href)",
            json!([]),
        )
        .await;
    let recorded = artifacts(&pool, sleeper_id).await;
    assert_eq!(links.as_array().unwrap().len(), recorded.len(), "{links}");
    for (name, sha256, storage_key) in &recorded {
        let link = ingress.url(&format!("/console/attempts/{sleeper_id}/artifacts/{name}"));
        assert!(links.as_array().unwrap().contains(&json!(link)), "{links}");
        let response = operator
            .client
            .get(&link)
            .header("cookie", &operator.cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["x-execplane-sha256"], sha256.as_str());
        assert_eq!(
            response.headers()["content-security-policy"],
            "default-src 'none'; sandbox",
            "a tenant's file is never a page of the console"
        );
        let bytes = response.bytes().await.unwrap();
        assert_eq!(&hex::encode(Sha256::digest(&bytes)), sha256);
        let _ = storage_key;
    }
    std::fs::write(
        pipeline.dir.join("console-attempt.png"),
        browser.screenshot().await,
    )
    .unwrap();
    if let Ok(path) = std::env::var("EXECPLANE_CONSOLE_SCREENSHOT") {
        std::fs::write(path, browser.screenshot().await).unwrap();
    }
    // Tampered on the storage: refused, not served, through the console
    // and the API alike.
    let (name, _, storage_key) = &recorded[0];
    let object = pipeline.dir.join("artifacts").join(storage_key);
    assert!(object.exists(), "{}", object.display());
    std::fs::write(&object, b"tampered").unwrap();
    let link = ingress.url(&format!("/console/attempts/{sleeper_id}/artifacts/{name}"));
    let (status, body) = operator.get(&link).await;
    assert_eq!(status, 502, "{body}");
    assert!(!body.contains("tampered"));
    let api = ingress.url(&format!("/v1/attempts/{sleeper_id}/artifacts/{name}"));
    let (status, body) = call(Method::GET, &api, Some(OPERATOR_A), None, &[], None).await;
    assert_eq!(status, 502, "{body}");
    assert_eq!(body["error"], "artifact_corrupt");

    // A viewer of team-a: its tenant only, and no cancel.
    let still = probe("team-a", "ops-a", "hang", json!({}));
    assert_eq!(submit(&ingress, OPERATOR_A, &still).await.0, 202);
    let still_id = pipeline
        .wait_status(still["job_id"].as_str().unwrap(), "running", WAIT)
        .await;
    sign_in(&browser, &ingress, VIEWER_A).await;
    assert_eq!(browser.text_of("#principal").await, "viewer-a");
    let shown = browser
        .script(
            "return Object.fromEntries(Array.from(document.querySelectorAll('#by-state tr[data-state]')).map(r => [r.dataset.state, Number(r.dataset.count)]))",
            json!([]),
        )
        .await;
    // The attempts that have not ended, every such state (zero too): not
    // a count of every attempt ever, which read the whole table.
    let counted: Vec<(String, i64)> = sqlx::query_as(
        "SELECT s, (SELECT count(*) FROM attempts WHERE tenant = 'team-a' AND status = s)
         FROM unnest(ARRAY['queued', 'leased', 'running', 'cancel_requested']) s",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(
        counted
            .iter()
            .any(|(state, count)| state == "running" && *count >= 1),
        "{counted:?}"
    );
    let counted: serde_json::Map<String, Value> = counted
        .into_iter()
        .map(|(state, count)| (state, json!(count)))
        .collect();
    assert_eq!(
        shown,
        Value::Object(counted),
        "the overview is the projection's"
    );
    browser
        .goto(&ingress.url(&format!("/console/attempts/{team_b_id}")))
        .await;
    assert!(browser.text_of("#error").await.contains("not found"));
    browser
        .goto(&ingress.url(&format!("/console/attempts/{still_id}")))
        .await;
    browser.find("#timeline").await;
    assert!(
        browser.all("#cancel").await.is_empty(),
        "a viewer has no cancel button"
    );
    let viewer = Session::sign_in(&ingress, VIEWER_A).await;
    let (status, _) = viewer
        .get(&ingress.url(&format!("/console/attempts/{team_b_id}")))
        .await;
    assert_eq!(status, 404);
    let token = viewer.csrf(&ingress).await;
    let forged = ingress.url(&format!("/console/attempts/{still_id}/cancel"));
    assert_eq!(
        viewer
            .post(&forged, &[("csrf", &token), ("reason", "forged")])
            .await,
        403
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(status_of(&pool, still_id).await, "running");

    // A stream outlives no policy: the viewer follows the attempt, loses
    // its role in a reload, and is sent nothing more (its stream ends at
    // the attempt's next event).
    let mut stream = reqwest::Client::new()
        .get(ingress.url(&format!("/v1/attempts/{still_id}/events")))
        .header("authorization", format!("Bearer {VIEWER_A}"))
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    let mut seen = String::new();
    while !seen.contains("event: started") {
        let chunk = tokio::time::timeout(WAIT, stream.chunk()).await.unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk.unwrap().unwrap()));
    }
    std::fs::write(
        &policy_file,
        policy().replace("team-a: [viewer]", "team-c: [viewer]"),
    )
    .unwrap();
    // A console stream ends with its session: opened by a session of
    // team-a's operator, which then signs out.
    let leaving = Session::sign_in(&ingress, OPERATOR_A).await;
    let console_stream = leaving
        .client
        .get(ingress.url(&format!("/console/attempts/{still_id}/live?after=0")))
        .header("cookie", &leaving.cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(console_stream.status(), 200);
    let token = leaving.csrf(&ingress).await;
    let signed_out = leaving
        .post(&ingress.url("/console/sign-out"), &[("csrf", &token)])
        .await;
    assert_eq!(signed_out, 303);
    let attempt_url = ingress.url(&format!("/v1/attempts/{still_id}"));
    pipeline
        .wait("the ingress to reload its policy", WAIT, || async {
            call(Method::GET, &attempt_url, Some(VIEWER_A), None, &[], None)
                .await
                .0
                == 404
        })
        .await;
    let started = Instant::now();
    let (status, _) = call(
        Method::POST,
        &ingress.url(&format!("/v1/attempts/{still_id}/cancel")),
        Some(OPERATOR_A),
        None,
        &[],
        Some(b"{}".to_vec()),
    )
    .await;
    assert_eq!(status, 202);
    pipeline
        .wait("the last hanging attempt to end", WAIT, || async {
            status_of(&pool, still_id).await == "cancelled"
        })
        .await;
    eprintln!("cancel to cancelled: {:?}", started.elapsed());
    let after = rest_of(stream).await;
    // What was sent before the reload (a progress event, say) was the
    // viewer's to read; nothing of the cancel after it.
    assert!(
        !after.contains("event: cancel") && !after.contains("event: finished"),
        "sent to a viewer the policy no longer lets read: {after}"
    );
    let after = rest_of(console_stream).await;
    assert!(
        !after.contains("cancel"),
        "sent to a session that signed out: {after}"
    );
}

/// What a stream sends until it ends (within [`WAIT`]).
async fn rest_of(mut stream: reqwest::Response) -> String {
    let mut text = String::new();
    loop {
        let chunk = tokio::time::timeout(WAIT, stream.chunk())
            .await
            .expect("the stream ends");
        match chunk.unwrap() {
            Some(bytes) => text.push_str(&String::from_utf8_lossy(&bytes)),
            None => return text,
        }
    }
}

/// (name, sha256, storage key) of an attempt's artifacts.
async fn artifacts(pool: &PgPool, attempt_id: Uuid) -> Vec<(String, String, String)> {
    sqlx::query_as(
        "SELECT name, sha256, storage_key FROM artifacts WHERE attempt_id = $1 ORDER BY name",
    )
    .bind(attempt_id)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Attempts the list test writes through the store's batch path.
const MANY: usize = 100_000;

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn the_attempts_list_pages_by_cursor_at_a_hundred_thousand_attempts(pool: PgPool) {
    use execplane::contract::{validate_jobspec, Input};
    use execplane::store::{InputEnvelope, Store};
    let store = Store::connect(&common::database_url(&pool), 4, None)
        .await
        .unwrap();
    let started = Instant::now();
    let now = chrono::Utc::now().timestamp_millis();
    for chunk in (0..MANY).collect::<Vec<_>>().chunks(1000) {
        let inputs: Vec<InputEnvelope> = chunk
            .iter()
            .map(|index| {
                let command_id = Uuid::new_v4();
                let tenant = if index % 2 == 0 { "team-a" } else { "team-b" };
                let spec = validate_jobspec(&json!({
                    "command_id": command_id.to_string(),
                    "job_id": format!("many/{index}"),
                    "tenant": tenant,
                    "requested_by": "ops-a",
                    "operation": "verify.tcp.connect",
                    "inputs": {"host": "127.0.0.1", "port": 5432}
                }))
                .unwrap();
                InputEnvelope {
                    input_id: format!("many-{command_id}"),
                    source: "test".into(),
                    input: Input::Execute {
                        policy_digest: None,
                        target_keys: Vec::new(),
                        spec: std::sync::Arc::new(spec),
                    },
                }
            })
            .collect();
        // Each batch a millisecond apart, so pages cross batches.
        let at = now + (chunk[0] / 1000) as i64;
        store.process_batch(&inputs, at).await.unwrap();
    }
    sqlx::query("ANALYZE attempts")
        .execute(&pool)
        .await
        .unwrap();
    eprintln!(
        "{MANY} attempts written in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let mut pipeline = Pipeline::new(&pool).await;
    let policy_file = pipeline.dir.join("principals.yaml");
    std::fs::write(&policy_file, policy()).unwrap();
    pipeline.set_env("EXECPLANE_POLICY_FILE", policy_file.to_str().unwrap());
    let ingress = start(&mut pipeline, &["ingress"], &[]).await;
    let viewer = Session::sign_in(&ingress, VIEWER_A).await;
    // The first page, then the 1,000th (50,000 attempts of team-a back).
    let mut url = ingress.url("/console/attempts?tenant=team-a");
    let mut timings = Vec::new();
    let mut middle = String::new();
    for page in 1..=1000 {
        if page == 500 {
            middle = url.clone();
        }
        let began = Instant::now();
        let (status, body) = viewer.get(&url).await;
        let took = began.elapsed();
        assert_eq!(status, 200, "page {page}");
        assert_eq!(body.matches("<tr data-attempt=").count(), 50, "page {page}");
        assert!(
            !body.contains("team-b"),
            "a viewer of team-a sees team-a's only"
        );
        if page == 1 || page % 250 == 0 {
            timings.push((page, took));
        }
        let at = body.find("id=\"next\"").expect("a next page");
        let href = &body[at..];
        let href = &href[href.find("href=\"").unwrap() + 6..];
        let href = href[..href.find('"').unwrap()].replace("&amp;", "&");
        url = ingress.url(&href);
    }
    for (page, took) in &timings {
        eprintln!(
            "attempts list page {page}: {:.1} ms",
            took.as_secs_f64() * 1000.0
        );
    }
    // A later page's plan walks the index from the cursor: it reads a
    // page's rows, not the rows before it.
    let cursor = middle
        .split("after=")
        .nth(1)
        .and_then(execplane::store::console::Cursor::decode)
        .unwrap();
    let filter = execplane::store::console::AttemptFilter::default();
    let query = execplane::store::console::attempts_page(None, &filter, Some(cursor), 50);
    let plan: Value =
        sqlx::query_scalar(&format!("EXPLAIN (ANALYZE, FORMAT JSON) {}", query.sql()))
            .bind(cursor.created_at)
            .bind(cursor.attempt_id)
            .bind(execplane::store::console::MAX_WALKED)
            .bind(50_i64)
            .fetch_one(&pool)
            .await
            .unwrap();
    let text = plan.to_string();
    assert!(text.contains("attempts_newest"), "{plan:#}");
    assert!(!text.contains("\"Sort\""), "{plan:#}");
    let scanned = scan_rows(&plan[0]["Plan"]);
    assert!(
        (50..=51).contains(&scanned),
        "the page scanned {scanned} rows: {plan:#}"
    );
    eprintln!(
        "a page 50,000 attempts deep: {scanned} index rows, {} ms execution",
        plan[0]["Execution Time"]
    );
    // A principal of a tenant with no attempt among the hundred thousand
    // walks at most MAX_WALKED of the others' for a page, and is sent on
    // to the next stretch.
    let walked = execplane::store::console::MAX_WALKED;
    let tenants = ["team-c".to_owned()];
    let query = execplane::store::console::attempts_page(Some(&tenants), &filter, None, 50);
    let plan: Value =
        sqlx::query_scalar(&format!("EXPLAIN (ANALYZE, FORMAT JSON) {}", query.sql()))
            .bind(walked)
            .bind(&tenants[..])
            .bind(50_i64)
            .fetch_one(&pool)
            .await
            .unwrap();
    // The walk's rows, counted twice: read from the index, then filtered
    // out by the scan of the walk.
    let scanned = scan_rows(&plan[0]["Plan"]);
    assert!(
        scanned <= 2 * walked as u64,
        "an empty tenant's page scanned {scanned} rows: {plan:#}"
    );
    let page = store
        .console_attempts(Some(&tenants), &filter, None, 50)
        .await
        .unwrap();
    assert!(page.lines.is_empty() && page.sparse, "{page:?}");
    let next = page.next.expect("a next stretch");
    let page_after = store
        .console_attempts(Some(&tenants), &filter, Some(next), 50)
        .await
        .unwrap();
    assert!(
        page_after.lines.is_empty() && page_after.sparse,
        "{page_after:?}"
    );
    // A job's attempts are found by its id, however deep.
    let oldest = execplane::store::console::AttemptFilter {
        job_id: Some("many/0".into()),
        ..Default::default()
    };
    let page = store
        .console_attempts(Some(&["team-a".to_owned()]), &oldest, None, 50)
        .await
        .unwrap();
    assert_eq!(page.lines.len(), 1, "{page:?}");
    assert!(page.next.is_none() && !page.sparse);
    let after = page_after.next.expect("another stretch");
    assert!(
        (after.created_at, after.attempt_id) < (next.created_at, next.attempt_id),
        "the next stretch is older"
    );
}

/// The rows the plan's scans read (the sum of their actual rows and the
/// rows their filters removed).
fn scan_rows(node: &Value) -> u64 {
    let own = if node["Node Type"]
        .as_str()
        .unwrap_or_default()
        .contains("Scan")
    {
        node["Actual Rows"].as_u64().unwrap_or(0)
            + node["Rows Removed by Filter"].as_u64().unwrap_or(0)
    } else {
        0
    };
    own + node["Plans"]
        .as_array()
        .into_iter()
        .flatten()
        .map(scan_rows)
        .sum::<u64>()
}

/// One status line read from a raw HTTP/1.1 connection.
fn request_status(stream: &mut std::net::TcpStream, request: &[u8]) -> u16 {
    use std::io::{Read, Write};
    stream.write_all(request).unwrap();
    let mut read = Vec::new();
    let mut buffer = [0_u8; 4096];
    while !read.windows(4).any(|window| window == b"\r\n\r\n") {
        let count = stream.read(&mut buffer).unwrap();
        assert!(count > 0, "closed: {}", String::from_utf8_lossy(&read));
        read.extend_from_slice(&buffer[..count]);
    }
    let text = String::from_utf8_lossy(&read);
    text.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// A principal's key (or console session) holds at most
/// `EXECPLANE_INGRESS_MAX_CONNECTIONS_PER_PRINCIPAL` connections, so one
/// viewer's streams cannot take every slot from every tenant; and the
/// console reads a form no larger than a form, before anyone is signed in.
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn one_principal_holds_a_bounded_share_of_connections_and_forms_are_small(pool: PgPool) {
    let mut pipeline = Pipeline::new(&pool).await;
    let policy_file = pipeline.dir.join("principals.yaml");
    std::fs::write(&policy_file, policy()).unwrap();
    pipeline.set_env("EXECPLANE_POLICY_FILE", policy_file.to_str().unwrap());
    let ingress = start(
        &mut pipeline,
        &["ingress"],
        &[("EXECPLANE_INGRESS_MAX_CONNECTIONS_PER_PRINCIPAL", "2")],
    )
    .await;
    let connect = || std::net::TcpStream::connect(("127.0.0.1", ingress.http)).unwrap();
    let asked = |key: &str| {
        format!(
            "GET /v1/jobs/team-a%2Fnone HTTP/1.1\r\nHost: ingress\r\nAuthorization: Bearer {key}\r\n\r\n"
        )
        .into_bytes()
    };
    let mut held: Vec<std::net::TcpStream> = (0..2).map(|_| connect()).collect();
    for stream in &mut held {
        assert_eq!(request_status(stream, &asked(VIEWER_A)), 404);
    }
    // A connection counts for its principal from its first request on.
    assert_eq!(request_status(&mut held[0], &asked(VIEWER_A)), 404);
    let mut third = connect();
    assert_eq!(request_status(&mut third, &asked(VIEWER_A)), 429);
    // Another principal is not held to the first one's count.
    assert_eq!(request_status(&mut third, &asked(OPERATOR_A)), 404);
    drop(held.remove(0));
    std::thread::sleep(Duration::from_millis(300));
    let mut again = connect();
    assert_eq!(request_status(&mut again, &asked(VIEWER_A)), 404);

    let form = format!("key={}", "k".repeat(20 * 1024));
    let sign_in = format!(
        "POST /console/sign-in HTTP/1.1\r\nHost: ingress\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{form}",
        form.len()
    );
    assert_eq!(request_status(&mut connect(), sign_in.as_bytes()), 413);
}
