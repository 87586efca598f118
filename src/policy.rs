//! The operator's policy: what each tenant may reach. What a requester
//! writes in a JobSpec never grants itself a permission; this file does.
//! It is checked at intake (a violation is `rejected (policy)`) and again
//! by the runner (and the callback worker) before it acts, after DNS
//! resolution, on every connection (docs/ARCHITECTURE.md, "Operator policy").
//!
//! The file is TOML (`EXECPLANE_POLICY_FILE`); without one, the defaults
//! below apply to every tenant:
//!
//! ```toml
//! [defaults]
//! # <mount>/<path prefix>; `*` is any mount, `{tenant}` the tenant's name.
//! secret_prefixes = ["*/{tenant}/"]
//! # what runners write for it (generated secrets, sensitive outputs)
//! secret_write_prefixes = ["*/{tenant}/"]
//! [defaults.destinations]
//! allow = []   # CIDRs or host names; empty: everything not denied
//! allow_private = []   # loopback and private networks that may be reached
//! deny = []    # on top of link-local and cloud metadata, always denied
//!
//! [tenants.team-a]
//! secret_prefixes = ["secret/team-a/", "secret/shared/"]
//! destinations = { allow = ["10.20.0.0/16", "api.example.com"], deny = [] }
//! ```
//!
//! A tenant's section replaces the defaults field by field; the default
//! deny list (link-local and cloud metadata addresses) is always kept.
//! Loopback and private networks ([`PRIVATE_NETWORKS`]: where the
//! platform's own services and the host's listeners live) are refused
//! unless `allow_private` lists them (a network, or a name whose addresses
//! they are), or an `allow` network lies inside one (`10.20.0.0/16` above;
//! `0.0.0.0/0` is the internet, not them). An `allow` name admits public
//! addresses only: whoever holds its DNS, often the tenant, could point it
//! at the platform's own.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::path::Path;
use std::sync::{Arc, PoisonError, RwLock};

use ipnet::IpNet;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::contract::{JobSpec, Problem};

pub mod ansible;
pub mod clusters;
pub mod concurrency;
pub mod egress;
pub mod helm;
pub mod kubernetes;
pub mod live;
pub mod opentofu;
pub mod principals;
pub mod rules;
pub mod ssh;

use ansible::AnsibleRules;
use helm::HelmRules;
use kubernetes::KubernetesRules;
pub use live::SharedPolicy;
use opentofu::TofuRules;
use rules::Requires;
pub use rules::{Grant, OperationRules};
use ssh::SshRules;
pub use ssh::{ArgKind, ArgSpec, SshTemplate, Sudo};

/// Link-local and cloud metadata destinations: never reachable, whatever a
/// policy file says (a probe or callback there reads the host's credentials).
pub const ALWAYS_DENIED: [&str; 5] = [
    "169.254.0.0/16",
    "fe80::/10",
    "fd00:ec2::254/128",
    "100.100.100.200/32",
    "metadata.google.internal",
];

/// Loopback, private, shared (RFC 6598), benchmarking, unspecified and
/// unique-local networks: refused to probes and callbacks unless the
/// tenant's `destinations` allow them by name (docs/SECURITY.md).
pub const PRIVATE_NETWORKS: [&str; 11] = [
    // NAT64 for local use (RFC 8215): what it embeds is the operator's.
    "64:ff9b:1::/48",
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "::/128",
    "::1/128",
    "fc00::/7",
];

/// One tenant's rules (or the defaults), as written in the file.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TenantRules {
    /// `<mount>/<path prefix>` entries a secret reference must fall under.
    pub secret_prefixes: Option<Vec<String>>,
    /// The same, for what a runner writes for the tenant (a generated
    /// secret, sensitive outputs). Default `*/{tenant}/`, whatever
    /// `secret_prefixes` says: a prefix a tenant shares to read is not
    /// one it may overwrite.
    pub secret_write_prefixes: Option<Vec<String>>,
    pub destinations: Option<DestinationRules>,
    /// Topic prefixes (with `{tenant}`) a JobSpec's `callback.topic` may
    /// name, under `EXECPLANE_TOPIC_PREFIX`. Default: none, so no callback
    /// topic at all.
    pub callback_topics: Option<Vec<String>>,
    /// Operations it may run: `*`, `<runner>.*` or names. Default `*`.
    pub operations: Option<Vec<String>>,
    /// The JobSpec flags it may set. Default: none.
    pub grants: Option<BTreeSet<Grant>>,
    pub kubernetes: Option<KubernetesRules>,
    pub helm: Option<HelmRules>,
    pub ansible: Option<AnsibleRules>,
    pub ssh: Option<SshRules>,
    pub opentofu: Option<TofuRules>,
}

/// Where probes and callbacks may connect, as written in the file.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DestinationRules {
    #[serde(default)]
    pub allow: Vec<String>,
    /// Loopback and private networks (of [`PRIVATE_NETWORKS`]) that may be
    /// reached, on top of `allow`.
    #[serde(default)]
    pub allow_private: Vec<String>,
    #[serde(default)]
    pub deny: Vec<String>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    #[serde(default)]
    defaults: TenantRules,
    #[serde(default)]
    tenants: BTreeMap<String, TenantRules>,
    #[serde(default)]
    requires: Requires,
    #[serde(default)]
    ssh_templates: BTreeMap<String, SshTemplate>,
    #[serde(default)]
    clusters: BTreeMap<String, clusters::ClusterEndpoint>,
    #[serde(default)]
    concurrency: concurrency::Concurrency,
    #[serde(default)]
    helm_marketplace: Vec<helm::MarketplaceChart>,
    #[serde(default)]
    principals: BTreeMap<String, principals::PrincipalEntry>,
}

/// How a policy file is written: YAML (`.yaml`, `.yml`) or TOML.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyFormat {
    Yaml,
    Toml,
}

impl PolicyFormat {
    pub fn of(path: &Path) -> Self {
        match path.extension().and_then(|extension| extension.to_str()) {
            Some("yaml" | "yml") => PolicyFormat::Yaml,
            _ => PolicyFormat::Toml,
        }
    }
}

