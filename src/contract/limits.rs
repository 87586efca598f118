//! Bounds on every text that crosses a trust boundary (JobSpecs, runner
//! reports, cancel commands, executor registrations), in one place so the
//! ingress, the dispatcher's intake and the runner SDK refuse the same
//! things. Postgres `text` and `jsonb` cannot hold U+0000, so nothing that
//! holds one is ever accepted: one such record would otherwise fail every
//! transaction it is in.

use std::path::{Component, Path};

use super::problem::Problem;

/// Longest identifier (job id, tenant, requested_by, runner instance), in characters.
pub const MAX_ID_CHARS: usize = 256;
/// Longest free text (progress and result messages, cancel reasons), in bytes.
pub const MAX_MESSAGE_BYTES: usize = 4 * 1024;
/// Longest cancel reason, in bytes.
pub const MAX_REASON_BYTES: usize = 1024;
/// Largest typed result a report may carry (JSON text), in bytes.
pub const MAX_RESULT_BYTES: usize = 256 * 1024;
/// Most pool labels, and capabilities, a runner may announce.
pub const MAX_LABELS: usize = 32;
/// Longest pool label key or value, or capability, in characters.
pub const MAX_LABEL_CHARS: usize = 128;

/// An identifier: not empty, at most [`MAX_ID_CHARS`], no control characters
/// (a newline or an ANSI escape in an id would forge log lines).
pub fn check_identifier(path: &str, text: &str, problems: &mut Vec<Problem>) {
    check_identifier_within(path, text, MAX_ID_CHARS, problems);
}

/// As [`check_identifier`], at most `max_chars` long.
pub fn check_identifier_within(
    path: &str,
    text: &str,
    max_chars: usize,
    problems: &mut Vec<Problem>,
) {
    if text.trim().is_empty() {
        problems.push(Problem::new(path, "must not be empty"));
    } else if text.chars().count() > max_chars {
        problems.push(Problem::new(
            path,
            format!("longer than {max_chars} characters"),
        ));
    } else if text.chars().any(char::is_control) {
        problems.push(Problem::new(path, "contains control characters"));
    }
}

/// Longest tenant name, in characters (a DNS label).
pub const MAX_TENANT_CHARS: usize = 63;

/// A tenant's name: a DNS label (`a-z`, `0-9` and `-`, 1 to 63 characters,
/// a letter or digit at each end). The name is substituted into the
/// operator's secret prefixes, storage keys and callback topic prefixes:
/// a `/` in it would reach into another tenant's secrets (`*/{tenant}/` of
/// tenant `execplane/team-b`), a `.` or `_` into another's topics, and a
/// capital would make `Team-A` a second `team-a` to a human reader.
pub fn check_tenant(path: &str, text: &str, problems: &mut Vec<Problem>) {
    if let Err(problem) = tenant_name(text) {
        problems.push(Problem::new(path, problem));
    }
}

/// As [`check_tenant`], the problem as text.
pub fn tenant_name(text: &str) -> Result<(), String> {
    let bytes = text.as_bytes();
    let inner = |byte: &u8| byte.is_ascii_lowercase() || byte.is_ascii_digit();
    if bytes.is_empty() || bytes.len() > MAX_TENANT_CHARS {
        return Err(format!(
            "a tenant's name is 1 to {MAX_TENANT_CHARS} characters"
        ));
    }
    if !bytes.iter().all(|byte| inner(byte) || *byte == b'-')
        || !inner(&bytes[0])
        || !inner(&bytes[bytes.len() - 1])
    {
        return Err(format!(
            "`{}` is not a tenant name: a-z, 0-9 and `-`, a letter or digit at each end",
            loggable(text)
        ));
    }
    Ok(())
}

/// Free text: at most `max_bytes`, no U+0000 and no control characters but
/// newline, carriage return and tab.
pub fn check_free_text(path: &str, text: &str, max_bytes: usize, problems: &mut Vec<Problem>) {
    if text.len() > max_bytes {
        problems.push(Problem::new(path, format!("longer than {max_bytes} bytes")));
    } else if text.contains('\0') {
        problems.push(Problem::new(path, NUL));
    } else if text
        .chars()
        .any(|character| character.is_control() && !matches!(character, '\n' | '\r' | '\t'))
    {
        problems.push(Problem::new(
            path,
            "contains control characters (only newline, carriage return and tab are allowed)",
        ));
    }
}

/// What a field holding U+0000 is told.
pub const NUL: &str = "contains U+0000 (NUL), which cannot be stored";

/// Whether a string or key of `value` holds U+0000. Valid JSON may escape
/// it (`\u0000`), and Postgres's `jsonb` refuses it even so.
pub fn json_holds_nul(value: &serde_json::Value) -> bool {
    use serde_json::Value;
    match value {
        Value::String(text) => text.contains('\0'),
        Value::Array(items) => items.iter().any(json_holds_nul),
        Value::Object(object) => object
            .iter()
            .any(|(key, child)| key.contains('\0') || json_holds_nul(child)),
        _ => false,
    }
}

