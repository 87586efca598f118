//! Starting an ingress for a test and talking to it.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use super::pipeline::Pipeline;
use super::prometheus;

const WAIT: Duration = Duration::from_secs(60);
pub const INGRESS_KEY: &str = "executor-key-for-the-tests-0123";
pub const API_KEY: &str = "api-key-for-the-tests-456789";

/// A port that is free now, below the ephemeral range (32768 and up on
/// Linux): a port the kernel hands out (`bind :0`) can be taken by any
/// outgoing connection of a concurrent test (an ssh client, a Kafka
/// client) before the ingress binds it.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let seed = std::process::id()
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.subsec_nanos());
    loop {
        let offset = seed.wrapping_add(NEXT.fetch_add(7919, Ordering::Relaxed)) % 12_000;
        let port = 20_000 + offset as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

pub fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/executors")
        .join(name)
}

pub struct Ingress {
    pub http: u16,
    pub tcp: u16,
}

impl Ingress {
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.http)
    }
}

/// Starts `execplane ARGS` (the ingress alone, or `serve`) with both keys
/// and fresh ports, and waits until it answers HTTP.
pub async fn start(pipeline: &mut Pipeline, args: &[&str], extra: &[(&str, &str)]) -> Ingress {
    let (http, tcp) = (free_port(), free_port());
    let (http_text, tcp_text) = (http.to_string(), tcp.to_string());
    let mut env = vec![
        ("EXECPLANE_INGRESS_KEY", INGRESS_KEY),
        ("EXECPLANE_API_KEY", API_KEY),
        ("EXECPLANE_INGRESS_HTTP_PORT", http_text.as_str()),
        ("EXECPLANE_INGRESS_TCP_PORT", tcp_text.as_str()),
        ("EXECPLANE_METRICS_ADDR", ""),
    ];
    env.extend_from_slice(extra);
    pipeline.spawn(args, &env);
    let ingress = Ingress { http, tcp };
    let client = reqwest::Client::new();
    pipeline
        .wait("the ingress to answer", WAIT, || async {
            client.get(ingress.url("/healthz")).send().await.is_ok()
        })
        .await;
    ingress
}

/// A request with a bearer key (and an executor id); the status and JSON.
pub async fn call(
    method: reqwest::Method,
    url: &str,
    key: Option<&str>,
    executor: Option<&str>,
    headers: &[(&str, &str)],
    body: Option<Vec<u8>>,
) -> (u16, Value) {
    let mut request = reqwest::Client::new().request(method, url);
    if let Some(key) = key {
        request = request.header("authorization", format!("Bearer {key}"));
    }
    if let Some(executor) = executor {
        request = request.header("x-execplane-executor", executor);
    }
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    if let Some(body) = body {
        request = request
            .header("content-type", "application/json")
            .body(body);
    }
    let response = request.send().await.expect("the ingress answers");
    let status = response.status().as_u16();
    let text = response.text().await.unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

pub async fn metrics(ingress: &Ingress) -> std::collections::BTreeMap<String, f64> {
    let text = reqwest::get(ingress.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    prometheus::parse(&text).unwrap_or_else(|error| panic!("invalid exposition: {error}\n{text}"))
}

pub fn catalog(pipeline: &Pipeline, args: &[&str]) {
    let output = super::execplane(&pipeline.pool, &[&["executors", "put"], args].concat());
    assert!(
        output.status.success(),
        "executors put: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}
