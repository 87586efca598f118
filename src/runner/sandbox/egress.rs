//! What a sandboxed tool may reach over the network (docs/SECURITY.md,
//! "Network"). Tools share the host's network: they reach nodes, API
//! servers, state backends and provider APIs as the runner would. What
//! they must never reach is the platform itself — the broker, the
//! database, the secret store, the artifact storage, the ingress — nor
//! the operator's deny list (a cloud's metadata service by default).
//!
//! The runner installs that as a firewall table of its own (nftables),
//! matching the sockets of the sandbox's uid pool: every tool process runs
//! as a pool uid (`super::Identity`), so the rule holds for every process
//! it starts and for no other process on the host. A destination that is
//! one of this machine's own addresses is refused at every local address
//! (the service answers on `127.0.0.2` as well as on `127.0.0.1`). Tools
//! that need no network at all run in an empty network namespace instead
//! (`ToolCommand::offline`).
//!
//! Names are resolved once, at start (with every broker the cluster's
//! metadata lists then, not only the bootstrap ones): a broker that moves
//! to a new address, or joins later, is guarded when the runner restarts.
//!
//! A tool that runs a tenant's code (ansible's plays, OpenTofu's modules
//! and providers) is held to what it must reach: its nodes, what the
//! operator's policy grants ([`Reach`]). The table's `held` map sends the sockets of that tool's uid
//! to a chain of its own that accepts those destinations and the host's
//! name servers and refuses the rest; the chain and its map entry are the
//! uid's while its attempt holds it, and are taken away before the uid is
//! given to another attempt (`super::Identity`).

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use ipnet::IpNet;

pub use crate::policy::egress::Destination;

/// How the tools' network is held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Network {
    /// `EXECPLANE_SANDBOX_NETWORK=guarded` (default): the host's network
    /// but none of `deny`, by a firewall table on the pool's uids.
    Guarded {
        /// The platform's own endpoints, then the operator's list.
        deny: Vec<Destination>,
        /// The nftables CLI that installs the table.
        nft: std::path::PathBuf,
    },
    /// `EXECPLANE_SANDBOX_NETWORK=host`: the host's network, all of it
    /// (said loudly at start).
    Host,
}

/// Debian's nftables CLI.
pub const NFT: &str = "/usr/sbin/nft";

impl Default for Network {
    fn default() -> Self {
        Self::Guarded {
            deny: Vec::new(),
            nft: NFT.into(),
        }
    }
}

/// The deny list, resolved to addresses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rules {
    /// Ports refused at every address of this machine.
    local_ports: BTreeSet<u16>,
    /// Ports refused at one remote address.
    endpoints: BTreeSet<(IpAddr, u16)>,
    /// Networks refused whole.
    nets: BTreeSet<IpNet>,
    /// The host's name servers (`/etc/resolv.conf`), which a held tool
    /// may ask (port 53).
    nameservers: BTreeSet<IpAddr>,
}

/// How long resolving one name may take at start.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);

impl Rules {
    /// Resolves every endpoint of `deny`; a name that does not resolve is
    /// an error (a guard on nothing would pass unnoticed).
    pub async fn resolve(deny: &[Destination]) -> Result<Self, String> {
        let mut rules = Self {
            nameservers: nameservers(&std::fs::read_to_string(RESOLV_CONF).unwrap_or_default()),
            ..Self::default()
        };
        for destination in deny {
            match destination {
                Destination::Net(net) => {
                    rules.nets.insert(*net);
                }
                Destination::Endpoint { host, port } => {
                    let found = tokio::time::timeout(
                        RESOLVE_TIMEOUT,
                        tokio::net::lookup_host((host.as_str(), *port)),
                    )
                    .await
                    .map_err(|_| format!("resolving `{host}` took over {RESOLVE_TIMEOUT:?}"))?
                    .map_err(|error| format!("cannot resolve `{host}`: {error}"))?;
                    for address in found {
                        rules.add(address);
                    }
                }
            }
        }
        Ok(rules)
    }

