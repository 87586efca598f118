//! A tiny real HTTP/1.1 server on loopback: answers with scripted statuses
//! and records what it received (method, path, headers, body).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

#[derive(Clone, Debug)]
pub struct Received {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }
}

#[derive(Clone)]
pub struct Server {
    pub host: String,
    pub port: u16,
    pub received: Arc<Mutex<Vec<Received>>>,
}

/// What the server answers a request with.
#[derive(Clone, Debug)]
pub enum Reply {
    Status(u16),
    /// 302 to this location.
    Redirect(String),
    /// 200 with a body of this many bytes, written in 64 KiB pieces.
    Large(usize),
    /// 200 with this body.
    Body(String),
}

type Replies = Arc<dyn Fn(&Received) -> Reply + Send + Sync>;

impl Server {
    /// Answers with `script` in order, then with `fallback` for ever.
    pub async fn start(script: Vec<u16>, fallback: u16) -> Self {
        let script = Arc::new(Mutex::new(VecDeque::from(script)));
        Self::start_on(
            "127.0.0.1",
            Arc::new(move |_: &Received| {
                Reply::Status(script.lock().unwrap().pop_front().unwrap_or(fallback))
            }),
        )
        .await
    }

    /// Listens on `host` (any loopback address) and answers what `replies` says.
    pub async fn start_on(host: &str, replies: Replies) -> Self {
        let listener = TcpListener::bind(format!("{host}:0")).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let log = received.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    break;
                };
                let log = log.clone();
                let replies = replies.clone();
                tokio::spawn(async move {
                    let mut buffer = Vec::new();
                    let mut chunk = [0u8; 4096];
                    let header_end = loop {
                        let Ok(read) = stream.read(&mut chunk).await else {
                            return;
                        };
                        if read == 0 {
                            return;
                        }
                        buffer.extend_from_slice(&chunk[..read]);
                        if let Some(position) =
                            buffer.windows(4).position(|window| window == b"\r\n\r\n")
                        {
                            break position + 4;
                        }
                    };
                    let head = String::from_utf8_lossy(&buffer[..header_end]).to_string();
                    let mut lines = head.split("\r\n");
                    let request_line = lines.next().unwrap_or_default().to_owned();
                    let headers: Vec<(String, String)> = lines
                        .filter_map(|line| {
                            line.split_once(':').map(|(key, value)| {
                                (key.trim().to_owned(), value.trim().to_owned())
                            })
                        })
                        .collect();
                    let length: usize = headers
                        .iter()
                        .find(|(key, _)| key.eq_ignore_ascii_case("content-length"))
                        .and_then(|(_, value)| value.parse().ok())
                        .unwrap_or(0);
                    while buffer.len() < header_end + length {
                        let Ok(read) = stream.read(&mut chunk).await else {
                            return;
                        };
                        if read == 0 {
                            break;
                        }
                        buffer.extend_from_slice(&chunk[..read]);
                    }
                    let body = String::from_utf8_lossy(&buffer[header_end..]).to_string();
                    let mut parts = request_line.split_whitespace();
                    let request = Received {
                        method: parts.next().unwrap_or_default().to_owned(),
                        path: parts.next().unwrap_or_default().to_owned(),
                        headers,
                        body,
                    };
                    let reply = replies(&request);
                    log.lock().unwrap().push(request);
                    match reply {
                        Reply::Status(status) => {
                            let response = format!("HTTP/1.1 {status} Scripted\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok");
                            let _ = stream.write_all(response.as_bytes()).await;
                        }
                        Reply::Body(body) => {
                            let response = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
                            let _ = stream.write_all(response.as_bytes()).await;
                        }
                        Reply::Redirect(location) => {
                            let response = format!("HTTP/1.1 302 Found\r\nlocation: {location}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
                            let _ = stream.write_all(response.as_bytes()).await;
                        }
                        Reply::Large(size) => {
                            let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {size}\r\nconnection: close\r\n\r\n");
                            let _ = stream.write_all(head.as_bytes()).await;
                            let piece = vec![b'x'; 64 * 1024];
                            let mut left = size;
                            while left > 0 {
                                let take = left.min(piece.len());
                                if stream.write_all(&piece[..take]).await.is_err() {
                                    break;
                                }
                                left -= take;
                            }
                        }
                    }
                    let _ = stream.shutdown().await;
                });
            }
        });
        Self {
            host: host.to_owned(),
            port,
            received,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}:{}{path}", self.host, self.port)
    }

    pub fn requests(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}
