//! A hostile client on the ingress (issue "found from outside"): NUL bytes,
//! forged log lines, oversized registrations and free text, audit floods,
//! connection and memory exhaustion, and event streams that would each poll
//! Postgres. Every refusal is exact; nothing reaches Kafka or the log.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::ingress::{call, catalog, start, API_KEY, INGRESS_KEY};
use common::pipeline::{job, Pipeline};
use serde_json::{json, Value};
use sqlx::PgPool;

const WAIT: Duration = Duration::from_secs(60);

fn paths(body: &Value) -> Vec<String> {
    body["problems"]
        .as_array()
        .map(|problems| {
            problems
                .iter()
                .map(|problem| problem["path"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// A TCP connection to `port` from the loopback address `from`.
fn connect_from(from: [u8; 4], port: u16) -> std::io::Result<TcpStream> {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    socket.bind(&SocketAddr::from((from, 0)).into())?;
    socket.connect(&SocketAddr::from(([127, 0, 0, 1], port)).into())?;
    Ok(socket.into())
}

/// True when the server closed the connection (read returns 0 or fails)
/// within `wait`, reading and discarding whatever it sent first.
fn closed_within(stream: &mut TcpStream, wait: Duration) -> bool {
    let deadline = Instant::now() + wait;
    let mut buffer = [0u8; 4096];
    while Instant::now() < deadline {
        stream
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        match stream.read(&mut buffer) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(error)
                if matches!(
                    error.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(_) => return true,
        }
    }
    false
}

fn frame(value: &Value) -> Vec<u8> {
    let body = serde_json::to_vec(value).unwrap();
    let mut wire = (body.len() as u32).to_be_bytes().to_vec();
    wire.extend(body);
    wire
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn hostile_input_is_refused_exactly_and_nothing_is_written(pool: PgPool) {
    let mut pipeline = Pipeline::new(&pool).await;
    let ingress = start(&mut pipeline, &["ingress"], &[]).await;
    catalog(&pipeline, &["exec-a", "--types", "verification"]);
    let post = reqwest::Method::POST;

    // A NUL in a JobSpec: 400 naming the field, nothing produced.
    let mut spec = serde_json::to_value(job(
        "verify.http.endpoint",
        json!({"url": "http://127.0.0.1:1/a"}),
        json!({}),
    ))
    .unwrap();
    spec["inputs"]["url"] = json!("http://x/a\u{0}b");
    let (status, body) = call(
        post.clone(),
        &ingress.url("/v1/jobs"),
        Some(API_KEY),
        None,
        &[],
        Some(serde_json::to_vec(&spec).unwrap()),
    )
    .await;
    assert_eq!(
        (status, paths(&body)),
        (400, vec!["inputs.url".to_owned()]),
        "{body}"
    );

    // A NUL in a report, and an instance id that would forge a log line
    // or colour one: 400 before anything else is looked at.
    let attempt = uuid::Uuid::new_v4();
    for (report, path) in [
        (
            json!({"attempt_id": attempt, "lease_epoch": 1, "runner_instance": "exec-a.x", "type": "progress", "message": "half\u{0}way"}),
            "message",
        ),
        (
            json!({"attempt_id": attempt, "lease_epoch": 1, "runner_instance": "exec-a.x\nINFO forged line", "type": "started"}),
            "runner_instance",
        ),
        (
            json!({"attempt_id": attempt, "lease_epoch": 1, "runner_instance": "exec-a.\u{1b}[31mred", "type": "started"}),
            "runner_instance",
        ),
    ] {
        let (status, body) = call(
            post.clone(),
            &ingress.url("/v1/executor/reports"),
            Some(INGRESS_KEY),
            Some("exec-a"),
            &[],
            Some(serde_json::to_vec(&report).unwrap()),
        )
        .await;
        assert_eq!(
            (status, paths(&body)),
            (400, vec![path.to_owned()]),
            "{report}: {body}"
        );
    }

    // Registrations are re-announced every second: bounded.
    let many: serde_json::Map<String, Value> = (0..33)
        .map(|index| (format!("label{index}"), json!("x")))
        .collect();
    for (register, path) in [
        (json!({"runner_type": "verification", "pool": many}), "pool"),
        (
            json!({"runner_type": "verification", "capabilities": ["c".repeat(200)]}),
            "capabilities[0]",
        ),
        (
            json!({"runner_type": "verification", "pool": {"zone": "a\u{1b}[0m"}}),
            "pool.zone",
        ),
    ] {
        let (status, body) = call(
            post.clone(),
            &ingress.url("/v1/executor/register"),
            Some(INGRESS_KEY),
            Some("exec-a"),
            &[],
            Some(serde_json::to_vec(&register).unwrap()),
        )
        .await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(paths(&body), vec![path.to_owned()], "{body}");
    }

    // Free text on a cancel is bounded (600 KB of requested_by).
    let (status, body) = call(
        post.clone(),
        &ingress.url(&format!("/v1/attempts/{attempt}/cancel")),
        Some(API_KEY),
        None,
        &[],
        Some(serde_json::to_vec(&json!({"requested_by": "p".repeat(600_000)})).unwrap()),
    )
    .await;
    assert_eq!(
        (status, paths(&body)),
        (400, vec!["requested_by".to_owned()]),
        "{body}"
    );

    // Random executor ids cannot flood the append-only audit table: one row
    // per reason and client address per ten seconds.
    let flood = Instant::now();
    for index in 0..40 {
        let (status, _) = call(
            post.clone(),
            &ingress.url("/v1/executor/register"),
            Some(INGRESS_KEY),
            Some(&format!("random-{index}")),
            &[],
            Some(br#"{"runner_type": "verification"}"#.to_vec()),
        )
        .await;
        assert_eq!(status, 403);
    }
    let audited: Vec<(String, String, String)> =
        sqlx::query_as("SELECT executor_id, reason, route FROM ingress_audit ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap();
    let windows = 1 + flood.elapsed().as_secs() as usize / 10;
    assert!(
        audited.len() <= windows,
        "{} audit rows for 40 refusals from one client in {:?}: {audited:?}",
        audited.len(),
        flood.elapsed()
    );

    // Nothing reached the log or the broker's command topic.
    for table in ["attempt_events", "jobs", "outbox", "inbox"] {
        let rows: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(rows, 0, "{table}");
    }
    assert!(pipeline
        .consume_all(execplane::contract::topics::COMMANDS)
        .await
        .is_empty());
    assert!(pipeline
        .consume_all(execplane::contract::topics::RUNNER_EVENTS)
        .await
        .is_empty());
    // No forged line and no escape sequence reached the ingress's log.
    let log = std::fs::read_to_string(pipeline.dir.join("ingress-0.log")).unwrap();
    assert!(
        !log.lines().any(|line| line.starts_with("INFO forged")),
        "{log}"
    );
    assert!(
        !log.contains("\u{1b}[31mred"),
        "the client's escape sequence reached the log"
    );
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn connections_and_partial_frames_are_bounded(pool: PgPool) {
    let mut pipeline = Pipeline::new(&pool).await;
    let ingress = start(
        &mut pipeline,
        &["ingress"],
        &[
            ("EXECPLANE_INGRESS_MAX_CONNECTIONS", "12"),
            ("EXECPLANE_INGRESS_HEADER_TIMEOUT", "1s"),
            ("EXECPLANE_INGRESS_READ_TIMEOUT", "30s"),
            ("EXECPLANE_INGRESS_PARTIAL_FRAME_BUDGET", "3000000"),
        ],
    )
    .await;

    // A global cap, whatever the source address. Strangers holding it
    // (12 idle connections from 12 loopback addresses, no key) do not keep
    // an executor out: each newcomer closes the oldest stranger, and an
    // executor that authenticates is never the one closed.
    // (TCP strangers: only the 30 s read timeout would close them.)
    let mut held: Vec<TcpStream> = (0..12)
        .map(|index| {
            let stream = connect_from([127, 0, 0, 10 + index], ingress.tcp).unwrap();
            std::thread::sleep(Duration::from_millis(20));
            stream
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let mut executor = authenticated(connect_from([127, 0, 0, 40], ingress.tcp).unwrap(), 40);
    assert!(
        closed_within(&mut held[0], Duration::from_secs(2)),
        "the oldest stranger was not closed to make room"
    );
    assert!(
        !closed_within(&mut held[1], Duration::from_millis(200)),
        "more than the oldest stranger was closed"
    );
    let flood: Vec<TcpStream> = (0..11u8)
        .map(|index| {
            let stream = connect_from([127, 0, 0, 60 + index], ingress.http).unwrap();
            std::thread::sleep(Duration::from_millis(20));
            stream
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !closed_within(&mut executor, Duration::from_millis(300)),
        "a flood of strangers closed an authenticated executor"
    );
    drop((executor, flood));
    held.clear();
    std::thread::sleep(Duration::from_millis(300));
    // When every open connection has authenticated, the next is closed at
    // accept; the cap is the process's, so TCP is refused too.
    let mut executors: Vec<TcpStream> = (0..12u8)
        .map(|index| {
            authenticated(
                connect_from([127, 0, 0, 80 + index], ingress.tcp).unwrap(),
                index,
            )
        })
        .collect();
    let mut over = connect_from([127, 0, 0, 41], ingress.http).unwrap();
    assert!(
        closed_within(&mut over, Duration::from_secs(2)),
        "a connection past a cap of authenticated ones stayed open"
    );
    let mut over_tcp = connect_from([127, 0, 0, 42], ingress.tcp).unwrap();
    assert!(
        closed_within(&mut over_tcp, Duration::from_secs(2)),
        "a TCP connection past the cap stayed open"
    );
    for stream in &mut executors {
        assert!(!closed_within(stream, Duration::from_millis(50)));
    }
    executors.clear();
    std::thread::sleep(Duration::from_millis(300));

    // A header trickled a byte at a time is cut at the header timeout
    // (the idle timeout alone would never fire: bytes keep moving).
    let mut slow = connect_from([127, 0, 0, 2], ingress.http).unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nX-Slow: ")
        .unwrap();
    let started = Instant::now();
    let mut closed = false;
    while started.elapsed() < Duration::from_secs(6) {
        if slow.write_all(b"a").is_err() || closed_within(&mut slow, Duration::from_millis(300)) {
            closed = true;
            break;
        }
    }
    assert!(closed, "a trickled header kept its connection for 6 s");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "closed after {:?}",
        started.elapsed()
    );

    // Before authenticating, a frame announcing more than the small
    // first-frame limit is refused before its body is read.
    let mut stranger = connect_from([127, 0, 0, 3], ingress.tcp).unwrap();
    stranger.write_all(&1_000_000u32.to_be_bytes()).unwrap();
    let mut reply = Vec::new();
    stranger
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let _ = stranger.read_to_end(&mut reply);
    assert!(
        String::from_utf8_lossy(&reply).contains("413"),
        "{}",
        String::from_utf8_lossy(&reply)
    );

    // Authenticated clients share one budget for unfinished frames: three
    // hold 900 KB each; the fourth would pass 3,000,000 bytes and is closed.
    let mut partial = Vec::new();
    for index in 0..4u8 {
        let mut stream = authenticated(
            connect_from([127, 0, 0, 50 + index], ingress.tcp).unwrap(),
            index,
        );
        stream.write_all(&1_000_000u32.to_be_bytes()).unwrap();
        stream.write_all(&vec![b' '; 900_000]).unwrap();
        partial.push(stream);
        std::thread::sleep(Duration::from_millis(300));
    }
    let mut fourth = partial.pop().unwrap();
    let mut reply = Vec::new();
    let _ = fourth.read_to_end(&mut reply);
    assert!(
        String::from_utf8_lossy(&reply).contains("503"),
        "{}",
        String::from_utf8_lossy(&reply)
    );
    for mut stream in partial {
        assert!(
            !closed_within(&mut stream, Duration::from_millis(200)),
            "within the budget stays open"
        );
    }
}

/// `stream` after a TCP `auth` frame with the ingress key was answered ok.
fn authenticated(mut stream: TcpStream, index: u8) -> TcpStream {
    stream
        .write_all(&frame(&json!({"op": "auth", "id": 1, "body": {"key": INGRESS_KEY, "executor_id": format!("exec-{index}")}})))
        .unwrap();
    let mut header = [0u8; 4];
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream.read_exact(&mut header).unwrap();
    let mut body = vec![0u8; u32::from_be_bytes(header) as usize];
    stream.read_exact(&mut body).unwrap();
    assert!(String::from_utf8_lossy(&body).contains("\"ok\":true"));
    stream
}

/// Transactions committed in the test's database so far.
async fn commits(pool: &PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Transactions per second the database sees over `window`.
async fn rate(pool: &PgPool, window: Duration) -> f64 {
    // The statistics are flushed about once a second: measure whole seconds.
    let before = commits(pool).await;
    tokio::time::sleep(window).await;
    let after = commits(pool).await;
    (after - before) as f64 / window.as_secs_f64()
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn event_streams_and_long_polls_share_one_poller(pool: PgPool) {
    let mut pipeline = Pipeline::new(&pool).await;
    pipeline.spawn(&["dispatcher"], &[]);
    pipeline.spawn(&["relay"], &[]);
    pipeline.spawn(&["runner", "verification"], &[]);
    let ingress = start(&mut pipeline, &["ingress"], &[]).await;
    catalog(&pipeline, &["exec-a", "--types", "verification"]);
    pipeline.wait_runners(1).await;
    // A long lease: the attempt is quiet (no extension) while measured.
    let hang = job(
        "verify.custom.probe",
        json!({"probe_id": "hang"}),
        json!({"timeouts": {"schedule_to_start": "20s", "start_to_close": "120s", "heartbeat": "60s", "schedule_to_close": "180s"}}),
    );
    pipeline.submit(&hang).await;
    let attempt = pipeline.wait_status(&hang.job_id, "running", WAIT).await;

    // 20 executor sessions (their presence is soft state the dispatcher
    // keeps): registered before the baseline, so only waiting is measured.
    let mut sessions = Vec::new();
    for _ in 0..20 {
        let (status, session) = call(
            reqwest::Method::POST,
            &ingress.url("/v1/executor/register"),
            Some(INGRESS_KEY),
            Some("exec-a"),
            &[],
            Some(br#"{"runner_type": "verification", "pool": {"nobody": "matches"}}"#.to_vec()),
        )
        .await;
        assert_eq!(status, 200, "{session}");
        sessions.push(session);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let baseline = rate(&pool, Duration::from_secs(6)).await;
    // 40 event streams on the running attempt, 20 long polls of sessions
    // that get no work.
    let client = reqwest::Client::new();
    let mut streams = Vec::new();
    for _ in 0..40 {
        let response = client
            .get(ingress.url(&format!("/v1/attempts/{attempt}/events")))
            .header("authorization", format!("Bearer {API_KEY}"))
            .header("accept", "text/event-stream")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        streams.push(response);
    }
    let mut polls = Vec::new();
    for session in &sessions {
        let url = ingress.url("/v1/executor/poll");
        let body =
            serde_json::to_vec(&json!({"instance_id": session["instance_id"], "wait_ms": 30000}))
                .unwrap();
        polls.push(tokio::spawn(async move {
            call(
                reqwest::Method::POST,
                &url,
                Some(INGRESS_KEY),
                Some("exec-a"),
                &[],
                Some(body),
            )
            .await
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let loaded = rate(&pool, Duration::from_secs(6)).await;
    eprintln!(
        "database transactions/s: {baseline:.0} before, {loaded:.0} with 40 streams and 20 polls waiting"
    );
    // Each stream and poll once ran its own query loop (about 13
    // transactions a second each: ~800/s for these 60); now one poller
    // serves them all: two queries per 150 ms tick, plus each waiter's
    // fallback read (every 15 s per stream, 5 s per poll), about 20/s in
    // all. The bound leaves room for the baseline's own noise (±20/s here).
    assert!(
        loaded - baseline < 80.0,
        "60 waiting requests added {:.0} transactions/s (baseline {baseline:.0}/s)",
        loaded - baseline
    );
    // They still see what happens: cancelling the attempt ends every stream.
    let (status, _) = call(
        reqwest::Method::POST,
        &ingress.url(&format!("/v1/attempts/{attempt}/cancel")),
        Some(API_KEY),
        None,
        &[],
        None,
    )
    .await;
    assert_eq!(status, 202);
    for response in streams {
        let text = tokio::time::timeout(WAIT, response.text())
            .await
            .unwrap()
            .unwrap();
        assert!(text.contains("event: finished"), "{text}");
    }
    for poll in polls {
        poll.abort();
    }
}

/// A tenant's Postgres probe names the server and, if it likes, a password
/// of its own; it never gets the runner's: not `PGPASSWORD` or `PGOPTIONS`
/// from the runner's environment, not `~/.pgpass`. A server of the
/// tenant's that asks for the password in clear text is sent nothing of
/// the runner's
/// (docs/SECURITY.md, "The runners' own credentials").
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_postgres_probe_never_sends_the_runner_s_own_password(pool: PgPool) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const RUNNERS_OWN: &str = "the-runner-s-own-password";
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let heard = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let heard_by_server = heard.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let heard = heard_by_server.clone();
            tokio::spawn(async move {
                let mut buffer = vec![0u8; 64 * 1024];
                // The startup message (the runner's client asks for no TLS).
                if let Ok(read) = stream.read(&mut buffer).await {
                    let said = String::from_utf8_lossy(&buffer[..read]).into_owned();
                    heard.lock().unwrap().push(said);
                }
                // AuthenticationCleartextPassword.
                let _ = stream.write_all(&[b'R', 0, 0, 0, 8, 0, 0, 0, 3]).await;
                if let Ok(read) = stream.read(&mut buffer).await {
                    let said = String::from_utf8_lossy(&buffer[..read]).into_owned();
                    heard.lock().unwrap().push(said);
                }
            });
        }
    });
    let mut pipeline = Pipeline::new(&pool).await;
    pipeline.set_env("PGPASSWORD", RUNNERS_OWN);
    pipeline.set_env("PGOPTIONS", &format!("-c execplane.leaked={RUNNERS_OWN}"));
    pipeline.start_roles(1);
    pipeline.wait_runners(1).await;
    let probe = job(
        "verify.postgres.ready",
        json!({"host": "127.0.0.1", "port": port, "database": "d", "user": "u"}),
        json!({"retry": {"max_attempts": 1}}),
    );
    pipeline.submit(&probe).await;
    pipeline.wait_done(&probe.job_id, WAIT).await;
    let heard = heard.lock().unwrap().clone();
    assert!(
        heard.iter().any(|said| said.contains("execplane-verify")),
        "the probe reached the server: {heard:?}"
    );
    assert!(
        heard.iter().all(|said| !said.contains(RUNNERS_OWN)),
        "the tenant's server was sent the runner's password: {heard:?}"
    );
}