/// A parsed destination list: networks and host names (lowercase, exact).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Destinations {
    networks: Vec<IpNet>,
    hosts: Vec<String>,
}

impl Destinations {
    fn parse(entries: &[String], field: &str, problems: &mut Vec<String>) -> Self {
        let mut parsed = Self::default();
        for entry in entries {
            let entry = entry.trim();
            if let Ok(network) = entry.parse::<IpNet>() {
                parsed.networks.push(network);
            } else if let Ok(address) = entry.parse::<IpAddr>() {
                parsed.networks.push(IpNet::from(address));
            } else if is_host_name(entry) {
                parsed.hosts.push(entry.to_ascii_lowercase());
            } else {
                problems.push(format!(
                    "{field}: `{entry}` is neither a CIDR, an address nor a host name"
                ));
            }
        }
        parsed
    }

    fn contains_ip(&self, address: IpAddr) -> bool {
        let address = canonical(address);
        self.networks
            .iter()
            .any(|network| network.contains(&address))
    }

    fn contains_host(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        self.hosts.contains(&host)
    }

    fn is_empty(&self) -> bool {
        self.networks.is_empty() && self.hosts.is_empty()
    }
}

fn is_host_name(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 253
        && text.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// An IPv6 address that carries an IPv4 one is judged as that IPv4
/// address, so no spelling slips past a v4 rule: mapped `::ffff:a.b.c.d`,
/// translated `::ffff:0:a.b.c.d`, compatible `::a.b.c.d`, NAT64
/// `64:ff9b::a.b.c.d` (a gateway there reaches the v4 address, private ones
/// too) and 6to4 `2002:aabb:ccdd::`.
fn canonical(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => embedded_v4(v6).map(IpAddr::V4).unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    }
}

fn embedded_v4(v6: std::net::Ipv6Addr) -> Option<std::net::Ipv4Addr> {
    let (segments, octets) = (v6.segments(), v6.octets());
    let tail = || std::net::Ipv4Addr::new(octets[12], octets[13], octets[14], octets[15]);
    if let Some(v4) = v6.to_ipv4_mapped() {
        return Some(v4);
    }
    match segments {
        // `::` and `::1` are v6 addresses of their own.
        [0, 0, 0, 0, 0, 0, 0, 0 | 1] => None,
        [0, 0, 0, 0, 0, 0, _, _] | [0, 0, 0, 0, 0xffff, 0, _, _] => Some(tail()),
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(tail()),
        [0x2002, ..] => Some(std::net::Ipv4Addr::new(
            octets[2], octets[3], octets[4], octets[5],
        )),
        _ => None,
    }
}

/// Where one tenant's probes and callbacks may connect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DestinationPolicy {
    allow: Destinations,
    /// The private networks it may reach: `allow_private`, and the `allow`
    /// networks that lie inside one of [`PRIVATE_NETWORKS`].
    allow_private: Destinations,
    deny: Destinations,
}

/// Whether `address` is in one of [`PRIVATE_NETWORKS`].
fn is_private(address: IpAddr) -> bool {
    private_networks()
        .iter()
        .any(|network| network.contains(&canonical(address)))
}

fn private_networks() -> &'static [IpNet] {
    static NETWORKS: std::sync::OnceLock<Vec<IpNet>> = std::sync::OnceLock::new();
    NETWORKS.get_or_init(|| {
        PRIVATE_NETWORKS
            .iter()
            .map(|entry| {
                entry
                    .parse()
                    .unwrap_or_else(|_| unreachable!("built-in network {entry} parses"))
            })
            .collect()
    })
}

impl DestinationPolicy {
    fn new(
        rules: &DestinationRules,
        deny: &[String],
        field: &str,
        problems: &mut Vec<String>,
    ) -> Self {
        let allow = Destinations::parse(&rules.allow, &format!("{field}.allow"), problems);
        let mut allow_private = Destinations::parse(
            &rules.allow_private,
            &format!("{field}.allow_private"),
            problems,
        );
        for network in &allow_private.networks {
            if !private_networks()
                .iter()
                .any(|private| private.contains(network))
            {
                problems.push(format!(
                    "{field}.allow_private: `{network}` is not inside a loopback or private network (list it under `allow`)"
                ));
            }
        }
        allow_private
            .networks
            .extend(allow.networks.iter().filter(|network| {
                private_networks()
                    .iter()
                    .any(|private| private.contains(*network))
            }));
        Self {
            allow,
            allow_private,
            deny: Destinations::parse(deny, &format!("{field}.deny"), problems),
        }
    }

    /// Whether a connection to `address` (resolved from `host`, when there
    /// was a name) is allowed; the error says which rule refused it.
    ///
    /// A refusal of a name's address does not say the address: the runner
    /// resolves with the platform's DNS, whose answers about internal names
    /// are not the tenant's to read.
    pub fn check(&self, host: Option<&str>, address: IpAddr) -> Result<(), String> {
        let address = canonical(address);
        let named = |list: &Destinations| host.is_some_and(|host| list.contains_host(host));
        let destination = match host {
            Some(host) => format!("an address of `{host}`"),
            None => address.to_string(),
        };
        if self.deny.contains_ip(address) || named(&self.deny) {
            return Err(format!(
                "destination {destination} is denied by the operator's policy"
            ));
        }
        if is_private(address) {
            // A name in `allow` admits public addresses only: whoever holds
            // its DNS (the tenant, often) could point it at the platform's
            // own. A private destination is the operator's to name, in
            // `allow_private`.
            return if self.allow_private.contains_ip(address) || named(&self.allow_private) {
                Ok(())
            } else {
                Err(format!(
                    "destination {destination} is a loopback or private address, reachable only where the operator's policy lists it (`destinations.allow_private`)"
                ))
            };
        }
        if self.allow.is_empty() || self.allow.contains_ip(address) || named(&self.allow) {
            return Ok(());
        }
        Err(format!(
            "destination {destination} is not in the operator's allow list"
        ))
    }

