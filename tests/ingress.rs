//! The ingress on the real stack: executors written in Python (not with the
//! project's Rust client) complete attempts over HTTP and TCP; the execute
//! API runs a job and streams its events; every refusal is exact and writes
//! nothing; the ingress will not start without its keys; `/metrics` is
//! valid exposition and moves.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::ingress::{call, catalog, free_port, metrics, script, start, API_KEY, INGRESS_KEY};
use common::pipeline::{job, Pipeline};
use common::prometheus;
use execplane::codec::{Codec, Family, LogChunkRecord};
use execplane::contract::topics;
use rdkafka::message::Headers;
use rdkafka::Message;
use serde_json::{json, Value};
use sqlx::PgPool;

const WAIT: Duration = Duration::from_secs(60);

#[test]
fn the_exposition_reader_is_strict() {
    assert!(prometheus::parse("# TYPE a counter\na{x=\"1\"} 2\n").is_ok());
    assert!(prometheus::parse("a b\n").is_err());
    assert!(prometheus::parse("# TYPE a counter\na 1\n# TYPE a counter\n").is_err());
    assert!(prometheus::parse("a 1\nb 1\na 2\n").is_err());
    assert!(prometheus::parse("a{x=1} 1\n").is_err());
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn python_executors_complete_attempts_over_http_and_over_tcp(pool: PgPool) {
    let mut pipeline = Pipeline::new(&pool).await;
    let dispatcher_metrics = free_port();
    let dispatcher_metrics_addr = format!("127.0.0.1:{dispatcher_metrics}");
    let upstream = format!("http://{dispatcher_metrics_addr}/metrics");
    pipeline.spawn(
        &["dispatcher"],
        &[("EXECPLANE_METRICS_ADDR", dispatcher_metrics_addr.as_str())],
    );
    pipeline.spawn(&["relay"], &[("EXECPLANE_METRICS_ADDR", "")]);
    // Records the outputs executors list, as it does a runner's.
    pipeline.spawn(&["artifact-worker"], &[("EXECPLANE_METRICS_ADDR", "")]);
    let ingress = start(
        &mut pipeline,
        &["ingress"],
        &[
            ("EXECPLANE_INGRESS_METRICS_UPSTREAM", upstream.as_str()),
            ("EXECPLANE_INGRESS_SESSION_TTL", "1s"),
        ],
    )
    .await;
    catalog(&pipeline, &["py-http", "--types", "verification"]);
    catalog(
        &pipeline,
        &["py-tcp", "--types", "verification", "--tenants", "team-a"],
    );

    let mut finished = Vec::new();
    for (name, args) in [
        (
            "python-http",
            vec![
                script("http_executor.py").display().to_string(),
                format!("http://127.0.0.1:{}", ingress.http),
                "py-http".into(),
                "1".into(),
            ],
        ),
        (
            "python-tcp",
            vec![
                script("tcp_executor.py").display().to_string(),
                "127.0.0.1".into(),
                ingress.tcp.to_string(),
                "py-tcp".into(),
                "1".into(),
            ],
        ),
    ] {
        let executor = Command::new("python3")
            .args(&args)
            .env("EXECPLANE_INGRESS_KEY", INGRESS_KEY)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("python3 runs");
        pipeline.wait_runners(1).await;
        // Postgres listens here: the executor's own probe connects to it.
        let spec = job(
            "verify.tcp.connect",
            json!({"host": "127.0.0.1", "port": 5432}),
            json!({}),
        );
        pipeline.submit(&spec).await;
        let attempts = pipeline.wait_done(&spec.job_id, WAIT).await;
        let output = executor.wait_with_output().unwrap();
        assert!(
            output.status.success(),
            "{name} executor failed: {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert_eq!(attempts.len(), 1, "{name}: {attempts:?}");
        assert_eq!(attempts[0].1, "succeeded", "{name}: {attempts:?}");
        finished.push(attempts[0].0);
        let result: String =
            sqlx::query_scalar("SELECT result_json FROM attempts WHERE attempt_id = $1")
                .bind(attempts[0].0)
                .fetch_one(&pool)
                .await
                .unwrap();
        assert!(result.contains(name), "{name}: {result}");
        if name == "python-http" {
            // Its evidence file, uploaded through the ingress, downloads.
            let stored = pipeline.download(attempts[0].0, "probe.json").await;
            let stored: Value = serde_json::from_slice(&stored).unwrap();
            assert_eq!(stored["operation"], "verify.tcp.connect");
        }
        // The finished report sent twice under one idempotency key is one
        // event (without the key, the second repeats the first: no event).
        let kinds = pipeline.events_of(attempts[0].0).await;
        // The HTTP executor's heartbeat carries progress, which is recorded.
        let expected: &[&str] = if name == "python-http" {
            &[
                "created",
                "lease_granted",
                "started",
                "progress",
                "finished",
            ]
        } else {
            &["created", "lease_granted", "started", "finished"]
        };
        assert_eq!(kinds, expected, "{name}");
        // The session ends once the executor is gone; nothing is placed on it.
        pipeline
            .wait("the executor session to end", WAIT, || async {
                pipeline.live_runners().await == 0
            })
            .await;
    }

    an_executor_s_outputs_and_result_are_held_to_the_contract(&mut pipeline, &ingress).await;

    // Log chunks reached their topic; the HTTP executor's traceparent rode
    // along with its reports.
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
    assert_eq!(chunks.len(), 2, "{chunks:?}");
    assert!(chunks[0].text.contains("connect") || chunks[1].text.contains("connect"));
    // Nobody writes into an attempt that was not leased to them: another
    // instance of the same executor gets 409, another executor's instance
    // 403; neither reaches the broker.
    let events_before = pipeline.consume_all(topics::RUNNER_EVENTS).await.len();
    for (executor, instance, status) in [
        ("py-http", "py-http.intruder", 409),
        ("py-tcp", "py-http.intruder", 403),
    ] {
        let report = json!({"attempt_id": finished[0], "lease_epoch": 1, "runner_instance": instance, "type": "heartbeat"});
        let (got, body) = call(
            reqwest::Method::POST,
            &ingress.url("/v1/executor/reports"),
            Some(INGRESS_KEY),
            Some(executor),
            &[],
            Some(serde_json::to_vec(&report).unwrap()),
        )
        .await;
        assert_eq!(got, status, "{executor} as {instance}: {body}");
    }
    assert_eq!(
        pipeline.consume_all(topics::RUNNER_EVENTS).await.len(),
        events_before
    );

    let traced = pipeline
        .consume_all(topics::RUNNER_EVENTS)
        .await
        .iter()
        .filter(|message| {
            message.headers().is_some_and(|headers| {
                headers.iter().any(|header| {
                    header.key == "traceparent"
                        && header.value
                            == Some(
                                b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
                                    .as_slice(),
                            )
                })
            })
        })
        .count();
    assert!(
        traced >= 3,
        "reports with the executor's traceparent: {traced}"
    );

    // The ingress serves its own metrics and the dispatcher's, as one
    // valid exposition.
    let samples = metrics(&ingress).await;
    assert!(
        prometheus::sum(
            &samples,
            "execplane_ingress_requests_total",
            &["route=\"/v1/executor/reports\"", "status=\"200\""]
        ) >= 3.0
    );
    assert!(
        prometheus::sum(
            &samples,
            "execplane_ingress_requests_total",
            &["transport=\"tcp\"", "route=\"report\""]
        ) >= 2.0
    );
    assert!(
        prometheus::sum(&samples, "execplane_lease_grants_total", &[]) >= 2.0,
        "the dispatcher's metrics are proxied"
    );
    // Log lines the writer thread could not keep up with are counted.
    assert!(
        samples
            .keys()
            .any(|series| series.starts_with("execplane_log_lines_dropped_total")),
        "{:?}",
        samples.keys().collect::<Vec<_>>()
    );
    assert!(
        prometheus::sum(
            &samples,
            "execplane_attempts_ended_total",
            &["state=\"succeeded\""]
        ) >= 2.0
    );
}

/// An executor lists only outputs stored through the ingress with the
/// digest it names, and a result not of its operation's type ends the
/// attempt as a `runner_error` that says so.
async fn an_executor_s_outputs_and_result_are_held_to_the_contract(
    pipeline: &mut Pipeline,
    ingress: &common::ingress::Ingress,
) {
    let post = |path: &'static str, body: Value| {
        let url = ingress.url(path);
        async move {
            call(
                reqwest::Method::POST,
                &url,
                Some(INGRESS_KEY),
                Some("py-http"),
                &[],
                Some(serde_json::to_vec(&body).unwrap()),
            )
            .await
        }
    };
    let (status, session) = post(
        "/v1/executor/register",
        json!({"runner_type": "verification"}),
    )
    .await;
    assert_eq!(status, 200, "{session}");
    let instance = session["instance_id"].as_str().unwrap().to_owned();
    pipeline.wait_runners(1).await;
    let spec = job(
        "verify.tcp.connect",
        json!({"host": "127.0.0.1", "port": 5432}),
        json!({}),
    );
    pipeline.submit(&spec).await;
    let work = loop {
        let (status, reply) = post(
            "/v1/executor/poll",
            json!({"instance_id": instance, "wait_ms": 2000}),
        )
        .await;
        assert_eq!(status, 200, "{reply}");
        if let Some(item) = reply["work"].as_array().and_then(|work| work.first()) {
            break item.clone();
        }
    };
    let lease = json!({
        "attempt_id": work["attempt_id"],
        "lease_epoch": work["lease_epoch"],
        "runner_instance": instance,
    });
    let with = |extra: Value| {
        let mut report = lease.clone();
        report
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        report
    };
    let (status, _) = post("/v1/executor/reports", with(json!({"type": "started"}))).await;
    assert_eq!(status, 200);
    let upload = |sha256: String, bytes: &'static [u8]| {
        let url = ingress.url(&format!(
            "/v1/executor/outputs/{}/notes.txt?lease_epoch={}&runner_instance={instance}&sha256={sha256}",
            work["attempt_id"].as_str().unwrap(),
            work["lease_epoch"]
        ));
        async move {
            call(
                reqwest::Method::PUT,
                &url,
                Some(INGRESS_KEY),
                Some("py-http"),
                &[],
                Some(bytes.to_vec()),
            )
            .await
        }
    };
    // A body that is not what its digest says is not stored.
    let (status, body) = upload("0".repeat(64), b"notes\n").await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["problems"][0]["path"], "sha256", "{body}");
    let (status, stored) = upload(execplane::artifacts::sha256_hex(b"notes\n"), b"notes\n").await;
    assert_eq!(status, 201, "{stored}");
    // An output never uploaded cannot be listed.
    let mut forged = stored.clone();
    let forged_sha = "1".repeat(64);
    forged["name"] = json!("other.txt");
    forged["sha256"] = json!(forged_sha);
    forged["key"] = json!(format!(
        "outputs/{}/{forged_sha}/other.txt",
        work["attempt_id"].as_str().unwrap()
    ));
    let finished = |result: Value, outputs: Value| {
        with(
            json!({"type": "finished", "outcome": "succeeded", "result": result, "outputs": outputs}),
        )
    };
    let (status, body) = post(
        "/v1/executor/reports",
        finished(json!({}), json!([stored, forged])),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["problems"][0]["path"], "outputs[1]", "{body}");
    // A result of another shape: forwarded as a runner_error naming it.
    let (status, reply) = post(
        "/v1/executor/reports",
        finished(json!({"latency_ms": "fast"}), json!([stored])),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    assert!(
        reply["result_refused"]
            .as_str()
            .is_some_and(|problem| !problem.is_empty()),
        "{reply}"
    );
    let attempts = pipeline.wait_done(&spec.job_id, WAIT).await;
    assert_eq!(attempts[0].1, "failed", "{attempts:?}");
    let (category, message, outputs): (String, String, Value) = sqlx::query_as(
        "SELECT failure_category, message, outputs FROM attempts WHERE attempt_id = $1",
    )
    .bind(attempts[0].0)
    .fetch_one(&pipeline.pool)
    .await
    .unwrap();
    assert_eq!(category, "runner_error");
    assert!(
        message.contains("does not match its documented type"),
        "{message}"
    );
    assert_eq!(outputs[0]["name"], "notes.txt", "{outputs}");
}