    fn add(&mut self, address: SocketAddr) {
        let ip = address.ip();
        if is_own(ip) {
            self.local_ports.insert(address.port());
        } else {
            self.endpoints.insert((ip, address.port()));
        }
    }

    /// The nftables script that replaces `table` with these rules for the
    /// sockets of uids `first..=last`.
    pub fn script(&self, table: &str, first: u32, last: u32) -> String {
        let ports = |ports: &mut dyn Iterator<Item = u16>| {
            ports
                .map(|port| port.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut rules = vec![format!("meta skuid != {first}-{last} accept")];
        if !self.local_ports.is_empty() {
            rules.push(format!(
                "fib daddr type local meta l4proto {{ tcp, udp }} th dport {{ {} }} reject",
                ports(&mut self.local_ports.iter().copied())
            ));
        }
        for (ip, port) in &self.endpoints {
            let family = if ip.is_ipv4() { "ip" } else { "ip6" };
            rules.push(format!(
                "{family} daddr {ip} meta l4proto {{ tcp, udp }} th dport {port} reject"
            ));
        }
        for net in &self.nets {
            let family = if matches!(net, IpNet::V4(_)) {
                "ip"
            } else {
                "ip6"
            };
            rules.push(format!("{family} daddr {net} reject"));
        }
        // Then a held tool's own chain, if its uid has one.
        rules.push("meta skuid vmap @held".to_owned());
        let body: String = rules.iter().map(|rule| format!("\t\t{rule}\n")).collect();
        let servers = |v4: bool| {
            let listed: Vec<String> = self
                .nameservers
                .iter()
                .filter(|ip| ip.is_ipv4() == v4)
                .map(ToString::to_string)
                .collect();
            let kind = if v4 { "ipv4_addr" } else { "ipv6_addr" };
            let name = if v4 { "dns4" } else { "dns6" };
            if listed.is_empty() {
                format!("\tset {name} {{ type {kind}; }}\n")
            } else {
                format!(
                    "\tset {name} {{ type {kind}; elements = {{ {} }} }}\n",
                    listed.join(", ")
                )
            }
        };
        // Declaring the table first makes the delete succeed on a host
        // that has none yet; the whole script is one transaction.
        format!(
            "table inet {table}\ndelete table inet {table}\ntable inet {table} {{\n\tmap held {{ typeof meta skuid : verdict; }}\n{}{}\tchain output {{\n\t\ttype filter hook output priority filter; policy accept;\n{body}\t}}\n}}\n",
            servers(true),
            servers(false),
        )
    }

    /// One address per refused TCP endpoint, for the start-up probe.
    pub fn probes(&self) -> Vec<SocketAddr> {
        let local = self
            .local_ports
            .iter()
            .map(|port| SocketAddr::new(Ipv4Addr::LOCALHOST.into(), *port));
        let remote = self
            .endpoints
            .iter()
            .map(|(ip, port)| SocketAddr::new(*ip, *port));
        local.chain(remote).collect()
    }
}

/// Where `/etc/resolv.conf` is.
const RESOLV_CONF: &str = "/etc/resolv.conf";

/// The `nameserver` addresses of a `resolv.conf`.
fn nameservers(text: &str) -> BTreeSet<IpAddr> {
    text.lines()
        .filter_map(|line| line.trim().strip_prefix("nameserver"))
        .filter_map(|rest| rest.split_whitespace().next())
        .filter_map(|address| address.split('%').next()?.parse().ok())
        .collect()
}

/// What one held tool may reach, resolved to addresses (docs/SECURITY.md,
/// "Network").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reach {
    /// One port at one address.
    endpoints: BTreeSet<(IpAddr, u16)>,
    /// Every port of a network.
    nets: BTreeSet<IpNet>,
}

impl Reach {
    /// Resolves `allowed`, every name at once (an attempt may name many
    /// nodes, and each may take [`RESOLVE_TIMEOUT`]); a name that does not
    /// resolve in time is left out, and said in the second list: the tool
    /// cannot reach it, and fails as it would on a name it cannot resolve.
    pub async fn resolve(allowed: &[Destination]) -> (Self, Vec<String>) {
        let mut reach = Self::default();
        let mut lookups = Vec::new();
        for destination in allowed {
            match destination {
                Destination::Net(net) => {
                    reach.nets.insert(net.trunc());
                }
                Destination::Endpoint { host, port } => lookups.push(async move {
                    let found = tokio::time::timeout(
                        RESOLVE_TIMEOUT,
                        tokio::net::lookup_host((host.as_str(), *port)),
                    )
                    .await;
                    match found {
                        Ok(Ok(addresses)) => Ok(addresses
                            .map(|address| (address.ip(), address.port()))
                            .collect::<Vec<_>>()),
                        Ok(Err(error)) => Err(format!("{host}: {error}")),
                        Err(_) => Err(format!("{host}: not resolved within {RESOLVE_TIMEOUT:?}")),
                    }
                }),
            }
        }
        let mut unresolved = Vec::new();
        for found in futures_util::future::join_all(lookups).await {
            match found {
                Ok(addresses) => reach.endpoints.extend(addresses),
                Err(error) => unresolved.push(error),
            }
        }
        (reach, unresolved)
    }

