//! SSH command templates: the operator's catalogue of what may run on a
//! node, each a program with typed arguments and an explicit sudo policy.
//! A JobSpec names a template and gives argument values; it never writes a
//! command line. Every value is checked against its type here, before
//! anything connects (docs/ARCHITECTURE.md, "Operator policy"). And a
//! tenant's ssh rules: the templates it may use, and the nodes it may name
//! as targets (for every operation).

use std::collections::BTreeMap;
use std::path::{Component, Path};

use serde::Deserialize;
use serde_json::Value;

use crate::contract::Problem;

/// One template, as written in the policy file.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SshTemplate {
    /// The program on the node: an absolute path, run with an argument
    /// vector (never through a shell).
    pub program: String,
    /// Fixed arguments before the typed ones (`["-h"]`).
    #[serde(default)]
    pub fixed_args: Vec<String>,
    /// A service template's status query: the fixed arguments that replace
    /// `fixed_args` for the command `ssh.service.restart` runs after the
    /// restart (`["is-active"]` for `systemctl`). Its output and exit code
    /// are the restart's evidence.
    #[serde(default)]
    pub status_args: Vec<String>,
    /// The arguments a JobSpec may give, in the order they are passed.
    #[serde(default)]
    pub args: Vec<ArgSpec>,
    /// Whether it runs through sudo, and as whom. Recorded in the attempt's
    /// events; a template without sudo cannot escalate.
    #[serde(default)]
    pub sudo: Sudo,
    /// The one ssh operation it serves (`ssh.command.run` when not given):
    /// a file template's program is an SFTP server, a fact template's a
    /// `uname` the runner passes its own words to, so a template approved
    /// for one operation is never run as another.
    #[serde(default = "command_run")]
    pub operation: String,
}

fn command_run() -> String {
    "ssh.command.run".to_owned()
}

/// A template's sudo policy: `none`, or `{as: <user>}`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(try_from = "SudoText")]
pub enum Sudo {
    #[default]
    None,
    As(String),
}

/// How a sudo policy is written, the same in YAML and TOML.
#[derive(Deserialize)]
#[serde(untagged)]
enum SudoText {
    Word(String),
    As {
        #[serde(rename = "as")]
        user: String,
    },
}

impl TryFrom<SudoText> for Sudo {
    type Error = String;

    fn try_from(text: SudoText) -> Result<Self, String> {
        match text {
            SudoText::Word(word) if word == "none" => Ok(Sudo::None),
            SudoText::Word(word) => Err(format!("sudo `{word}`: write `none` or `{{as: <user>}}`")),
            SudoText::As { user } => Ok(Sudo::As(user)),
        }
    }
}

/// The types an argument can have.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ArgKind {
    /// One of `values`.
    Enum,
    /// An integer within `min..=max`.
    Int,
    /// A DNS host name or an IP address.
    Hostname,
    /// An absolute, normalised path under `root`.
    Path,
    /// A string matching `pattern` (the whole of it).
    String,
}

/// One typed argument of a template.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ArgSpec {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: ArgKind,
    #[serde(default)]
    pub values: Vec<String>,
    #[serde(default)]
    pub min: Option<i64>,
    #[serde(default)]
    pub max: Option<i64>,
    #[serde(default)]
    pub root: Option<String>,
    #[serde(default)]
    pub pattern: Option<String>,
    /// A required argument must be given (the default).
    #[serde(default = "required_by_default")]
    pub required: bool,
}

fn required_by_default() -> bool {
    true
}

/// Longest argument value accepted, in bytes.
pub const MAX_ARG_BYTES: usize = 4096;

