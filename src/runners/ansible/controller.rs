//! What an approved package may not do unless the operator allows it for
//! that package (`controller: true` in its `ansible.packages` entry): run
//! code on the controller, the runner's host (in the attempt's sandbox),
//! rather than on the nodes. Checked on the unpacked package, every file
//! of it, before ansible starts (docs/SECURITY.md, "Content the runner
//! reads before the tool does"):
//!
//! - plugin directories (`*_plugins`, `plugins`, `collections`): action,
//!   lookup, filter, callback and connection plugins run in the
//!   controller's Python; `library` and `module_utils` (modules, run on
//!   the nodes) are allowed;
//! - in every YAML file: `delegate_to` localhost (or a template),
//!   `local_action`, a `connection` other than ssh, `ansible_connection`,
//!   plays on localhost (or on templated hosts), `add_host`, a `with_`
//!   loop or an include of anything but a package-relative path, and a
//!   `src` outside the package;
//! - in every file's templates (`{{ }}`, `{% %}`): a `lookup`/`query` of a
//!   plugin that reads the controller (`pipe`, `file`, `env`, `url`, ...)
//!   or of a name that is not a literal, and any `__` (Python internals:
//!   ansible's Jinja is not sandboxed).
//!
//! A second reading of what ansible will read, so it errs on the side of
//! refusing: a file that is not YAML is scanned as text only, and YAML
//! anywhere in the package is read whether a playbook includes it or not.

use std::path::Path;

use serde_json::Value;

/// Lookup (and `with_`) plugins that only transform what they are given.
const PURE_LOOKUPS: [&str; 12] = [
    "items",
    "list",
    "dict",
    "indexed_items",
    "sequence",
    "subelements",
    "together",
    "nested",
    "cartesian",
    "flattened",
    "random_choice",
    "vars",
];

/// Keys that name a file of the package to read.
const INCLUDES: [&str; 18] = [
    "import_playbook",
    "include_tasks",
    "import_tasks",
    "include",
    "include_vars",
    "vars_files",
    "include_role",
    "import_role",
    "roles",
    // A role's `meta/main.yml`: the roles it pulls in.
    "dependencies",
    "src",
    "file",
    "dir",
    // Modules that copy a controller file to the node.
    "copy",
    "template",
    "script",
    "unarchive",
    "assemble",
];

/// The most a package's YAML file may expand to (as for inventories).
const MAX_EXPANDED: usize = 8 * 1024 * 1024;

/// The first controller-side construct in the package at `root`, named
/// with its file: why the package may not run as it is.
pub fn refusal(root: &Path) -> Option<String> {
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Some(format!("cannot read {}", shown(root, &dir)));
        };
        let mut entries: Vec<_> = entries.flatten().collect();
        entries.sort_by_key(|entry| entry.file_name());
        for entry in entries {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                if name.ends_with("_plugins") || name == "plugins" || name == "collections" {
                    return Some(format!(
                        "`{}`: plugins run on the controller",
                        shown(root, &path)
                    ));
                }
                pending.push(path);
            } else if kind.is_file() {
                if let Some(why) = file_refusal(&path) {
                    return Some(format!("`{}`: {why}", shown(root, &path)));
                }
            }
        }
    }
    None
}

