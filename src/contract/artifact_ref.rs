//! Input artifact references: `{"artifact": "sha256:<hex>"}` in a
//! JobSpec's inputs names a file stored by content (`artifacts::inputs`).

use sha2::{Digest, Sha256};

use super::json_path::JsonPath;

/// A content address, `sha256:<64 lowercase hex>`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct InputRef(String);

impl InputRef {
    /// Parses a reference as written in a JobSpec.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.strip_prefix("sha256:") {
            Some(hex)
                if hex.len() == 64
                    && hex
                        .bytes()
                        .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte)) =>
            {
                Ok(Self(hex.to_owned()))
            }
            _ => Err(format!(
                "`{}` is not an artifact reference (sha256:<64 lowercase hex digits>)",
                super::limits::loggable(text)
            )),
        }
    }

    /// The reference of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Self(hex::encode(Sha256::digest(bytes)))
    }

    /// Its digest, 64 lowercase hex digits.
    pub fn hex(&self) -> &str {
        &self.0
    }

    /// Its storage key.
    pub fn key(&self) -> String {
        format!("inputs/sha256/{}", self.0)
    }

    /// The storage key whose presence binds this content to `tenant`
    /// (`artifacts::inputs::bind`), the tenant as [`tenant_segment`].
    pub fn tenant_key(&self, tenant: &str) -> String {
        format!(
            "inputs/tenants/{}/sha256/{}",
            tenant_segment(tenant),
            self.0
        )
    }
}

/// `tenant` as one segment of a storage key: every byte but
/// `A-Z a-z 0-9 - _` percent-encoded, so no tenant's name spells another's
/// keys (`.`, `/` and `%` are encoded too).
pub fn tenant_segment(tenant: &str) -> String {
    use std::fmt::Write;
    let mut segment = String::with_capacity(tenant.len());
    for byte in tenant.bytes() {
        if byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_' {
            segment.push(char::from(byte));
        } else {
            let _ = write!(segment, "%{byte:02X}");
        }
    }
    segment
}

/// Every artifact reference in `value` with its field path (under `path`),
/// or the problem of a malformed one.
pub fn references_in(
    value: &serde_json::Value,
    path: &str,
    found: &mut Vec<(String, Result<InputRef, String>)>,
) {
    references_under(value, JsonPath::Root(path), found);
}

fn references_under(
    value: &serde_json::Value,
    path: JsonPath<'_>,
    found: &mut Vec<(String, Result<InputRef, String>)>,
) {
    if let Some(reference) = reference_in(value) {
        found.push((path.to_string(), reference));
        return;
    }
    match value {
        serde_json::Value::Object(object) => {
            for (key, child) in object {
                references_under(child, path.key(key), found);
            }
        }
        serde_json::Value::Array(items) => {
            for (index, child) in items.iter().enumerate() {
                references_under(child, path.index(index), found);
            }
        }
        _ => {}
    }
}

/// Written as in a JobSpec, `sha256:<hex>`.
impl serde::Serialize for InputRef {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Read as in a JobSpec: a reference that does not parse is refused with
/// [`InputRef::parse`]'s reason.
impl<'de> serde::Deserialize<'de> for InputRef {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl std::fmt::Display for InputRef {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "sha256:{}", self.0)
    }
}

/// The reference an input value holds, if it is an object whose one key
/// is `artifact`.
pub fn reference_in(value: &serde_json::Value) -> Option<Result<InputRef, String>> {
    let object = value.as_object()?;
    let reference = object.get("artifact")?;
    if object.len() != 1 {
        return None;
    }
    Some(match reference.as_str() {
        Some(text) => InputRef::parse(text),
        None => Err("`artifact` must be a string sha256:<hex>".into()),
    })
}