impl SshTemplate {
    /// Every problem of the template itself (at load).
    pub fn problems(&self, id: &str) -> Vec<String> {
        let mut problems = Vec::new();
        let at = |what: String| format!("ssh_templates.{id}: {what}");
        let serves_ssh = self
            .operation
            .parse::<crate::contract::Operation>()
            .is_ok_and(|operation| operation.runner_type() == crate::contract::RunnerType::Ssh);
        if !serves_ssh {
            problems.push(at(format!(
                "operation `{}` is not an ssh operation",
                self.operation
            )));
        }
        if !Path::new(&self.program).is_absolute() || has_control(&self.program) {
            problems.push(at(format!(
                "program `{}` is not an absolute path",
                self.program
            )));
        }
        if let Sudo::As(user) = &self.sudo {
            if !is_user_name(user) {
                problems.push(at(format!("sudo user `{user}` is not a user name")));
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        for arg in &self.args {
            if !seen.insert(arg.name.as_str()) {
                problems.push(at(format!("argument `{}` is declared twice", arg.name)));
            }
            if let Err(problem) = arg.definition() {
                problems.push(at(format!("argument `{}`: {problem}", arg.name)));
            }
        }
        problems
    }

    /// The declared argument named `name`.
    pub fn arg(&self, name: &str) -> Option<&ArgSpec> {
        self.args.iter().find(|arg| arg.name == name)
    }

    /// Checks a JobSpec's argument values: every one declared, every
    /// required one present, each of its type. One message per problem,
    /// naming the argument.
    pub fn check_args(&self, args: &BTreeMap<String, Value>) -> Vec<String> {
        let mut problems = Vec::new();
        for name in args.keys() {
            if self.arg(name).is_none() {
                problems.push(format!("argument `{name}` is not declared by the template"));
            }
        }
        for spec in &self.args {
            match args.get(&spec.name) {
                Some(value) => {
                    if let Err(problem) = spec.check(value) {
                        problems.push(format!("argument `{}`: {problem}", spec.name));
                    }
                }
                None if spec.required => {
                    problems.push(format!("argument `{}` is required", spec.name));
                }
                None => {}
            }
        }
        problems
    }
}

impl ArgSpec {
    /// Whether the declaration is complete for its type.
    fn definition(&self) -> Result<(), String> {
        match self.kind {
            ArgKind::Enum if self.values.is_empty() => Err("an enum needs `values`".into()),
            ArgKind::Int => match (self.min, self.max) {
                (Some(min), Some(max)) if min <= max => Ok(()),
                _ => Err("an int needs `min` <= `max`".into()),
            },
            ArgKind::Path => match &self.root {
                Some(root) if is_clean_absolute(root) => Ok(()),
                _ => Err("a path needs an absolute, normalised `root`".into()),
            },
            ArgKind::String => match &self.pattern {
                Some(pattern) => anchored(pattern).map(|_| ()),
                None => Err("a string needs a `pattern`".into()),
            },
            _ => Ok(()),
        }
    }

    /// Whether `value` is a value of this argument.
    pub fn check(&self, value: &Value) -> Result<(), String> {
        if self.kind == ArgKind::Int {
            let number = value
                .as_i64()
                .ok_or_else(|| format!("`{value}` is not an integer"))?;
            // As a word, `-5` is an option to most programs.
            if number < 0 {
                return Err(format!(
                    "{number} is negative: on the command line it would be read as an option"
                ));
            }
            let (min, max) = (self.min.unwrap_or(i64::MIN), self.max.unwrap_or(i64::MAX));
            return if (min..=max).contains(&number) {
                Ok(())
            } else {
                Err(format!("{number} is outside {min}..={max}"))
            };
        }
        let Some(text) = value.as_str() else {
            return Err(format!("`{value}` is not a string"));
        };
        if text.is_empty() || text.len() > MAX_ARG_BYTES {
            return Err(format!("must be 1 to {MAX_ARG_BYTES} bytes"));
        }
        if has_control(text) {
            return Err("holds a control character (a newline, a NUL, ...)".into());
        }
        match self.kind {
            ArgKind::Enum => self
                .values
                .iter()
                .any(|allowed| allowed == text)
                .then_some(())
                .ok_or_else(|| format!("`{text}` is not one of {}", self.values.join(", "))),
            ArgKind::Hostname => {
                if is_host(text) {
                    Ok(())
                } else {
                    Err(format!("`{text}` is not a host name or an address"))
                }
            }
            ArgKind::Path => {
                let root = self.root.as_deref().unwrap_or("/");
                if !is_clean_absolute(text) {
                    Err(format!(
                        "`{text}` is not an absolute path without `.` or `..`"
                    ))
                } else if !Path::new(text).starts_with(root) {
                    Err(format!("`{text}` is not under {root}"))
                } else {
                    Ok(())
                }
            }
            ArgKind::String => {
                // An option smuggled into a string would be read as one.
                if text.starts_with('-') {
                    return Err(format!("`{text}` starts with `-`"));
                }
                let pattern = self.pattern.as_deref().unwrap_or("");
                let regex = anchored(pattern)?;
                if regex.is_match(text) {
                    Ok(())
                } else {
                    Err(format!("`{text}` does not match {pattern}"))
                }
            }
            ArgKind::Int => Ok(()),
        }
    }
}

/// The whole-value form of an operator's pattern.
fn anchored(pattern: &str) -> Result<regex::Regex, String> {
    regex::Regex::new(&format!("^(?:{pattern})$"))
        .map_err(|error| format!("pattern `{pattern}`: {error}"))
}

/// An IP address or a DNS host name: what may be connected to, and never
/// an option to the program that connects.
pub fn is_host(text: &str) -> bool {
    text.parse::<std::net::IpAddr>().is_ok() || is_dns_name(text)
}

/// RFC 1123 labels: letters, digits and inner hyphens (so never an option).
fn is_dns_name(text: &str) -> bool {
    text.len() <= 253
        && text.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// An absolute path with no `.`, `..` or empty segment, no trailing `/`
/// (but `/` itself), and only characters no shell gives a meaning to
/// (letters, digits, `/._-+=@%:,`): a path argument is inert however the
/// node's side reads it.
fn is_clean_absolute(text: &str) -> bool {
    if text == "/" {
        return true;
    }
    let inert = |c: char| c.is_ascii_alphanumeric() || "/._-+=@%:,".contains(c);
    text.starts_with('/')
        && !text.ends_with('/')
        && !text.contains("//")
        && text.chars().all(inert)
        && Path::new(text)
            .components()
            .all(|component| matches!(component, Component::RootDir | Component::Normal(_)))
        && !text
            .split('/')
            .any(|segment| segment == "." || segment == "..")
}

fn has_control(text: &str) -> bool {
    text.chars().any(char::is_control)
}

/// Key types a node binding's `host_key` may have.
pub const HOST_KEY_TYPES: [&str; 6] = [
    "ssh-ed25519",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "rsa-sha2-512",
    "ssh-rsa",
];

/// A node binding's `host_key` (`<type> <base64> [comment]`) as the
/// `<type> <base64>` a known_hosts line takes; `None` when it is not one.
pub fn known_host_key(text: &str) -> Option<String> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let valid = matches!(words.as_slice(), [kind, blob] | [kind, blob, _]
        if HOST_KEY_TYPES.contains(kind)
            && blob.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=')));
    valid.then(|| format!("{} {}", words[0], words[1]))
}

/// A node binding's `host_key_fingerprint` (`SHA256:<base64>`, as
/// `ssh-keygen -l` prints it) when it is one.
pub fn pinned_fingerprint(text: &str) -> Option<String> {
    let digest = text.trim().strip_prefix("SHA256:")?;
    let valid = digest.len() == 43
        && digest
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '+' || c == '/');
    valid.then(|| format!("SHA256:{digest}"))
}

/// The `SHA256:<base64>` fingerprint of a host key given as its base64
/// blob (the second word of a known_hosts line).
pub fn fingerprint_of(blob: &str) -> Option<String> {
    use base64::Engine;
    use sha2::Digest;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(blob.trim())
        .ok()?;
    let digest = sha2::Sha256::digest(&bytes);
    Some(format!(
        "SHA256:{}",
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(digest)
    ))
}

/// How a node's host key is known: the key itself, or its pinned
/// fingerprint. Either is the only key accepted for the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostKey {
    /// `<type> <base64>`, a known_hosts key.
    Key(String),
    /// `SHA256:<base64>`, checked by `execplane known-host` when the node
    /// offers its key (OpenSSH's `KnownHostsCommand`).
    Fingerprint(String),
}

impl HostKey {
    /// From a target's attributes: `host_key`, else `host_key_fingerprint`.
    /// `Err(true)` when neither is there; `Err(false)` when one is not
    /// what it must be.
    pub fn of(attributes: &std::collections::BTreeMap<String, String>) -> Result<Self, bool> {
        if let Some(key) = attributes.get("host_key") {
            return known_host_key(key).map(HostKey::Key).ok_or(false);
        }
        if let Some(pin) = attributes.get("host_key_fingerprint") {
            return pinned_fingerprint(pin)
                .map(HostKey::Fingerprint)
                .ok_or(false);
        }
        Err(true)
    }
}

/// `execplane known-host PINS HOST TYPE KEY`, OpenSSH's `KnownHostsCommand`
/// for pinned nodes: prints `HOST TYPE KEY` (a known_hosts line the client
/// then accepts) exactly when PINS (lines `<known_hosts host> SHA256:…`)
/// pins HOST to the fingerprint of KEY; nothing otherwise, and the client
/// refuses the key.
pub fn known_host_line(pins: &str, host: &str, kind: &str, key: &str) -> Option<String> {
    if !HOST_KEY_TYPES.contains(&kind) {
        return None;
    }
    let offered = fingerprint_of(key)?;
    pins.lines()
        .filter_map(|line| line.split_once(' '))
        .any(|(entry, pin)| entry == host && pin.trim() == offered)
        .then(|| format!("{host} {kind} {key}"))
}

/// A POSIX-style account name of at most 32 bytes, never an option.
pub fn is_user_name(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 32
        && !text.starts_with('-')
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
}

/// A tenant's ssh rules: the templates it may use, the nodes it may name
/// and the ports it may log in to them at.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SshRules {
    /// Template ids from the operator's `ssh_templates`.
    #[serde(default)]
    pub templates: Vec<String>,
    /// The nodes it may name in `targets` (any operation: each takes a
    /// `node:` key) and so reach: target ids, host names or CIDRs.
    #[serde(default)]
    pub nodes: Vec<String>,
    /// The ports an ssh or ansible target's `port` attribute may name
    /// (22 when it names none). ansible runs held to its nodes at these
    /// ports, so a port is a service of the node the tenant's plays reach
    /// (docs/SECURITY.md, "Network"). Default: `[22]`.
    #[serde(default = "ssh_port")]
    pub ports: Vec<u16>,
}