/// Reads SSE events until the terminal one: (seq, kind, received at).
async fn follow(url: &str, last_event_id: Option<&str>) -> Vec<(u64, String, Instant)> {
    let mut request = reqwest::Client::new()
        .get(url)
        .header("authorization", format!("Bearer {API_KEY}"))
        .header("accept", "text/event-stream");
    if let Some(id) = last_event_id {
        request = request.header("last-event-id", id);
    }
    let mut response = request.send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let mut buffer = String::new();
    let mut events = Vec::new();
    let deadline = Instant::now() + WAIT;
    while let Ok(Ok(Some(chunk))) = tokio::time::timeout_at(deadline.into(), response.chunk()).await
    {
        buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            let (mut id, mut kind) = (None, None);
            for line in block.lines() {
                if let Some(value) = line.strip_prefix("id:") {
                    id = value.trim().parse::<u64>().ok();
                } else if let Some(value) = line.strip_prefix("event:") {
                    kind = Some(value.trim().to_owned());
                }
            }
            if let (Some(id), Some(kind)) = (id, kind) {
                events.push((id, kind, Instant::now()));
            }
        }
    }
    events
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn the_execute_api_runs_a_job_streams_its_events_and_cancels(pool: PgPool) {
    let mut pipeline = Pipeline::new(&pool).await;
    pipeline.with_example_policy();
    let ingress = start(&mut pipeline, &["serve"], &[]).await;
    pipeline.wait_runners(1).await;
    let before = metrics(&ingress).await;

    // Invalid: 400 naming every problem, nothing produced.
    let (status, body) = call(
        reqwest::Method::POST,
        &ingress.url("/v1/jobs"),
        Some(API_KEY),
        None,
        &[],
        Some(
            br#"{"operation": "verify.tcp.connect", "inputs": {"host": "h", "port": "x"}}"#
                .to_vec(),
        ),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    let paths: Vec<&str> = body["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|problem| problem["path"].as_str().unwrap())
        .collect();
    assert!(
        paths.contains(&"command_id") && paths.contains(&"inputs.port"),
        "{paths:?}"
    );
    // A job that takes 1.5 s, so that its events arrive while it runs.
    let spec = job(
        "verify.custom.probe",
        json!({"probe_id": "sleep", "args": {"seconds": 1.5}}),
        json!({}),
    );
    let (status, body) = call(
        reqwest::Method::POST,
        &ingress.url("/v1/jobs"),
        Some(API_KEY),
        None,
        &[],
        Some(serde_json::to_vec(&spec).unwrap()),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["job_id"], spec.job_id);
    assert_eq!(body["command_id"], spec.command_id.to_string());
    let job_url = ingress.url(&format!("/v1/jobs/{}", spec.job_id));
    let deadline = Instant::now() + WAIT;
    let attempt_id = loop {
        let (status, body) = call(
            reqwest::Method::GET,
            &job_url,
            Some(API_KEY),
            None,
            &[],
            None,
        )
        .await;
        if let Some(id) = body["attempts"][0]["attempt_id"]
            .as_str()
            .filter(|_| status == 200)
        {
            break id.to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "no attempt for the job: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let events_url = ingress.url(&format!("/v1/attempts/{attempt_id}/events"));
    let streamed = follow(&events_url, None).await;
    // The probe reports progress while it sleeps.
    let kinds: Vec<&str> = streamed.iter().map(|(_, kind, _)| kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "created",
            "lease_granted",
            "started",
            "progress",
            "finished"
        ],
        "{streamed:?}"
    );
    let seqs: Vec<u64> = streamed.iter().map(|(seq, _, _)| *seq).collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5]);
    // Live, not replayed at the end: `started` arrived well before `finished`.
    let gap = streamed[4].2.duration_since(streamed[2].2);
    assert!(
        gap >= Duration::from_millis(1000),
        "started → finished arrived {gap:?} apart"
    );
    // Resuming after seq 2 gives the rest.
    let resumed = follow(&events_url, Some("2")).await;
    assert_eq!(
        resumed.iter().map(|(seq, _, _)| *seq).collect::<Vec<_>>(),
        [3, 4, 5]
    );

    let (status, body) = call(
        reqwest::Method::GET,
        &ingress.url(&format!("/v1/attempts/{attempt_id}")),
        Some(API_KEY),
        None,
        &[],
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body["attempt"]["status"], "succeeded");
    assert_eq!(body["timeline"].as_array().unwrap().len(), 5);
    assert_eq!(body["timeline"][4]["kind"], "finished");
    assert_eq!(body["timeline_complete"], true);
    let (status, body) = call(
        reqwest::Method::GET,
        &events_url,
        Some(API_KEY),
        None,
        &[],
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body.as_array().unwrap().len(), 5);
    assert_eq!(body[0]["body"]["type"], "created");
    // Paged: the events after a seq.
    let (status, body) = call(
        reqwest::Method::GET,
        &format!("{events_url}?after=3"),
        Some(API_KEY),
        None,
        &[],
        None,
    )
    .await;
    assert_eq!(status, 200);
    let seqs: Vec<u64> = body
        .as_array()
        .unwrap()
        .iter()
        .map(|event| event["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [4, 5], "{body}");

    // An approval names a plan: a probe's attempt has none to approve, a
    // malformed digest is refused with its path, nothing is produced.
    let approve_url = ingress.url(&format!("/v1/attempts/{attempt_id}/approve"));
    let digest = format!("sha256:{}", "ab".repeat(32));
    for (body, expected) in [
        // One of team-a's approvers in the example policy, but no plan.
        (json!({"plan_digest": digest, "approved_by": "alice"}), 409),
        (
            json!({"plan_digest": digest, "approved_by": "mallory"}),
            403,
        ),
        (
            json!({"plan_digest": "sha256:nope", "approved_by": "alice"}),
            400,
        ),
        // No approver named: the shared key approves as `api-key`, which
        // the policy does not name.
        (json!({"plan_digest": digest}), 403),
    ] {
        let (status, reply) = call(
            reqwest::Method::POST,
            &approve_url,
            Some(API_KEY),
            None,
            &[],
            Some(serde_json::to_vec(&body).unwrap()),
        )
        .await;
        assert_eq!(status, expected, "{body}: {reply}");
    }

    // Cancel a hanging probe through the API; a second cancel is a conflict.
    let hang = job(
        "verify.custom.probe",
        json!({"probe_id": "hang"}),
        json!({}),
    );
    let (status, _) = call(
        reqwest::Method::POST,
        &ingress.url("/v1/jobs"),
        Some(API_KEY),
        None,
        &[],
        Some(serde_json::to_vec(&hang).unwrap()),
    )
    .await;
    assert_eq!(status, 202);
    let hanging = pipeline.wait_status(&hang.job_id, "running", WAIT).await;
    let cancel_url = ingress.url(&format!("/v1/attempts/{hanging}/cancel"));
    let (status, body) = call(
        reqwest::Method::POST,
        &cancel_url,
        Some(API_KEY),
        None,
        &[],
        Some(br#"{"reason": "operator changed their mind"}"#.to_vec()),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    pipeline.wait_status(&hang.job_id, "cancelled", WAIT).await;
    let (status, body) = call(
        reqwest::Method::POST,
        &cancel_url,
        Some(API_KEY),
        None,
        &[],
        None,
    )
    .await;
    assert_eq!(status, 409, "{body}");
    let (status, _) = call(
        reqwest::Method::GET,
        &ingress.url("/v1/attempts/00000000-0000-0000-0000-000000000000"),
        Some(API_KEY),
        None,
        &[],
        None,
    )
    .await;
    assert_eq!(status, 404);

    // The counters moved with the attempts.
    let after = metrics(&ingress).await;
    let ended = |samples| prometheus::sum(samples, "execplane_attempts_ended_total", &[]);
    assert!(
        ended(&after) >= ended(&before) + 2.0,
        "attempts ended did not move"
    );
    assert!(
        prometheus::sum(
            &after,
            "execplane_ingress_requests_total",
            &["route=\"/v1/jobs\"", "status=\"202\""]
        ) >= 2.0
    );
    assert!(
        prometheus::sum(
            &after,
            "execplane_ingress_requests_total",
            &["route=\"/v1/jobs\"", "status=\"400\""]
        ) >= 1.0
    );
    assert!(prometheus::sum(&after, "execplane_lease_grants_total", &[]) >= 2.0);
    assert!(after
        .keys()
        .any(|key| key.starts_with("execplane_intake_transaction_seconds")));
}

/// Reads TCP frames until the connection closes (or `wait` passes):
/// the replies received, and whether it closed.
fn tcp_replies(stream: &mut TcpStream, wait: Duration) -> (Vec<Value>, bool) {
    stream.set_read_timeout(Some(wait)).unwrap();
    let mut bytes = Vec::new();
    let mut buffer = [0u8; 4096];
    let closed = loop {
        match stream.read(&mut buffer) {
            Ok(0) => break true,
            Ok(read) => bytes.extend_from_slice(&buffer[..read]),
            Err(error)
                if matches!(
                    error.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                break false
            }
            Err(_) => break true,
        }
    };
    let mut replies = Vec::new();
    let mut rest = &bytes[..];
    while rest.len() >= 4 {
        let size = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        if rest.len() < 4 + size {
            break;
        }
        replies.push(serde_json::from_slice(&rest[4..4 + size]).unwrap());
        rest = &rest[4 + size..];
    }
    (replies, closed)
}

fn frame(value: &Value) -> Vec<u8> {
    let payload = serde_json::to_vec(value).unwrap();
    let mut bytes = (payload.len() as u32).to_be_bytes().to_vec();
    bytes.extend(payload);
    bytes
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn every_refusal_is_exact_and_nothing_reaches_kafka_or_postgres(pool: PgPool) {
    let mut pipeline = Pipeline::new(&pool).await;
    let open = start(
        &mut pipeline,
        &["ingress"],
        &[
            ("EXECPLANE_INGRESS_MAX_BODY", "2048"),
            ("EXECPLANE_INGRESS_MAX_FRAME", "2048"),
            ("EXECPLANE_INGRESS_READ_TIMEOUT", "1s"),
            ("EXECPLANE_INGRESS_MAX_CONNECTIONS_PER_PEER", "6"),
        ],
    )
    .await;
    catalog(&pipeline, &["enabled-exec", "--types", "verification"]);
    catalog(
        &pipeline,
        &["disabled-exec", "--types", "verification", "--disabled"],
    );
    catalog(&pipeline, &["ssh-only", "--types", "ssh"]);
    let register = open.url("/v1/executor/register");
    let good = Some(br#"{"runner_type": "verification"}"#.to_vec());
    let post = reqwest::Method::POST;

    // Key missing or wrong: 401, with no detail of why (the same answer).
    let unauthorized = json!({"error": "unauthorized"});
    for key in [None, Some("wrong-key-wrong-key-wrong"), Some(API_KEY)] {
        let (status, body) = call(
            post.clone(),
            &register,
            key,
            Some("enabled-exec"),
            &[],
            good.clone(),
        )
        .await;
        assert_eq!(
            (status, &body),
            (401, &unauthorized),
            "executor route, key {key:?}"
        );
    }
    for key in [None, Some(INGRESS_KEY)] {
        let (status, body) = call(
            post.clone(),
            &open.url("/v1/jobs"),
            key,
            None,
            &[],
            good.clone(),
        )
        .await;
        assert_eq!(
            (status, &body),
            (401, &unauthorized),
            "execute API, key {key:?}"
        );
    }

    // Unknown, disabled, or outside its types: 403 and an audit row.
    for (executor, reason) in [
        ("nobody", "unknown_executor"),
        ("disabled-exec", "executor_disabled"),
        ("ssh-only", "runner_type_not_allowed"),
    ] {
        let (status, body) = call(
            post.clone(),
            &register,
            Some(INGRESS_KEY),
            Some(executor),
            &[],
            good.clone(),
        )
        .await;
        assert_eq!(
            (status, body),
            (403, json!({"error": "forbidden", "reason": reason})),
            "{executor}"
        );
    }
    let audit: Vec<(String, String, String)> =
        sqlx::query_as("SELECT executor_id, reason, host(client) FROM ingress_audit ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        audit,
        [
            (
                "nobody".into(),
                "unknown_executor".into(),
                "127.0.0.1".into()
            ),
            (
                "disabled-exec".into(),
                "executor_disabled".into(),
                "127.0.0.1".into()
            ),
            (
                "ssh-only".into(),
                "runner_type_not_allowed".into(),
                "127.0.0.1".into()
            ),
        ]
    );

    // Too large: 413 on HTTP.
    let huge = format!(
        r#"{{"runner_type": "verification", "pool": {{"x": "{}"}}}}"#,
        "y".repeat(4096)
    );
    let (status, body) = call(
        post.clone(),
        &register,
        Some(INGRESS_KEY),
        Some("enabled-exec"),
        &[],
        Some(huge.clone().into_bytes()),
    )
    .await;
    assert_eq!((status, body), (413, json!({"error": "too_large"})));
    let (status, _) = call(
        post.clone(),
        &open.url("/v1/jobs"),
        Some(API_KEY),
        None,
        &[],
        Some(huge.into_bytes()),
    )
    .await;
    assert_eq!(status, 413);

    // Malformed JSON: 400 naming the field path.
    for (route, body, path) in [
        (
            "/v1/executor/register",
            r#"{"runner_type": "verification", "capacity": "x"}"#,
            "capacity",
        ),
        (
            "/v1/executor/register",
            r#"{"runner_type": "teleport"}"#,
            "runner_type",
        ),
        (
            "/v1/executor/register",
            r#"{"runner_type": "verification", "operations": ["verify.tcp.connect", "helm.install"]}"#,
            "operations[1]",
        ),
        (
            "/v1/executor/reports",
            r#"{"attempt_id": "00000000-0000-0000-0000-000000000001", "lease_epoch": "two", "runner_instance": "enabled-exec.1", "type": "started"}"#,
            "lease_epoch",
        ),
        (
            "/v1/executor/reports",
            r#"{"attempt_id": "00000000-0000-0000-0000-000000000001", "lease_epoch": 1, "runner_instance": "enabled-exec.1", "type": "finished", "outcome": "failed"}"#,
            "category",
        ),
        (
            "/v1/executor/register",
            r#"{"runner_type": "#,
            "runner_type",
        ),
    ] {
        let (status, reply) = call(
            post.clone(),
            &open.url(route),
            Some(INGRESS_KEY),
            Some("enabled-exec"),
            &[],
            Some(body.as_bytes().to_vec()),
        )
        .await;
        assert_eq!(status, 400, "{route} {body}: {reply}");
        assert_eq!(reply["error"], "invalid_request");
        assert_eq!(reply["problems"][0]["path"], path, "{body}: {reply}");
    }

    // TCP: garbage, an oversized frame, a frame that is not JSON, a bad key,
    // a request before auth: each gets one error frame and is closed.
    let tcp_address = format!("127.0.0.1:{}", open.tcp);
    let auth =
        json!({"op": "auth", "id": 1, "body": {"key": INGRESS_KEY, "executor_id": "enabled-exec"}});
    let mut cases: Vec<(&str, Vec<u8>, Option<u16>)> = vec![
        (
            "http on the tcp port",
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
            Some(413),
        ),
        (
            "oversized frame",
            100_000u32.to_be_bytes().to_vec(),
            Some(413),
        ),
        (
            "not json",
            frame(&json!(null))
                .into_iter()
                .take(4)
                .chain(*b"nul!")
                .collect(),
            Some(400),
        ),
        (
            "wrong key",
            frame(
                &json!({"op": "auth", "id": 1, "body": {"key": "nope", "executor_id": "enabled-exec"}}),
            ),
            Some(401),
        ),
        (
            "no auth first",
            frame(&json!({"op": "poll", "id": 1, "body": {"instance_id": "x"}})),
            Some(401),
        ),
    ];
    cases.push(("empty frame", vec![0, 0, 0, 0], Some(400)));
    for (case, bytes, status) in cases {
        let mut stream = TcpStream::connect(&tcp_address).unwrap();
        stream.write_all(&bytes).unwrap();
        let (replies, closed) = tcp_replies(&mut stream, Duration::from_secs(5));
        assert!(closed, "{case}: connection left open");
        assert_eq!(replies.len(), 1, "{case}: {replies:?}");
        assert_eq!(replies[0]["ok"], false, "{case}");
        assert_eq!(
            replies[0]["status"].as_u64().map(|s| s as u16),
            status,
            "{case}: {replies:?}"
        );
    }
    // A half-open connection (half a header, then silence) is closed after
    // the read timeout; meanwhile the server serves others.
    let mut half_open = TcpStream::connect(&tcp_address).unwrap();
    half_open.write_all(&[0, 0]).unwrap();
    let mut other = TcpStream::connect(&tcp_address).unwrap();
    other.write_all(&frame(&auth)).unwrap();
    other
        .write_all(&frame(
            &json!({"op": "register", "id": 2, "body": {"runner_type": "teleport"}}),
        ))
        .unwrap();
    let (replies, closed) = tcp_replies(&mut other, Duration::from_millis(500));
    assert!(!closed, "a good client stays connected");
    assert_eq!(replies.len(), 2, "{replies:?}");
    assert_eq!(replies[0]["ok"], true);
    assert_eq!(
        replies[1]["status"], 400,
        "bad body: an error frame, connection kept"
    );
    assert_eq!(
        replies[1]["error"]["problems"][0]["path"],
        "body.runner_type"
    );
    let started = Instant::now();
    let (_, closed) = tcp_replies(&mut half_open, Duration::from_secs(5));
    assert!(
        closed && started.elapsed() < Duration::from_secs(4),
        "half-open connection closed after the read timeout"
    );
    drop(other);

    // Per-peer connection limit: over it, a connection is closed at once.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let held: Vec<TcpStream> = (0..6)
        .map(|_| TcpStream::connect(&tcp_address).unwrap())
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut over = TcpStream::connect(&tcp_address).unwrap();
    let (_, closed) = tcp_replies(&mut over, Duration::from_secs(3));
    assert!(closed, "a connection over the per-peer limit is closed");
    drop(held);
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Allowlist: a peer outside it gets 403; X-Forwarded-For is ignored
    // unless trust proxy is on and the peer is a trusted proxy.
    let (status, _) = call(
        reqwest::Method::GET,
        &open.url("/healthz"),
        None,
        None,
        &[("x-forwarded-for", "10.9.9.9")],
        None,
    )
    .await;
    assert_eq!(
        status, 200,
        "spoofed XFF ignored: still 127.0.0.1, which is allowed"
    );
    let closed_door = start(
        &mut pipeline,
        &["ingress"],
        &[("EXECPLANE_INGRESS_ALLOW_CIDRS", "10.9.9.9/32")],
    )
    .await;
    for forwarded in [None, Some("10.9.9.9")] {
        let headers: Vec<(&str, &str)> = forwarded
            .map(|value| ("x-forwarded-for", value))
            .into_iter()
            .collect();
        let (status, body) = call(
            post.clone(),
            &closed_door.url("/v1/executor/register"),
            Some(INGRESS_KEY),
            Some("enabled-exec"),
            &headers,
            good.clone(),
        )
        .await;
        assert_eq!(
            (status, body),
            (403, json!({"error": "forbidden"})),
            "XFF {forwarded:?} with trust proxy off"
        );
    }
    let mut stream = TcpStream::connect(format!("127.0.0.1:{}", closed_door.tcp)).unwrap();
    let (replies, closed) = tcp_replies(&mut stream, Duration::from_secs(3));
    assert!(
        closed && replies.len() == 1 && replies[0]["status"] == 403,
        "{replies:?}"
    );
    // Behind named proxies, and behind one the seed's `TRUST_PROXY=true`
    // alone takes every peer for.
    let trusted: &[(&str, &str)] = &[("EXECPLANE_INGRESS_TRUSTED_PROXIES", "127.0.0.0/8")];
    type Forwarded<'a> = &'a [(Option<&'a str>, u16)];
    let cases: [(&[(&str, &str)], Forwarded); 2] = [
        (
            trusted,
            &[
                (Some("1.2.3.4, 10.9.9.9"), 200),
                (Some("10.9.9.9, 127.0.0.5"), 200),
                (Some("10.9.9.9, 1.2.3.4"), 403),
                (Some("::ffff:10.9.9.9"), 200),
                (None, 403),
            ],
        ),
        (
            &[],
            &[
                (Some("1.2.3.4, 10.9.9.9"), 200),
                (Some("10.9.9.9, 127.0.0.5"), 403),
                (None, 403),
            ],
        ),
    ];
    for (proxies, expected) in cases {
        let mut env = vec![
            ("EXECPLANE_INGRESS_ALLOW_CIDRS", "10.9.9.9/32"),
            ("EXECPLANE_INGRESS_TRUST_PROXY", "true"),
        ];
        env.extend_from_slice(proxies);
        let proxied = start(&mut pipeline, &["ingress"], &env).await;
        for (forwarded, status) in expected {
            let headers: Vec<(&str, &str)> = forwarded
                .map(|value| ("x-forwarded-for", value))
                .into_iter()
                .collect();
            let (got, _) = call(
                reqwest::Method::GET,
                &proxied.url("/healthz"),
                None,
                None,
                &headers,
                None,
            )
            .await;
            assert_eq!(got, *status, "XFF {forwarded:?} behind proxies {proxies:?}");
        }
    }

    // None of it reached Kafka or the attempt store.
    for topic in [
        topics::COMMANDS,
        topics::RUNNER_EVENTS,
        topics::LOG_CHUNKS,
        topics::RUNNER_PRESENCE,
    ] {
        assert!(
            pipeline.consume_all(topic).await.is_empty(),
            "{topic} got a record"
        );
    }
    for table in ["attempt_events", "jobs", "outbox", "inbox"] {
        let rows: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(rows, 0, "{table}");
    }
    let refusals = metrics(&open).await;
    assert!(
        prometheus::sum(
            &refusals,
            "execplane_ingress_auth_refusals_total",
            &["reason=\"key_wrong\""]
        ) >= 2.0
    );
    assert!(
        prometheus::sum(
            &refusals,
            "execplane_ingress_auth_refusals_total",
            &["reason=\"executor_disabled\""]
        ) >= 1.0
    );
}

#[test]
fn the_ingress_refuses_to_start_without_its_keys_and_says_why() {
    let run = |env: &[(&str, &str)]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_execplane"));
        command
            .arg("ingress")
            .env_remove("EXECPLANE_INGRESS_KEY")
            .env_remove("EXECPLANE_API_KEY")
            .env(
                "EXECPLANE_DATABASE_URL",
                "postgres://nobody@127.0.0.1:1/none",
            )
            .env("EXECPLANE_LOG", "warn");
        for (key, value) in env {
            command.env(key, value);
        }
        let output = command.output().unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    // The executors' key is required; the execute API's is not (off
    // without it: `the_ingress_starts_with_the_seed_s_key_alone…`).
    let (code, stderr) = run(&[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("EXECPLANE_INGRESS_KEY (or PLUGIN_CONTROL_PLANE_KEY) is not set")
            && !stderr.contains("EXECPLANE_API_KEY"),
        "{stderr}"
    );
    // The seed's settings that mean nothing here are refused by name,
    // each with what replaces it.
    let (code, stderr) = run(&[
        ("EXECPLANE_INGRESS_KEY", INGRESS_KEY),
        ("REDIS_URL", "redis://127.0.0.1:6379"),
        ("RUNTIME_ENGINE_HOST", "engine"),
        ("FILE_SERVICE_BASE_URL", "http://files"),
    ]);
    assert_eq!(code, Some(2), "{stderr}");
    for (name, instead) in [
        ("REDIS_URL", "Postgres"),
        ("RUNTIME_ENGINE_HOST", "Kafka"),
        ("FILE_SERVICE_BASE_URL", "S3"),
    ] {
        assert!(
            stderr.contains(&format!("{name} has no meaning here")) && stderr.contains(instead),
            "{name}: {stderr}"
        );
    }
    let (code, stderr) = run(&[
        ("EXECPLANE_INGRESS_KEY", "short"),
        ("EXECPLANE_API_KEY", API_KEY),
    ]);
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("EXECPLANE_INGRESS_KEY is shorter than 16"),
        "{stderr}"
    );
    let (code, stderr) = run(&[
        ("EXECPLANE_INGRESS_KEY", API_KEY),
        ("EXECPLANE_API_KEY", API_KEY),
    ]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("are the same"), "{stderr}");
    let (code, stderr) = run(&[
        ("EXECPLANE_INGRESS_KEY", INGRESS_KEY),
        ("EXECPLANE_API_KEY", API_KEY),
        ("EXECPLANE_INGRESS_ALLOW_CIDRS", "10.0.0.0/8,bogus"),
        ("EXECPLANE_INGRESS_TRUST_PROXY", "true"),
    ]);
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("`bogus`") && !stderr.contains("error: EXECPLANE_INGRESS_TRUST"),
        "{stderr}"
    );
    assert!(
        !stderr.contains(INGRESS_KEY) && !stderr.contains(API_KEY),
        "a key was printed"
    );
}

/// The seed's settings alone start the ingress: its one key
/// (`PLUGIN_CONTROL_PLANE_KEY`) is the executors'; the execute API, which
/// has no key of its own then, stays off, whatever key is presented.
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn the_ingress_starts_with_the_seed_s_key_alone_and_its_execute_api_stays_off(pool: PgPool) {
    let mut pipeline = Pipeline::new(&pool).await;
    let (http, tcp) = (free_port().to_string(), free_port().to_string());
    pipeline.spawn(
        &["ingress"],
        &[
            ("PLUGIN_CONTROL_PLANE_KEY", INGRESS_KEY),
            ("RUNTIME_CONTROL_PLANE_HTTP_PORT", http.as_str()),
            ("RUNTIME_CONTROL_PLANE_TCP_PORT", tcp.as_str()),
            ("EXECPLANE_METRICS_ADDR", ""),
        ],
    );
    let url = |path: &str| format!("http://127.0.0.1:{http}{path}");
    let client = reqwest::Client::new();
    pipeline
        .wait("the ingress to answer", Duration::from_secs(60), || async {
            client.get(url("/healthz")).send().await.is_ok()
        })
        .await;
    catalog(&pipeline, &["seed-exec", "--types", "verification"]);
    let (status, body) = call(
        reqwest::Method::POST,
        &url("/v1/executor/register"),
        Some(INGRESS_KEY),
        Some("seed-exec"),
        &[],
        Some(br#"{"runner_type": "verification"}"#.to_vec()),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    for key in [Some(INGRESS_KEY), Some(API_KEY), Some(""), None] {
        let (status, body) = call(
            reqwest::Method::POST,
            &url("/v1/jobs"),
            key,
            None,
            &[],
            Some(b"{}".to_vec()),
        )
        .await;
        assert_eq!(status, 404, "{key:?}: {body}");
        assert!(
            body["message"]
                .as_str()
                .is_some_and(|message| message.contains("no EXECPLANE_API_KEY")),
            "{body}"
        );
    }
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn an_unsandboxed_runner_is_said_so_in_its_presence_and_in_readyz(pool: PgPool) {
    let mut pipeline = Pipeline::new(&pool).await;
    let ingress = start(&mut pipeline, &["ingress"], &[]).await;
    pipeline.spawn(&["dispatcher"], &[]);
    pipeline.spawn(&["runner", "verification"], &[]);
    pipeline.spawn(&["runner", "verification"], &[("EXECPLANE_SANDBOX", "off")]);
    pipeline.wait_runners(2).await;
    let isolation: Vec<String> =
        sqlx::query_scalar("SELECT isolation FROM runner_instances ORDER BY isolation")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(isolation, ["sandboxed", "unsandboxed"]);
    let response = reqwest::get(ingress.url("/readyz")).await.unwrap();
    assert_eq!(response.status(), 200);
    let body = response.text().await.unwrap();
    let warnings: Vec<&str> = body
        .lines()
        .filter(|line| line.starts_with("warning:"))
        .collect();
    assert_eq!(warnings.len(), 1, "{body}");
    assert!(
        warnings[0].contains("(verification) runs its tools unsandboxed"),
        "{body}"
    );
}