/// Every `key: value` of `text` as written on its lines (block or flow
/// style, quoted or not), held to [`key_refusal`].
fn line_refusal(text: &str) -> Option<String> {
    static PAIR: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let pair = PAIR.get_or_init(|| {
        regex::Regex::new(r#"(?m)(?:^|[\s{,\-\[])["']?([A-Za-z_][A-Za-z0-9_.]*)["']?[ \t]*:(?:[ \t]+|$)([^\n,}#]*)"#)
            .unwrap_or_else(|error| unreachable!("the key pattern compiles: {error}"))
    });
    pair.captures_iter(text).find_map(|found| {
        let value = found[2].trim().trim_matches(['"', '\'']);
        key_refusal(&found[1], &Value::String(value.to_owned()))
    })
}

fn shown(root: &Path, path: &Path) -> String {
    let relative = path.strip_prefix(root).unwrap_or(path);
    crate::contract::limits::loggable(&relative.display().to_string())
}

fn file_refusal(path: &Path) -> Option<String> {
    let bytes = std::fs::read(path).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    // Ansible evaluates bare expressions (`when`, `that`, `loop`) as
    // templates too, so a file's whole text is read, not only its `{{ }}`;
    // a Python file (a module, run on the nodes) only where it templates.
    let python = path.extension().is_some_and(|extension| extension == "py");
    let found = if python {
        blocks(&text).find_map(text_refusal)
    } else {
        text_refusal(&text)
    };
    if let Some(why) = found {
        return Some(why);
    }
    // Ansible reads YAML whatever a file is called (`group_vars/all`, a
    // role's `tasks/main`, `include_tasks: t.txt`): every file that reads
    // as YAML is held to the rules; one named as YAML must read.
    let named_yaml = path
        .extension()
        .and_then(|extension| extension.to_str())
        .is_some_and(|extension| matches!(extension, "yml" | "yaml" | "json"));
    match crate::runner::yaml::documents(&bytes, MAX_EXPANDED) {
        Ok(documents) => documents.iter().find_map(value_refusal),
        // Refused by the bound (an alias bomb), or named as YAML: ansible's
        // own loader would read what this one would not.
        Err(error) if named_yaml || error.too_large => {
            Some(format!("not YAML ansible can be held to: {error}"))
        }
        // Not YAML to this reader (a duplicate key, a construct it reads
        // otherwise, or no YAML at all): its `key: value` lines are held to
        // the same rules, in case ansible's loader reads it as YAML.
        Err(_) if !python => line_refusal(&text),
        Err(_) => None,
    }
}

/// Every `{{ }}` and `{% %}` block of `text`.
fn blocks(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        let start = [rest.find("{{"), rest.find("{%")]
            .into_iter()
            .flatten()
            .min()?;
        let close = if rest[start..].starts_with("{{") {
            "}}"
        } else {
            "%}"
        };
        let body = &rest[start + 2..];
        let end = body.find(close).unwrap_or(body.len());
        rest = &body[end.min(body.len())..];
        Some(&body[..end])
    })
}

/// Python internals a template can climb through (ansible's Jinja is not
/// sandboxed), and the filter that reaches them by a computed name.
const INTERNALS: [&str; 10] = [
    "__class__",
    "__mro__",
    "__subclasses__",
    "__globals__",
    "__builtins__",
    "__import__",
    "__init__",
    "__dict__",
    "__getattribute__",
    "attr(",
];

/// Names that, inside a template, hand out a lookup plugin or a way into
/// Python without a literal call to look for (`{% set f = lookup %}`,
/// `(lookup)(...)`, `lipsum.__globals__` spelled by concatenation). The
/// globals that are Python functions or classes (`namespace`, ansible's
/// `now` and `undef`) may only be called: subscripted, a name computed
/// by concatenation reaches their `__globals__` (`namespace['_' ~ ...]`).
const TEMPLATE_WORDS: [&str; 10] = [
    "lookup",
    "query",
    "q",
    "lipsum",
    "cycler",
    "joiner",
    "self",
    "namespace",
    "now",
    "undef",
];

/// Of [`TEMPLATE_WORDS`], those a template may call (lookups only of a
/// pure plugin, which [`lookup_refusal`] checks).
const CALLABLE_WORDS: [&str; 6] = ["lookup", "query", "q", "namespace", "now", "undef"];

/// What makes ansible render a string: `{{`, `{%`, or a comment's `{#`
/// (which renders to nothing, so `local{##}host` is `localhost`).
const TEMPLATE_MARKS: [&str; 3] = ["{{", "{%", "{#"];

fn is_template(text: &str) -> bool {
    TEMPLATE_MARKS.iter().any(|mark| text.contains(mark))
}

fn text_refusal(text: &str) -> Option<String> {
    if let Some(name) = INTERNALS.iter().find(|name| text.contains(*name)) {
        return Some(format!("a template reaches Python internals (`{name}`)"));
    }
    // A template's header that sets Jinja's own options, its delimiters
    // among them: blocks this reader would not see.
    if text.contains("#jinja2:") {
        return Some("a template sets Jinja's own options (`#jinja2:`)".into());
    }
    lookup_refusal(text).or_else(|| blocks(text).find_map(word_refusal))
}

