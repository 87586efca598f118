//! Apache Kafka clusters of a test's own (one node or three), started by
//! `scripts/kafka.sh` on free loopback ports, for the tests that stop,
//! kill or cut off brokers without touching the stack's shared one.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

pub struct Cluster {
    pub dir: PathBuf,
    /// Node n's client port is `port + n - 1`.
    pub port: u16,
    pub brokers: u16,
    advertise: Option<u16>,
}

impl Cluster {
    /// `brokers` nodes (1 or 3), formatted and started; with `advertise`
    /// (one node), clients are told to connect to that port instead.
    pub fn start(brokers: u16, advertise: Option<u16>) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "execplane-kafka-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        ));
        let cluster = Self {
            dir,
            port: free_ports(2 * brokers),
            brokers,
            advertise,
        };
        cluster.script(None);
        cluster
    }

    /// `bootstrap.servers` of the cluster (the advertised port, if any).
    pub fn bootstrap(&self) -> String {
        if let Some(port) = self.advertise {
            return format!("127.0.0.1:{port}");
        }
        (1..=self.brokers)
            .map(|n| format!("127.0.0.1:{}", self.client_port(n)))
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn client_port(&self, node: u16) -> u16 {
        self.port + node - 1
    }

    fn script(&self, node: Option<u16>) {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/kafka.sh");
        let mut command = Command::new(script);
        command
            .args(["--brokers", &self.brokers.to_string()])
            .args(["--port", &self.port.to_string()])
            .arg("--dir")
            .arg(&self.dir);
        if let Some(node) = node {
            command.args(["--node", &node.to_string()]);
        }
        if let Some(port) = self.advertise {
            command.args(["--advertise", &port.to_string()]);
        }
        let out = command.output().expect("scripts/kafka.sh runs");
        assert!(
            out.status.success(),
            "scripts/kafka.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn pid(&self, node: u16) -> Option<String> {
        std::fs::read_to_string(self.dir.join(format!("node-{node}/pid")))
            .ok()
            .map(|pid| pid.trim().to_owned())
    }

    fn signal(&self, node: u16, signal: &str) {
        if let Some(pid) = self.pid(node) {
            let _ = Command::new("kill").args([signal, &pid]).status();
        }
    }

    /// `kill -9` of one node.
    pub fn kill(&self, node: u16) {
        self.signal(node, "-KILL");
        self.wait_closed(node, Duration::from_secs(10));
    }

    /// A clean stop of one node (SIGTERM: it flushes and leaves the quorum).
    pub fn stop(&self, node: u16) {
        self.signal(node, "-TERM");
        self.wait_closed(node, Duration::from_secs(60));
    }

    /// Starts a node that was stopped or killed, on its own log directory.
    pub fn restart(&self, node: u16) {
        self.script(Some(node));
    }

    fn wait_closed(&self, node: u16, within: Duration) {
        let deadline = Instant::now() + within;
        while std::net::TcpStream::connect(("127.0.0.1", self.client_port(node))).is_ok() {
            if Instant::now() > deadline {
                self.signal(node, "-KILL");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // The process itself, not only its listener.
        if let Some(pid) = self.pid(node) {
            let proc = PathBuf::from(format!("/proc/{pid}"));
            while proc.exists() && Instant::now() < deadline + Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in 1..=self.brokers {
            self.signal(node, "-KILL");
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `count` consecutive loopback ports nobody listens on.
/// `count` consecutive ports free now, below the kernel's ephemeral range:
/// a port in it can be taken by any outgoing connection between this
/// check and the broker's bind (a node then never opens its port).
fn free_ports(count: u16) -> u16 {
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    let span = ephemeral.saturating_sub(20_000 + count).max(1);
    loop {
        let base = 20_000 + (rand_u16() % span);
        let free = (base..base + count)
            .all(|port| std::net::TcpListener::bind(("127.0.0.1", port)).is_ok());
        if free {
            return base;
        }
    }
}

fn rand_u16() -> u16 {
    (uuid::Uuid::new_v4().as_u128() & 0xffff) as u16
}