    /// The script that holds `uid`'s sockets in `table` to this, and the
    /// one that lets them go again. Each replaces whatever the uid had
    /// there, so either can run whatever state a runner that died left.
    pub fn scripts(&self, table: &str, uid: u32) -> (String, String) {
        let chain = format!("reach_{uid}");
        let rule = |rule: String| format!("add rule inet {table} {chain} {rule}\n");
        let mut hold =
            format!("add chain inet {table} {chain}\nflush chain inet {table} {chain}\n");
        // Matched on the connection's original destination, what the tool
        // asked for: the output hook's NAT (a container's DNS at
        // 127.0.0.11, a service address) has already rewritten the packet.
        // And only in the direction the tool opened it (a held tool is a
        // client): a socket bound to an allowed address sends no replies.
        for (family, set) in [("ip", "dns4"), ("ip6", "dns6")] {
            hold += &rule(format!(
                "ct direction original meta l4proto {{ tcp, udp }} ct original proto-dst 53 ct original {family} daddr @{set} accept"
            ));
        }
        for v4 in [true, false] {
            let family = if v4 { "ip" } else { "ip6" };
            let endpoints: Vec<String> = self
                .endpoints
                .iter()
                .filter(|(ip, _)| ip.is_ipv4() == v4)
                .map(|(ip, port)| format!("{ip} . {port}"))
                .collect();
            if !endpoints.is_empty() {
                hold += &rule(format!(
                    "ct direction original meta l4proto {{ tcp, udp }} ct original {family} daddr . ct original proto-dst {{ {} }} accept",
                    endpoints.join(", ")
                ));
            }
            let nets: Vec<String> = self
                .nets
                .iter()
                .filter(|net| matches!(net, IpNet::V4(_)) == v4)
                .map(ToString::to_string)
                .collect();
            if !nets.is_empty() {
                hold += &rule(format!(
                    "ct direction original ct original {family} daddr {{ {} }} accept",
                    nets.join(", ")
                ));
            }
        }
        hold += &rule("reject with icmpx admin-prohibited".to_owned());
        hold += &format!("add element inet {table} held {{ {uid} : jump {chain} }}\n");
        (hold, release_script(table, uid))
    }
}

/// The script that takes `uid`'s chain in `table` away, whether or not it
/// has one there (its adds make the deletes find what they delete).
fn release_script(table: &str, uid: u32) -> String {
    let chain = format!("reach_{uid}");
    format!(
        "add chain inet {table} {chain}\nflush chain inet {table} {chain}\nadd element inet {table} held {{ {uid} : jump {chain} }}\ndelete element inet {table} held {{ {uid} }}\ndelete chain inet {table} {chain}\n"
    )
}

/// Whether `ip` is this machine's own: loopback, unspecified, or an
/// address a socket can bind here.
fn is_own(ip: IpAddr) -> bool {
    ip.is_loopback()
        || ip.is_unspecified()
        || std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

/// The prefix of the tables of the pool that starts at `uid_base`.
fn table_prefix(uid_base: u32) -> String {
    format!("execplane_sandbox_{uid_base}_")
}

/// This process's table for the pool that starts at `uid_base`. One per
/// runner process: a refusal in any table at the hook is final, so the
/// tables of several runners on one host add up to every deny list of
/// them, and none replaces another's. Named by a random word of the
/// process's, not its pid: runners in containers of their own share the
/// host's firewall but not their pids (both may be pid 1).
pub fn table_name(uid_base: u32) -> String {
    static WORD: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    // Not all digits: a runner that named tables by its pid reads a pid.
    let word = WORD.get_or_init(|| format!("r{:08x}", rand::random::<u32>()));
    format!("{}{word}", table_prefix(uid_base))
}

/// The lock file a live runner holds for its table, in the pool's lock
/// directory: a table whose file nobody holds is a dead runner's.
fn table_lock(lock_dir: &Path, table: &str) -> std::path::PathBuf {
    lock_dir.join(format!("table-{table}"))
}

/// Runs the nftables CLI with `script` on its stdin; its stdout.
async fn nft(nft: &Path, args: &[&str], script: &str) -> Result<String, String> {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new(nft)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|error| format!("cannot run {}: {error}", nft.display()))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(script.as_bytes())
            .await
            .map_err(|error| format!("writing to {}: {error}", nft.display()))?;
    }
    let output = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .map_err(|_| format!("{} did not finish in 30 s", nft.display()))?
        .map_err(|error| format!("{}: {error}", nft.display()))?;
    if output.status.success() {
        return Ok(String::from_utf8_lossy(&output.stdout).into_owned());
    }
    Err(format!(
        "{} {}: {}",
        nft.display(),
        args.join(" "),
        crate::contract::limits::tail(String::from_utf8_lossy(&output.stderr).trim(), 1024)
    ))
}