    /// What can be decided before resolution: a literal address, or a name
    /// on the deny list (or missing from a names-only allow list). The
    /// resolved addresses are checked again on every connection.
    pub fn check_name(&self, host: &str) -> Result<(), String> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(address) = bare.parse::<IpAddr>() {
            return self.check(None, address);
        }
        if self.deny.contains_host(bare) {
            return Err(format!(
                "destination `{bare}` is denied by the operator's policy"
            ));
        }
        Ok(())
    }
}

/// Why a callback topic prefix cannot be the operator's, if it cannot:
/// empty, it would allow every topic; a `{tenant}` not closed by a
/// character no tenant name holds (`.` or `_`) would give tenant `team`
/// every topic of `team-a` (`callbacks.team` is a prefix of
/// `callbacks.team-a.x`).
fn topic_prefix_problem(prefix: &str) -> Option<&'static str> {
    if prefix.is_empty() {
        return Some("an empty prefix would allow every topic");
    }
    let closed = prefix.split("{tenant}").skip(1).all(|after| {
        after
            .bytes()
            .next()
            .is_some_and(|byte| matches!(byte, b'.' | b'_'))
    });
    (!closed).then_some(
        "`{tenant}` must be followed by `.` or `_`, or one tenant's prefix would cover another's topics",
    )
}

/// The secret prefix of a tenant that says none: its own name.
const OWN_PREFIX: &str = "*/{tenant}/";

/// `entries` (`<mount>/<path prefix>`, `{tenant}` substituted) as (mount
/// or `*`, path prefix ending in `/`, so `secret/team-a` never covers
/// `team-a-evil/`); a malformed entry is a problem.
fn parse_prefixes(
    tenant: &str,
    entries: &[String],
    problems: &mut Vec<String>,
) -> Vec<(String, String)> {
    entries
        .iter()
        .filter_map(|entry| {
            let entry = entry.replace("{tenant}", tenant);
            match entry.trim_start_matches('/').split_once('/') {
                Some((mount, prefix)) if !mount.is_empty() => {
                    let mut prefix = prefix.trim_start_matches('/').to_owned();
                    if !prefix.is_empty() && !prefix.ends_with('/') {
                        prefix.push('/');
                    }
                    Some((mount.to_owned(), prefix))
                }
                _ => {
                    problems.push(format!(
                        "tenant {tenant}: secret prefix `{entry}` is not <mount>/<path prefix>"
                    ));
                    None
                }
            }
        })
        .collect()
}

/// Whether `mount`/`path` falls under one of `prefixes`. Under a `*`
/// mount, only a mount of one segment: a mount holding `/` would spell
/// another mount's paths (`secret/data/team-b/x` + `team-a/y`).
fn under(prefixes: &[(String, String)], mount: &str, path: &str) -> bool {
    let mount = mount.trim_matches('/');
    let path = path.trim_matches('/');
    prefixes.iter().any(|(allowed_mount, prefix)| {
        (allowed_mount == mount || (allowed_mount == "*" && !mount.contains('/')))
            && (prefix.is_empty()
                || path == prefix.trim_end_matches('/')
                || path.starts_with(prefix.as_str()))
    })
}

/// One tenant's effective rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantPolicy {
    /// (mount or `*`, path prefix), with `{tenant}` substituted.
    secret_prefixes: Vec<(String, String)>,
    /// What a runner may write for the tenant, as `secret_prefixes`.
    secret_write_prefixes: Vec<(String, String)>,
    pub destinations: DestinationPolicy,
    pub operations: OperationRules,
    /// The topic prefixes its callbacks may name, `{tenant}` substituted.
    pub callback_topics: Vec<String>,
    /// Secret locations (`{tenant}` any tenant) no tenant may read or write.
    reserved_secrets: Vec<(String, String)>,
}

impl TenantPolicy {
    /// Why a callback may not be produced to `topic`, if it may not.
    pub fn callback_topic_refused(&self, topic: &str) -> Option<String> {
        if crate::contract::topics::is_own(topic) {
            return Some(format!("`{topic}` is one of execplane's own topics"));
        }
        if self.callback_topics.is_empty() {
            return Some(
                "the operator's policy names no callback topic prefix for this tenant (`callback_topics`)"
                    .into(),
            );
        }
        (!self
            .callback_topics
            .iter()
            .any(|prefix| topic.starts_with(prefix.as_str())))
        .then(|| {
            format!(
                "`{topic}` is outside the operator's callback topic prefixes for this tenant: {}",
                self.callback_topics.join(", ")
            )
        })
    }

    /// Whether a secret reference may be resolved for this tenant.
    pub fn secret_allowed(&self, mount: &str, path: &str) -> bool {
        !self.secret_reserved(mount, path) && under(&self.secret_prefixes, mount, path)
    }

    /// Whether a runner may write this tenant's secret at `mount`/`path`
    /// (a generated value, sensitive outputs).
    pub fn secret_writable(&self, mount: &str, path: &str) -> bool {
        !self.secret_reserved(mount, path) && under(&self.secret_write_prefixes, mount, path)
    }

    /// Whether `mount`/`path` is execplane's own (a tenant's callback
    /// signing secrets): no tenant reads or writes it, whatever its
    /// prefixes cover.
    pub fn secret_reserved(&self, mount: &str, path: &str) -> bool {
        self.reserved_secrets
            .iter()
            .any(|location| crate::contract::callbacks::is_signing_entry(location, mount, path))
    }
}

/// Why a JobSpec may not name a reserved secret location.
pub const RESERVED_SECRET: &str =
    "a tenant's callback signing secrets are execplane's: no JobSpec may read or write them";

/// The operator's policy for every tenant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperatorPolicy {
    defaults: TenantRules,
    tenants: BTreeMap<String, TenantRules>,
    requires: Requires,
    ssh_templates: BTreeMap<String, SshTemplate>,
    clusters: BTreeMap<String, clusters::ClusterEndpoint>,
    concurrency: concurrency::Concurrency,
    /// Charts any tenant with `helm.marketplace` may install.
    helm_marketplace: Vec<helm::MarketplaceChart>,
    /// Who may call the execute API and the console (empty: the shared key).
    principals: principals::Principals,
    /// Secret locations that are execplane's own, from its settings (the
    /// callback signing secrets), not from the file.
    reserved_secrets: Vec<(String, String)>,
    /// `sha256:<hex>` of the file as read (of the empty string without a file).
    digest: String,
    /// Tenants' effective rules as built (see `tenant`).
    built: TenantMemo,
}

