//! The event log's hash chain, checked wherever the log is read from: the
//! database (`Store::verify_chain`), the published topic ([`topic`]), and
//! an exported evidence bundle ([`bundle`]). See docs/EVENTS.md ("Proving
//! the published log").
//!
//! Each attempt's events form a chain: `hash = sha256(prev_hash ‖ datum)`,
//! where `datum` is the event's Avro datum (no framing) and the first
//! event's `prev_hash` is 32 zero bytes.

use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::codec::Codec;
use crate::contract::AttemptEvent;

pub mod bundle;
pub mod topic;

/// Header of every `exec.attempt-events.v1` record: the event's seq.
pub const SEQ_HEADER: &str = "execplane_seq";
/// Header: the previous event's chain hash, lowercase hex.
pub const PREV_HASH_HEADER: &str = "execplane_prev_hash";
/// Header: this event's chain hash, lowercase hex.
pub const HASH_HEADER: &str = "execplane_hash";

/// The `prev_hash` of an attempt's first event.
pub const GENESIS_HASH: [u8; 32] = [0; 32];

/// The chain link: `sha256(prev_hash || datum)`.
pub fn chain_hash(prev_hash: &[u8; 32], datum: &[u8]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(prev_hash);
    hasher.update(datum);
    hasher.finalize().into()
}

/// One event as a source holds it.
#[derive(Clone, Copy, Debug)]
pub struct Link<'a> {
    pub seq: i64,
    /// The links the source states; `None` where it states none (records
    /// published before the topic carried them), which are then computed.
    pub prev_hash: Option<&'a [u8]>,
    pub hash: Option<&'a [u8]>,
    /// The writer schema's fingerprint and the bare datum.
    pub fingerprint: u64,
    pub datum: &'a [u8],
}

/// Where an attempt's chain stands: its last seq and hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tip {
    pub seq: i64,
    pub hash: [u8; 32],
}

impl Tip {
    pub const GENESIS: Tip = Tip {
        seq: 0,
        hash: GENESIS_HASH,
    };
}

/// Checks the next link of `attempt_id`'s chain after `tip`: seq
/// continuity, the stated `prev_hash`, the recomputed hash against the
/// stated one, and that the datum decodes to that attempt's event of that
/// seq. Returns the event and the new tip, or why the link is bad.
pub fn check(attempt_id: Uuid, tip: Tip, link: &Link<'_>) -> Result<(AttemptEvent, Tip), String> {
    if link.seq != tip.seq + 1 {
        return Err(format!(
            "expected seq {} here, found seq {} (events missing or reordered)",
            tip.seq + 1,
            link.seq
        ));
    }
    if link.prev_hash.is_some_and(|stated| stated != tip.hash) {
        return Err(format!("prev_hash does not link to seq {}", tip.seq));
    }
    let hash = chain_hash(&tip.hash, link.datum);
    if link.hash.is_some_and(|stated| stated != hash) {
        return Err(
            "hash does not match sha256(prev_hash || payload): the payload or hash was altered"
                .into(),
        );
    }
    let event = decode(link.fingerprint, link.datum)
        .map_err(|error| format!("the payload does not decode: {error}"))?;
    if event.attempt_id != attempt_id {
        return Err(format!("the payload names attempt {}", event.attempt_id));
    }
    if i64::try_from(event.seq).ok() != Some(link.seq) {
        return Err(format!("the payload's seq is {}", event.seq));
    }
    Ok((
        event,
        Tip {
            seq: link.seq,
            hash,
        },
    ))
}

/// An event from its datum and its writer schema's fingerprint.
pub fn decode(fingerprint: u64, datum: &[u8]) -> Result<AttemptEvent, String> {
    let record = Codec::record::<crate::codec::AttemptEventRecord>(fingerprint, datum)
        .map_err(|error| error.to_string())?;
    AttemptEvent::try_from(record).map_err(|error| error.to_string())
}

/// Where a chain first breaks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainBreak {
    pub attempt_id: Uuid,
    pub seq: i64,
    pub reason: String,
}

impl std::fmt::Display for ChainBreak {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "hash chain broken at attempt {} seq {}: {}",
            self.attempt_id, self.seq, self.reason
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_is_refused_for_each_way_it_can_be_wrong() {
        let attempt = Uuid::from_u128(7);
        let datum: &[u8] = b"not avro";
        let good = chain_hash(&GENESIS_HASH, datum);
        let other = [9u8; 32];
        let link = |seq, prev_hash: &'static [u8], hash: Option<&'static [u8]>| Link {
            seq,
            prev_hash: Some(prev_hash),
            hash,
            fingerprint: 0,
            datum,
        };
        let refused = |link: Link<'_>| check(attempt, Tip::GENESIS, &link).unwrap_err();
        let good: &'static [u8] = Box::leak(Box::new(good));
        let other: &'static [u8] = Box::leak(Box::new(other));
        assert!(
            refused(link(2, &GENESIS_HASH, None)).starts_with("expected seq 1 here, found seq 2")
        );
        assert_eq!(
            refused(link(1, other, None)),
            "prev_hash does not link to seq 0"
        );
        assert!(refused(link(1, &GENESIS_HASH, Some(other))).starts_with("hash does not match"));
        // A link that holds, over a datum that is not an event, is refused too.
        assert!(
            refused(link(1, &GENESIS_HASH, Some(good))).starts_with("the payload does not decode")
        );
    }
}