/// Runs `script` through the nftables CLI at `nft`.
pub async fn apply(nft_path: &Path, script: &str) -> Result<(), String> {
    nft(nft_path, &["-f", "-"], script).await.map(drop)
}

/// [`apply`], blocking: for a uid's release where nothing can wait (a
/// drop), which must be done before the uid is free again.
pub fn apply_blocking(nft: &Path, script: &str) -> Result<(), String> {
    nft_blocking(nft, &["-f", "-"], script)
}

/// Whether `table` exists, blocking: `Err` when nft could not say.
pub fn table_exists(nft: &Path, table: &str) -> Result<bool, String> {
    match nft_blocking(nft, &["list", "table", "inet", table], "") {
        Ok(()) => Ok(true),
        Err(error) if error.contains("No such file or directory") => Ok(false),
        Err(error) => Err(error),
    }
}

/// Runs the nftables CLI with `script` on its stdin, for at most 10 s (a
/// drop waits for it on a runtime thread).
fn nft_blocking(nft: &Path, args: &[&str], script: &str) -> Result<(), String> {
    use std::io::Write;
    let mut child = std::process::Command::new(nft)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|error| format!("cannot run {}: {error}", nft.display()))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(script.as_bytes())
            .map_err(|error| format!("writing to {}: {error}", nft.display()))?;
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while child
        .try_wait()
        .map_err(|error| format!("{}: {error}", nft.display()))?
        .is_none()
    {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("{} did not finish in 10 s", nft.display()));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let output = child
        .wait_with_output()
        .map_err(|error| format!("{}: {error}", nft.display()))?;
    if output.status.success() {
        return Ok(());
    }
    Err(format!(
        "{}: {}",
        nft.display(),
        crate::contract::limits::tail(String::from_utf8_lossy(&output.stderr).trim(), 1024)
    ))
}