/// Each tenant's effective rules, built once: they depend only on the
/// policy and the tenant's name, and building them (prefixes, destination
/// networks, operation rules) cost more than the check of a JobSpec that
/// asks for them, once in intake and again in the runner. At most
/// [`TenantMemo::TENANTS`] are kept: a tenant's name comes from a JobSpec,
/// so a tenant past that is built each time it is asked for. Not part of
/// the policy's value: a copy starts empty, and two policies compare equal
/// whatever either has built.
#[derive(Default)]
struct TenantMemo(RwLock<HashMap<String, Arc<TenantPolicy>>>);

impl TenantMemo {
    const TENANTS: usize = 4096;

    fn get_or_build(
        &self,
        tenant: &str,
        build: impl FnOnce() -> TenantPolicy,
    ) -> Arc<TenantPolicy> {
        let read = self.0.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(built) = read.get(tenant) {
            return built.clone();
        }
        drop(read);
        let built = Arc::new(build());
        let mut write = self.0.write().unwrap_or_else(PoisonError::into_inner);
        if write.len() < Self::TENANTS {
            write.insert(tenant.to_owned(), built.clone());
        }
        built
    }

    fn clear(&mut self) {
        self.0
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }
}

impl Clone for TenantMemo {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl PartialEq for TenantMemo {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for TenantMemo {}

impl std::fmt::Debug for TenantMemo {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let built = self.0.read().map_or(0, |built| built.len());
        write!(formatter, "TenantMemo({built} built)")
    }
}

impl Default for OperatorPolicy {
    fn default() -> Self {
        Self::parse("", PolicyFormat::Toml)
            .unwrap_or_else(|_| unreachable!("the empty policy parses"))
    }
}

impl OperatorPolicy {
    /// Reads a policy file; every problem in it, one per entry.
    pub fn load_all(path: &Path) -> Result<Self, Vec<String>> {
        let text = std::fs::read_to_string(path).map_err(|error| {
            vec![format!(
                "cannot read the policy file {}: {error}",
                path.display()
            )]
        })?;
        Self::parse_file(path, &text)
    }

    /// The policy `text`, read from `path` (its extension says the format;
    /// each problem names the file).
    pub fn parse_file(path: &Path, text: &str) -> Result<Self, Vec<String>> {
        Self::parse(text, PolicyFormat::of(path)).map_err(|problems| {
            problems
                .into_iter()
                .map(|problem| format!("policy file {}: {problem}", path.display()))
                .collect()
        })
    }

    pub fn from_toml(text: &str) -> Result<Self, Vec<String>> {
        Self::parse(text, PolicyFormat::Toml)
    }

    pub fn from_yaml(text: &str) -> Result<Self, Vec<String>> {
        Self::parse(text, PolicyFormat::Yaml)
    }

