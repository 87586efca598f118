//! One sample of each probe kind. A sample never panics and never waits past
//! its timeout or a cancellation.

use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::net::TcpStream;

use crate::codec::LogStream;
use crate::contract::ops::{
    VerifyAttemptOutput, VerifyCustom, VerifyHttp, VerifyPostgres, VerifyTcp,
};
use crate::runner::ExecutionContext;

/// One observation.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct Sample {
    pub n: u32,
    pub at: String,
    pub latency_ms: u64,
    /// Something answered (false: refused, timed out, unresolvable).
    pub reached: bool,
    pub observed: serde_json::Value,
    pub assertions: Vec<Assertion>,
    pub error: Option<String>,
    /// The operator's policy refused: its destinations refused the
    /// connection, or the tool went over a sandbox limit.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub refused_by_policy: bool,
    /// The body as read, when the evidence keeps bodies: stored as an
    /// output, then dropped (never part of the result).
    #[serde(skip)]
    pub body: Option<Vec<u8>>,
    /// A probe program stopped at the attempt's start-to-close deadline:
    /// the attempt timed out, whatever the target did.
    #[serde(skip)]
    pub stopped_at_deadline: bool,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct Assertion {
    pub name: String,
    pub expected: serde_json::Value,
    pub actual: serde_json::Value,
    pub passed: bool,
}

impl Sample {
    pub(super) fn new(n: u32) -> Self {
        Self {
            n,
            at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            latency_ms: 0,
            reached: false,
            observed: serde_json::Value::Null,
            assertions: Vec::new(),
            error: None,
            refused_by_policy: false,
            body: None,
            stopped_at_deadline: false,
        }
    }

    pub fn passed(&self) -> bool {
        self.reached
            && self.error.is_none()
            && self.assertions.iter().all(|assertion| assertion.passed)
    }
}

fn secret_free(value: &serde_json::Value) -> Option<&str> {
    value.as_str()
}

/// Where a probe may connect and how much it may read.
#[derive(Clone, Debug)]
pub struct Bounds {
    /// The tenant's destinations (the operator's policy).
    pub destinations: crate::policy::DestinationPolicy,
    /// The most response body bytes an HTTP sample reads.
    pub max_body_bytes: usize,
}

/// Reads at most `max` bytes of a response body; true when there was more.
async fn read_capped(response: &mut reqwest::Response, max: usize) -> (Vec<u8>, bool) {
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let room = max - body.len();
                if chunk.len() > room {
                    body.extend_from_slice(&chunk[..room]);
                    return (body, true);
                }
                body.extend_from_slice(&chunk);
            }
            // An error mid-body: judge what arrived.
            Ok(None) | Err(_) => return (body, false),
        }
    }
}

pub async fn http(
    client: &reqwest::Client,
    inputs: &VerifyHttp,
    bounds: &Bounds,
    timeout: Duration,
    n: u32,
) -> Sample {
    let mut sample = Sample::new(n);
    let request = match http_request(client, inputs, bounds, timeout) {
        Ok(request) => request,
        Err(refusal) => {
            sample.refused_by_policy = refusal.by_policy;
            sample.error = Some(refusal.reason);
            return sample;
        }
    };
    let started = Instant::now();
    let response = request.send().await;
    sample.latency_ms = started.elapsed().as_millis() as u64;
    match response {
        Err(error) => {
            // The resolver's or redirect policy's refusal is in the source chain.
            let chain = crate::policy::describe_http_error(&error);
            sample.refused_by_policy =
                chain.contains("operator's") || chain.contains("refused addresses");
            sample.error = Some(chain);
        }
        Ok(mut response) => {
            sample.reached = true;
            let status = response.status().as_u16();
            // Bounded by the operator, and by the sample's timeout.
            let (bytes, truncated) = tokio::time::timeout(
                timeout.saturating_sub(started.elapsed()),
                read_capped(&mut response, bounds.max_body_bytes),
            )
            .await
            .unwrap_or_default();
            drop(response);
            sample.observed = serde_json::json!({
                "status": status,
                "body_bytes": bytes.len(),
                "body_truncated": truncated,
            });
            judge_http(
                &mut sample,
                inputs,
                status,
                &String::from_utf8_lossy(&bytes),
                truncated,
            )
            .await;
            if inputs.evidence.keep.bodies {
                sample.body = Some(bytes);
            }
        }
    }
    sample
}

/// Why a probe was not sent.
struct NotSent {
    reason: String,
    by_policy: bool,
}

/// The request a probe sends, or why it cannot be sent. The client's
/// resolver and redirect policy check every connection; a literal address in
/// the URL is checked here.
fn http_request(
    client: &reqwest::Client,
    inputs: &VerifyHttp,
    bounds: &Bounds,
    timeout: Duration,
) -> Result<reqwest::RequestBuilder, NotSent> {
    let invalid = |reason| NotSent {
        reason,
        by_policy: false,
    };
    let url =
        reqwest::Url::parse(&inputs.url).map_err(|error| invalid(format!("not a URL: {error}")))?;
    crate::policy::check_url(&bounds.destinations, &url).map_err(|reason| NotSent {
        reason,
        by_policy: true,
    })?;
    let method = reqwest::Method::from_bytes(inputs.method.to_ascii_uppercase().as_bytes())
        .map_err(|_| invalid(format!("`{}` is not an HTTP method", inputs.method)))?;
    let mut request = client.request(method, url).timeout(timeout);
    for (name, value) in &inputs.headers {
        let text = secret_free(value)
            .ok_or_else(|| invalid(format!("header `{name}` is not a string")))?;
        request = request.header(name, text);
    }
    if let Some(body) = &inputs.body {
        request = request.body(body.clone());
    }
    Ok(request)
}

/// A content contract: text it contains, a pattern it matches, a JSON
/// Schema it satisfies (each checked when given).
pub(super) struct Content<'a> {
    pub contains: Option<&'a str>,
    pub matches: Option<&'a str>,
    pub schema: Option<&'a serde_json::Value>,
    /// Values at JSON pointers (none: no check).
    pub json: Option<&'a std::collections::BTreeMap<String, serde_json::Value>>,
}

