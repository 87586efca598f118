//! Text that looks like a credential whatever field it is in: private keys,
//! cloud access key ids, bearer tokens. The JobSpec validation refuses such
//! literals; the artifact worker masks them in output it was not told about.

use std::sync::OnceLock;

use regex::Regex;

/// The shapes, by name: (name, pattern).
pub const SHAPES: [(&str, &str); 3] = [
    (
        "pem_private_key",
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z0-9 ]*PRIVATE KEY-----",
    ),
    ("aws_access_key_id", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    ("bearer_token", r"(?i)\bbearer\s+[A-Za-z0-9\-._~+/]{16,}=*"),
];

/// The compiled shapes, in [`SHAPES`] order.
pub fn compiled() -> &'static [(&'static str, Regex)] {
    static COMPILED: OnceLock<Vec<(&'static str, Regex)>> = OnceLock::new();
    COMPILED.get_or_init(|| {
        SHAPES
            .iter()
            .map(|(name, pattern)| {
                (
                    *name,
                    Regex::new(pattern).unwrap_or_else(|error| {
                        unreachable!("built-in pattern {name} does not compile: {error}")
                    }),
                )
            })
            .collect()
    })
}

/// The first shape `text` holds, if any. A PEM header alone counts: a key
/// cut short is still a key.
pub fn find(text: &str) -> Option<&'static str> {
    if text.contains("PRIVATE KEY-----") {
        return Some("pem_private_key");
    }
    compiled()
        .iter()
        .find(|(_, rule)| rule.is_match(text))
        .map(|(name, _)| *name)
}