    pub fn parse(text: &str, format: PolicyFormat) -> Result<Self, Vec<String>> {
        let file: PolicyFile = match format {
            PolicyFormat::Toml => toml::from_str(text).map_err(|error| vec![error.to_string()])?,
            // An empty YAML document is no policy at all, like an empty TOML file.
            PolicyFormat::Yaml if text.trim().is_empty() => PolicyFile::default(),
            PolicyFormat::Yaml => {
                serde_yaml::from_str(text).map_err(|error| vec![error.to_string()])?
            }
        };
        let (principals, mut problems) = match principals::Principals::parse(&file.principals) {
            Ok(principals) => (principals, Vec::new()),
            Err(problems) => (principals::Principals::default(), problems),
        };
        let policy = Self {
            principals,
            reserved_secrets: Vec::new(),
            defaults: file.defaults,
            tenants: file.tenants,
            requires: file.requires,
            ssh_templates: file.ssh_templates,
            clusters: file.clusters,
            concurrency: file.concurrency,
            helm_marketplace: file.helm_marketplace,
            digest: format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes()))),
            built: TenantMemo::default(),
        };
        // Parse every tenant once now, so a bad entry fails at startup.
        problems.extend(policy.table_problems());
        policy.build("{defaults}", &policy.defaults, &mut problems);
        for (tenant, rules) in &policy.tenants {
            if let Err(problem) = crate::contract::limits::tenant_name(tenant) {
                problems.push(format!("tenants: {problem}"));
            }
            policy.build(tenant, rules, &mut problems);
        }
        problems.extend(policy.shared_namespaces());
        if problems.is_empty() {
            Ok(policy)
        } else {
            Err(problems)
        }
    }

    /// Problems of the operator-wide tables: `requires`, `ssh_templates`,
    /// `clusters` and `concurrency`.
    fn table_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for grant in Grant::ALL {
            let entries = match grant {
                Grant::Destructive => &self.requires.destructive,
                Grant::Elevated => &self.requires.elevated,
                Grant::ExplicitCommand => &self.requires.explicit_command,
            };
            for entry in entries {
                if let Some(problem) = rules::operation_pattern_problem(entry) {
                    problems.push(format!("requires.{}: {problem}", grant.as_str()));
                }
            }
        }
        for (id, template) in &self.ssh_templates {
            problems.extend(template.problems(id));
        }
        for (name, cluster) in &self.clusters {
            problems.extend(cluster.problems(name));
        }
        problems.extend(self.concurrency.problems());
        for (index, chart) in self.helm_marketplace.iter().enumerate() {
            problems.extend(
                chart
                    .problems()
                    .into_iter()
                    .map(|problem| format!("helm_marketplace[{index}]: {problem}")),
            );
        }
        problems
    }

    /// Namespaces two tenants could both name on one cluster: each must be
    /// one tenant's (a pattern `team-a-*` also covers tenant `team-a-b`'s
    /// namespaces, defaults shared by tenants share theirs).
    fn shared_namespaces(&self) -> Vec<String> {
        let mut held: Vec<(&str, &str, &str)> = Vec::new();
        for (tenant, rules) in &self.tenants {
            let Some(kubernetes) = rules
                .kubernetes
                .as_ref()
                .or(self.defaults.kubernetes.as_ref())
            else {
                continue;
            };
            for (cluster, access) in &kubernetes.clusters {
                for pattern in &access.namespaces {
                    held.push((tenant, cluster, pattern));
                }
            }
        }
        let mut problems = Vec::new();
        for (index, (tenant, cluster, pattern)) in held.iter().enumerate() {
            for (other, other_cluster, other_pattern) in &held[index + 1..] {
                if tenant != other
                    && cluster == other_cluster
                    && kubernetes::patterns_overlap(pattern, other_pattern)
                {
                    problems.push(format!(
                        "tenants {tenant} and {other}: kubernetes.clusters.{cluster}.namespaces `{pattern}` and `{other_pattern}` can name the same namespace; each namespace must be one tenant's"
                    ));
                }
            }
        }
        problems
    }

    /// The principals of the execute API and the console.
    pub fn principals(&self) -> &principals::Principals {
        &self.principals
    }

    /// The operator's ssh template `id`: what the ssh runner runs.
    pub fn ssh_template(&self, id: &str) -> Option<&SshTemplate> {
        self.ssh_templates.get(id)
    }

    /// The operator's cluster `name`: where the kubernetes runner connects.
    pub fn cluster(&self, name: &str) -> Option<&clusters::ClusterEndpoint> {
        self.clusters.get(name)
    }

    /// The target keys an attempt of `spec` holds while leased, with the
    /// limits this policy sets (recorded in its `created` event).
    pub fn target_keys(&self, spec: &JobSpec) -> Vec<crate::contract::TargetKey> {
        self.concurrency.keys_for(spec)
    }

    /// The digest of the policy as loaded (`sha256:<hex>` of the file),
    /// recorded in every attempt's first event.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// Reserves a secret location (`<mount>`, path with `{tenant}`) as
    /// execplane's own: no tenant's JobSpec reads or writes it.
    pub fn reserve_secrets(&mut self, location: (String, String)) {
        if !self.reserved_secrets.contains(&location) {
            self.reserved_secrets.push(location);
            self.built.clear();
        }
    }

    /// The effective rules of `tenant`, built the first time it is asked
    /// for (see `TenantMemo`).
    pub fn tenant(&self, tenant: &str) -> Arc<TenantPolicy> {
        self.built.get_or_build(tenant, || {
            let rules = self.tenants.get(tenant).cloned().unwrap_or_default();
            self.build(tenant, &rules, &mut Vec::new())
        })
    }

    fn build(&self, tenant: &str, rules: &TenantRules, problems: &mut Vec<String>) -> TenantPolicy {
        let read = rules
            .secret_prefixes
            .clone()
            .or_else(|| self.defaults.secret_prefixes.clone())
            .unwrap_or_else(|| vec![OWN_PREFIX.into()]);
        let write = rules
            .secret_write_prefixes
            .clone()
            .or_else(|| self.defaults.secret_write_prefixes.clone())
            .unwrap_or_else(|| vec![OWN_PREFIX.into()]);
        let secret_prefixes = parse_prefixes(tenant, &read, problems);
        let secret_write_prefixes = parse_prefixes(tenant, &write, problems);
        let destinations = rules
            .destinations
            .clone()
            .or_else(|| self.defaults.destinations.clone())
            .unwrap_or_default();
        let mut deny = destinations.deny.clone();
        deny.extend(ALWAYS_DENIED.iter().map(|entry| (*entry).to_owned()));
        let operations = self.operation_rules(tenant, rules, problems);
        let callback_topics = rules
            .callback_topics
            .as_ref()
            .or(self.defaults.callback_topics.as_ref())
            .map(|prefixes| {
                prefixes
                    .iter()
                    .filter(|prefix| {
                        let problem = topic_prefix_problem(prefix);
                        if let Some(problem) = &problem {
                            problems.push(format!(
                                "tenant {tenant}: callback_topics: `{}`: {problem}",
                                prefix.escape_debug()
                            ));
                        }
                        problem.is_none()
                    })
                    .map(|prefix| prefix.replace("{tenant}", tenant))
                    .collect()
            })
            .unwrap_or_default();
        TenantPolicy {
            operations,
            callback_topics,
            reserved_secrets: self.reserved_secrets.clone(),
            secret_prefixes,
            secret_write_prefixes,
            destinations: DestinationPolicy::new(
                &destinations,
                &deny,
                &format!("tenant {tenant}: destinations"),
                problems,
            ),
        }
    }

    /// A tenant's operation rules: its section's fields, else the defaults'.
    fn operation_rules(
        &self,
        tenant: &str,
        rules: &TenantRules,
        problems: &mut Vec<String>,
    ) -> OperationRules {
        fn pick<T: Clone>(own: &Option<T>, defaults: &Option<T>) -> Option<T> {
            own.clone().or_else(|| defaults.clone())
        }
        let defaults = &self.defaults;
        let operations =
            pick(&rules.operations, &defaults.operations).unwrap_or_else(|| vec!["*".into()]);
        for entry in &operations {
            if let Some(problem) = rules::operation_pattern_problem(entry) {
                problems.push(format!("tenant {tenant}: operations: {problem}"));
            }
        }
        let ssh: SshRules = pick(&rules.ssh, &defaults.ssh).unwrap_or_default();
        for id in &ssh.templates {
            if !self.ssh_templates.contains_key(id) {
                problems.push(format!(
                    "tenant {tenant}: ssh.templates: `{id}` is not in ssh_templates"
                ));
            }
        }
        let kubernetes: KubernetesRules =
            pick(&rules.kubernetes, &defaults.kubernetes).unwrap_or_default();
        for name in kubernetes.clusters.keys() {
            if !self.clusters.contains_key(name) {
                problems.push(format!(
                    "tenant {tenant}: kubernetes.clusters: `{name}` is not in clusters"
                ));
            }
        }
        let ansible: AnsibleRules = pick(&rules.ansible, &defaults.ansible).unwrap_or_default();
        let opentofu: TofuRules = pick(&rules.opentofu, &defaults.opentofu).unwrap_or_default();
        let digests = ansible
            .packages
            .iter()
            .map(|package| ("ansible.packages", &package.digest))
            .chain(
                opentofu
                    .modules
                    .iter()
                    .map(|digest| ("opentofu.modules", digest)),
            );
        for name in &opentofu.env {
            if !crate::contract::ops::opentofu::is_env_name(name)
                || crate::contract::ops::opentofu::is_reserved_env(name)
            {
                problems.push(format!(
                    "tenant {tenant}: opentofu.env: `{name}` is not a name a tenant may set (A-Z, 0-9, `_`; not TF_*, PG*, LD_*, PATH, HOME, TMPDIR, CHECKPOINT_DISABLE: the runner's own)"
                ));
            }
        }
        for (field, digest) in digests {
            if crate::contract::artifact_ref::InputRef::parse(digest).is_err() {
                problems.push(format!(
                    "tenant {tenant}: {field}: `{digest}` is not sha256:<64 hex digits>"
                ));
            }
        }
        let mut helm: HelmRules = pick(&rules.helm, &defaults.helm).unwrap_or_default();
        if helm.marketplace {
            helm.market = self.helm_marketplace.clone();
        }
        OperationRules {
            operations,
            grants: pick(&rules.grants, &defaults.grants).unwrap_or_default(),
            kubernetes,
            helm,
            ansible,
            ssh,
            opentofu,
        }
    }

    /// The tenants the file names (others get the defaults).
    pub fn tenant_names(&self) -> Vec<&str> {
        self.tenants.keys().map(String::as_str).collect()
    }

    /// Every policy problem of a JobSpec that can be found before anything
    /// runs: the operation, the flags and the per-runner rules of its
    /// tenant (naming the rule), secret references outside the tenant's
    /// prefixes, and destinations (probe targets, the callback URL) that
    /// are literal denied addresses or denied names.
    pub fn check_jobspec(&self, spec: &JobSpec) -> Vec<Problem> {
        let tenant = self.tenant(&spec.tenant);
        let mut problems = rules::Check {
            spec,
            tenant: &tenant,
            rules: &tenant.operations,
            requires: &self.requires,
            templates: &self.ssh_templates,
            problems: Vec::new(),
        }
        .run();
        for (index, secret) in spec.secret_refs.iter().enumerate() {
            if tenant.secret_reserved(&secret.mount, &secret.path) {
                problems.push(Problem::new(
                    format!("secret_refs[{index}]"),
                    RESERVED_SECRET,
                ));
                continue;
            }
            let writes = secret.generate.is_some();
            if writes && !tenant.secret_writable(&secret.mount, &secret.path) {
                problems.push(Problem::new(
                    format!("secret_refs[{index}].generate"),
                    format!(
                        "tenant `{}` may not write `{}/{}`: outside the operator's secret write prefixes for it",
                        spec.tenant, secret.mount, secret.path
                    ),
                ));
            }
            if !tenant.secret_allowed(&secret.mount, &secret.path) {
                problems.push(Problem::new(
                    format!("secret_refs[{index}]"),
                    format!(
                        "tenant `{}` may not read `{}/{}`: outside the operator's secret prefixes for it",
                        spec.tenant, secret.mount, secret.path
                    ),
                ));
            }
        }
        for (path, host) in destinations_of(spec) {
            if let Err(message) = tenant.destinations.check_name(&host) {
                problems.push(Problem::new(path, message));
            }
        }
        let topic = spec
            .callback
            .as_ref()
            .and_then(|callback| callback.topic.as_deref());
        if let Some(refused) = topic.and_then(|topic| tenant.callback_topic_refused(topic)) {
            problems.push(Problem::new("callback.topic", refused));
        }
        problems
    }
}