impl Content<'_> {
    /// Its checks of `content` (`truncated`: more of it was not read), as
    /// assertions named `<prefix>contains`, `<prefix>matches` and
    /// `<prefix>schema`.
    pub(super) async fn judge(
        &self,
        sample: &mut Sample,
        prefix: &str,
        content: &str,
        truncated: bool,
    ) {
        use crate::contract::ops::verification::{compile_pattern, compile_schema};
        if let Some(needle) = self.contains {
            let found = content.contains(needle);
            sample.assertions.push(Assertion {
                name: format!("{prefix}contains"),
                expected: needle.into(),
                actual: found.into(),
                passed: found,
            });
        }
        if let Some(pattern) = self.matches {
            let found = compile_pattern(pattern).map(|compiled| compiled.is_match(content));
            sample.assertions.push(Assertion {
                name: format!("{prefix}matches"),
                expected: pattern.into(),
                actual: found.clone().map_or_else(Into::into, Into::into),
                passed: found == Ok(true),
            });
        }
        if let Some(pointers) = self.json.filter(|pointers| !pointers.is_empty()) {
            // Parsed off the runtime's threads (an output may be 64 MiB);
            // what each pointer found is kept as evidence only in part.
            let (text, pointers) = (content.to_owned(), pointers.clone());
            let judged =
                tokio::task::spawn_blocking(move || json_assertions(&text, truncated, &pointers))
                    .await
                    .unwrap_or_default();
            for (pointer, expected, actual, passed) in judged {
                sample.assertions.push(Assertion {
                    name: format!("{prefix}json {pointer}"),
                    expected,
                    actual,
                    passed,
                });
            }
        }
        if let Some(schema) = self.schema {
            // Bounded (`compile_schema`), but CPU all the same: off the
            // runtime's threads.
            let (schema, text) = (schema.clone(), content.to_owned());
            let errors = tokio::task::spawn_blocking(move || {
                schema_errors(compile_schema(&schema), &text, truncated)
            })
            .await
            .unwrap_or_else(|error| vec![format!("the schema check failed: {error}")]);
            sample.assertions.push(Assertion {
                name: format!("{prefix}schema"),
                expected: format!("satisfies inputs.expect.{prefix}schema").into(),
                actual: if errors.is_empty() {
                    "satisfied".into()
                } else {
                    errors.clone().into()
                },
                passed: errors.is_empty(),
            });
        }
    }
}

/// The most of a value a JSON pointer found kept in its assertion.
const MAX_SHOWN_VALUE: usize = 256;

/// Each pointer's check of `content` read as JSON: (pointer, expected, what
/// it found, at most [`MAX_SHOWN_VALUE`] bytes of its JSON text when it is
/// not a scalar, passed).
fn json_assertions(
    content: &str,
    truncated: bool,
    pointers: &std::collections::BTreeMap<String, serde_json::Value>,
) -> Vec<(String, serde_json::Value, serde_json::Value, bool)> {
    let read: Result<serde_json::Value, String> = if truncated {
        Err(format!(
            "it is longer than the {} bytes read: it cannot be checked",
            content.len()
        ))
    } else {
        serde_json::from_str(content).map_err(|error| format!("not JSON: {error}"))
    };
    pointers
        .iter()
        .map(|(pointer, expected)| {
            let found = read
                .as_ref()
                .ok()
                .and_then(|document| document.pointer(pointer));
            let actual = match (&read, found) {
                (Err(why), _) => why.as_str().into(),
                (Ok(_), None) => "absent".into(),
                (Ok(_), Some(value)) => shown_value(value),
            };
            (
                pointer.clone(),
                expected.clone(),
                actual,
                found == Some(expected),
            )
        })
        .collect()
}

/// A found value as evidence: itself when small, else its JSON text cut.
fn shown_value(value: &serde_json::Value) -> serde_json::Value {
    let text = value.to_string();
    if text.len() <= MAX_SHOWN_VALUE {
        value.clone()
    } else {
        crate::contract::limits::shortened(&text, MAX_SHOWN_VALUE).into()
    }
}

/// Where `body` breaks the schema: the first error the validator meets,
/// with the path it is at (one: listing every error would hold as many as
/// the body has values); none when it satisfies it. A truncated body, or
/// one that is not JSON, breaks it.
fn schema_errors(
    validator: Result<jsonschema::Validator, String>,
    body: &str,
    truncated: bool,
) -> Vec<String> {
    let validator = match validator {
        Ok(validator) => validator,
        Err(error) => return vec![format!("the schema does not compile: {error}")],
    };
    if truncated {
        return vec![format!(
            "it is longer than the {} bytes read: it cannot be checked",
            body.len()
        )];
    }
    let document: serde_json::Value = match serde_json::from_str(body) {
        Ok(document) => document,
        Err(error) => return vec![format!("it is not JSON: {error}")],
    };
    match validator.validate(&document) {
        Ok(()) => Vec::new(),
        Err(error) => {
            let at = error.instance_path().to_string();
            let message = crate::contract::limits::shortened(&error.to_string(), 256);
            vec![format!("at `{at}`: {message}")]
        }
    }
}

/// The assertions of `expect` against what came back.
async fn judge_http(
    sample: &mut Sample,
    inputs: &VerifyHttp,
    status: u16,
    body: &str,
    truncated: bool,
) {
    if let Some(expected) = inputs.expect.status {
        sample.assertions.push(Assertion {
            name: "status".into(),
            expected: expected.into(),
            actual: status.into(),
            passed: status == expected,
        });
    } else {
        sample.assertions.push(Assertion {
            name: "status_2xx".into(),
            expected: "2xx".into(),
            actual: status.into(),
            passed: (200..300).contains(&status),
        });
    }
    let expect = &inputs.expect;
    let contract = Content {
        contains: expect.body_contains.as_deref(),
        matches: expect.body_matches.as_deref(),
        schema: expect.body_schema.as_ref(),
        json: Some(&expect.body_json),
    };
    contract.judge(sample, "body_", body, truncated).await;
    if let Some(max) = inputs.expect.max_latency_ms {
        sample.assertions.push(Assertion {
            name: "max_latency_ms".into(),
            expected: max.into(),
            actual: sample.latency_ms.into(),
            passed: sample.latency_ms <= max,
        });
    }
}

/// `verify.attempt.output`: the output, fetched once before the first
/// sample (`content`), judged against its contract.
pub async fn attempt_output(inputs: &VerifyAttemptOutput, content: &[u8], n: u32) -> Sample {
    let mut sample = Sample::new(n);
    sample.reached = true;
    sample.observed = serde_json::json!({
        "attempt_id": inputs.attempt_id,
        "name": inputs.name,
        "sha256": inputs.sha256,
        "bytes": content.len(),
    });
    let expect = &inputs.expect;
    let contract = Content {
        contains: expect.contains.as_deref(),
        matches: expect.matches.as_deref(),
        schema: expect.schema.as_ref(),
        json: Some(&expect.json),
    };
    contract
        .judge(&mut sample, "", &String::from_utf8_lossy(content), false)
        .await;
    sample
}