/// A [`TEMPLATE_WORDS`] name used in a template other than as a call of
/// one of [`CALLABLE_WORDS`] (a lookup's plugin [`lookup_refusal`] has
/// checked), or `attr` called.
fn word_refusal(block: &str) -> Option<String> {
    let bytes = block.as_bytes();
    let word = |byte: u8| byte.is_ascii_alphanumeric() || byte == b'_';
    let mut at = 0;
    while at < bytes.len() {
        if !word(bytes[at]) || (at > 0 && (word(bytes[at - 1]) || bytes[at - 1] == b'.')) {
            at += 1;
            continue;
        }
        let end = (at..bytes.len())
            .find(|&index| !word(bytes[index]))
            .unwrap_or(bytes.len());
        let name = &block[at..end];
        let called = block[end..].trim_start().starts_with('(');
        if TEMPLATE_WORDS.contains(&name) && !(CALLABLE_WORDS.contains(&name) && called) {
            return Some(format!("a template uses `{name}` other than as a call"));
        }
        // `attr (` as well as `attr(` (INTERNALS).
        if name == "attr" && called {
            return Some("a template reaches Python internals (`attr(`)".into());
        }
        at = end;
    }
    None
}

/// A `lookup(`, `query(` or `q(` whose plugin is not a literal pure one.
fn lookup_refusal(block: &str) -> Option<String> {
    let bytes = block.as_bytes();
    for call in ["lookup", "query", "q"] {
        let mut from = 0;
        while let Some(found) = block[from..].find(call) {
            let at = from + found;
            from = at + call.len();
            let before = at.checked_sub(1).map(|index| bytes[index]);
            if before.is_some_and(|byte| byte.is_ascii_alphanumeric() || byte == b'_') {
                continue;
            }
            let after = block[from..].trim_start();
            let Some(arguments) = after.strip_prefix('(') else {
                continue;
            };
            let arguments = arguments.trim_start();
            // A literal: one quoted name, then the next argument or the end.
            let plugin = arguments
                .strip_prefix(['\'', '"'])
                .and_then(|quoted| {
                    let quote = arguments.as_bytes()[0] as char;
                    quoted.split_once(quote)
                })
                .filter(|(_, rest)| rest.trim_start().starts_with([',', ')']))
                .map(|(name, _)| name.rsplit('.').next().unwrap_or(name));
            match plugin {
                Some(name) if PURE_LOOKUPS.contains(&name) => {}
                Some(name) => {
                    return Some(format!(
                        "`{call}('{}')` reads the controller",
                        crate::contract::limits::loggable(name)
                    ))
                }
                None => return Some(format!("`{call}(` of a plugin that is not a literal name")),
            }
        }
    }
    None
}

fn is_local(host: &str) -> bool {
    // `localhost[0]`: ansible drops the subscript before it matches.
    let host = host.trim().to_ascii_lowercase();
    let host = host.split('[').next().unwrap_or_default();
    host == "localhost"
        || host.starts_with("localhost.")
        || host.starts_with("127.")
        || host == "::1"
        || is_template(host)
}

/// A package-relative path (`package::clean_relative`: no absolute path,
/// no `..`), neither a home directory, an environment variable (ansible
/// expands `$HOME` in a role's name) nor a template.
fn is_package_relative(path: &str) -> bool {
    !path.starts_with('~')
        && !path.contains('$')
        && !is_template(path)
        && crate::runner::kit::package::clean_relative(Path::new(path)).is_some()
}

fn strings(value: &Value) -> Vec<&str> {
    match value {
        Value::String(text) => vec![text.as_str()],
        Value::Array(items) => items.iter().flat_map(strings).collect(),
        _ => Vec::new(),
    }
}

/// The first refusal in a YAML value: its keys, and its strings as ansible
/// reads them (escapes decoded).
fn value_refusal(value: &Value) -> Option<String> {
    match value {
        Value::Object(object) => object.iter().find_map(|(key, child)| {
            text_refusal(key)
                .or_else(|| key_refusal(key, child))
                .or_else(|| value_refusal(child))
        }),
        Value::Array(items) => items.iter().find_map(value_refusal),
        Value::String(text) => text_refusal(text),
        _ => None,
    }
}

