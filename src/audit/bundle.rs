//! Evidence bundles: the events of a time window with their chain links,
//! and the chain heads, signed with the operator's Ed25519 key when one is
//! configured. `audit verify --file` checks a bundle with nothing but the
//! file (and the public key): no database, no broker. See docs/EVENTS.md
//! ("Evidence bundles") for the format.
//!
//! A chain rewritten whole still links; what an auditor anchors to is the
//! signed heads, compared with a bundle exported earlier or kept elsewhere.

use std::collections::BTreeMap;
use std::io::{BufRead, Read, Write};

use base64::Engine;
use openssl::pkey::{Id, PKey, Private, Public};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::{ChainBreak, Link, Tip};

/// The first line's `format`.
pub const FORMAT: &str = "execplane-audit-export/1";

/// The longest line a bundle may hold (an event's datum is bounded far
/// below this by the contract's limits).
const MAX_LINE: usize = 8 << 20;

#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("line {line}: {reason}")]
    Malformed { line: usize, reason: String },
    #[error("{0}")]
    Broken(ChainBreak),
    #[error("signing key: {0}")]
    Key(String),
    #[error("{0}")]
    Signature(String),
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Header {
    pub format: String,
    pub since: String,
    pub until: String,
    pub exported_at: String,
}

/// One event line.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct EventLine {
    pub attempt_id: Uuid,
    pub seq: i64,
    /// The writer schema's CRC-64-AVRO fingerprint, 16 hex digits.
    pub fingerprint: String,
    pub prev_hash: String,
    pub hash: String,
    /// The event's Avro datum, base64.
    pub datum: String,
    /// The datum decoded, for a reader without Avro; checked against it.
    pub event: serde_json::Value,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Head {
    pub attempt_id: Uuid,
    pub seq: i64,
    pub hash: String,
}

/// The last line.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Trailer {
    pub heads: Vec<Head>,
    pub events: u64,
    /// sha256 of every byte before this line, hex.
    pub digest: String,
    pub signature: Option<Signature>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Signature {
    pub algorithm: String,
    /// The signer's public key, SubjectPublicKeyInfo PEM: says which key
    /// signed; trust comes from the key the auditor passes, never this one.
    pub public_key: String,
    /// base64 of the Ed25519 signature of [`signed_message`].
    pub value: String,
}

/// What the signature covers: the format, the signer's public key, the
/// digest of everything before the trailer, the event count and every head.
pub fn signed_message(public_key: &str, digest: &str, events: u64, heads: &[Head]) -> Vec<u8> {
    let mut message = format!("{FORMAT}\nkey {public_key:?}\ndigest {digest}\nevents {events}\n");
    for head in heads {
        message.push_str(&format!(
            "head {} {} {}\n",
            head.attempt_id, head.seq, head.hash
        ));
    }
    message.into_bytes()
}

/// An Ed25519 private key from PKCS#8 PEM (`openssl genpkey -algorithm ed25519`).
pub fn signing_key(pem: &[u8]) -> Result<PKey<Private>, BundleError> {
    let key = PKey::private_key_from_pem(pem)
        .map_err(|_| BundleError::Key("not a PEM private key".into()))?;
    if key.id() != Id::ED25519 {
        return Err(BundleError::Key("not an Ed25519 key".into()));
    }
    Ok(key)
}

/// An Ed25519 public key from SubjectPublicKeyInfo PEM (`openssl pkey -pubout`).
pub fn public_key(pem: &[u8]) -> Result<PKey<Public>, BundleError> {
    let key = PKey::public_key_from_pem(pem)
        .map_err(|_| BundleError::Key("not a PEM public key".into()))?;
    if key.id() != Id::ED25519 {
        return Err(BundleError::Key("not an Ed25519 key".into()));
    }
    Ok(key)
}

/// Writes a bundle line by line, hashing what it wrote.
pub struct Writer<W: Write> {
    out: W,
    digest: Sha256,
    heads: BTreeMap<Uuid, (i64, [u8; 32])>,
    events: u64,
}

impl<W: Write> Writer<W> {
    pub fn new(mut out: W, header: &Header) -> Result<Self, BundleError> {
        let mut digest = Sha256::new();
        let line = line_of(header)?;
        out.write_all(&line)?;
        digest.update(&line);
        Ok(Self {
            out,
            digest,
            heads: BTreeMap::new(),
            events: 0,
        })
    }