pub async fn tcp(inputs: &VerifyTcp, bounds: &Bounds, timeout: Duration, n: u32) -> Sample {
    let mut sample = Sample::new(n);
    let started = Instant::now();
    let result = tokio::time::timeout(timeout, async {
        // Connect only to what the policy allowed, as resolved once.
        let addresses =
            crate::policy::resolve_allowed(&bounds.destinations, &inputs.host, inputs.port)
                .await
                .map_err(|refusal| {
                    std::io::Error::new(std::io::ErrorKind::PermissionDenied, refusal)
                })?;
        TcpStream::connect(addresses.as_slice()).await
    })
    .await;
    sample.latency_ms = started.elapsed().as_millis() as u64;
    match result {
        Ok(Ok(mut stream)) => {
            sample.reached = true;
            sample.observed = serde_json::json!({"peer": stream.peer_addr().map(|addr| addr.to_string()).unwrap_or_default()});
            sample.assertions.push(Assertion {
                name: "connected".into(),
                expected: true.into(),
                actual: true.into(),
                passed: true,
            });
            let expect = &inputs.expect;
            if expect.banner_contains.is_some() || expect.banner_matches.is_some() {
                let left = timeout.saturating_sub(started.elapsed());
                let banner = read_banner(&mut stream, left).await;
                sample.observed["banner"] = banner.as_str().into();
                let contract = Content {
                    contains: expect.banner_contains.as_deref(),
                    matches: expect.banner_matches.as_deref(),
                    schema: None,
                    json: None,
                };
                contract.judge(&mut sample, "banner_", &banner, false).await;
            }
        }
        Ok(Err(error)) => {
            sample.refused_by_policy = error.kind() == std::io::ErrorKind::PermissionDenied;
            sample.error = Some(format!("connect {}:{}: {error}", inputs.host, inputs.port))
        }
        Err(_) => {
            sample.error = Some(format!(
                "connect {}:{}: no answer within {} ms",
                inputs.host,
                inputs.port,
                timeout.as_millis()
            ))
        }
    }
    sample
}

/// What a service says first: its first line, or what came within `wait`,
/// at most [`MAX_BANNER_BYTES`] (lossy UTF-8).
async fn read_banner(stream: &mut TcpStream, wait: Duration) -> String {
    use crate::contract::ops::verification::MAX_BANNER_BYTES;
    use tokio::io::AsyncReadExt;
    let mut banner = Vec::with_capacity(256);
    let mut chunk = [0u8; 256];
    let _ = tokio::time::timeout(wait, async {
        while banner.len() < MAX_BANNER_BYTES && !banner.contains(&b'\n') {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(read) => banner.extend_from_slice(&chunk[..read]),
            }
        }
    })
    .await;
    let end = banner
        .iter()
        .position(|&byte| byte == b'\n')
        .map_or(banner.len(), |newline| newline + 1);
    banner.truncate(end.min(MAX_BANNER_BYTES));
    String::from_utf8_lossy(&banner).trim_end().to_owned()
}

pub async fn postgres(
    inputs: &VerifyPostgres,
    bounds: &Bounds,
    timeout: Duration,
    n: u32,
) -> Sample {
    use sqlx::Connection;
    let mut sample = Sample::new(n);
    // Resolved and checked once; the connection goes to that address.
    let address = match tokio::time::timeout(
        timeout,
        crate::policy::resolve_allowed(&bounds.destinations, &inputs.host, inputs.port),
    )
    .await
    {
        Ok(Ok(addresses)) => addresses[0],
        Ok(Err(refusal)) => {
            sample.refused_by_policy =
                refusal.contains("operator's") || refusal.contains("refused addresses");
            sample.error = Some(refusal);
            return sample;
        }
        Err(_) => {
            sample.error = Some(format!(
                "cannot resolve `{}` within {} ms",
                inputs.host,
                timeout.as_millis()
            ));
            return sample;
        }
    };
    // The tenant's password or none: never the process's own (sqlx starts
    // from `PGPASSWORD` and the other `PG*` variables, and `new()` from
    // `~/.pgpass` too), which a server asking for it in clear text would
    // be sent. An empty one is what no password sends. (The relay takes
    // `PGOPTIONS`, which sqlx cannot be told to leave out, off the
    // startup message.)
    let password = match &inputs.password {
        None => "",
        Some(password) => match secret_free(password) {
            Some(text) => text,
            None => {
                sample.error = Some("the password is not a string".into());
                return sample;
            }
        },
    };
    let started = Instant::now();
    let relay = match tokio::time::timeout(timeout, BoundedRelay::to(address)).await {
        Ok(Ok(relay)) => relay,
        Ok(Err(error)) => {
            sample.latency_ms = started.elapsed().as_millis() as u64;
            sample.error = Some(unreached(inputs, Some(&sqlx::Error::Io(error)), timeout));
            return sample;
        }
        Err(_) => {
            sample.latency_ms = started.elapsed().as_millis() as u64;
            sample.error = Some(unreached(inputs, None, timeout));
            return sample;
        }
    };
    let options = relay
        .options()
        .database(&inputs.database)
        .username(&inputs.user)
        .password(password)
        .application_name("execplane-verify");
    let left = timeout.saturating_sub(started.elapsed());
    if let Some(query) = &inputs.query {
        let result = tokio::time::timeout(left, async {
            let mut connection = sqlx::PgConnection::connect_with(&options).await?;
            let answer = run_query(&mut connection, query, timeout).await;
            connection.close().await.ok();
            answer
        })
        .await;
        sample.latency_ms = started.elapsed().as_millis() as u64;
        judge_query(&mut sample, result, inputs, timeout);
        relay.end(&mut sample, inputs);
        return sample;
    }
    let result = tokio::time::timeout(left, async {
        let mut connection = sqlx::PgConnection::connect_with(&options).await?;
        let one: i32 = sqlx::query_scalar("SELECT 1")
            .fetch_one(&mut connection)
            .await?;
        connection.close().await.ok();
        Ok::<i32, sqlx::Error>(one)
    })
    .await;
    sample.latency_ms = started.elapsed().as_millis() as u64;
    judge_select(&mut sample, result, inputs, timeout);
    relay.end(&mut sample, inputs);
    sample
}

/// The longest message a Postgres probe lets the server send. sqlx
/// reserves a message's whole declared length before it reads any of it
/// (a 5-byte header may declare 4 GiB), and a probe's own messages are
/// small: a row is one column of at most [`MAX_QUERY_VALUE`] characters.
pub const MAX_POSTGRES_MESSAGE: u32 = 1024 * 1024;