/// Paths a value names for ansible to read on the controller: the string
/// (or each of a list), the `file`, `dir`, `src` and `name` of a mapping,
/// and the `src=`, `file=`, `dir=` of a free-form `k=v` string.
fn paths(value: &Value) -> Vec<&str> {
    match value {
        Value::Object(object) => [
            "file",
            "dir",
            "src",
            "name",
            "role",
            "tasks_from",
            "vars_from",
            "defaults_from",
            "handlers_from",
        ]
        .iter()
        .filter_map(|field| object.get(*field))
        .flat_map(strings)
        .collect(),
        Value::Array(items) => items.iter().flat_map(paths).collect(),
        Value::String(text) => {
            let mut found: Vec<&str> = text
                .split_whitespace()
                .filter_map(|token| token.split_once('='))
                .filter(|(name, _)| {
                    matches!(
                        *name,
                        "src"
                            | "file"
                            | "dir"
                            | "tasks_from"
                            | "vars_from"
                            | "defaults_from"
                            | "handlers_from"
                    )
                })
                .map(|(_, path)| path.trim_matches(['"', '\'']))
                .collect();
            if !text.contains('=') {
                found.extend(text.split_whitespace().next());
            }
            found
        }
        _ => Vec::new(),
    }
}

fn key_refusal(key: &str, value: &Value) -> Option<String> {
    let bare = key.rsplit('.').next().unwrap_or(key);
    let refuse = |what: &str| Some(format!("{what} runs on the controller"));
    if is_template(key) {
        return refuse("a templated key (`set_fact` of any variable)");
    }
    if bare.to_ascii_lowercase().starts_with("ansible_") {
        return Some(format!(
            "`{}`: how ansible connects, escalates or runs is the runner's, not the package's",
            crate::contract::limits::loggable(key)
        ));
    }
    if let Some(found) = value.as_str().and_then(|text| {
        text.split_whitespace()
            .filter_map(|token| token.split_once('='))
            .find(|(name, _)| name.to_ascii_lowercase().starts_with("ansible_"))
    }) {
        return Some(format!(
            "`{}`: how ansible connects is the runner's, not the package's",
            crate::contract::limits::loggable(found.0)
        ));
    }
    if let Some(why) =
        runtime_name_refusal(key, bare, value).or_else(|| assigned_refusal(key, bare, value))
    {
        return Some(why);
    }
    match bare {
        "local_action" => refuse("`local_action`"),
        "add_host" => refuse("`add_host` (it can make a host local)"),
        "delegate_to" if strings(value).iter().any(|host| is_local(host)) => {
            refuse("`delegate_to` localhost (or a template)")
        }
        "connection"
            if strings(value)
                .iter()
                .any(|kind| !matches!(*kind, "ssh" | "smart")) =>
        {
            refuse("a `connection` other than ssh")
        }
        "hosts"
            if strings(value).iter().any(|hosts| {
                is_local(hosts)
                    || hosts
                        .split([',', ':', '&', '!'])
                        .any(|host| is_local(host.trim()))
            }) =>
        {
            refuse("a play on localhost (or on templated hosts)")
        }
        _ if bare.starts_with("with_") && !PURE_LOOKUPS.contains(&&bare[5..]) => Some(format!(
            "`{}` reads the controller",
            crate::contract::limits::loggable(key)
        )),
        _ if INCLUDES.contains(&key) || INCLUDES.contains(&bare) => paths(value)
            .into_iter()
            .find(|path| !is_package_relative(path))
            .map(|path| {
                format!(
                    "`{}: {}` reads outside the package",
                    crate::contract::limits::loggable(key),
                    crate::contract::limits::loggable(path)
                )
            }),
        _ => None,
    }
}

/// Names and parameters known only as the task runs: a `k=v` whose key is
/// a template (`set_fact: "{{ 'ansible_' ~ 'connection' }}=local"`), `args`
/// or a variable-setting action given as a template (a dict of names), a
/// module's free-form template (its parameters, a `src` among them).
fn runtime_name_refusal(key: &str, bare: &str, value: &Value) -> Option<String> {
    if let Some(text) = value.as_str() {
        let templated = |token: &str| {
            is_template(token) || ["}}", "%}", "#}"].iter().any(|mark| token.contains(mark))
        };
        let key_templated = text
            .split_whitespace()
            .filter_map(|token| token.split_once('='))
            .any(|(name, _)| templated(name));
        let free_templated = text
            .split_whitespace()
            .filter(|token| !token.contains('='))
            .any(templated);
        let sets_names = matches!(bare, "set_fact" | "set_stats" | "args");
        let reads_paths =
            INCLUDES.contains(&bare) && !matches!(bare, "src" | "file" | "dir" | "roles");
        if key_templated || (sets_names && templated(text)) || (reads_paths && free_templated) {
            return Some(format!(
                "`{}` given as a template (names or parameters known only as it runs) runs on the controller",
                crate::contract::limits::loggable(key)
            ));
        }
    }
    None
}

