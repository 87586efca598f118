//! A TCP proxy that can cut one process off: it closes that process's
//! connections and refuses its new ones, leaving every other client alone.
//! A connection's owner is found through /proc (the client socket's inode
//! among the process's file descriptors).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

/// Client port -> (owning pid, the forwarding task).
type Connections = HashMap<u16, (Option<u32>, AbortHandle)>;

#[derive(Clone, Default)]
struct State {
    blocked: Arc<Mutex<Option<u32>>>,
    connections: Arc<Mutex<Connections>>,
}

pub struct Proxy {
    pub port: u16,
    state: State,
}

fn inode_of(client_port: u16, server_port: u16) -> Option<String> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    let local = format!("0100007F:{client_port:04X}");
    let remote = format!("0100007F:{server_port:04X}");
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.len() > 9 && fields[1] == local && fields[2] == remote)
            .then(|| fields[9].to_owned())
    })
}

fn owner_of(inode: &str) -> Option<u32> {
    let needle = format!("socket:[{inode}]");
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path())
                .map(|target| target.to_string_lossy() == needle)
                .unwrap_or(false)
            {
                return Some(pid);
            }
        }
    }
    None
}

impl Proxy {
    /// Listens on `port`, forwarding to `upstream_port`, on a thread and
    /// runtime of its own (tests call blocking Kafka client functions).
    pub fn start_on(port: u16, upstream_port: u16) -> Self {
        let std_listener = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
        std_listener.set_nonblocking(true).unwrap();
        let state = State::default();
        let shared = state.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(Self::serve(std_listener, upstream_port, shared));
        });
        Self { port, state }
    }

    async fn serve(std_listener: std::net::TcpListener, upstream_port: u16, shared: State) {
        let listener = TcpListener::from_std(std_listener).unwrap();
        let port = listener.local_addr().unwrap().port();
        {
            while let Ok((client, address)) = listener.accept().await {
                let owner = inode_of(address.port(), port).and_then(|inode| owner_of(&inode));
                let blocked = *shared.blocked.lock().unwrap();
                if blocked.is_some() && owner == blocked {
                    drop(client);
                    continue;
                }
                let connections = shared.connections.clone();
                let client_port = address.port();
                let task = tokio::spawn(async move {
                    let Ok(mut upstream) = TcpStream::connect(("127.0.0.1", upstream_port)).await
                    else {
                        return;
                    };
                    let mut client = client;
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                });
                connections
                    .lock()
                    .unwrap()
                    .insert(client_port, (owner, task.abort_handle()));
            }
        }
    }

    /// Cuts `pid` off: closes its connections and refuses new ones.
    pub fn cut(&self, pid: u32) {
        *self.state.blocked.lock().unwrap() = Some(pid);
        let mut connections = self.state.connections.lock().unwrap();
        connections.retain(|_, (owner, handle)| {
            if *owner == Some(pid) {
                handle.abort();
                false
            } else {
                true
            }
        });
    }
}