/// Installs `script` (this process's table of the pool at `uid_base`),
/// holding its lock file in `lock_dir` for the rest of the process's life,
/// and removes the tables of the same pool that runners no longer alive
/// left behind: those whose lock file no process holds.
pub async fn install(
    path: &Path,
    uid_base: u32,
    lock_dir: &Path,
    script: &str,
) -> Result<(), String> {
    static HELD: std::sync::OnceLock<std::fs::File> = std::sync::OnceLock::new();
    let own = table_name(uid_base);
    if HELD.get().is_none() {
        // Locked before it is in place under its name: another runner's
        // sweep never finds it free.
        let lock = table_lock(lock_dir, &own);
        let fresh = lock.with_extension("new");
        let held = open_lock(&fresh).and_then(|file| {
            file.try_lock().map_err(std::io::Error::other)?;
            std::fs::rename(&fresh, &lock)?;
            Ok(file)
        });
        let file = held.map_err(|error| format!("cannot hold the table's lock file: {error}"))?;
        let _ = HELD.set(file);
    }
    nft(path, &["-f", "-"], script).await?;
    let listed = nft(path, &["list", "tables"], "").await?;
    let prefix = table_prefix(uid_base);
    let tables: BTreeSet<String> = listed
        .lines()
        .filter_map(|line| line.trim().strip_prefix("table inet "))
        .filter(|table| table.starts_with(&prefix))
        .map(str::to_owned)
        .collect();
    // The lock files here: a table's, or one a runner died making.
    let locks: Vec<String> = std::fs::read_dir(lock_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            Some(name.strip_prefix("table-")?.to_owned())
        })
        .filter(|name| name.starts_with(&prefix) && *name != own)
        .collect();
    let mut stale = String::new();
    for name in locks {
        let lock = lock_dir.join(format!("table-{name}"));
        // One being made now is not locked yet.
        let young = std::fs::metadata(&lock)
            .and_then(|metadata| metadata.modified())
            .is_ok_and(|at| at.elapsed().is_ok_and(|age| age < Duration::from_secs(60)));
        if name.ends_with(".new") && young {
            continue;
        }
        // Held: its runner is alive.
        if !open_lock(&lock).is_ok_and(|file| file.try_lock().is_ok()) {
            continue;
        }
        if tables.contains(&name) {
            stale += &format!("delete table inet {name}\n");
        }
        let _ = std::fs::remove_file(&lock);
    }
    // A table with no lock file here is left: its runner may keep its
    // lock files elsewhere (a container of its own), or name its table
    // by its pid (an older runner), and deleting a live runner's table
    // would take its deny list away.
    for table in &tables {
        if *table != own && !table_lock(lock_dir, table).exists() {
            tracing::debug!(table, "a sandbox table with no lock file here: left");
        }
    }
    if !stale.is_empty() {
        // Another runner may have removed them first.
        if let Err(error) = nft(path, &["-f", "-"], &stale).await {
            tracing::debug!(%error, "removing the sandbox tables of runners gone");
        }
    }
    Ok(())
}

/// Opens (creating, 0600) a lock file in the pool's lock directory.
fn open_lock(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
}