/// `value` with every U+0000 of its strings and keys replaced by U+FFFD.
pub fn json_without_nul(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    let clean = |text: String| {
        if text.contains('\0') {
            text.replace('\0', "\u{fffd}")
        } else {
            text
        }
    };
    match value {
        Value::String(text) => Value::String(clean(text)),
        Value::Array(items) => Value::Array(items.into_iter().map(json_without_nul).collect()),
        Value::Object(object) => Value::Object(
            object
                .into_iter()
                .map(|(key, child)| (clean(key), json_without_nul(child)))
                .collect(),
        ),
        other => other,
    }
}

/// Every problem of a cancel request's free fields.
pub fn check_cancel(reason: &str, requested_by: &str) -> Vec<Problem> {
    let mut problems = Vec::new();
    check_free_text("reason", reason, MAX_REASON_BYTES, &mut problems);
    check_identifier("requested_by", requested_by, &mut problems);
    problems
}

/// The first at most `max` bytes of `text`, cut at a character boundary.
pub fn head(text: &str, max: usize) -> &str {
    let mut cut = text.len().min(max);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    &text[..cut]
}

/// The last at most `max` bytes of `text`, cut at a character boundary.
pub fn tail(text: &str, max: usize) -> &str {
    let mut cut = text.len().saturating_sub(max);
    while !text.is_char_boundary(cut) {
        cut += 1;
    }
    &text[cut..]
}

/// Whether `value` (a secret's mount or path) is segments of letters,
/// digits and `- _ . @ + =`, none empty, `.` or `..`: they become URL
/// segments of the secret store's API, so a reference reaches a KV secret
/// and nothing else (no dot segment, query, fragment or encoding).
pub fn is_store_path(value: &str) -> bool {
    value.trim_matches('/').split('/').all(|segment| {
        !matches!(segment, "" | "." | "..")
            && segment
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.@+=".contains(&b))
    })
}

/// What [`is_store_path`] refuses, as a problem says it.
pub const STORE_PATH: &str =
    "segments of letters, digits and - _ . @ + = only, separated by /, no `.` or `..`";

/// `text` cut to at most `max` bytes, with `…` when something was cut.
pub fn shortened(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    format!("{}…", head(text, max))
}

/// `text` cut to its last `max` bytes at most, with `…` before them when
/// something was cut.
pub fn shortened_tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    format!("…{}", tail(text, max))
}

/// A text as it may appear in a log line: control characters escaped, so
/// what a client wrote can never start a line of its own or colour one.
pub fn loggable(text: &str) -> String {
    if !text.chars().any(char::is_control) {
        return text.to_owned();
    }
    let mut escaped = String::with_capacity(text.len() + 8);
    for character in text.chars() {
        if character.is_control() {
            escaped.extend(character.escape_default());
        } else {
            escaped.push(character);
        }
    }
    escaped
}

#[cfg(test)]
mod cut_tests {
    use super::*;

    #[test]
    fn cuts_keep_characters_whole() {
        assert_eq!(head("héllo", 2), "h");
        assert_eq!(tail("héllo", 4), "llo");
        assert_eq!(tail("abc", 10), "abc");
        assert_eq!(shortened("héllo", 2), "h…");
        assert_eq!(shortened("abc", 3), "abc");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cancel_fields_are_bounded() {
        assert!(check_cancel("because", "control-plane").is_empty());
        let paths: Vec<String> =
            check_cancel(&"r".repeat(MAX_REASON_BYTES + 1), &"p".repeat(600_000))
                .into_iter()
                .map(|problem| problem.path)
                .collect();
        assert_eq!(paths, ["reason", "requested_by"]);
    }

    #[test]
    fn loggable_escapes_control_characters() {
        assert_eq!(loggable("a\nb\u{1b}[0m"), "a\\nb\\u{1b}[0m");
        assert_eq!(loggable("plain ✓"), "plain ✓");
    }
}

/// `path` names a file inside a package: not empty, relative, no `..`.
pub(crate) fn is_safe_relative(path: &str) -> Result<(), &'static str> {
    if path.trim().is_empty() {
        return Err("must not be empty");
    }
    let candidate = Path::new(path);
    if candidate.is_absolute() || path.starts_with('/') || path.starts_with('\\') {
        return Err("must be relative to the package root, not absolute");
    }
    if candidate
        .components()
        .any(|component| matches!(component, Component::ParentDir))
        || path.split(['/', '\\']).any(|part| part == "..")
    {
        return Err("must not contain `..`");
    }
    Ok(())
}