fn ssh_port() -> Vec<u16> {
    vec![22]
}

impl Default for SshRules {
    fn default() -> Self {
        Self {
            templates: Vec::new(),
            nodes: Vec::new(),
            ports: ssh_port(),
        }
    }
}

impl super::rules::Check<'_> {
    pub(super) fn ssh_command(&mut self, command: &crate::contract::ops::SshCommand) {
        let Some(template) = self.ssh_template(&command.template_id) else {
            return;
        };
        for problem in template.check_args(&command.args) {
            self.refuse("inputs.args", "ssh.templates", problem);
        }
        if command.sudo && template.sudo == Sudo::None {
            let message = format!(
                "template `{}` does not run through sudo",
                command.template_id
            );
            self.refuse("inputs.sudo", "ssh.templates", message);
        }
    }

    pub(super) fn ssh_facts(&mut self, facts: &crate::contract::ops::SshFacts) {
        let Some(template) = self.ssh_template(&facts.template_id) else {
            return;
        };
        let Some(spec) = template.arg("facts") else {
            return;
        };
        for (index, fact) in facts.facts.iter().enumerate() {
            if let Err(problem) = spec.check(&fact.clone().into()) {
                self.refuse(format!("inputs.facts[{index}]"), "ssh.templates", problem);
            }
        }
    }

    pub(super) fn ssh_template(&mut self, id: &str) -> Option<SshTemplate> {
        if !self.rules.ssh.templates.iter().any(|allowed| allowed == id) {
            let message = format!(
                "tenant `{}` may not use ssh template `{id}`",
                self.spec.tenant
            );
            self.refuse("inputs.template_id", "ssh.templates", message);
            return None;
        }
        let template = self.templates.get(id).cloned();
        match &template {
            None => self.problems.push(Problem::new(
                "inputs.template_id",
                format!("ssh template `{id}` is not defined (operator policy `ssh_templates`)"),
            )),
            Some(template) if template.operation != self.spec.operation.as_str() => {
                let message = format!(
                    "ssh template `{id}` serves {}, not {}",
                    template.operation, self.spec.operation
                );
                self.refuse("inputs.template_id", "ssh.templates", message);
                return None;
            }
            Some(_) => {}
        }
        template
    }

    /// A field of a file or service operation, checked as the template's
    /// argument of that name (which the template must declare).
    pub(super) fn ssh_field(&mut self, id: &str, name: &str, value: &serde_json::Value) {
        let Some(template) = self.ssh_template(id) else {
            return;
        };
        let path = format!("inputs.{name}");
        match template.arg(name) {
            Some(spec) => {
                if let Err(problem) = spec.check(value) {
                    self.refuse(
                        path,
                        "ssh.templates",
                        format!("argument `{name}`: {problem}"),
                    );
                }
            }
            None => {
                let message = format!("template `{id}` declares no `{name}` argument");
                self.refuse(path, "ssh.templates", message);
            }
        }
    }

    pub(super) fn nodes(&mut self) {
        let spec = self.spec;
        let logs_in = matches!(
            spec.operation.runner_type(),
            crate::contract::RunnerType::Ssh | crate::contract::RunnerType::Ansible
        );
        for (index, target) in spec.targets.iter().enumerate() {
            if !self.node_allowed(target) {
                let message = format!(
                    "tenant `{}` may not name node `{}` as a target",
                    spec.tenant, target.id
                );
                self.refuse(format!("targets[{index}]"), "ssh.nodes", message);
            }
            // A port that does not parse is the runner's to refuse.
            let port = match target.attributes.get("port") {
                None => Some(22),
                Some(port) => port.parse::<u16>().ok(),
            };
            if let (true, Some(port)) = (logs_in, port) {
                if !self.rules.ssh.ports.contains(&port) {
                    let message = format!(
                        "node `{}`: port {port} is not one of the tenant's ssh ports",
                        crate::contract::limits::shortened(&target.id, 64)
                    );
                    self.refuse(
                        format!("targets[{index}].attributes.port"),
                        "ssh.ports",
                        message,
                    );
                }
            }
        }
    }

    /// What is connected to must be allowed: the address when the target
    /// has one (a listed name or inside a listed network), else its id.
    pub(super) fn node_allowed(&self, target: &crate::contract::Target) -> bool {
        let listed = |text: &str| {
            self.rules.ssh.nodes.iter().any(|entry| {
                entry == text
                    || match (
                        entry.parse::<ipnet::IpNet>(),
                        text.parse::<std::net::IpAddr>(),
                    ) {
                        (Ok(network), Ok(address)) => network.contains(&address),
                        _ => false,
                    }
            })
        };
        listed(target.address.as_deref().unwrap_or(&target.id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn template() -> SshTemplate {
        serde_yaml::from_str(
            r#"
            program: /usr/bin/du
            fixed_args: ["-sh"]
            args:
              - {name: path, type: path, root: /var/log}
              - {name: depth, type: int, min: 0, max: 3, required: false}
              - {name: offset, type: int, min: -10, max: 10, required: false}
              - {name: unit, type: enum, values: [k, m], required: false}
              - {name: host, type: hostname, required: false}
              - {name: label, type: string, pattern: "[a-z0-9._-]{1,32}", required: false}
            sudo: {as: root}
            "#,
        )
        .unwrap()
    }

    fn args(value: serde_json::Value) -> BTreeMap<String, Value> {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a_pinned_fingerprint_accepts_its_key_and_no_other() {
        let blob = "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C7okWi0dh2l9GKJl";
        let pin = fingerprint_of(blob).unwrap();
        assert_eq!(pinned_fingerprint(&pin), Some(pin.clone()));
        let pins = format!("[127.0.0.1]:2222 {pin}\n");
        assert_eq!(
            known_host_line(&pins, "[127.0.0.1]:2222", "ssh-ed25519", blob),
            Some(format!("[127.0.0.1]:2222 ssh-ed25519 {blob}"))
        );
        assert_eq!(
            known_host_line(&pins, "[127.0.0.2]:2222", "ssh-ed25519", blob),
            None
        );
        let other = "AAAAC3NzaC1lZDI1NTE5AAAAIBNVnJ2lnJL6gHi1UBk+0rJkMSPfXCNnm6BF9A1CNZ6P";
        assert_eq!(
            known_host_line(&pins, "[127.0.0.1]:2222", "ssh-ed25519", other),
            None
        );
        assert_eq!(
            known_host_line(&pins, "[127.0.0.1]:2222", "bogus", blob),
            None
        );
        assert_eq!(pinned_fingerprint("MD5:ab:cd"), None);
    }

    #[test]
    fn values_of_their_type_pass() {
        let template = template();
        assert!(template.problems("du").is_empty());
        assert_eq!(template.sudo, Sudo::As("root".into()));
        let good = args(json!({
            "path": "/var/log/nginx", "depth": 2, "unit": "m",
            "host": "db-1.example.com", "label": "nightly.run-1"
        }));
        assert_eq!(template.check_args(&good), Vec::<String>::new());
        assert!(template
            .check_args(&args(json!({"path": "/var/log"})))
            .is_empty());
    }

    #[test]
    fn injection_payloads_are_refused_by_type() {
        let template = template();
        for (name, value) in [
            ("path", json!("/var/log/../../etc/shadow")),
            ("path", json!("/etc/passwd")),
            ("path", json!("/var/log/x; rm -rf /")),
            ("path", json!("/var/log/a\nb")),
            ("path", json!("var/log")),
            ("path", json!("/var/logs-elsewhere")),
            ("depth", json!(4)),
            ("offset", json!(-1)),
            ("depth", json!("2")),
            ("unit", json!("g")),
            ("host", json!("$(reboot)")),
            ("host", json!("-oProxyCommand=x")),
            ("label", json!("`id`")),
            ("label", json!("a b")),
            ("label", json!("--option")),
            ("label", json!("ok\u{0000}")),
        ] {
            let problems = template.check_args(&args(json!({"path": "/var/log", name: value})));
            assert_eq!(problems.len(), 1, "{name} = {value}: {problems:?}");
            assert!(problems[0].starts_with(&format!("argument `{name}`")));
        }
        let problems = template.check_args(&args(json!({"extra": "x"})));
        assert_eq!(
            problems,
            [
                "argument `extra` is not declared by the template",
                "argument `path` is required"
            ]
        );
    }

    #[test]
    fn incomplete_templates_are_named() {
        let bad: SshTemplate = serde_yaml::from_str(
            r#"
            program: du
            args:
              - {name: a, type: enum}
              - {name: b, type: int, min: 3, max: 1}
              - {name: c, type: path, root: /var/../etc}
              - {name: d, type: string, pattern: "("}
              - {name: d, type: hostname}
            sudo: {as: "root; id"}
            "#,
        )
        .unwrap();
        assert_eq!(bad.problems("t").len(), 7, "{:?}", bad.problems("t"));
    }
}