/// `execplane sandbox-reach ADDR...`, run inside a sandbox by the start-up
/// check: the addresses it could connect to, one per line; exit 1 when
/// there is any.
pub fn reach(addresses: &[SocketAddr]) -> std::process::ExitCode {
    let reached: Vec<&SocketAddr> = addresses
        .iter()
        .filter(|address| {
            std::net::TcpStream::connect_timeout(address, Duration::from_secs(2)).is_ok()
        })
        .collect();
    for address in &reached {
        println!("{address}");
    }
    if reached.is_empty() {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::from(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn own_addresses_are_refused_at_every_local_address() {
        let deny = [
            Destination::parse("127.0.0.1:9092").unwrap(),
            Destination::parse("0.0.0.0:8080").unwrap(),
            Destination::parse("192.0.2.7:443").unwrap(),
            Destination::parse("169.254.0.0/16").unwrap(),
            Destination::parse("fd00::/8").unwrap(),
        ];
        let rules = Rules::resolve(&deny).await.unwrap();
        let script = rules.script("execplane_sandbox_7", 7, 8);
        for expected in [
            "table inet execplane_sandbox_7\ndelete table inet execplane_sandbox_7\n",
            "meta skuid != 7-8 accept",
            "fib daddr type local meta l4proto { tcp, udp } th dport { 8080, 9092 } reject",
            "ip daddr 192.0.2.7 meta l4proto { tcp, udp } th dport 443 reject",
            "ip daddr 169.254.0.0/16 reject",
            "ip6 daddr fd00::/8 reject",
        ] {
            assert!(script.contains(expected), "{expected} not in\n{script}");
        }
        assert_eq!(
            rules.probes(),
            [
                "127.0.0.1:8080".parse().unwrap(),
                "127.0.0.1:9092".parse().unwrap(),
                "192.0.2.7:443".parse().unwrap()
            ]
        );
    }

    #[test]
    fn name_servers_are_read_from_resolv_conf() {
        let text = "# a comment\nnameserver 10.0.0.53\nsearch example\nnameserver fe80::1%eth0\nnameserver\nnameserver not-an-address\n";
        assert_eq!(
            nameservers(text),
            ["10.0.0.53".parse().unwrap(), "fe80::1".parse().unwrap()]
                .into_iter()
                .collect()
        );
    }

    #[tokio::test]
    async fn a_held_uid_reaches_its_destinations_and_the_name_servers_only() {
        let allowed = [
            Destination::parse("127.0.0.1:2222").unwrap(),
            Destination::parse("[::1]:22").unwrap(),
            Destination::parse("10.1.0.0/16").unwrap(),
            Destination::parse("no-such-host.invalid:22").unwrap(),
        ];
        let (reach, unresolved) = Reach::resolve(&allowed).await;
        assert_eq!(unresolved.len(), 1, "{unresolved:?}");
        assert!(unresolved[0].starts_with("no-such-host.invalid"));
        let (hold, release) = reach.scripts("t", 7);
        for expected in [
            "add chain inet t reach_7\nflush chain inet t reach_7\n",
            "add rule inet t reach_7 ct direction original meta l4proto { tcp, udp } ct original proto-dst 53 ct original ip daddr @dns4 accept",
            "add rule inet t reach_7 ct direction original meta l4proto { tcp, udp } ct original ip daddr . ct original proto-dst { 127.0.0.1 . 2222 } accept",
            "add rule inet t reach_7 ct direction original meta l4proto { tcp, udp } ct original ip6 daddr . ct original proto-dst { ::1 . 22 } accept",
            "add rule inet t reach_7 ct direction original ct original ip daddr { 10.1.0.0/16 } accept",
            "add rule inet t reach_7 reject with icmpx admin-prohibited\nadd element inet t held { 7 : jump reach_7 }\n",
        ] {
            assert!(hold.contains(expected), "{expected} not in\n{hold}");
        }
        assert!(
            release.ends_with("delete element inet t held { 7 }\ndelete chain inet t reach_7\n")
        );
        // The table sends a held uid to its chain after the deny list.
        let script = Rules::default().script("t", 7, 8);
        assert!(
            script.contains("map held { typeof meta skuid : verdict; }"),
            "{script}"
        );
        assert!(
            script.contains("\t\tmeta skuid vmap @held\n\t}"),
            "{script}"
        );
    }
}