/// The most bytes a Postgres probe takes from the server in all: at most
/// [`MAX_QUERY_ROWS`] rows of [`MAX_QUERY_VALUE`] characters, 4 bytes
/// each at most in UTF-8, and what the protocol adds.
///
/// [`MAX_QUERY_ROWS`]: crate::contract::ops::verification::MAX_QUERY_ROWS
pub const MAX_POSTGRES_BYTES: u64 = 64 * 1024 * 1024;

/// The text of a server's message a probe keeps.
const MAX_SERVER_MESSAGE: usize = 1024;

/// A relay to the checked address, through which sqlx connects: it passes
/// the server's messages one by one, and ends both connections at the
/// first message longer than [`MAX_POSTGRES_MESSAGE`] or past
/// [`MAX_POSTGRES_BYTES`] in all. The probe asks for no TLS, so the
/// server's stream is framed messages from its first byte. sqlx reaches
/// it through a Unix socket in a directory of the runner's own (0700):
/// no other process, a tenant's tool least of all, can take the
/// connection. It connects to the server before it is handed out, so a
/// server that cannot be reached is told as the client's own error.
/// Dropped, it stops and its directory goes.
struct BoundedRelay {
    dir: std::path::PathBuf,
    task: tokio::task::JoinHandle<()>,
    cut: std::sync::Arc<std::sync::OnceLock<String>>,
}

/// The port in the relay socket's name (`.s.PGSQL.<port>`), which is all
/// sqlx asks of a socket's directory.
const RELAY_PORT: u16 = 5432;

impl BoundedRelay {
    async fn to(server: std::net::SocketAddr) -> std::io::Result<Self> {
        use std::os::unix::fs::DirBuilderExt;
        let server = tokio::net::TcpStream::connect(server).await?;
        // Short: a socket's path is at most 107 bytes.
        let dir = std::env::temp_dir().join(format!("ep-pg-{}", uuid::Uuid::new_v4().simple()));
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        let listener =
            match tokio::net::UnixListener::bind(dir.join(format!(".s.PGSQL.{RELAY_PORT}"))) {
                Ok(listener) => listener,
                Err(error) => {
                    let _ = std::fs::remove_dir_all(&dir);
                    return Err(error);
                }
            };
        let cut: std::sync::Arc<std::sync::OnceLock<String>> = Default::default();
        let cut_by_task = cut.clone();
        let task = tokio::spawn(async move {
            let Ok((client, _)) = listener.accept().await else {
                return;
            };
            drop(listener);
            let (mut client_reads, mut client_writes) = client.into_split();
            let (server_reads, mut server_writes) = server.into_split();
            let up = async {
                pass_startup(&mut client_reads, &mut server_writes).await?;
                tokio::io::copy(&mut client_reads, &mut server_writes).await
            };
            tokio::select! {
                refused = pass_messages(server_reads, &mut client_writes) => {
                    if let Some(reason) = refused {
                        let _ = cut_by_task.set(reason);
                    }
                }
                _ = up => {}
            }
        });
        Ok(Self { dir, task, cut })
    }

    /// The options sqlx connects with: through the relay's socket, with no
    /// TLS (the relay reads the server's framing).
    fn options(&self) -> sqlx::postgres::PgConnectOptions {
        sqlx::postgres::PgConnectOptions::new_without_pgpass()
            .socket(&self.dir)
            .port(RELAY_PORT)
            .ssl_mode(sqlx::postgres::PgSslMode::Disable)
    }

    /// A sample the relay cut says why.
    fn end(self, sample: &mut Sample, inputs: &VerifyPostgres) {
        if let Some(reason) = self.cut.get() {
            sample.error = Some(format!(
                "postgres {}:{}: the server sent {reason}; the probe stopped reading",
                inputs.host, inputs.port
            ));
        }
    }
}

impl Drop for BoundedRelay {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Passes the client's startup message to the server without its
/// `options`: sqlx fills them from the runner's `PGOPTIONS`, which are not
/// the tenant's to be sent, and it can add to them but not clear them.
/// The probe sets none of its own.
async fn pass_startup(
    client: &mut tokio::net::unix::OwnedReadHalf,
    server: &mut tokio::net::tcp::OwnedWriteHalf,
) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut length = [0u8; 4];
    client.read_exact(&mut length).await?;
    let length = u32::from_be_bytes(length) as usize;
    if !(8..=64 * 1024).contains(&length) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "not a startup message",
        ));
    }
    let mut body = vec![0u8; length - 4];
    client.read_exact(&mut body).await?;
    let (protocol, parameters) = body.split_at(4);
    let mut kept = protocol.to_vec();
    // key\0value\0 … \0
    let mut fields = parameters.split(|byte| *byte == 0);
    while let Some(key) = fields.next().filter(|key| !key.is_empty()) {
        let value = fields.next().unwrap_or_default();
        if key != b"options" {
            for field in [key, value] {
                kept.extend_from_slice(field);
                kept.push(0);
            }
        }
    }
    kept.push(0);
    let length = u32::try_from(kept.len() + 4).unwrap_or(u32::MAX);
    server.write_all(&length.to_be_bytes()).await?;
    server.write_all(&kept).await
}

/// Passes the server's messages to the client while each is within
/// [`MAX_POSTGRES_MESSAGE`] and all within [`MAX_POSTGRES_BYTES`]; why it
/// stopped, if a bound stopped it (else the server or the client ended).
async fn pass_messages(
    server: tokio::net::tcp::OwnedReadHalf,
    client: &mut tokio::net::unix::OwnedWriteHalf,
) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut server = tokio::io::BufReader::with_capacity(64 * 1024, server);
    let mut carried = 0u64;
    loop {
        let mut header = [0u8; 5];
        server.read_exact(&mut header).await.ok()?;
        let length = u32::from_be_bytes([header[1], header[2], header[3], header[4]]);
        if !(4..=MAX_POSTGRES_MESSAGE).contains(&length) {
            return Some(format!(
                "a message of {length} bytes (a probe reads at most {MAX_POSTGRES_MESSAGE})"
            ));
        }
        carried += 1 + u64::from(length);
        if carried > MAX_POSTGRES_BYTES {
            return Some(format!("more than {MAX_POSTGRES_BYTES} bytes"));
        }
        client.write_all(&header).await.ok()?;
        let body = u64::from(length) - 4;
        let copied = tokio::io::copy(&mut (&mut server).take(body), client)
            .await
            .ok()?;
        if copied < body {
            return None;
        }
    }
}

