//! Signed callbacks, as the Standard Webhooks specification says:
//! `webhook-id`, `webhook-timestamp` and `webhook-signature: v1,<base64
//! HMAC-SHA256 of "<id>.<timestamp>.<body>">`, one signature per secret in
//! force (several while a secret is rotated), separated by spaces. Each
//! tenant's secrets are in the secret store (docs/EVENTS.md, "Callbacks").

use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// How a topic's callback is named in its `callback_recorded` event:
/// `kafka:<topic>`.
pub const TOPIC_SCHEME: &str = "kafka:";

/// The key of the secret store's entry that holds a tenant's secrets.
pub const SIGNING_KEY: &str = "signing_secrets";

/// The most secrets in force at once.
pub const MAX_SECRETS: usize = 4;

/// `<mount>/<path>` of the setting, with `{tenant}` in the path.
pub fn signing_location(setting: &str) -> Result<(String, String), String> {
    let (mount, path) = setting
        .trim()
        .trim_matches('/')
        .split_once('/')
        .ok_or("write it as <mount>/<path>, with {tenant} in the path")?;
    if !path.contains("{tenant}") {
        return Err("the path must hold `{tenant}`: each tenant has its own secrets".into());
    }
    // `.` too: the secret store's client drops it, so `secret/./x/{tenant}`
    // would read `secret/x/...` while matching only itself.
    if mount.is_empty()
        || path
            .split('/')
            .any(|part| part.is_empty() || part == ".." || part == ".")
    {
        return Err("empty, `.` or `..` segments".into());
    }
    Ok((mount.to_owned(), path.to_owned()))
}

/// The path of one tenant's secrets. A tenant whose name could leave its
/// own path is refused.
pub fn signing_path(template: &str, tenant: &str) -> Result<String, String> {
    super::limits::tenant_name(tenant)?;
    Ok(template.replace("{tenant}", tenant))
}

/// Whether `mount`/`path` is some tenant's signing secrets at `location`
/// ([`signing_location`]). Those are execplane's, never a JobSpec's to
/// read or write, whatever prefixes the operator's policy gives a tenant:
/// the default `*/{tenant}/` of a tenant named `execplane` would
/// otherwise cover `secret/execplane/{tenant}/callbacks` of every tenant.
/// `{tenant}` matches any text here, `/` included, and empty segments are
/// dropped first, as the secret store drops them.
pub fn is_signing_entry(location: &(String, String), mount: &str, path: &str) -> bool {
    let segments = |text: &str| {
        text.split('/')
            .filter(|segment| !segment.is_empty())
            .collect::<Vec<_>>()
            .join("/")
    };
    if segments(mount) != segments(&location.0) {
        return false;
    }
    let pattern = segments(&location.1)
        .split("{tenant}")
        .map(regex::escape)
        .collect::<Vec<_>>()
        .join(".+");
    regex::Regex::new(&format!("^{pattern}$"))
        .is_ok_and(|pattern| pattern.is_match(&segments(path)))
}

/// The secrets of one entry: `whsec_<base64>` values separated by
/// whitespace, the newest first, each of 24 to 64 bytes.
pub fn parse_secrets(text: &str) -> Result<Vec<Vec<u8>>, String> {
    let secrets: Vec<Vec<u8>> = text
        .split_whitespace()
        .enumerate()
        .map(|(index, secret)| {
            secret
                .strip_prefix("whsec_")
                .and_then(|encoded| {
                    base64::engine::general_purpose::STANDARD
                        .decode(encoded)
                        .ok()
                })
                .filter(|key| (24..=64).contains(&key.len()))
                .ok_or_else(|| {
                    format!(
                        "secret {} is not `whsec_` and the base64 of 24 to 64 bytes",
                        index + 1
                    )
                })
        })
        .collect::<Result<_, _>>()?;
    if secrets.is_empty() || secrets.len() > MAX_SECRETS {
        return Err(format!(
            "1 to {MAX_SECRETS} secrets, {} given",
            secrets.len()
        ));
    }
    Ok(secrets)
}

/// `webhook-signature`: one `v1,<base64>` per secret.
pub fn signature(secrets: &[Vec<u8>], id: &str, timestamp: i64, body: &[u8]) -> String {
    secrets
        .iter()
        .map(|secret| {
            let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret)
                .unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"));
            mac.update(id.as_bytes());
            mac.update(b".");
            mac.update(timestamp.to_string().as_bytes());
            mac.update(b".");
            mac.update(body);
            format!(
                "v1,{}",
                base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_the_standard_webhooks_example() {
        // The specification's own example (standard-webhooks, spec/standard-webhooks.md).
        let secrets = parse_secrets("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            signature(&secrets, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn locations_secrets_and_tenants_are_checked() {
        assert_eq!(
            signing_location("secret/execplane/{tenant}/callbacks").unwrap(),
            ("secret".into(), "execplane/{tenant}/callbacks".into())
        );
        assert!(signing_location("secret/execplane/callbacks").is_err());
        assert!(signing_location("secret/../{tenant}").is_err());
        assert!(signing_location("secret/./x/{tenant}").is_err());
        assert!(signing_path("a/{tenant}", "../team-b").is_err());
        assert!(signing_path("a/{tenant}", "team/b").is_err());
        let location = signing_location("secret/execplane/{tenant}/callbacks").unwrap();
        for (mount, path) in [
            ("secret", "execplane/team-b/callbacks"),
            ("secret", "/execplane//team-b/callbacks/"),
            ("secret/", "execplane/a/b/callbacks"),
        ] {
            assert!(is_signing_entry(&location, mount, path), "{mount} {path}");
        }
        for (mount, path) in [
            ("kv", "execplane/team-b/callbacks"),
            ("secret", "execplane/callbacks"),
            ("secret", "execplane//callbacks"),
            ("secret", "execplane/team-b/callbacks-old"),
            ("secret", "execplane/team-b"),
            ("secret", "team-b/callbacks"),
        ] {
            assert!(!is_signing_entry(&location, mount, path), "{mount} {path}");
        }
        let at_end = signing_location("kv/hooks/{tenant}").unwrap();
        assert!(is_signing_entry(&at_end, "kv", "hooks/team-b"));
        assert!(!is_signing_entry(&at_end, "kv", "hooks"));
        assert_eq!(signing_path("a/{tenant}", "team-a").unwrap(), "a/team-a");
        assert!(parse_secrets("").is_err());
        assert!(parse_secrets("whsec_c2hvcnQ=").is_err(), "too short");
        assert_eq!(
            parse_secrets(
                "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
            )
            .unwrap()
            .len(),
            2
        );
    }
}
