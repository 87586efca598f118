//! What the runners that log in to nodes over SSH (ssh, ansible) read from
//! a JobSpec alike: the login, and each target's binding (where it is and
//! the one host key accepted for it). Their failures are the JobSpec's
//! (`contract`), naming the field.

use serde_json::Value;

use crate::contract::Target;
use crate::policy::ssh::{is_host, is_user_name, HostKey, HOST_KEY_TYPES};
use crate::runner::Failure;

/// `inputs.user` and the resolved `inputs.private_key` (ending in a
/// newline, as OpenSSH wants a key file to).
pub fn login(user: Option<&str>, private_key: Option<&Value>) -> Result<(String, String), Failure> {
    let user = match user {
        Some(user) if is_user_name(user) => user.to_owned(),
        Some(user) => {
            return Err(Failure::contract(format!(
                "inputs.user: `{user}` is not a user name"
            )))
        }
        None => {
            return Err(Failure::contract(
                "inputs.user: the account on the nodes is required",
            ))
        }
    };
    let key = match private_key {
        Some(Value::String(key)) if !key.trim().is_empty() => {
            let mut key = key.clone();
            if !key.ends_with('\n') {
                key.push('\n');
            }
            key
        }
        _ => {
            return Err(Failure::contract(
                "inputs.private_key: a {\"$secret\": ...} reference to the account's OpenSSH private key is required",
            ))
        }
    };
    Ok((user, key))
}

/// A target as a node to connect to.
#[derive(Clone, Debug)]
pub struct Binding {
    /// The target's address, else its id.
    pub address: String,
    /// Its `port` attribute (22).
    pub port: u16,
    /// Its `host_key` or `host_key_fingerprint`: without one, nothing
    /// connects.
    pub host_key: HostKey,
}

impl Binding {
    /// How known_hosts names the node (`host`, or `[host]:port`).
    pub fn known_hosts_entry(&self) -> String {
        if self.port == 22 {
            self.address.clone()
        } else {
            format!("[{}]:{}", self.address, self.port)
        }
    }
}

/// The binding of `targets[index]`.
pub fn binding(index: usize, target: &Target) -> Result<Binding, Failure> {
    binding_of(index, target).map_err(Failure::contract)
}

fn binding_of(index: usize, target: &Target) -> Result<Binding, String> {
    let field = format!("targets[{index}]");
    let address = target.address.clone().unwrap_or_else(|| target.id.clone());
    if !is_host(&address) {
        return Err(format!(
            "{field}.address: `{address}` is not a host name or an IP address"
        ));
    }
    let port = match target.attributes.get("port") {
        None => 22,
        Some(port) => match port.parse::<u16>() {
            Ok(port) if port > 0 => port,
            _ => return Err(format!("{field}.attributes.port: `{port}` is not a port")),
        },
    };
    let host_key = match HostKey::of(&target.attributes) {
        Ok(host_key) => host_key,
        Err(true) => return Err(format!(
            "{field}: node `{}` has no known host key; set attributes.host_key to its known_hosts key (`ssh-ed25519 AAAA...`) or attributes.host_key_fingerprint to its pinned `SHA256:...` fingerprint: unknown host keys are refused",
            target.id
        )),
        Err(false) => return Err(format!(
            "{field}.attributes: host_key is not a known_hosts key (`<type> <base64>`, type one of {}), or host_key_fingerprint not a `SHA256:<base64>` fingerprint",
            HOST_KEY_TYPES.join(", ")
        )),
    };
    Ok(Binding {
        address,
        port,
        host_key,
    })
}

/// Every target's binding; at least one target.
pub fn bindings(targets: &[Target]) -> Result<Vec<Binding>, Failure> {
    if targets.is_empty() {
        return Err(Failure::contract(
            "targets: the nodes to run on are required",
        ));
    }
    targets
        .iter()
        .enumerate()
        .map(|(index, target)| binding(index, target))
        .collect()
}