/// The hosts a JobSpec asks execplane to connect to, with their field paths.
pub fn destinations_of(spec: &JobSpec) -> Vec<(String, String)> {
    let mut hosts = Vec::new();
    let url_host = |url: &str| {
        reqwest::Url::parse(url)
            .ok()
            .and_then(|url| url.host_str().map(str::to_owned))
    };
    if let Some(url) = spec
        .callback
        .as_ref()
        .and_then(|callback| callback.url.as_deref())
    {
        if let Some(host) = url_host(url) {
            hosts.push(("callback.url".to_owned(), host));
        }
    }
    let inputs = &spec.inputs;
    match spec.operation.as_str() {
        "verify.http.endpoint" => {
            if let Some(host) = inputs
                .get("url")
                .and_then(|url| url.as_str())
                .and_then(url_host)
            {
                hosts.push(("inputs.url".to_owned(), host));
            }
        }
        "verify.tcp.connect" | "verify.postgres.ready" => {
            if let Some(host) = inputs.get("host").and_then(|host| host.as_str()) {
                hosts.push(("inputs.host".to_owned(), host.to_owned()));
            }
        }
        _ => {}
    }
    hosts
}

/// The addresses of `host:port` this policy allows: resolved once, every
/// address checked, so the caller connects to exactly what was checked (a
/// second resolution could answer differently: DNS rebinding).
pub async fn resolve_allowed(
    policy: &DestinationPolicy,
    host: &str,
    port: u16,
) -> Result<Vec<std::net::SocketAddr>, String> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(address) = bare.parse::<IpAddr>() {
        policy.check(None, address)?;
        return Ok(vec![std::net::SocketAddr::new(address, port)]);
    }
    policy.check_name(bare)?;
    let resolved: Vec<std::net::SocketAddr> = tokio::net::lookup_host((bare, port))
        .await
        .map_err(|error| format!("cannot resolve `{bare}`: {error}"))?
        .collect();
    let mut refusals = Vec::new();
    let allowed: Vec<std::net::SocketAddr> = resolved
        .into_iter()
        .filter(|address| match policy.check(Some(bare), address.ip()) {
            Ok(()) => true,
            Err(refusal) => {
                refusals.push(refusal);
                false
            }
        })
        .collect();
    if allowed.is_empty() {
        return Err(match refusals.first() {
            Some(refusal) => format!("`{bare}` resolves only to refused addresses: {refusal}"),
            None => format!("`{bare}` resolves to no address"),
        });
    }
    Ok(allowed)
}