/// The most of the first column's text a probe query returns.
const MAX_QUERY_VALUE: usize = 1024;

/// What a probe's query returned: how many rows (counted up to
/// [`MAX_QUERY_ROWS`]) and the first row's first column as text (at most
/// [`MAX_QUERY_VALUE`] characters; `None` without a row).
struct QueryAnswer {
    rows: u64,
    value: Option<Result<Option<String>, String>>,
}

/// Runs the tenant's query in a read-only transaction under a statement
/// timeout, and rolls it back: a probe never changes state.
async fn run_query(
    connection: &mut sqlx::PgConnection,
    query: &str,
    timeout: Duration,
) -> Result<QueryAnswer, sqlx::Error> {
    use crate::contract::ops::verification::MAX_QUERY_ROWS;
    use futures_util::TryStreamExt;
    use sqlx::{Connection, Row};
    let mut transaction = connection.begin().await?;
    sqlx::query("SET TRANSACTION READ ONLY")
        .execute(&mut *transaction)
        .await?;
    sqlx::query(&format!(
        "SET LOCAL statement_timeout = {}",
        timeout.as_millis().max(1)
    ))
    .execute(&mut *transaction)
    .await?;
    let mut answer = QueryAnswer {
        rows: 0,
        value: None,
    };
    // A subquery: only what reads (no COPY, no PREPARE TRANSACTION, no
    // data-modifying WITH), its first column cut to text of a bounded
    // size and its rows bounded, whatever it selects. The newline ends a
    // trailing `--` comment.
    let wrapped = format!(
        "SELECT left(q.c1::text, {MAX_QUERY_VALUE}) FROM ({query}\n) AS q(c1) LIMIT {MAX_QUERY_ROWS}"
    );
    {
        let mut rows = sqlx::query(&wrapped).fetch(&mut *transaction);
        while let Some(row) = rows.try_next().await? {
            if answer.rows == 0 {
                answer.value = Some(
                    row.try_get::<Option<String>, _>(0)
                        .map_err(|error| error.to_string()),
                );
            }
            answer.rows += 1;
        }
    }
    transaction.rollback().await?;
    Ok(answer)
}

/// What the query showed against `expect`: an assertion for each of its
/// checks (`query` alone when it has none), or why it did not run.
fn judge_query(
    sample: &mut Sample,
    result: Result<Result<QueryAnswer, sqlx::Error>, tokio::time::error::Elapsed>,
    inputs: &VerifyPostgres,
    timeout: Duration,
) {
    let answer = match result {
        Ok(Ok(answer)) => answer,
        Ok(Err(sqlx::Error::Database(error))) => {
            let message = crate::contract::limits::shortened(error.message(), MAX_SERVER_MESSAGE);
            sample.reached = true;
            sample.assertions.push(Assertion {
                name: "query".into(),
                expected: "it runs".into(),
                actual: message.as_str().into(),
                passed: false,
            });
            sample.error = Some(format!("postgres refused: {message}"));
            return;
        }
        Ok(Err(error)) => {
            sample.error = Some(unreached(inputs, Some(&error), timeout));
            return;
        }
        Err(_) => {
            sample.error = Some(unreached(inputs, None, timeout));
            return;
        }
    };
    sample.reached = true;
    let value = match &answer.value {
        None => serde_json::Value::from("no row"),
        Some(Ok(value)) => value.clone().map_or(serde_json::Value::Null, Into::into),
        Some(Err(why)) => why.as_str().into(),
    };
    sample.observed = serde_json::json!({"rows": answer.rows, "value": value});
    let expect = &inputs.expect;
    if let Some(expected) = &expect.value {
        let passed = matches!(&answer.value, Some(Ok(found)) if match found {
            Some(text) => expected.as_str() == Some(text.as_str()),
            None => expected.is_null(),
        });
        sample.assertions.push(Assertion {
            name: "value".into(),
            expected: expected.clone(),
            actual: value,
            passed,
        });
    }
    if let Some(expected) = expect.rows {
        sample.assertions.push(Assertion {
            name: "rows".into(),
            expected: expected.into(),
            actual: answer.rows.into(),
            passed: answer.rows == expected,
        });
    }
    if expect.value.is_none() && expect.rows.is_none() {
        sample.assertions.push(Assertion {
            name: "query".into(),
            expected: "it runs".into(),
            actual: "it ran".into(),
            passed: true,
        });
    }
}

/// What `SELECT 1` showed: ready, refused by a server that answered, or
/// not reached.
fn judge_select(
    sample: &mut Sample,
    result: Result<Result<i32, sqlx::Error>, tokio::time::error::Elapsed>,
    inputs: &VerifyPostgres,
    timeout: Duration,
) {
    match result {
        Ok(Ok(one)) => {
            sample.reached = true;
            sample.observed = serde_json::json!({"select_1": one});
            sample.assertions.push(Assertion {
                name: "select_1".into(),
                expected: 1.into(),
                actual: one.into(),
                passed: one == 1,
            });
        }
        Ok(Err(sqlx::Error::Database(error))) => {
            // The server answered and refused: reachable, not ready.
            sample.reached = true;
            sample.assertions.push(Assertion {
                name: "select_1".into(),
                expected: 1.into(),
                actual: serde_json::Value::Null,
                passed: false,
            });
            sample.error = Some(format!(
                "postgres refused: {}",
                crate::contract::limits::shortened(error.message(), MAX_SERVER_MESSAGE)
            ));
        }
        Ok(Err(error)) => sample.error = Some(unreached(inputs, Some(&error), timeout)),
        Err(_) => sample.error = Some(unreached(inputs, None, timeout)),
    }
}

/// Why a Postgres probe reached no server: the client's error, or no
/// answer within `timeout`.
fn unreached(inputs: &VerifyPostgres, error: Option<&sqlx::Error>, timeout: Duration) -> String {
    match error {
        Some(error) => format!(
            "postgres {}:{}: {}",
            inputs.host,
            inputs.port,
            crate::contract::limits::shortened(&error.to_string(), MAX_SERVER_MESSAGE)
        ),
        None => format!(
            "postgres {}:{}: no answer within {} ms",
            inputs.host,
            inputs.port,
            timeout.as_millis()
        ),
    }
}

