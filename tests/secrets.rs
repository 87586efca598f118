//! Secrets by reference against a real OpenBao (the Vault API): resolution,
//! each failure's category and message, token and AppRole renewal, and an
//! attempt that deliberately echoes its secret in every form, after which
//! no Kafka topic, Postgres table or process log holds any of them.

mod common;

use std::time::Duration;

use common::bao::Bao;
use common::http::Server;
use common::leaks::{find_leak, leaks, records_until_now};
use common::pipeline::{job, Pipeline};
use execplane::codec::{Codec, Family, LogChunkRecord, LogStream};
use execplane::config::Secret;
use execplane::contract::{topics, FailureCategory, RunnerType, SecretRef};
use execplane::secrets::{SecretError, Vault, VaultAuth, VaultSettings};
use rdkafka::message::Headers;
use rdkafka::Message;
use serde_json::json;
use sqlx::{PgPool, Row};
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(60);

impl Bao {
    /// A policy that reads everything under `prefix` except `prefix/denied`.
    async fn policy(&self, name: &str, prefix: &str) {
        let policy = format!(
            "path \"secret/data/{prefix}/*\" {{ capabilities = [\"read\"] }}\npath \"secret/data/{prefix}/denied\" {{ capabilities = [\"deny\"] }}\n"
        );
        let (status, body) = self
            .call(
                reqwest::Method::PUT,
                &format!("sys/policies/acl/{name}"),
                Some(json!({"policy": policy})),
            )
            .await;
        assert!(status == 204 || status == 200, "{body}");
    }

