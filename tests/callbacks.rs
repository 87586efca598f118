//! Callbacks a control plane can trust (docs/EVENTS.md, "Callbacks"):
//! signed as the Standard Webhooks specification says with each tenant's
//! secrets from the secret store, checked by the documented recipe, and
//! sent only where the operator's policy lets the tenant connect.

mod common;

use std::io::Write;
use std::time::Duration;

use common::http::Server;
use common::pipeline::{job, Pipeline};
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(60);

const NEW_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const OLD_SECRET: &str = "whsec_c2l4dGVlbi1ieXRlcy1vZi1yYW5kb20tZW50cm9weQ==";

/// The documented recipe (`examples/callbacks/verify_webhook.py`) on one
/// received callback: whether it verifies.
fn recipe(secrets: &[&str], headers: serde_json::Value, body: &str, now: Option<i64>) -> bool {
    let mut child = std::process::Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/callbacks/verify_webhook.py"
        ))
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let case = json!({"secrets": secrets, "headers": headers, "body": body, "now": now});
    child
        .stdin
        .take()
        .unwrap()
        .write_all(case.to_string().as_bytes())
        .unwrap();
    child.wait().unwrap().success()
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_signed_callback_verifies_with_the_recipe_and_a_tampered_or_stale_one_does_not(
    pool: PgPool,
) {
    let bao = common::bao::Bao::new();
    let place = format!("execplane/cb-{}", Uuid::new_v4().simple());
    // Mid-rotation: the new secret and the old one are both in force.
    bao.put(
        &format!("{place}/team-a"),
        json!({"signing_secrets": format!("{NEW_SECRET} {OLD_SECRET}")}),
    )
    .await;
    let mut pipeline = Pipeline::new(&pool).await;
    pipeline.set_env("EXECPLANE_VAULT_ADDR", &bao.address);
    pipeline.set_env("EXECPLANE_VAULT_TOKEN", &bao.root);
    pipeline.set_env(
        "EXECPLANE_CALLBACK_SIGNING_SECRETS",
        &format!("secret/{place}/{{tenant}}"),
    );
    pipeline.start_roles(1);
    pipeline.wait_runners(1).await;
    let receiver = Server::start(vec![], 200).await;
    let spec = job(
        "verify.tcp.connect",
        json!({"host": "127.0.0.1", "port": 5432}),
        json!({"callback": {"url": receiver.url("/callbacks")}}),
    );
    pipeline.submit(&spec).await;
    let attempt = pipeline.wait_done(&spec.job_id, WAIT).await[0].0;
    pipeline
        .wait("the callback", WAIT, || async {
            !receiver.requests().is_empty()
        })
        .await;
    let received = receiver.requests().remove(0);
    let headers = json!({
        "webhook-id": received.header("webhook-id").unwrap(),
        "webhook-timestamp": received.header("webhook-timestamp").unwrap(),
        "webhook-signature": received.header("webhook-signature").unwrap(),
    });
    assert_eq!(headers["webhook-id"], format!("{attempt}:4"));
    assert_eq!(
        received
            .header("webhook-signature")
            .unwrap()
            .split(' ')
            .count(),
        2,
        "one signature per secret in force"
    );
    // Either secret verifies it: a receiver that has only one still does.
    assert!(recipe(&[NEW_SECRET], headers.clone(), &received.body, None));
    assert!(recipe(&[OLD_SECRET], headers.clone(), &received.body, None));
    let tampered = received.body.replace("succeeded", "failed\u{0020}\u{0020}");
    assert_ne!(tampered, received.body);
    assert!(!recipe(&[NEW_SECRET], headers.clone(), &tampered, None));
    let sent: i64 = headers["webhook-timestamp"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(!recipe(
        &[NEW_SECRET],
        headers.clone(),
        &received.body,
        Some(sent + 301)
    ));
    let mut replayed = headers.clone();
    replayed["webhook-timestamp"] = json!((sent + 60).to_string());
    assert!(!recipe(
        &[NEW_SECRET],
        replayed,
        &received.body,
        Some(sent + 60)
    ));
    let stranger = "whsec_YW5vdGhlci10ZW5hbnRzLXNlY3JldC12YWx1ZQ==";
    assert!(!recipe(&[stranger], headers, &received.body, None));

    // Team-a's secrets are execplane's, whatever a tenant's prefixes say:
    // the default `*/{tenant}/` of a tenant named `execplane` covers
    // `secret/execplane/...`, and of one named `execplane/cb-...` covers
    // team-a's entry exactly. Both are refused before anything runs.
    for (tenant, category) in [("execplane", "policy"), (place.as_str(), "contract")] {
        let mut thief = job(
            "verify.tcp.connect",
            json!({"host": "127.0.0.1", "port": 5432}),
            json!({"secret_refs": [{
                "name": "stolen", "mount": "secret",
                "path": format!("{place}/team-a"), "key": "signing_secrets",
            }]}),
        );
        thief.tenant = tenant.into();
        pipeline.submit(&thief).await;
        let ended = pipeline.wait_done(&thief.job_id, WAIT).await;
        assert_eq!(ended.len(), 1, "{tenant}");
        assert_eq!(ended[0].1, "rejected", "{tenant}");
        assert_eq!(ended[0].2.as_deref(), Some(category), "{tenant}");
    }
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_callback_the_policy_does_not_let_the_tenant_reach_is_refused_at_validation(
    pool: PgPool,
) {
    // The default policy: loopback and private networks are not the
    // tenant's to reach, nor is the cloud's metadata service.
    for url in [
        "http://127.0.0.1:9/callbacks",
        "http://169.254.169.254/latest",
        "http://10.1.2.3/hook",
    ] {
        let spec = job(
            "verify.tcp.connect",
            json!({"host": "db.example.com", "port": 5432}),
            json!({"callback": {"url": url}}),
        );
        let dir = std::env::temp_dir().join(format!("execplane-cb-{}", Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("job.json");
        std::fs::write(&file, serde_json::to_vec(&spec).unwrap()).unwrap();
        let validated = common::execplane(&pool, &["validate", file.to_str().unwrap()]);
        let said = String::from_utf8_lossy(&validated.stdout).into_owned()
            + &String::from_utf8_lossy(&validated.stderr);
        assert_eq!(validated.status.code(), Some(2), "{url}: {said}");
        assert!(said.contains("callback.url"), "{url}: {said}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// What the attempt's row says of its topic callback.
async fn topic_delivered(pool: &PgPool, attempt: Uuid) -> Option<bool> {
    sqlx::query_scalar("SELECT callback_topic_delivered FROM attempts WHERE attempt_id = $1")
        .bind(attempt)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Runs the pipeline's processes under a policy that gives every tenant
/// the callback topics `callbacks.<tenant>.…`; the policy file's path.
fn with_callback_topics(pipeline: &mut Pipeline) -> std::path::PathBuf {
    let policy = pipeline.dir.join("callback-topics.yaml");
    std::fs::write(
        &policy,
        format!(
            "{}  callback_topics: [\"callbacks.{{tenant}}.\"]\n",
            common::pipeline::LOOPBACK_POLICY
        ),
    )
    .unwrap();
    pipeline.set_env("EXECPLANE_POLICY_FILE", policy.to_str().unwrap());
    policy
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_callback_topic_gets_the_result_record_once_per_ce_id_and_is_recorded(pool: PgPool) {
    let mut pipeline = Pipeline::new(&pool).await;
    let policy = with_callback_topics(&mut pipeline);
    pipeline.start_roles(1);
    pipeline.wait_runners(1).await;
    let topic = "callbacks.team-a.results";
    let spec = job(
        "verify.tcp.connect",
        json!({"host": "127.0.0.1", "port": 5432}),
        json!({"callback": {"topic": topic}}),
    );
    pipeline.submit(&spec).await;
    let attempt = pipeline.wait_done(&spec.job_id, WAIT).await[0].0;
    pipeline
        .wait("the topic callback to be recorded", WAIT, || async {
            pipeline
                .events_of(attempt)
                .await
                .contains(&"callback_recorded".to_owned())
        })
        .await;
    let store = execplane::store::Store::from_pool(pool.clone());
    let recorded = store
        .history(attempt)
        .await
        .unwrap()
        .last()
        .unwrap()
        .decode()
        .unwrap();
    match recorded.body {
        execplane::contract::EventBody::CallbackRecorded { url, delivered, .. } => {
            assert_eq!(
                (url.as_str(), delivered),
                ("kafka:callbacks.team-a.results", true)
            );
        }
        other => panic!("{other:?}"),
    }
    // The same record as exec.results.v1: the same ce_id and value, once.
    let on_results = pipeline
        .consume_all(execplane::contract::topics::RESULTS)
        .await;
    let on_callback = pipeline.consume_all(topic).await;
    let ce_id = |record: &rdkafka::message::OwnedMessage| {
        use rdkafka::message::Headers;
        use rdkafka::Message;
        let headers = record.headers().unwrap();
        let found = headers.iter().find(|header| header.key == "ce_id").unwrap();
        String::from_utf8(found.value.unwrap().to_vec()).unwrap()
    };
    let ids: std::collections::BTreeSet<String> = on_callback.iter().map(ce_id).collect();
    assert_eq!(ids.len(), 1, "one result, once per ce_id");
    let result = on_results
        .iter()
        .find(|record| ids.contains(&ce_id(record)))
        .unwrap();
    use rdkafka::Message;
    assert_eq!(on_callback[0].payload(), result.payload());
    assert_eq!(on_callback[0].key(), result.key());
    assert_eq!(topic_delivered(&pool, attempt).await, Some(true));
    let rebuild = common::execplane(&pool, &["projection", "rebuild", "--verify"]);
    assert!(
        rebuild.status.success(),
        "{}",
        String::from_utf8_lossy(&rebuild.stderr)
    );

    // Another tenant's prefix, execplane's own topic, or none at all: refused
    // at validation.
    // A name that would nest in another's topics is no tenant's name.
    for (tenant, refused, field) in [
        ("team-a", "callbacks.team-b.results", "callback.topic"),
        ("team-a.evil", "callbacks.team-a.evil.results", "tenant"),
        ("team-a", "exec.results.v1", "callback.topic"),
        ("team-a", "elsewhere", "callback.topic"),
    ] {
        let mut spec = job(
            "verify.tcp.connect",
            json!({"host": "127.0.0.1", "port": 5432}),
            json!({"callback": {"topic": refused}}),
        );
        spec.tenant = tenant.into();
        let file = pipeline.dir.join("refused.json");
        std::fs::write(&file, serde_json::to_vec(&spec).unwrap()).unwrap();
        let validated = common::execplane_with(
            &pool,
            &["validate", file.to_str().unwrap()],
            &[("EXECPLANE_POLICY_FILE", policy.to_str().unwrap())],
        );
        let said = String::from_utf8_lossy(&validated.stdout).into_owned()
            + &String::from_utf8_lossy(&validated.stderr);
        assert_eq!(validated.status.code(), Some(2), "{refused}: {said}");
        assert!(said.contains(&format!("- {field}:")), "{refused}: {said}");
    }
}

/// A tenant whose callback endpoint accepts and never answers holds its
/// own share of the deliveries in flight, never the others' turn: another
/// tenant's callback is delivered while the first one's still hang, not
/// after every batch of them has timed out (docs/EVENTS.md, "Callbacks").
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_tenant_whose_endpoint_never_answers_does_not_hold_back_another_s_callbacks(
    pool: PgPool,
) {
    // Accepts every connection and holds it open, answering nothing.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_url = format!("http://{}/hooks", silent.local_addr().unwrap());
    let held = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let holder = held.clone();
    std::thread::spawn(move || {
        for stream in silent.incoming().flatten() {
            holder.lock().unwrap().push(stream);
        }
    });
    let mut pipeline = Pipeline::new(&pool).await;
    pipeline.start_roles(1);
    pipeline.wait_runners(1).await;
    let probe = |tenant: &str, url: &str| {
        let mut spec = job(
            "verify.tcp.connect",
            json!({"host": "127.0.0.1", "port": 5432}),
            json!({"callback": {"url": url}}),
        );
        spec.tenant = tenant.into();
        spec
    };
    // More than three batches of team-a's, due before team-b's.
    let hanging: Vec<_> = (0..100).map(|_| probe("team-a", &silent_url)).collect();
    for spec in &hanging {
        pipeline.submit(spec).await;
    }
    for spec in &hanging {
        pipeline.wait_done(&spec.job_id, WAIT).await;
    }
    pipeline
        .wait("team-a's callbacks to hang", WAIT, || async {
            !held.lock().unwrap().is_empty()
        })
        .await;
    let receiver = Server::start(vec![], 200).await;
    let other = probe("team-b", &receiver.url("/callbacks"));
    pipeline.submit(&other).await;
    pipeline.wait_done(&other.job_id, WAIT).await;
    let ended = std::time::Instant::now();
    pipeline
        .wait("team-b's callback", WAIT, || async {
            !receiver.requests().is_empty()
        })
        .await;
    // Under the request timeout (10 s): it did not wait for team-a's.
    let waited = ended.elapsed();
    assert!(
        waited < Duration::from_secs(8),
        "team-b's callback waited {waited:?} behind team-a's"
    );
}

/// A policy reload that takes a tenant's callback topic prefix away stops
/// the topic callbacks of JobSpecs admitted before it: the prefix is
/// checked again when the record would be produced, as a URL is checked
/// again when it would be posted to (docs/EVENTS.md, "Callbacks").
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_callback_topic_the_reloaded_policy_no_longer_names_is_not_produced_to(pool: PgPool) {
    let mut pipeline = Pipeline::new(&pool).await;
    let policy = with_callback_topics(&mut pipeline);
    let dispatcher = pipeline.spawn(&["dispatcher"], &[]);
    pipeline.spawn(&["relay"], &[]);
    let spec = job(
        "verify.tcp.connect",
        json!({"host": "127.0.0.1", "port": 5432}),
        json!({"callback": {"topic": "callbacks.team-a.results"}}),
    );
    pipeline.submit(&spec).await;
    pipeline
        .wait("the job to be admitted", WAIT, || async {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM attempts WHERE job_id = $1")
                .bind(&spec.job_id)
                .fetch_one(&pool)
                .await
                .unwrap()
                == 1
        })
        .await;
    // The operator takes the prefix away; the attempt runs after that.
    std::fs::write(&policy, common::pipeline::LOOPBACK_POLICY).unwrap();
    pipeline.signal(dispatcher, "HUP");
    pipeline
        .wait("the dispatcher to reload its policy", WAIT, || async {
            pipeline
                .log(dispatcher)
                .contains("operator policy reloaded")
        })
        .await;
    pipeline.spawn(&["runner", "verification"], &[]);
    let attempt = pipeline.wait_done(&spec.job_id, WAIT).await[0].0;
    let refusal = || async {
        sqlx::query_scalar::<_, Option<String>>(
            "SELECT last_error FROM callbacks WHERE attempt_id = $1 AND status = 'pending'",
        )
        .bind(attempt)
        .fetch_optional(&pool)
        .await
        .unwrap()
        .flatten()
    };
    pipeline
        .wait("the topic callback to be refused", WAIT, || async {
            refusal().await.is_some()
        })
        .await;
    let refusal = refusal().await.unwrap();
    assert!(refusal.contains("callback_topics"), "{refusal}");
    assert_eq!(
        topic_delivered(&pool, attempt).await,
        None,
        "nothing was produced"
    );
}