/// The built-in probes; the caller has checked the allowlist.
pub async fn custom(inputs: &VerifyCustom, context: &ExecutionContext, n: u32) -> Sample {
    let cancel = &context.cancel;
    let mut sample = Sample::new(n);
    let started = Instant::now();
    match inputs.probe_id.as_str() {
        "echo" => echo(&inputs.args, context, &mut sample),
        "sleep" => {
            let seconds = inputs
                .args
                .get("seconds")
                .and_then(serde_json::Value::as_f64)
                .unwrap_or(1.0)
                .clamp(0.0, 86_400.0);
            tokio::select! {
                _ = cancel.cancelled() => sample.error = Some("stopped".into()),
                _ = tokio::time::sleep(Duration::from_secs_f64(seconds)) => {
                    sample.reached = true;
                    sample.observed = serde_json::json!({"slept_seconds": seconds});
                }
            }
        }
        "hang" => {
            cancel.cancelled().await;
            sample.error = Some("stopped".into());
        }
        "fail" => {
            sample.reached = true;
            sample.assertions.push(Assertion {
                name: "always".into(),
                expected: true.into(),
                actual: false.into(),
                passed: false,
            });
        }
        other => sample.error = Some(format!("probe `{other}` is not built in")),
    }
    sample.latency_ms = started.elapsed().as_millis() as u64;
    sample
}

/// The `echo` probe: writes `args.text` to its output in the forms
/// `args.forms` names (plain, base64, url, json, reversed), the plain form
/// split across two writes when `args.split`: a job that deliberately
/// leaks, to prove masking. `reversed` prints what the JobSpec never said
/// (a tool printing a key of its own), for the artifact detectors.
fn echo(args: &crate::contract::ops::Vars, context: &ExecutionContext, sample: &mut Sample) {
    use base64::Engine;
    let text = args
        .get("text")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default();
    let forms: Vec<&str> = args
        .get("forms")
        .and_then(serde_json::Value::as_array)
        .map(|forms| forms.iter().filter_map(serde_json::Value::as_str).collect())
        .unwrap_or_else(|| vec!["plain"]);
    for form in &forms {
        let line = match *form {
            "base64" => base64::engine::general_purpose::STANDARD.encode(text),
            "url" => crate::secrets::mask::percent_encode(text),
            "json" => serde_json::to_string(text).unwrap_or_default(),
            "reversed" => text.chars().rev().collect(),
            _ => text.to_owned(),
        };
        context.log(LogStream::Stdout, format!("{form}: {line}\n"));
    }
    if args.get("split").and_then(serde_json::Value::as_bool) == Some(true) {
        let middle = text
            .char_indices()
            .nth(text.chars().count() / 2)
            .map_or(0, |(i, _)| i);
        context.log(LogStream::Stdout, format!("split: {}", &text[..middle]));
        context.log(LogStream::Stdout, format!("{}\n", &text[middle..]));
    }
    context.log(
        LogStream::Stderr,
        format!("echoed {} form(s)\n", forms.len()),
    );
    context.progress(format!("echoing {text}"), None);
    sample.reached = true;
    sample.observed = serde_json::json!({"echoed": text});
}

/// Whether `id` names a probe compiled into the runner (each runs only
/// when `EXECPLANE_VERIFY_PROBES` names it; by default none does).
pub fn is_built_in(id: &str) -> bool {
    matches!(id, "echo" | "sleep" | "hang" | "fail")
}

/// An operator's probe program, `<probe dir>/<probe id>`, run as a tool
/// process: the JobSpec's `args` as JSON in `EXECPLANE_PROBE_ARGS`, the
/// sample number in `EXECPLANE_PROBE_SAMPLE`, nothing else of the runner's
/// environment; its output goes to the attempt's log. It passes when it
/// exits 0. It runs in `inputs_dir` when its input artifacts were fetched
/// there (the sandbox shows a tool its own directory only).
pub async fn program(
    dir: &std::path::Path,
    inputs: &VerifyCustom,
    context: &ExecutionContext,
    n: u32,
    inputs_dir: Option<&crate::runner::tool::Workdir>,
) -> Sample {
    use crate::runner::tool::{self, ToolCommand, Workdir};
    let mut sample = Sample::new(n);
    let started = Instant::now();
    let id = inputs.probe_id.as_str();
    if id.is_empty() || id.starts_with('.') || id.contains('/') {
        sample.error = Some(format!("probe id `{id}` is not a file name"));
        return sample;
    }
    let own;
    let workdir = match inputs_dir {
        Some(workdir) => workdir,
        None => match Workdir::for_tools(context.tools()) {
            Ok(workdir) => {
                own = workdir;
                &own
            }
            Err(error) => {
                sample.error = Some(format!("no working directory for the probe: {error}"));
                return sample;
            }
        },
    };
    let args = match serde_json::to_string(&inputs.args) {
        Ok(args) => args,
        Err(error) => {
            sample.error = Some(format!(
                "inputs.args cannot be passed to the probe: {error}"
            ));
            return sample;
        }
    };
    // Files the probe leaves here become the attempt's output artifacts.
    let outputs = workdir.path().join(format!("outputs-{n}"));
    if let Err(error) = std::fs::create_dir(&outputs) {
        sample.error = Some(format!("no output directory for the probe: {error}"));
        return sample;
    }
    let command = ToolCommand::new(dir.join(id))
        .base_env(workdir)
        .env("EXECPLANE_PROBE_ARGS", args)
        .env("EXECPLANE_PROBE_SAMPLE", n.to_string())
        .env("EXECPLANE_OUTPUT_DIR", outputs.display().to_string());
    match tool::run(context, workdir, command).await {
        Ok(exit) if exit.limit.is_some() => {
            // The operator's limits stopped it: the policy's word, not the
            // target's.
            sample.error = exit.limit.map(|limit| limit.to_string());
            sample.refused_by_policy = true;
        }
        Ok(exit) => judge_exit(&exit, &mut sample),
        Err(error) => sample.error = Some(error.to_string()),
    }
    store_outputs(context, &outputs, &mut sample).await;
    sample.latency_ms = started.elapsed().as_millis() as u64;
    sample
}

/// What a probe program's exit shows: its code the one assertion (0
/// passes), or why it has none.
fn judge_exit(exit: &crate::runner::tool::ToolExit, sample: &mut Sample) {
    match serde_json::to_value(exit) {
        Ok(observed) => sample.observed = observed,
        Err(error) => {
            sample.error = Some(format!("the probe's exit cannot be recorded: {error}"));
            return;
        }
    }
    if let Some(cause) = exit.stopped {
        sample.stopped_at_deadline = cause == crate::runner::tool::StopCause::Deadline;
        sample.error = Some(match cause {
            crate::runner::tool::StopCause::Stopped => "stopped".into(),
            crate::runner::tool::StopCause::Deadline => {
                "stopped at the start-to-close deadline".into()
            }
        });
    } else if let Some(code) = exit.code {
        sample.reached = true;
        sample.assertions.push(Assertion {
            name: "exit_code".into(),
            expected: 0.into(),
            actual: code.into(),
            passed: code == 0,
        });
    } else {
        sample.error = Some(format!(
            "the probe ended by signal {}",
            exit.signal.unwrap_or_default()
        ));
    }
}