    async fn token(&self, policy: &str, ttl: &str) -> String {
        let (status, body) = self
            .call(
                reqwest::Method::POST,
                "auth/token/create",
                Some(json!({"policies": [policy], "ttl": ttl, "explicit_max_ttl": "1h", "renewable": true})),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        body["auth"]["client_token"].as_str().unwrap().to_owned()
    }

    /// An AppRole whose tokens live `ttl`; returns (role_id, secret_id).
    async fn approle(&self, role: &str, policy: &str, ttl: &str) -> (String, String) {
        // Enabling twice is refused; either way it is enabled afterwards.
        let _ = self
            .call(
                reqwest::Method::POST,
                "sys/auth/approle",
                Some(json!({"type": "approle"})),
            )
            .await;
        let (status, body) = self
            .call(
                reqwest::Method::POST,
                &format!("auth/approle/role/{role}"),
                Some(json!({"token_policies": [policy], "token_ttl": ttl, "token_max_ttl": "1h"})),
            )
            .await;
        assert!(status == 204 || status == 200, "{body}");
        let (_, body) = self
            .call(
                reqwest::Method::GET,
                &format!("auth/approle/role/{role}/role-id"),
                None,
            )
            .await;
        let role_id = body["data"]["role_id"].as_str().unwrap().to_owned();
        let (_, body) = self
            .call(
                reqwest::Method::POST,
                &format!("auth/approle/role/{role}/secret-id"),
                Some(json!({})),
            )
            .await;
        let secret_id = body["data"]["secret_id"].as_str().unwrap().to_owned();
        (role_id, secret_id)
    }
}

fn reference(name: &str, path: &str, key: &str) -> SecretRef {
    SecretRef {
        name: name.into(),
        mount: "secret".into(),
        path: path.into(),
        key: key.into(),
        generate: None,
    }
}

async fn vault(address: &str, auth: VaultAuth) -> std::sync::Arc<Vault> {
    Vault::connect(VaultSettings {
        address: address.into(),
        auth,
        timeout: Duration::from_secs(3),
    })
    .await
    .unwrap()
}

/// A value that changes under base64, URL and JSON encoding.
fn secret_value() -> String {
    format!("p@ss/w0rd+\"q\" &<{}>", Uuid::new_v4().simple())
}

#[tokio::test]
async fn each_vault_failure_has_its_category_and_names_the_ref_never_the_value() {
    let bao = Bao::new();
    let prefix = format!("execplane-test/{}", Uuid::new_v4().simple());
    let value = secret_value();
    bao.put(&format!("{prefix}/app"), json!({"password": value}))
        .await;
    bao.put(&format!("{prefix}/denied"), json!({"password": value}))
        .await;
    let policy = format!("p-{}", Uuid::new_v4().simple());
    bao.policy(&policy, &prefix).await;
    let token = bao.token(&policy, "1h").await;
    let good = vault(&bao.address, VaultAuth::Token(Secret::new(token))).await;

    let resolved = good
        .resolve(&reference("db", &format!("{prefix}/app"), "password"))
        .await
        .unwrap();
    assert_eq!(resolved.expose(), value);
    assert!(!format!("{resolved:?}").contains(&value));

    let wrong = vault(&bao.address, VaultAuth::Token(Secret::new("not-a-token"))).await;
    let down = vault("http://127.0.0.1:1", VaultAuth::Token(Secret::new("x"))).await;
    let cases: Vec<(&str, &Vault, SecretRef, FailureCategory, &str)> = vec![
        (
            "missing path",
            &good,
            reference("db", &format!("{prefix}/nope"), "password"),
            FailureCategory::Contract,
            "no such secret",
        ),
        (
            "denied by policy",
            &good,
            reference("db", &format!("{prefix}/denied"), "password"),
            FailureCategory::Contract,
            "permission denied",
        ),
        (
            "missing key",
            &good,
            reference("db", &format!("{prefix}/app"), "user"),
            FailureCategory::Contract,
            "no key `user`",
        ),
        (
            "wrong token",
            &wrong,
            reference("db", &format!("{prefix}/app"), "password"),
            FailureCategory::Infrastructure,
            "refused this runner's credentials",
        ),
        (
            "unreachable",
            &down,
            reference("db", &format!("{prefix}/app"), "password"),
            FailureCategory::Infrastructure,
            "unreachable",
        ),
    ];
    for (case, store, reference, category, phrase) in cases {
        let error: SecretError = store.resolve(&reference).await.unwrap_err();
        let message = error.to_string();
        assert_eq!(error.category(), category, "{case}: {message}");
        assert!(
            message.contains("secret `db`") && message.contains(&reference.path),
            "{case}: {message}"
        );
        assert!(message.contains(phrase), "{case}: {message}");
        assert!(!message.contains(&value), "{case}: the value leaked");
    }
}

/// A reference with `generate` creates its key once: attempts racing on it
/// all get one value, what the secret held stays, a key already there is
/// kept, and a store that lets the runner only read refuses it (`contract`).
#[tokio::test]
async fn a_generated_secret_is_created_once_and_kept() {
    let bao = Bao::new();
    let prefix = format!("execplane-test/{}", Uuid::new_v4().simple());
    bao.put(&format!("{prefix}/app"), json!({"user": "app"}))
        .await;
    let root = vault(
        &bao.address,
        VaultAuth::Token(Secret::new(bao.root.clone())),
    )
    .await;
    let mut generated = reference("db", &format!("{prefix}/app"), "password");
    generated.generate = Some(execplane::contract::GenerateSecret { length: 40 });
    let racing: Vec<_> = (0..8)
        .map(|_| {
            let (root, generated) = (root.clone(), generated.clone());
            tokio::spawn(async move {
                root.ensure_generated(&generated, generated.generate.unwrap())
                    .await
                    .unwrap();
                root.resolve(&generated).await.unwrap().expose().to_owned()
            })
        })
        .collect();
    let mut values = Vec::new();
    for attempt in racing {
        values.push(attempt.await.unwrap());
    }
    let value = values[0].clone();
    assert!(values.iter().all(|other| *other == value), "one value");
    assert_eq!(value.len(), 40);
    assert!(value.bytes().all(|b| b.is_ascii_alphanumeric()));
    let (_, stored) = bao
        .call(
            reqwest::Method::GET,
            &format!("secret/data/{prefix}/app"),
            None,
        )
        .await;
    assert_eq!(
        stored["data"]["data"],
        json!({"user": "app", "password": value})
    );
    // Already there: kept, never rotated by a later attempt.
    root.ensure_generated(&generated, generated.generate.unwrap())
        .await
        .unwrap();
    assert_eq!(root.resolve(&generated).await.unwrap().expose(), value);

    let policy = format!("p-{}", Uuid::new_v4().simple());
    bao.policy(&policy, &prefix).await;
    let reader = vault(
        &bao.address,
        VaultAuth::Token(Secret::new(bao.token(&policy, "1h").await)),
    )
    .await;
    let mut fresh = generated.clone();
    fresh.key = "api_key".into();
    let error = reader
        .ensure_generated(&fresh, fresh.generate.unwrap())
        .await
        .unwrap_err();
    assert_eq!(error.category(), FailureCategory::Contract, "{error}");
    assert!(error.to_string().contains("permission denied"), "{error}");
}

#[tokio::test]
async fn token_and_approle_credentials_are_renewed_before_they_expire() {
    let bao = Bao::new();
    let prefix = format!("execplane-test/{}", Uuid::new_v4().simple());
    bao.put(&format!("{prefix}/app"), json!({"password": "renewed"}))
        .await;
    let policy = format!("p-{}", Uuid::new_v4().simple());
    bao.policy(&policy, &prefix).await;
    let token = bao.token(&policy, "3s").await;
    let (role_id, secret_id) = bao
        .approle(&format!("r-{}", Uuid::new_v4().simple()), &policy, "3s")
        .await;
    let shutdown = tokio_util::sync::CancellationToken::new();
    let stores = [
        vault(&bao.address, VaultAuth::Token(Secret::new(token))).await,
        vault(
            &bao.address,
            VaultAuth::AppRole {
                mount: "approle".into(),
                role_id,
                secret_id: Secret::new(secret_id),
            },
        )
        .await,
    ];
    for store in &stores {
        store.keep_alive(shutdown.clone());
    }
    let wanted = reference("db", &format!("{prefix}/app"), "password");
    // Twice the tokens' TTL: without renewal both would have expired.
    for _ in 0..3 {
        for store in &stores {
            assert_eq!(store.resolve(&wanted).await.unwrap().expose(), "renewed");
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    shutdown.cancel();
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn an_attempt_echoing_its_secret_leaks_it_nowhere(pool: PgPool) {
    let bao = Bao::new();
    // Under the tenant's own name: the operator's default policy.
    let prefix = format!("team-a/execplane-test/{}", Uuid::new_v4().simple());
    let value = secret_value();
    bao.put(&format!("{prefix}/app"), json!({"password": value}))
        .await;
    let policy = format!("p-{}", Uuid::new_v4().simple());
    bao.policy(&policy, &prefix).await;
    let token = bao.token(&policy, "1h").await;

    let mut pipeline = Pipeline::new(&pool).await;
    pipeline.spawn(&["dispatcher"], &[]);
    pipeline.spawn(&["relay"], &[]);
    // Artifacts go to the stack's real S3 (Garage), to be scanned too.
    let (key_id, key_secret) = common::s3_credentials();
    let s3_env = [
        ("EXECPLANE_S3_ENDPOINT", "http://127.0.0.1:3900"),
        ("EXECPLANE_S3_ACCESS_KEY_ID", key_id.as_str()),
        ("EXECPLANE_S3_SECRET_ACCESS_KEY", key_secret.as_str()),
        ("EXECPLANE_ARTIFACT_GRACE", "300ms"),
    ];
    pipeline.spawn(&["artifact-worker"], &s3_env);
    let probes = format!("{}/tests/probes", env!("CARGO_MANIFEST_DIR"));
    pipeline.spawn(
        &["runner", "verification"],
        &[
            ("EXECPLANE_VAULT_ADDR", bao.address.as_str()),
            ("EXECPLANE_VAULT_TOKEN", token.as_str()),
            ("EXECPLANE_VERIFY_PROBES", "sleep,hang,fail,echo,leaky"),
            ("EXECPLANE_VERIFY_PROBE_DIR", probes.as_str()),
        ],
    );
    pipeline.wait_runners(1).await;
    let refs = json!({"secret_refs": [{"name": "pw", "mount": "secret", "path": format!("{prefix}/app"), "key": "password"}]});

    // 1. The job echoes its secret in every form, the plain one split
    //    across two writes; it also puts it in its progress and result.
    let echo = job(
        "verify.custom.probe",
        json!({"probe_id": "echo", "args": {"text": {"$secret": "pw"}, "forms": ["plain", "base64", "url", "json"], "split": true}}),
        refs.clone(),
    );
    pipeline.submit(&echo).await;
    // 2. A header from the secret reaches its target: resolution works.
    let target = Server::start(vec![], 200).await;
    let http = job(
        "verify.http.endpoint",
        json!({"url": format!("http://127.0.0.1:{}/ready", target.port), "headers": {"authorization": {"$secret": "pw"}}, "expect": {"status": 200}}),
        refs.clone(),
    );
    pipeline.submit(&http).await;
    // 3. A path that does not exist: a contract failure naming the ref.
    let missing = job(
        "verify.custom.probe",
        json!({"probe_id": "echo", "args": {"text": {"$secret": "gone"}}}),
        json!({"secret_refs": [{"name": "gone", "mount": "secret", "path": format!("{prefix}/nope"), "key": "password"}]}),
    );
    pipeline.submit(&missing).await;
    // 4. A tool process (tests/probes/leaky) prints it to stdout in two
    //    writes split in the middle, and to stderr.
    let tool = job(
        "verify.custom.probe",
        json!({"probe_id": "leaky", "args": {"text": {"$secret": "pw"}}}),
        refs.clone(),
    );
    pipeline.submit(&tool).await;

    for (spec, status) in [
        (&echo, "succeeded"),
        (&http, "succeeded"),
        (&missing, "failed"),
        (&tool, "succeeded"),
    ] {
        let attempts = pipeline.wait_done(&spec.job_id, WAIT).await;
        assert_eq!(
            attempts.last().unwrap().1,
            status,
            "{}: {attempts:?}",
            spec.operation
        );
    }
    let received = target.requests();
    assert_eq!(received[0].header("authorization"), Some(value.as_str()));
    let row = sqlx::query("SELECT failure_category, message FROM attempts WHERE job_id = $1")
        .bind(&missing.job_id)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(row.get::<String, _>(0), "contract");
    let message: String = row.get(1);
    assert!(
        message.contains("secret `gone`") && message.contains("no such secret"),
        "{message}"
    );

    // The echo happened, masked: its output reached exec.log-chunks.v1.
    let chunks: Vec<LogChunkRecord> = pipeline
        .consume_all(topics::LOG_CHUNKS)
        .await
        .iter()
        .map(|message| {
            Codec::default()
                .decode(Family::LogChunk, message.payload().unwrap())
                .unwrap()
        })
        .collect();
    let output_of = |job: &execplane::contract::JobSpec, streams: &[LogStream]| -> String {
        let attempt = execplane::attempt::attempt_id_for(job.command_id, 1).to_string();
        chunks
            .iter()
            .filter(|chunk| chunk.attempt_id == attempt && streams.contains(&chunk.stream))
            .map(|chunk| chunk.text.as_str())
            .collect()
    };
    let output = output_of(&echo, &[LogStream::Stdout, LogStream::Stderr]);
    assert_eq!(output.matches("[masked]").count(), 5, "{output}");
    assert!(
        output.contains("base64: [masked]") && output.contains("split: [masked]"),
        "{output}"
    );
    // Each stream masked as a stream: the two halves on stdout are one
    // `[masked]`.
    assert_eq!(output_of(&tool, &[LogStream::Stdout]), "tool: [masked]\n");
    assert_eq!(output_of(&tool, &[LogStream::Stderr]), "stderr: [masked]\n");

    // Nowhere: not in any topic (payloads and headers), any table, any log.
    let needles = leaks(&value);
    let work = topics::work(RunnerType::Verification);
    for topic in [
        topics::COMMANDS,
        topics::RUNNER_EVENTS,
        topics::RUNNER_PRESENCE,
        topics::LOG_CHUNKS,
        topics::ATTEMPT_EVENTS,
        topics::ARTIFACTS,
        topics::RESULTS,
        topics::DLQ,
        work.as_str(),
    ] {
        for message in records_until_now(&pipeline, topic).await {
            let mut bytes = message.payload().unwrap_or_default().to_vec();
            if let Some(headers) = message.headers() {
                for header in headers.iter() {
                    bytes.extend_from_slice(header.value.unwrap_or_default());
                }
            }
            assert_eq!(find_leak(&bytes, &needles), None, "leaked on {topic}");
        }
    }
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(tables.len() >= 10, "{tables:?}");
    for table in &tables {
        let text: Option<String> = sqlx::query_scalar(&format!(
            "SELECT string_agg(t::text, E'\\n') FROM {table} t"
        ))
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(
            find_leak(text.unwrap_or_default().as_bytes(), &needles),
            None,
            "leaked in table {table}"
        );
    }
    let payloads: Vec<Vec<u8>> = sqlx::query_scalar("SELECT payload FROM attempt_events")
        .fetch_all(&pool)
        .await
        .unwrap();
    for payload in payloads {
        assert_eq!(
            find_leak(&payload, &needles),
            None,
            "leaked in an attempt event"
        );
    }
    // Every stored artifact of the three attempts (logs, results, manifests).
    let storage = execplane::artifacts::S3::new(&execplane::artifacts::S3Settings {
        endpoint: "http://127.0.0.1:3900".into(),
        region: "garage".into(),
        bucket: "execplane-artifacts".into(),
        access_key_id: key_id.clone(),
        secret_access_key: Secret::new(key_secret.clone()),
    });
    pipeline
        .wait("the echo attempt's artifacts", WAIT, || async {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM artifacts a JOIN attempts t USING (attempt_id) WHERE t.job_id = $1")
                .bind(&echo.job_id)
                .fetch_one(&pool)
                .await
                .unwrap_or(0)
                == 4
                && sqlx::query_scalar::<_, i64>("SELECT count(*) FROM artifacts a JOIN attempts t USING (attempt_id) WHERE t.job_id = $1")
                    .bind(&tool.job_id)
                    .fetch_one(&pool)
                    .await
                    .unwrap_or(0)
                    == 4
        })
        .await;
    let keys: Vec<String> = sqlx::query_scalar("SELECT storage_key FROM artifacts")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert!(keys.len() >= 3);
    for key in keys {
        use execplane::artifacts::ArtifactStorage;
        let bytes = storage.get(&key).await.unwrap();
        assert_eq!(
            find_leak(&bytes, &needles),
            None,
            "leaked in S3 object {key}"
        );
    }
    for entry in std::fs::read_dir(&pipeline.dir).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(
            find_leak(&bytes, &needles),
            None,
            "leaked in {}",
            path.display()
        );
    }
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_tenant_cannot_name_another_tenants_secret(pool: PgPool) {
    let bao = Bao::new();
    let run = Uuid::new_v4().simple().to_string();
    let value = secret_value();
    bao.put(&format!("team-b/{run}/db"), json!({"password": value}))
        .await;
    let policy = format!("p-{}", Uuid::new_v4().simple());
    bao.policy(&policy, &format!("team-b/{run}")).await;
    // The runner's token CAN read team-b's secret: only the operator's
    // policy stands between a team-a job and it.
    let token = bao.token(&policy, "1h").await;
    let listener = Server::start(vec![], 200).await;
    let steal = |extra_tenant: &str| {
        job(
            "verify.http.endpoint",
            json!({"url": listener.url("/exfiltrate"), "headers": {"authorization": {"$secret": "db"}}}),
            json!({
                "tenant": extra_tenant,
                "secret_refs": [{"name": "db", "mount": "secret", "path": format!("team-b/{run}/db"), "key": "password"}],
                // The second pipeline's relay takes over the first's (one
                // database) and waits out its publication horizon, up to
                // 8 s: a lease must outlive that wait.
                "timeouts": {"schedule_to_start": "60s", "start_to_close": "60s", "heartbeat": "20s", "schedule_to_close": "120s"}
            }),
        )
    };

    // 1. At intake: `rejected (policy)`, never placed.
    let mut pipeline = Pipeline::new(&pool).await;
    let vault_env = [
        ("EXECPLANE_VAULT_ADDR", bao.address.as_str()),
        ("EXECPLANE_VAULT_TOKEN", token.as_str()),
    ];
    pipeline.spawn(&["dispatcher"], &[]);
    pipeline.spawn(&["relay"], &[]);
    pipeline.spawn(&["runner", "verification"], &vault_env);
    pipeline.wait_runners(1).await;
    let spec = steal("team-a");
    pipeline.submit(&spec).await;
    let attempts = pipeline.wait_done(&spec.job_id, WAIT).await;
    assert_eq!(
        (attempts[0].1.as_str(), attempts[0].2.as_deref()),
        ("rejected", Some("policy"))
    );

    // 2. In the runner, before resolving: a dispatcher whose policy file
    //    lets team-a read anything, a runner with the default policy.
    drop(pipeline);
    tokio::time::sleep(Duration::from_secs(2)).await; // its runner's presence lapses
    let mut second = Pipeline::new(&pool).await;
    let lax = second.dir.join("lax.toml");
    std::fs::write(
        &lax,
        "[defaults]\ndestinations = { allow_private = [\"127.0.0.0/8\"] }\n[tenants.team-a]\nsecret_prefixes = [\"*/\"]\n",
    )
    .unwrap();
    let lax = lax.display().to_string();
    second.spawn(&["dispatcher"], &[("EXECPLANE_POLICY_FILE", lax.as_str())]);
    second.spawn(&["relay"], &[]);
    second.spawn(&["runner", "verification"], &vault_env);
    second.wait_runners(1).await;
    let spec = steal("team-a");
    second.submit(&spec).await;
    let attempts = second.wait_done(&spec.job_id, WAIT).await;
    assert_eq!(
        (attempts[0].1.as_str(), attempts[0].2.as_deref()),
        ("failed", Some("policy")),
        "{attempts:?}"
    );
    assert!(
        listener.requests().is_empty(),
        "the listener received {:?}",
        listener.requests()
    );
    // And the secret's owner reads it as before.
    let spec = steal("team-b");
    second.submit(&spec).await;
    assert_eq!(second.wait_done(&spec.job_id, WAIT).await[0].1, "succeeded");
    assert_eq!(
        listener.requests()[0].header("authorization"),
        Some(value.as_str())
    );
}