/// A name the task assigns that is not a plain name, or is one of
/// ansible's own.
fn assigned_refusal(key: &str, bare: &str, value: &Value) -> Option<String> {
    // A name the task assigns: `loop_var: ansible_connection` with
    // `loop: [local]` connects each item locally; a template could spell
    // it.
    let names_ansible = |name: &&str| {
        let name = name.trim();
        name.to_ascii_lowercase().starts_with("ansible_") || !super::service::is_variable_name(name)
    };
    let assigned = match bare {
        "loop_var" | "index_var" | "register" => strings(value).into_iter().find(names_ansible),
        // `include_vars: {file: x.yml, name: ansible_...}`.
        "include_vars" => value
            .get("name")
            .map(strings)
            .unwrap_or_default()
            .into_iter()
            .find(names_ansible),
        "vars_prompt" => match value {
            Value::Array(prompts) => prompts
                .iter()
                .filter_map(|prompt| prompt.get("name"))
                .flat_map(strings)
                .find(names_ansible),
            _ => None,
        },
        _ => None,
    };
    assigned.map(|name| {
        format!(
            "`{}: {}`: how ansible connects, escalates or runs is the runner's, not the package's",
            crate::contract::limits::loggable(key),
            crate::contract::limits::loggable(name)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn package(files: &[(&str, &str)]) -> std::path::PathBuf {
        let root = std::env::temp_dir().join(format!(
            "execplane-controller-{}",
            uuid::Uuid::new_v4().simple()
        ));
        for (path, text) in files {
            let file = root.join(path);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(file, text).unwrap();
        }
        root
    }

    fn refused(files: &[(&str, &str)]) -> Option<String> {
        let root = package(files);
        let why = refusal(&root);
        std::fs::remove_dir_all(root).unwrap();
        why
    }

    #[test]
    fn plays_on_the_nodes_pass() {
        let site = r#"- hosts: all
  gather_facts: false
  vars_files: [vars/common.yml]
  tasks:
    - ansible.builtin.copy:
        src: files/motd
        dest: "{{ motd_dir }}/{{ inventory_hostname }}.motd"
    - ansible.builtin.debug:
        msg: "{{ item }} {{ lookup('ansible.builtin.vars', 'motd_dir') }}"
      loop: "{{ query('items', [1, 2]) }}"
      with_items: [a]
    - ansible.builtin.command: uptime
      delegate_to: "db-1"
      connection: ssh
    - ansible.builtin.include_tasks: tasks/more.yml
    - ansible.builtin.include_role: {name: r, tasks_from: install.yml}
    - ansible.builtin.debug:
        msg: "{% set ns = namespace(n=1) %}{{ ns.n }} {{ now(utc=true) }}"
"#;
        let files = [
            ("site.yml", site),
            ("vars/common.yml", "motd_dir: /etc/motd.d\n"),
            ("library/my_module.py", "print('runs on the node')\n"),
            ("templates/motd.j2", "{{ inventory_hostname }}\n"),
        ];
        assert_eq!(refused(&files), None);
    }

    /// A few KiB that expand to gigabytes: each level aliases the one
    /// before it eight times.
    fn bomb() -> String {
        let mut text = format!("l0: &l0 [{}]\n", "xxxxxxxx,".repeat(100));
        for level in 1..10 {
            let previous = format!("*l{}", level - 1);
            text.push_str(&format!(
                "l{level}: &l{level} [{}]\n",
                vec![previous; 8].join(", ")
            ));
        }
        text
    }

    #[test]
    fn every_way_onto_the_controller_is_refused() {
        let task = |body: &str| format!("- hosts: all\n  tasks:\n    - {body}\n");
        let cases = [
            ("site.yml", task("ansible.builtin.shell: id\n      delegate_to: localhost"), "delegate_to"),
            ("site.yml", task("ansible.builtin.shell: id\n      delegate_to: 127.0.0.1"), "delegate_to"),
            ("site.yml", task("ansible.builtin.shell: id\n      delegate_to: \"{{ where }}\""), "delegate_to"),
            ("site.yml", task("local_action: ansible.builtin.shell id"), "local_action"),
            ("site.yml", task("ansible.builtin.shell: id\n      connection: local"), "connection"),
            ("site.yml", "- hosts: localhost\n  tasks: []\n".into(), "localhost"),
            ("site.yml", "- hosts: \"{{ target }}\"\n  tasks: []\n".into(), "localhost"),
            ("site.yml", "- hosts: web:localhost\n  tasks: []\n".into(), "localhost"),
            ("site.yml", "- hosts: all\n  vars: {ansible_connection: local}\n".into(), "ansible_connection"),
            ("site.yml", task("ansible.builtin.add_host: {name: x}"), "add_host"),
            ("site.yml", task("ansible.builtin.debug: {msg: \"{{ lookup('pipe', 'id') }}\"}"), "pipe"),
            ("site.yml", task("ansible.builtin.debug: {msg: \"{{ lookup( \\\"file\\\" , '/etc/shadow') }}\"}"), "lookup("),
            ("site.yml", task("ansible.builtin.debug: {msg: \"{\\x7b lookup('pipe', 'id') }}\"}"), "pipe"),
            ("site.yml", task("ansible.builtin.debug: {msg: x}\n      when: lookup('pipe', 'id') == 'x'"), "pipe"),
            ("site.yml", task("ansible.builtin.debug: {msg: \"{{ {'a': {'b': 1}} | attr('_' ~ '_class__') }}\"}"), "attr("),
            ("site.yml", "- hosts: \"::1\"\n  tasks: []\n".into(), "localhost"),
            ("site.yml", task("ansible.builtin.debug: {msg: \"{{ q('env', 'HOME') }}\"}"), "env"),
            ("site.yml", task("ansible.builtin.debug: {msg: \"{{ lookup('pi' ~ 'pe', 'id') }}\"}"), "literal"),
            ("site.yml", task("ansible.builtin.debug: {msg: \"{{ ''.__class__ }}\"}"), "__class__"),
            ("site.yml", task("ansible.builtin.debug: {msg: x}\n      with_file: [/etc/passwd]"), "with_file"),
            ("site.yml", task("ansible.builtin.copy: {src: /etc/shadow, dest: /tmp/x}"), "outside"),
            ("site.yml", task("ansible.builtin.copy: {src: ../../secrets/key, dest: /tmp/x}"), "outside"),
            ("site.yml", task("ansible.builtin.include_tasks: /srv/other/tasks.yml"), "outside"),
            ("site.yml", "- ansible.builtin.import_playbook: ../../x.yml\n".into(), "outside"),
            ("templates/motd.j2", "{% set x = lookup('pipe', 'id') %}".into(), "pipe"),
            ("filter_plugins/evil.py", "def filters(): pass\n".into(), "plugins"),
            ("roles/r/action_plugins/evil.py", "x = 1\n".into(), "plugins"),
            ("collections/ansible_collections/a/b/plugins/x.py", "x = 1\n".into(), "plugins"),
            // What a review found past the first version of this check.
            ("group_vars/all", "ansible_connection: local\n".into(), "ansible_connection"),
            ("tasks.txt", "- ansible.builtin.shell: id\n  delegate_to: localhost\n".into(), "delegate_to"),
            ("site.yml", "- hosts: all\n  vars: {ansible_ssh_common_args: \"-o ProxyCommand='sh -c id'\"}\n".into(), "ansible_ssh_common_args"),
            ("site.yml", task("ansible.builtin.debug: {msg: \"{{ (lookup)('pipe', 'id') }}\"}"), "lookup"),
            ("site.yml", task("ansible.builtin.debug: {msg: \"{% set f = lookup %}{{ f('pipe', 'id') }}\"}"), "lookup"),
            ("site.yml", task("ansible.builtin.debug: {msg: \"{{ lipsum['_' ~ '_globals__'] }}\"}"), "lipsum"),
            ("site.yml", task("ansible.builtin.set_fact: {\"{{ 'ansible_' ~ 'connection' }}\": local}"), "templated key"),
            ("site.yml", "- hosts: \"localhost[0]\"\n  tasks: []\n".into(), "localhost"),
            ("site.yml", task("ansible.builtin.include_tasks: {file: /abs.yml}"), "outside"),
            ("site.yml", task("ansible.builtin.include_vars: {dir: /etc}"), "outside"),
            ("site.yml", task("ansible.builtin.copy: \"src=/etc/shadow dest=/tmp/x\""), "outside"),
            ("site.yml", task("ansible.builtin.script: /etc/x"), "outside"),
            ("site.yml", "- hosts: all\n  roles: [/abs/role]\n".into(), "outside"),
            ("site.yml", task("ansible.builtin.command: \"ls ansible_connection=local\""), "ansible_connection"),
            // Past this reader, not past ansible's: a duplicate key (PyYAML
            // keeps the last), and an alias bomb in a file not named YAML.
            ("group_vars/all", "x: 1\nx: 2\nansible_connection: local\n".into(), "ansible_connection"),
            ("tasks/main", "- hosts: all\n- hosts: all\n  hosts: localhost\n".into(), "localhost"),
            ("vars/bomb", bomb(), "not YAML"),
            // A name the task assigns (a hostile review).
            ("site.yml", task("ansible.builtin.command: id\n      loop: [local]\n      loop_control: {loop_var: ansible_connection}"), "ansible_connection"),
            ("site.yml", task("ansible.builtin.command: id\n      loop: [0]\n      loop_control: {index_var: ansible_port}"), "ansible_port"),
            ("site.yml", task("ansible.builtin.command: id\n      register: ansible_become"), "ansible_become"),
            ("site.yml", "- hosts: all\n  vars_prompt: [{name: ansible_connection, default: local}]\n".into(), "ansible_connection"),
            ("site.yml", task("ansible.builtin.include_vars: {file: v.yml, name: ansible_become}"), "ansible_become"),
            ("site.yml", task("ansible.builtin.include_role: {name: \"$HOME/stage\"}"), "outside"),
            ("site.yml", task("ansible.builtin.include_tasks: $HOME/stage.yml"), "outside"),
            // Names known only as the task runs (a second hostile review).
            ("site.yml", task("ansible.builtin.set_fact: \"{{ 'ansible_' ~ 'connection' }}=local\""), "template"),
            ("site.yml", task("ansible.builtin.set_fact: \"{{ {'ansible_connection': 'local'} }}\""), "template"),
            ("site.yml", task("ansible.builtin.copy:\n      args: \"{{ {'src': '/etc/shadow', 'dest': '/tmp/x'} }}\""), "template"),
            ("site.yml", task("ansible.builtin.copy: \"{{ dict(src='/etc/shadow', dest='/tmp/x') }}\""), "template"),
            ("site.yml", task("ansible.builtin.command: id\n      loop: [local]\n      loop_control: {loop_var: \"{{ 'ansible_connection' }}\"}"), "loop_var"),
            // A comment is a template too (a fourth hostile review).
            ("site.yml", task("ansible.builtin.set_fact:\n        \"{##}ansible_connection\": local"), "templated key"),
            ("site.yml", task("ansible.builtin.set_fact: \"{##}ansible_connection=local\""), "template"),
            ("site.yml", task("ansible.builtin.shell: id\n      delegate_to: \"local{##}host\""), "delegate_to"),
            ("site.yml", "- hosts: \"local{##}host\"\n  tasks: []\n".into(), "localhost"),
            ("site.yml", task("ansible.builtin.copy: {src: \"{##}/etc/passwd\", dest: /tmp/x}"), "outside"),
            ("site.yml", task("ansible.builtin.include_tasks: \"{##}/srv/other/t.yml\""), "template"),
            // A fifth hostile review: a global's `__globals__` by a computed
            // name, `attr` spaced from its call, and a role's other files.
            ("site.yml", task("ansible.builtin.debug: {msg: \"{{ namespace['_'~'_init__']['_'~'_globals__'].os.popen('id').read() }}\"}"), "namespace"),
            ("site.yml", task("ansible.builtin.debug: {msg: \"{{ now['_'~'_func__'] }}\"}"), "now"),
            ("site.yml", task("ansible.builtin.debug: {msg: \"{{ {} | attr ('_' ~ '_class__') }}\"}"), "attr("),
            ("site.yml", task("ansible.builtin.include_role: {name: r, tasks_from: /srv/other/t.yml}"), "outside"),
            ("roles/r/meta/main.yml", "dependencies: [{role: /srv/other/role}]\n".into(), "outside"),
            ("site.yml", task("ansible.builtin.include_role: \"name=r tasks_from=/srv/other/t.yml\""), "outside"),
            ("site.yml", task("ansible.builtin.debug:\n        msg: \"#jinja2:variable_start_string:'[[',variable_end_string:']]'\\n[[ 1 ]]{##}\""), "jinja2"),
        ];
        for (path, text, expected) in cases {
            let why = refused(&[(path, text.as_str())])
                .unwrap_or_else(|| panic!("not refused: {path}: {text}"));
            assert!(why.contains(expected), "{text}: {why}");
        }
    }
}