/// Stores every regular file the probe left in its output directory as
/// an evidence artifact of the attempt; one that cannot be stored fails
/// the sample's `outputs_stored` assertion, naming why.
async fn store_outputs(context: &ExecutionContext, dir: &std::path::Path, sample: &mut Sample) {
    let mut refused = Vec::new();
    let mut stored = Vec::new();
    match tokio::fs::read_dir(dir).await {
        Ok(mut entries) => {
            while let Ok(Some(entry)) = entries.next_entry().await {
                let name = entry.file_name().to_string_lossy().into_owned();
                match context
                    .store_output(
                        &entry.path(),
                        &name,
                        crate::contract::RetentionClass::Evidence,
                    )
                    .await
                {
                    Ok(output) => stored.push(output.name),
                    Err(error) => refused.push(error.to_string()),
                }
            }
        }
        // The probe removed it: it left no output.
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        // Swapped for a link, say, which the working directory's mount
        // never follows for the runner.
        Err(error) => refused.push(format!("the output directory: {error}")),
    }
    if !refused.is_empty() {
        refused.sort();
        sample.assertions.push(Assertion {
            name: "outputs_stored".into(),
            expected: serde_json::json!([]),
            actual: serde_json::json!(refused),
            passed: false,
        });
    }
    if !stored.is_empty() {
        stored.sort();
        if let Some(observed) = sample.observed.as_object_mut() {
            observed.insert("outputs".into(), serde_json::json!(stored));
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::policy::OperatorPolicy;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// The defaults, but the tests' servers listen on loopback.
    const LOOPBACK: &str = "[defaults.destinations]\nallow_private = [\"127.0.0.0/8\"]\n";

    fn bounds(policy: &str, max_body_bytes: usize) -> Bounds {
        Bounds {
            destinations: OperatorPolicy::from_toml(policy)
                .unwrap()
                .tenant("team-a")
                .destinations
                .clone(),
            max_body_bytes,
        }
    }

    /// A server that says it is Postgres and then sends one message as
    /// long as it likes: the probe refuses it by its declared length, not
    /// after sqlx has reserved and read it (sqlx holds a message whole).
    #[tokio::test]
    async fn a_postgres_server_s_endless_message_is_cut_at_the_probe_s_bound() {
        const OFFERED: usize = 128 * 1024 * 1024;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut buffer = [0u8; 4096];
            // The startup message (this build's client asks for no TLS).
            let _ = stream.read(&mut buffer).await;
            let mut message = vec![b'E'];
            // A length sqlx would reserve before reading any of it.
            message.extend_from_slice(&(u32::MAX - 16).to_be_bytes());
            let mut sent = 0;
            if stream.write_all(&message).await.is_err() {
                return sent;
            }
            let chunk = vec![b'x'; 1024 * 1024];
            while sent < OFFERED {
                if stream.write_all(&chunk).await.is_err() {
                    break;
                }
                sent += chunk.len();
            }
            sent
        });
        let inputs: VerifyPostgres = serde_json::from_value(serde_json::json!({
            "host": "127.0.0.1", "port": port, "database": "d", "user": "u"
        }))
        .unwrap();
        let sample = postgres(&inputs, &bounds(LOOPBACK, 1024), Duration::from_secs(30), 1).await;
        let sent = server.await.unwrap();
        assert!(
            sent <= MAX_POSTGRES_BYTES as usize + 8 * 1024 * 1024,
            "the probe read {sent} bytes of one message"
        );
        let error = sample.error.unwrap_or_default();
        assert!(error.contains("a message of 4294967279 bytes"), "{error}");
    }

    /// A loopback server answering every request with `response`.
    /// [`serve`] of a 200 with `body`.
    pub(in crate::runners::verification) async fn serve_ok(body: &str) -> u16 {
        let length = body.len();
        serve(
            format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {length}\r\nconnection: close\r\n\r\n{body}"
            )
            .into_bytes(),
        )
        .await
    }

    async fn serve(response: Vec<u8>) -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let response = response.clone();
                tokio::spawn(async move {
                    let mut buffer = [0u8; 4096];
                    let _ = stream.read(&mut buffer).await;
                    let _ = stream.write_all(&response).await;
                });
            }
        });
        port
    }

    fn http(url: String, expect: serde_json::Value) -> VerifyHttp {
        serde_json::from_value(serde_json::json!({"url": url, "expect": expect})).unwrap()
    }

    #[tokio::test]
    async fn http_assertions_judge_status_body_and_a_capped_body() {
        let body = "x".repeat(5000) + "needle";
        let port = serve_ok(&body).await;
        let url = format!("http://127.0.0.1:{port}/");
        let client = reqwest::Client::new();
        let open = bounds(LOOPBACK, 1 << 20);
        let sample = http(
            url.clone(),
            serde_json::json!({"status": 200, "body_contains": "needle"}),
        );
        let passed = super::http(&client, &sample, &open, Duration::from_secs(5), 1).await;
        assert!(passed.passed(), "{passed:?}");
        assert_eq!(passed.observed["body_truncated"], false);
        // The needle is past the cap: the capped body does not hold it.
        let capped = super::http(
            &client,
            &sample,
            &bounds(LOOPBACK, 1000),
            Duration::from_secs(5),
            1,
        )
        .await;
        assert!(!capped.passed());
        assert_eq!(capped.observed["body_bytes"], 1000);
        assert_eq!(capped.observed["body_truncated"], true);
        // A wrong status is an assertion that failed, not an error.
        let wrong = http(url, serde_json::json!({"status": 204}));
        let failed = super::http(&client, &wrong, &open, Duration::from_secs(5), 1).await;
        assert!(failed.reached && !failed.passed() && failed.error.is_none());
        assert_eq!(failed.assertions[0].name, "status");
    }

    #[tokio::test]
    async fn a_body_is_judged_by_its_pattern_and_its_schema() {
        let body = r#"{"status": "ok", "replicas": 3, "items": ["a", "b"]}"#;
        let port = serve_ok(body).await;
        let url = format!("http://127.0.0.1:{port}/");
        let client = reqwest::Client::new();
        let open = bounds(LOOPBACK, 1 << 20);
        let schema = serde_json::json!({
            "type": "object",
            "required": ["status", "replicas"],
            "properties": {
                "status": {"const": "ok"},
                "replicas": {"type": "integer", "minimum": 3},
                "items": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]$"}}
            }
        });
        let judged = |expect| {
            let inputs = http(url.clone(), expect);
            let (client, open) = (&client, &open);
            async move { super::http(client, &inputs, open, Duration::from_secs(5), 1).await }
        };
        let passed = judged(serde_json::json!({
            "body_matches": r#""replicas": \d+"#, "body_schema": schema
        }))
        .await;
        assert!(passed.passed(), "{passed:?}");
        let names: Vec<&str> = passed.assertions.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["status_2xx", "body_matches", "body_schema"]);
        // Four replicas wanted: the schema's error names where it broke.
        let mut stricter = schema.clone();
        stricter["properties"]["replicas"]["minimum"] = 4.into();
        let failed = judged(serde_json::json!({"body_schema": stricter})).await;
        assert!(failed.reached && !failed.passed(), "{failed:?}");
        let actual = failed.assertions[1].actual.to_string();
        assert!(actual.contains("at `/replicas`"), "{actual}");
        let unmatched = judged(serde_json::json!({"body_matches": "^<html>"})).await;
        assert!(!unmatched.passed() && unmatched.assertions[1].actual == false);
        // A body cut at the operator's cap is never judged as a whole.
        let inputs = http(url.clone(), serde_json::json!({"body_schema": schema}));
        let capped = super::http(
            &client,
            &inputs,
            &bounds(LOOPBACK, 10),
            Duration::from_secs(5),
            1,
        )
        .await;
        assert!(!capped.passed(), "{capped:?}");
        assert!(capped.assertions[1]
            .actual
            .to_string()
            .contains("longer than"));
    }

    #[tokio::test]
    async fn a_denied_destination_is_refused_before_anything_connects() {
        let port = serve(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n".to_vec()).await;
        let denied = bounds(
            "[defaults.destinations]\ndeny = [\"127.0.0.0/8\", \"::1/128\"]\n",
            1 << 20,
        );
        let client = crate::policy::http_client(&denied.destinations, 0).unwrap();
        let sample = http(format!("http://127.0.0.1:{port}/"), serde_json::json!({}));
        let refused = super::http(&client, &sample, &denied, Duration::from_secs(5), 1).await;
        assert!(refused.refused_by_policy && !refused.reached, "{refused:?}");
        // By name too: localhost resolves only to denied addresses (on
        // hosts that map it to ::1 as well).
        let by_name = http(format!("http://localhost:{port}/"), serde_json::json!({}));
        let refused = super::http(&client, &by_name, &denied, Duration::from_secs(5), 1).await;
        assert!(refused.refused_by_policy, "{refused:?}");
        let tcp_inputs = VerifyTcp {
            host: "127.0.0.1".into(),
            target: None,
            port,
            timeout: None,
            expect: Default::default(),
            evidence: Default::default(),
        };
        let refused = super::tcp(&tcp_inputs, &denied, Duration::from_secs(5), 1).await;
        assert!(refused.refused_by_policy && !refused.reached, "{refused:?}");
    }

    #[tokio::test]
    async fn a_tcp_service_s_banner_is_judged_by_its_first_line() {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let _ = stream
                    .write_all(b"SSH-2.0-execplane_test\r\nnot the banner\n")
                    .await;
            }
        });
        let open = bounds(LOOPBACK, 1 << 20);
        let probe = |contains: &str, matches: &str| VerifyTcp {
            host: "127.0.0.1".into(),
            target: None,
            port,
            timeout: None,
            expect: crate::contract::ops::TcpExpect {
                banner_contains: Some(contains.into()),
                banner_matches: Some(matches.into()),
            },
            evidence: Default::default(),
        };
        let seen = super::tcp(
            &probe("SSH-2.0", "^SSH-2\\.0-\\w+$"),
            &open,
            Duration::from_secs(5),
            1,
        )
        .await;
        assert!(seen.passed(), "{seen:?}");
        assert_eq!(seen.observed["banner"], "SSH-2.0-execplane_test");
        let wrong = super::tcp(&probe("SSH-2.0", "^220 "), &open, Duration::from_secs(5), 1).await;
        assert!(!wrong.passed() && wrong.reached, "{wrong:?}");
        assert_eq!(wrong.assertions[2].name, "banner_matches");
        assert!(!wrong.assertions[2].passed);
    }

    #[tokio::test]
    async fn tcp_tells_an_answer_from_a_closed_port() {
        let port = serve(Vec::new()).await;
        let open = bounds(LOOPBACK, 1 << 20);
        let reached = super::tcp(
            &VerifyTcp {
                host: "127.0.0.1".into(),
                target: None,
                expect: Default::default(),
                port,
                timeout: None,
                evidence: Default::default(),
            },
            &open,
            Duration::from_secs(5),
            1,
        )
        .await;
        assert!(reached.passed(), "{reached:?}");
        let closed = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let refused = super::tcp(
            &VerifyTcp {
                host: "127.0.0.1".into(),
                target: None,
                expect: Default::default(),
                port: closed,
                timeout: None,
                evidence: Default::default(),
            },
            &open,
            Duration::from_secs(5),
            1,
        )
        .await;
        assert!(!refused.reached && !refused.refused_by_policy && refused.error.is_some());
    }

    #[tokio::test]
    async fn custom_probes_pass_fail_and_stop_when_cancelled() {
        let (progress, _) = tokio::sync::mpsc::unbounded_channel();
        let (log, _) = tokio::sync::mpsc::unbounded_channel();
        let context =
            ExecutionContext::new(tokio_util::sync::CancellationToken::new(), progress, log);
        let probe = |id: &str, args: serde_json::Value| -> VerifyCustom {
            serde_json::from_value(serde_json::json!({"probe_id": id, "args": args})).unwrap()
        };
        assert!(custom(
            &probe("sleep", serde_json::json!({"seconds": 0.01})),
            &context,
            1
        )
        .await
        .passed());
        let failed = custom(&probe("fail", serde_json::json!({})), &context, 1).await;
        assert!(failed.reached && !failed.passed());
        context.cancel.cancel();
        let stopped = custom(&probe("hang", serde_json::json!({})), &context, 1).await;
        assert_eq!(stopped.error.as_deref(), Some("stopped"));
        let unknown = custom(&probe("nope", serde_json::json!({})), &context, 1).await;
        assert!(unknown.error.unwrap().contains("not built in"));
    }
}