/// A reqwest resolver that answers only with addresses the policy allows.
struct PolicyResolver(DestinationPolicy);

impl reqwest::dns::Resolve for PolicyResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.0.clone();
        Box::pin(async move {
            let addresses = resolve_allowed(&policy, name.as_str(), 0).await.map_err(
                |message| -> Box<dyn std::error::Error + Send + Sync> { message.into() },
            )?;
            let addresses: reqwest::dns::Addrs = Box::new(addresses.into_iter());
            Ok(addresses)
        })
    }
}

/// An HTTP client bound to a destination policy: every connection, the
/// first and each redirect hop (at most `max_redirects`), goes only to an
/// address the policy allows, after resolution. A literal address in a URL
/// is not resolved; [`check_url`] and the redirect policy check it.
pub fn http_client(
    policy: &DestinationPolicy,
    max_redirects: usize,
) -> Result<reqwest::Client, String> {
    let redirect_policy = policy.clone();
    reqwest::Client::builder()
        // A proxy would resolve the name itself, past the policy's resolver.
        .no_proxy()
        .dns_resolver(std::sync::Arc::new(PolicyResolver(policy.clone())))
        .redirect(reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() >= max_redirects {
                return attempt.error(format!("more than {max_redirects} redirects"));
            }
            match check_url(&redirect_policy, attempt.url()) {
                Ok(()) => attempt.follow(),
                Err(refusal) => attempt.error(format!("redirect refused: {refusal}")),
            }
        }))
        .build()
        .map_err(|error| format!("cannot build an HTTP client: {error}"))
}

/// An HTTP client error and its causes (a policy refusal is one of them),
/// without the URL (its query may carry something private).
pub fn describe_http_error(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    if let Some(url) = error.url() {
        text = text
            .replace(&format!(" ({url})"), "")
            .replace(url.as_str(), "<url>");
    }
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// What can be checked of a URL before connecting: its scheme, and its host
/// when that is a literal address or a denied name.
pub fn check_url(policy: &DestinationPolicy, url: &reqwest::Url) -> Result<(), String> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("scheme `{}` is not http or https", url.scheme()));
    }
    match url.host() {
        Some(url::Host::Ipv4(address)) => policy.check(None, IpAddr::V4(address)),
        Some(url::Host::Ipv6(address)) => policy.check(None, IpAddr::V6(address)),
        Some(url::Host::Domain(name)) => policy.check_name(name),
        None => Err("the URL has no host".into()),
    }
}

