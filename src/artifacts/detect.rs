//! Defence in depth: the runner masked what it knew to be secret; these
//! detectors catch secret-shaped text it could not know (a key a tool
//! printed by itself).

use regex::Regex;

/// The built-in detectors, by name: the contract's secret shapes.
pub const BUILTIN: [&str; 3] = [
    crate::contract::secret_shapes::SHAPES[0].0,
    crate::contract::secret_shapes::SHAPES[1].0,
    crate::contract::secret_shapes::SHAPES[2].0,
];

#[derive(Clone, Debug)]
pub struct Detectors {
    rules: Vec<(&'static str, Regex)>,
}

impl Detectors {
    /// The named built-ins; an unknown name is an error naming it.
    pub fn new(names: &[String]) -> Result<Self, String> {
        let mut rules = Vec::new();
        for name in names {
            let Some((name, rule)) = crate::contract::secret_shapes::compiled()
                .iter()
                .find(|(known, _)| *known == name.as_str())
            else {
                return Err(format!(
                    "unknown detector `{name}` (known: {})",
                    BUILTIN.join(", ")
                ));
            };
            rules.push((*name, rule.clone()));
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
