//! Defence in depth: the runner masked what it knew to be secret; these
//! detectors catch secret-shaped text it could not know (a key a tool
//! printed by itself).

use regex::Regex;

/// The built-in detectors, by name.
pub const BUILTIN: [&str; 3] = ["pem_private_key", "aws_access_key_id", "bearer_token"];

#[derive(Clone, Debug)]
pub struct Detectors {
    rules: Vec<(&'static str, Regex)>,
}

impl Detectors {
    /// The named built-ins; an unknown name is an error naming it.
    pub fn new(names: &[String]) -> Result<Self, String> {
        let mut rules = Vec::new();
        for name in names {
            let (name, pattern) = match name.as_str() {
                "pem_private_key" => (
                    "pem_private_key",
                    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z0-9 ]*PRIVATE KEY-----",
                ),
                "aws_access_key_id" => ("aws_access_key_id", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
                "bearer_token" => ("bearer_token", r"(?i)\bbearer\s+[A-Za-z0-9\-._~+/]{16,}=*"),
                other => {
                    return Err(format!(
                        "unknown detector `{other}` (known: {})",
                        BUILTIN.join(", ")
                    ))
                }
            };
            rules.push((
                name,
                Regex::new(pattern).map_err(|error| error.to_string())?,
            ));
        }
        Ok(Self { rules })
    }

    pub fn all() -> Self {
        Self::new(&BUILTIN.map(str::to_owned)).expect("the built-in patterns compile")
    }

    /// `text` with every detection replaced by `[masked:<detector>]`, and
    /// what was caught.
    pub fn scrub(&self, text: &str) -> (String, Vec<(&'static str, usize)>) {
        let mut text = text.to_owned();
        let mut caught = Vec::new();
        for (name, rule) in &self.rules {
            let count = rule.find_iter(&text).count();
            if count > 0 {
                text = rule
                    .replace_all(&text, format!("[masked:{name}]").as_str())
                    .into_owned();
                caught.push((*name, count));
            }
        }
        (text, caught)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_shaped_text_is_caught() {
        let detectors = Detectors::all();
        let text = "key AKIAABCDEFGHIJKLMNOP\nAuthorization: Bearer abcdefghijklmnop.qrstuvwxyz\n-----BEGIN RSA PRIVATE KEY-----\nMIIB\n-----END RSA PRIVATE KEY-----\nfine";
        let (scrubbed, caught) = detectors.scrub(text);
        assert_eq!(
            scrubbed,
            "key [masked:aws_access_key_id]\nAuthorization: [masked:bearer_token]\n[masked:pem_private_key]\nfine"
        );
        assert_eq!(caught.len(), 3);
        assert!(Detectors::new(&["nope".into()])
            .unwrap_err()
            .contains("`nope`"));
        assert_eq!(detectors.scrub("AKIA123 bearer x").1, vec![]);
    }
}