#[cfg(test)]
mod rule_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn by_default_a_tenant_reads_only_secrets_under_its_own_name() {
        let policy = OperatorPolicy::default();
        let team_a = policy.tenant("team-a");
        assert!(team_a.secret_allowed("secret", "team-a/db"));
        assert!(team_a.secret_allowed("kv", "/team-a/app/api/"));
        assert!(!team_a.secret_allowed("secret", "team-b/db"));
        assert!(!team_a.secret_allowed("secret", "team-a-evil/db"));
        assert!(!team_a.secret_allowed("secret", "apps/team-a/db"));
    }

    #[test]
    fn tenant_names_and_callback_topic_prefixes_cannot_reach_another_tenant() {
        // A `/` would put tenant `execplane/team-b` under team-b's secrets,
        // an unclosed `{tenant}` tenant `team` over team-a's topics.
        for (file, problem) in [
            ("tenants:\n  execplane/team-b: {}\n", "is not a tenant name"),
            ("tenants:\n  Team-A: {}\n", "is not a tenant name"),
            ("tenants:\n  team_a: {}\n", "is not a tenant name"),
            (
                "principals:\n  p:\n    key_sha256: \"0000000000000000000000000000000000000000000000000000000000000000\"\n    roles: {\"a/b\": [viewer]}\n",
                "is not a tenant name",
            ),
            (
                "defaults:\n  callback_topics: [\"callbacks.{tenant}\"]\n",
                "must be followed by `.` or `_`",
            ),
            (
                "tenants:\n  a:\n    callback_topics: [\"{tenant}-x.\"]\n",
                "must be followed by `.` or `_`",
            ),
        ] {
            let problems = OperatorPolicy::from_yaml(file).unwrap_err();
            assert!(
                problems.iter().any(|found| found.contains(problem)),
                "{file}: {problems:?}"
            );
        }
        let policy =
            OperatorPolicy::from_yaml("defaults:\n  callback_topics: [\"callbacks.{tenant}.\"]\n")
                .unwrap();
        let team = policy.tenant("team");
        assert!(team.callback_topic_refused("callbacks.team.done").is_none());
        assert!(team
            .callback_topic_refused("callbacks.team-a.done")
            .is_some());
    }

    #[test]
    fn a_shared_prefix_is_read_only_and_a_mount_never_spells_another_s_paths() {
        let policy = OperatorPolicy::from_toml(
            r#"
            [tenants.team-a]
            secret_prefixes = ["secret/team-a", "secret/shared/", "*/{tenant}/"]
            "#,
        )
        .unwrap();
        let team_a = policy.tenant("team-a");
        assert!(team_a.secret_allowed("secret", "shared/db"));
        assert!(!team_a.secret_writable("secret", "shared/db"), "read-only");
        assert!(team_a.secret_writable("secret", "team-a/db"));
        assert!(team_a.secret_allowed("secret", "team-a"));
        // A prefix written without its `/` is still a whole segment.
        assert!(!team_a.secret_allowed("secret", "team-a-evil/db"));
        // Under `*`, one mount segment: `secret/data/team-b/x` + `team-a/y`
        // is team-b's KV path.
        for mount in ["secret/data/team-b/app", "kv/x"] {
            assert!(!team_a.secret_allowed(mount, "team-a/x"), "{mount}");
            assert!(!team_a.secret_writable(mount, "team-a/x"), "{mount}");
        }
        let writer = OperatorPolicy::from_toml(
            r#"
            [defaults]
            secret_write_prefixes = ["kv/{tenant}/generated/"]
            "#,
        )
        .unwrap()
        .tenant("team-b");
        assert!(writer.secret_writable("kv", "team-b/generated/db"));
        assert!(!writer.secret_writable("secret", "team-b/db"));
        assert!(writer.secret_allowed("secret", "team-b/db"));
    }

    #[test]
    fn a_tenant_section_replaces_the_defaults_and_metadata_stays_denied() {
        let policy = OperatorPolicy::from_toml(
            r#"
            [defaults]
            secret_prefixes = ["secret/{tenant}/"]
            [defaults.destinations]
            deny = ["10.0.0.0/8", "internal.example"]
            [tenants.team-a]
            secret_prefixes = ["secret/shared/", "kv/team-a/"]
            [tenants.team-a.destinations]
            allow = ["127.0.0.0/8", "api.example.com"]
            "#,
        )
        .unwrap();
        let team_a = policy.tenant("team-a");
        assert!(
            team_a.secret_allowed("secret", "shared/x") && team_a.secret_allowed("kv", "team-a/x")
        );
        assert!(!team_a.secret_allowed("secret", "team-a/x"));
        let team_b = policy.tenant("team-b");
        assert!(
            team_b.secret_allowed("secret", "team-b/x") && !team_b.secret_allowed("kv", "team-b/x")
        );
        // team-b: the default deny list; everything else public allowed,
        // nothing loopback or private in any spelling.
        assert!(team_b.destinations.check(None, ip("10.1.2.3")).is_err());
        assert!(team_b.destinations.check(None, ip("192.0.2.1")).is_ok());
        assert!(team_b
            .destinations
            .check(None, ip("64:ff9b::c000:201"))
            .is_ok());
        assert!(team_b.destinations.check(None, ip("2001:db8::1")).is_ok());
        assert!(team_b.destinations.check_name("internal.example").is_err());
        for private in [
            "127.0.0.1",
            "127.1.2.3",
            "::1",
            "::ffff:127.0.0.1",
            "0.0.0.0",
            "::",
            "172.20.0.1",
            "192.168.1.1",
            "100.64.0.1",
            "fd12::1",
            "64:ff9b::c0a8:101",
            "64:ff9b:1::1",
            "::7f00:1",
            "::ffff:0:c0a8:101",
            "2002:c0a8:101::",
        ] {
            let refused = team_b.destinations.check(None, ip(private)).unwrap_err();
            assert!(refused.contains("allow_private"), "{private}: {refused}");
        }
        assert!(team_b
            .destinations
            .check(Some("localhost"), ip("127.0.0.1"))
            .is_err());
        // team-a: an allow list, by address or by name.
        assert!(team_a.destinations.check(None, ip("127.0.0.1")).is_ok());
        assert!(team_a
            .destinations
            .check(Some("api.example.com"), ip("192.0.2.9"))
            .is_ok());
        assert!(team_a.destinations.check(None, ip("192.0.2.9")).is_err());
        // Metadata and link-local, for everyone, in every spelling.
        for tenant in [&team_a, &team_b] {
            assert!(tenant
                .destinations
                .check(None, ip("169.254.169.254"))
                .is_err());
            assert!(tenant
                .destinations
                .check(None, ip("::ffff:169.254.169.254"))
                .is_err());
            assert!(tenant.destinations.check_name("[fe80::1]").is_err());
            assert!(tenant
                .destinations
                .check_name("metadata.google.internal.")
                .is_err());
        }
    }

    #[test]
    fn private_networks_open_only_where_the_operator_names_them() {
        let policy = OperatorPolicy::from_yaml(
            r#"
            tenants:
              open:
                destinations: {allow_private: ["127.0.0.1/32", "db.internal"]}
              listed:
                destinations: {allow: ["10.20.0.0/16", "api.example.com", "192.0.2.0/24"]}
              world:
                destinations: {allow: ["0.0.0.0/0", "::/0"]}
            "#,
        )
        .unwrap();
        let open = policy.tenant("open").destinations.clone();
        assert!(open.check(None, ip("127.0.0.1")).is_ok());
        assert!(open.check(None, ip("127.0.0.2")).is_err());
        assert!(open.check(Some("db.internal"), ip("10.9.9.9")).is_ok());
        // allow_private adds to an empty allow list: public stays open.
        assert!(open.check(None, ip("192.0.2.1")).is_ok());
        // Metadata stays denied whatever is allowed.
        assert!(open.check(None, ip("169.254.169.254")).is_err());
        let listed = policy.tenant("listed").destinations.clone();
        assert!(listed.check(None, ip("10.20.3.4")).is_ok());
        assert!(listed.check(None, ip("10.21.3.4")).is_err());
        // A name in `allow` is a public destination: the tenant who holds
        // its DNS could point it at the platform's own private addresses.
        let refused = listed
            .check(Some("api.example.com"), ip("10.1.1.1"))
            .unwrap_err();
        // What the platform's DNS answered is not said to the tenant.
        assert!(
            refused.contains("`api.example.com`") && !refused.contains("10.1.1.1"),
            "{refused}"
        );
        assert!(listed
            .check(Some("api.example.com"), ip("198.51.100.9"))
            .is_ok());
        assert!(listed.check(None, ip("192.0.2.7")).is_ok());
        // The whole internet is not the private networks.
        let world = policy.tenant("world").destinations.clone();
        assert!(world.check(None, ip("198.51.100.1")).is_ok());
        for private in ["127.0.0.1", "10.0.0.1", "::1", "fd00::1"] {
            assert!(world.check(None, ip(private)).is_err(), "{private}");
        }
        // allow_private is for private networks only.
        let problems = OperatorPolicy::from_yaml(
            "tenants:\n  a:\n    destinations: {allow_private: [\"0.0.0.0/0\", \"8.8.8.8\"]}\n",
        )
        .unwrap_err();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("allow_private"), "{problems:?}");
    }

    #[test]
    fn a_bad_policy_file_names_every_problem() {
        let problems = OperatorPolicy::from_toml(
            r#"
            [tenants.a]
            secret_prefixes = ["nomount"]
            destinations = { allow = ["10.0.0.0/33"], deny = ["not a host!"] }
            "#,
        )
        .unwrap_err();
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(OperatorPolicy::from_toml("[tenants.a]\nsecrets = []\n").is_err());
    }
}