    /// One event: its attempt's events must come in seq order.
    pub fn event(&mut self, line: &EventLine) -> Result<(), BundleError> {
        let mut hash = [0u8; 32];
        hex::decode_to_slice(&line.hash, &mut hash).map_err(|_| BundleError::Malformed {
            line: 0,
            reason: "hash is not 64 hex digits".into(),
        })?;
        let bytes = line_of(line)?;
        self.out.write_all(&bytes)?;
        self.digest.update(&bytes);
        self.heads.insert(line.attempt_id, (line.seq, hash));
        self.events += 1;
        Ok(())
    }

    /// The trailer, signed with `key` when given; the writer's output.
    pub fn finish(mut self, key: Option<&PKey<Private>>) -> Result<W, BundleError> {
        let heads: Vec<Head> = self
            .heads
            .iter()
            .map(|(attempt_id, (seq, hash))| Head {
                attempt_id: *attempt_id,
                seq: *seq,
                hash: hex::encode(hash),
            })
            .collect();
        let digest = hex::encode(self.digest.finalize());
        let signature = key
            .map(|key| sign(key, &digest, self.events, &heads))
            .transpose()?;
        let trailer = Trailer {
            heads,
            events: self.events,
            digest,
            signature,
        };
        self.out.write_all(&line_of(&trailer)?)?;
        self.out.flush()?;
        Ok(self.out)
    }
}

fn line_of<T: Serialize>(value: &T) -> Result<Vec<u8>, BundleError> {
    let mut line = serde_json::to_vec(value).map_err(|error| BundleError::Malformed {
        line: 0,
        reason: error.to_string(),
    })?;
    line.push(b'\n');
    Ok(line)
}

fn sign(
    key: &PKey<Private>,
    digest: &str,
    events: u64,
    heads: &[Head],
) -> Result<Signature, BundleError> {
    let failed = |error: openssl::error::ErrorStack| BundleError::Key(error.to_string());
    let public_key =
        String::from_utf8_lossy(&key.public_key_to_pem().map_err(failed)?).into_owned();
    let message = signed_message(&public_key, digest, events, heads);
    let mut signer = openssl::sign::Signer::new_without_digest(key).map_err(failed)?;
    let value = signer.sign_oneshot_to_vec(&message).map_err(failed)?;
    Ok(Signature {
        algorithm: "ed25519".into(),
        public_key,
        value: base64::engine::general_purpose::STANDARD.encode(value),
    })
}

/// What a verified bundle holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    pub header: Header,
    pub attempts: usize,
    pub events: u64,
    /// Whether the signature was checked against the auditor's key.
    pub signed: bool,
}

/// Checks a bundle: every line's form, each attempt's chain (from genesis,
/// or from the first event's stated `prev_hash` where the window starts
/// mid-chain), each event's JSON against its datum, the trailer's heads,
/// count and digest, and the signature against `key` when given (a bundle
/// without one is then refused).
pub fn verify(input: impl BufRead, key: Option<&PKey<Public>>) -> Result<Verified, BundleError> {
    let mut digest = Sha256::new();
    let mut header: Option<Header> = None;
    let mut trailer: Option<(usize, Trailer, String)> = None;
    let mut tips: BTreeMap<Uuid, Tip> = BTreeMap::new();
    let mut events = 0u64;
    let mut input = input;
    let mut line = Vec::new();
    for number in 1.. {
        let malformed = |reason: String| BundleError::Malformed {
            line: number,
            reason,
        };
        line.clear();
        let limit = u64::try_from(MAX_LINE).unwrap_or(u64::MAX) + 1;
        if (&mut input).take(limit).read_until(b'\n', &mut line)? == 0 {
            break;
        }
        if line.pop() != Some(b'\n') {
            return Err(malformed(if line.len() >= MAX_LINE {
                format!("longer than {MAX_LINE} bytes")
            } else {
                "the last line has no newline: the bundle is cut short".into()
            }));
        }
        if let Some((at, ..)) = &trailer {
            return Err(malformed(format!("a line after the trailer (line {at})")));
        }
        if header.is_none() {
            let parsed: Header = serde_json::from_slice(&line)
                .map_err(|error| malformed(format!("not the bundle's header: {error}")))?;
            if parsed.format != FORMAT {
                return Err(malformed(format!(
                    "format {:?}, this release reads {FORMAT:?}",
                    parsed.format
                )));
            }
            header = Some(parsed);
        } else if let Ok(event) = serde_json::from_slice::<EventLine>(&line) {
            check_event(&mut tips, &event).map_err(|reason| {
                BundleError::Broken(ChainBreak {
                    attempt_id: event.attempt_id,
                    seq: event.seq,
                    reason: format!("{reason} (line {number})"),
                })
            })?;
            events += 1;
        } else {
            let parsed: Trailer = serde_json::from_slice(&line)
                .map_err(|error| malformed(format!("neither an event nor the trailer: {error}")))?;
            trailer = Some((number, parsed, hex::encode(digest.clone().finalize())));
            continue;
        }
        digest.update(&line);
        digest.update(b"\n");
    }
    let header = header.ok_or(BundleError::Malformed {
        line: 1,
        reason: "the file is empty".into(),
    })?;
    let Some((at, trailer, computed)) = trailer else {
        return Err(BundleError::Malformed {
            line: 0,
            reason: "no trailer: the bundle is cut short".into(),
        });
    };
    let signed = check_trailer(&trailer, at, &computed, events, &tips, key)?;
    Ok(Verified {
        header,
        attempts: tips.len(),
        events,
        signed,
    })
}

/// The trailer against what the lines before it hold (`computed`, the
/// digest; `events`; the chains' `tips`), and its signature against `key`:
/// whether the signature was checked.
fn check_trailer(
    trailer: &Trailer,
    at: usize,
    computed: &str,
    events: u64,
    tips: &BTreeMap<Uuid, Tip>,
    key: Option<&PKey<Public>>,
) -> Result<bool, BundleError> {
    let malformed = |reason: String| BundleError::Malformed { line: at, reason };
    if trailer.digest != computed {
        return Err(malformed(
            "the digest does not match the lines before it".into(),
        ));
    }
    if trailer.events != events {
        return Err(malformed(format!(
            "the trailer counts {} events, the bundle holds {events}",
            trailer.events
        )));
    }
    let heads: Vec<Head> = tips
        .iter()
        .map(|(attempt_id, tip)| Head {
            attempt_id: *attempt_id,
            seq: tip.seq,
            hash: hex::encode(tip.hash),
        })
        .collect();
    if trailer.heads != heads {
        return Err(malformed("the heads are not where the chains end".into()));
    }
    match (key, &trailer.signature) {
        (None, _) => Ok(false),
        (Some(_), None) => Err(BundleError::Signature(
            "the bundle is not signed, and a public key was given".into(),
        )),
        (Some(key), Some(signature)) => {
            let message = signed_message(
                &signature.public_key,
                &trailer.digest,
                trailer.events,
                &trailer.heads,
            );
            check_signature(key, signature, &message)?;
            Ok(true)
        }
    }
}

fn check_event(tips: &mut BTreeMap<Uuid, Tip>, line: &EventLine) -> Result<(), String> {
    let decode_hash = |text: &str, name: &str| {
        let mut hash = [0u8; 32];
        hex::decode_to_slice(text, &mut hash)
            .map(|()| hash)
            .map_err(|_| format!("{name} is not 64 hex digits"))
    };
    let prev_hash = decode_hash(&line.prev_hash, "prev_hash")?;
    let hash = decode_hash(&line.hash, "hash")?;
    let fingerprint = u64::from_str_radix(&line.fingerprint, 16)
        .map_err(|_| "fingerprint is not 16 hex digits".to_owned())?;
    let datum = base64::engine::general_purpose::STANDARD
        .decode(&line.datum)
        .map_err(|_| "datum is not base64".to_owned())?;
    // Where the window starts mid-chain, the first event anchors it.
    let tip = tips.get(&line.attempt_id).copied().unwrap_or(Tip {
        seq: line.seq - 1,
        hash: prev_hash,
    });
    let link = Link {
        seq: line.seq,
        prev_hash: Some(&prev_hash),
        hash: Some(&hash),
        fingerprint,
        datum: &datum,
    };
    let (event, next) = super::check(line.attempt_id, tip, &link)?;
    let decoded = serde_json::to_value(&event).map_err(|error| error.to_string())?;
    if decoded != line.event {
        return Err("the event's JSON is not its datum decoded".into());
    }
    tips.insert(line.attempt_id, next);
    Ok(())
}

fn check_signature(
    key: &PKey<Public>,
    signature: &Signature,
    message: &[u8],
) -> Result<(), BundleError> {
    let refused = |reason: &str| BundleError::Signature(format!("signature refused: {reason}"));
    if signature.algorithm != "ed25519" {
        return Err(refused("not an ed25519 signature"));
    }
    let value = base64::engine::general_purpose::STANDARD
        .decode(&signature.value)
        .map_err(|_| refused("not base64"))?;
    let mut verifier =
        openssl::sign::Verifier::new_without_digest(key).map_err(|_| refused("the key"))?;
    match verifier.verify_oneshot(&value, message) {
        Ok(true) => Ok(()),
        _ => Err(refused(
            "it does not verify with the given public key (another signer, or the heads were altered)",
        )),
    }
}
