//! The published log read back from Kafka: every partition of
//! `exec.attempt-events.v1` from its first offset to an end taken before
//! the read, each record checked as a link of its attempt's chain as it
//! arrives. Records repeat (at least once: a relay that crashed between
//! publishing and deleting publishes again with the same `ce_id`); a repeat
//! is dropped once it is shown to be the same event.
//!
//! What is kept per event is its id and hash (about 50 bytes), not the
//! record: reading a topic of ten million events holds about 500 MB.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::{BorrowedMessage, Headers};
use rdkafka::Message;
use uuid::Uuid;

use super::{ChainBreak, Link, Tip, GENESIS_HASH, HASH_HEADER, PREV_HASH_HEADER, SEQ_HEADER};
use crate::codec::{Codec, Family};
use crate::contract::AttemptEvent;
use crate::kafka::{KafkaConfig, KafkaError};

/// How long a read waits without a record before it gives up on a
/// partition short of its end.
const STALL: Duration = Duration::from_secs(30);

/// Each partition's first and end offset at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ends(pub BTreeMap<i32, (i64, i64)>);

impl Ends {
    /// Whether `offset` of `partition` was published before these ends.
    pub fn before(&self, partition: i32, offset: i64) -> bool {
        self.0
            .get(&partition)
            .is_some_and(|(_, high)| offset < *high)
    }
}

/// Every partition's offsets of `topic` now.
pub async fn ends(kafka: &KafkaConfig, topic: &str) -> Result<Ends, KafkaError> {
    let consumer: StreamConsumer = kafka.assigned_consumer()?;
    let topic = topic.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut ends = BTreeMap::new();
        for partition in 0..crate::kafka::partition_count(&consumer, &topic)? {
            ends.insert(
                partition,
                crate::kafka::watermarks(&consumer, &topic, partition)?,
            );
        }
        Ok(Ends(ends))
    })
    .await
    .map_err(|join| KafkaError::Topology(join.to_string()))?
}

/// One record as the walk reads it.
#[derive(Clone, Copy, Debug)]
pub struct Published<'a> {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<&'a [u8]>,
    pub ce_id: Option<&'a [u8]>,
    pub seq: Option<&'a [u8]>,
    pub prev_hash: Option<&'a [u8]>,
    pub hash: Option<&'a [u8]>,
    pub payload: &'a [u8],
}

impl<'a> Published<'a> {
    fn of(message: &'a BorrowedMessage<'a>) -> Self {
        let header = |name: &str| {
            message.headers().and_then(|headers| {
                headers
                    .iter()
                    .find(|header| header.key == name)
                    .and_then(|header| header.value)
            })
        };
        Published {
            partition: message.partition(),
            offset: message.offset(),
            key: message.key(),
            ce_id: header("ce_id"),
            seq: header(SEQ_HEADER),
            prev_hash: header(PREV_HASH_HEADER),
            hash: header(HASH_HEADER),
            payload: message.payload().unwrap_or_default(),
        }
    }
}

/// Reads `topic` from each partition's end in `from` (or its first offset
/// in `until`) to its end in `until`, handing every record to `each`; the
/// number of records read.
pub async fn read(
    kafka: &KafkaConfig,
    topic: &str,
    from: Option<&Ends>,
    until: &Ends,
    mut each: impl FnMut(&Published<'_>),
) -> Result<u64, KafkaError> {
    let consumer: StreamConsumer = kafka.assigned_consumer()?;
    let mut assignment = rdkafka::TopicPartitionList::new();
    let mut pending: BTreeMap<i32, i64> = BTreeMap::new();
    for (&partition, &(first, high)) in &until.0 {
        let low = from
            .and_then(|from| from.0.get(&partition))
            .map_or(first, |(_, end)| (*end).max(first));
        if high > low {
            assignment.add_partition_offset(topic, partition, rdkafka::Offset::Offset(low))?;
            pending.insert(partition, high);
        }
    }
    if pending.is_empty() {
        return Ok(0);
    }
    consumer.assign(&assignment)?;
    let (mut read, mut idle) = (0u64, Duration::ZERO);
    while !pending.is_empty() {
        let tick = Duration::from_secs(1);
        match tokio::time::timeout(tick, consumer.recv()).await {
            Ok(Ok(message)) => {
                idle = Duration::ZERO;
                let partition = message.partition();
                let Some(&high) = pending.get(&partition) else {
                    continue;
                };
                if message.offset() < high {
                    read += 1;
                    each(&Published::of(&message));
                }
                if message.offset() + 1 >= high {
                    pending.remove(&partition);
                }
            }
            Ok(Err(error)) => return Err(error.into()),
            Err(_) => {
                // A partition may end in records no consumer is handed
                // (transaction markers): its position says it is done.
                for element in consumer.position()?.elements() {
                    if let rdkafka::Offset::Offset(position) = element.offset() {
                        if pending
                            .get(&element.partition())
                            .is_some_and(|high| position >= *high)
                        {
                            pending.remove(&element.partition());
                        }
                    }
                }
                idle += tick;
                if idle >= STALL && !pending.is_empty() {
                    return Err(KafkaError::Topology(format!(
                        "reading {topic}: no record for {}s, partitions {:?} short of their end",
                        STALL.as_secs(),
                        pending.keys().collect::<Vec<_>>()
                    )));
                }
            }
        }
    }
    Ok(read)
}

/// One event of the walk: its id and chain hash, whether it was read
/// before the ends a comparison started from, and whether the comparison
/// matched it with the database's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen {
    pub event_id: Uuid,
    pub hash: [u8; 32],
    pub early: bool,
    pub matched: bool,
}

/// An event the walk accepted, with its links.
#[derive(Clone, Debug)]
pub struct Walked {
    pub event: AttemptEvent,
    pub prev_hash: [u8; 32],
    pub hash: [u8; 32],
}

/// A record that arrived before an earlier seq of its attempt: held until
/// the gap fills. A relay round whose records timed out is published again
/// after later ones may have succeeded, so an attempt's seq N+1 can precede
/// its seq N on the topic (docs/EVENTS.md, "Ordering").
#[derive(Debug)]
struct Held {
    early: bool,
    partition: i32,
    offset: i64,
    ce_id: Option<Vec<u8>>,
    prev_hash: Option<Vec<u8>>,
    hash: Option<Vec<u8>>,
    payload: Vec<u8>,
}

impl Held {
    fn of(record: &Published<'_>, early: bool) -> Self {
        Self {
            early,
            partition: record.partition,
            offset: record.offset,
            ce_id: record.ce_id.map(<[u8]>::to_vec),
            prev_hash: record.prev_hash.map(<[u8]>::to_vec),
            hash: record.hash.map(<[u8]>::to_vec),
            payload: record.payload.to_vec(),
        }
    }

    fn published(&self) -> Published<'_> {
        Published {
            partition: self.partition,
            offset: self.offset,
            key: None,
            ce_id: self.ce_id.as_deref(),
            seq: None,
            prev_hash: self.prev_hash.as_deref(),
            hash: self.hash.as_deref(),
            payload: &self.payload,
        }
    }
}

/// The most records a walk holds for gaps at once; past it, the walk gives
/// up on the attempt that needs one more.
const MAX_HELD: usize = 100_000;

#[derive(Debug, Default)]
struct Chain {
    tip: Option<Tip>,
    seen: Vec<Seen>,
    held: BTreeMap<i64, Held>,
    broken: bool,
}

/// The chains of the published log, walked record by record.
#[derive(Debug)]
pub struct Walk {
    codec: Codec,
    only: Option<Uuid>,
    chains: HashMap<Uuid, Chain>,
    breaks: Vec<ChainBreak>,
    held: usize,
    /// Records read, repeats dropped, and records without chain headers
    /// (checked by recomputing the chain alone).
    pub records: u64,
    pub repeats: u64,
    pub unlinked: u64,
}

impl Walk {
    /// A walk of every attempt, or only of `only`; `codec` knows the
    /// Confluent ids records may be framed with.
    pub fn new(codec: Codec, only: Option<Uuid>) -> Self {
        Self {
            codec,
            only,
            chains: HashMap::new(),
            breaks: Vec::new(),
            held: 0,
            records: 0,
            repeats: 0,
            unlinked: 0,
        }
    }

    /// Walks one record: the events it lets the walk accept (itself, and
    /// any held records whose gap it filled), in seq order.
    pub fn push(&mut self, record: &Published<'_>, early: bool) -> Vec<Walked> {
        let mut accepted = Vec::new();
        let Some((attempt_id, seq)) = self.identify(record) else {
            return accepted;
        };
        if self.only.is_some_and(|only| only != attempt_id) {
            return accepted;
        }
        self.records += 1;
        let chain = self.chains.entry(attempt_id).or_default();
        let next = chain.tip.map_or(1, |tip| tip.seq + 1);
        if chain.broken {
            return accepted;
        }
        if seq > next {
            self.hold(attempt_id, seq, record, early);
            return accepted;
        }
        self.apply(attempt_id, seq, record, early, &mut accepted);
        while let Some(chain) = self.chains.get_mut(&attempt_id) {
            let next = chain.tip.map_or(1, |tip| tip.seq + 1);
            let Some(held) = chain.held.remove(&next).filter(|_| !chain.broken) else {
                break;
            };
            self.held -= 1;
            self.apply(
                attempt_id,
                next,
                &held.published(),
                held.early,
                &mut accepted,
            );
        }
        accepted
    }

    fn hold(&mut self, attempt_id: Uuid, seq: i64, record: &Published<'_>, early: bool) {
        let chain = self.chains.entry(attempt_id).or_default();
        let reason = match chain.held.get(&seq) {
            Some(first)
                if first.payload == record.payload && first.ce_id.as_deref() == record.ce_id =>
            {
                self.repeats += 1;
                return;
            }
            Some(_) => "two different records claim this seq",
            None if self.held >= MAX_HELD => {
                "more records wait for an earlier seq than a walk holds"
            }
            None => {
                chain.held.insert(seq, Held::of(record, early));
                self.held += 1;
                return;
            }
        };
        self.break_at(attempt_id, seq, reason.into(), record);
    }

    fn apply(
        &mut self,
        attempt_id: Uuid,
        seq: i64,
        record: &Published<'_>,
        early: bool,
        accepted: &mut Vec<Walked>,
    ) {
        let chain = self.chains.entry(attempt_id).or_default();
        match step(&self.codec, chain, attempt_id, seq, record, early) {
            Ok(Step::Event(walked, linked)) => {
                self.unlinked += u64::from(!linked);
                accepted.push(*walked);
            }
            Ok(Step::Repeat) => self.repeats += 1,
            Err(reason) => self.break_at(attempt_id, seq, reason, record),
        }
    }

    fn break_at(&mut self, attempt_id: Uuid, seq: i64, reason: String, record: &Published<'_>) {
        let chain = self.chains.entry(attempt_id).or_default();
        chain.broken = true;
        self.held -= chain.held.len();
        chain.held.clear();
        self.breaks.push(ChainBreak {
            attempt_id,
            seq,
            reason: format!(
                "{reason} (partition {}, offset {})",
                record.partition, record.offset
            ),
        });
    }

    /// Ends the walk: records still held wait for a seq the topic does not
    /// have, and break their chains there.
    pub fn finish(&mut self) {
        let mut gaps = Vec::new();
        for (attempt_id, chain) in &mut self.chains {
            if let Some((seq, held)) = chain.held.pop_first() {
                let expected = chain.tip.map_or(1, |tip| tip.seq + 1);
                gaps.push(ChainBreak {
                    attempt_id: *attempt_id,
                    seq: expected,
                    reason: format!(
                        "expected seq {expected}, the topic has seq {seq} but not this one (events missing) (partition {}, offset {})",
                        held.partition, held.offset
                    ),
                });
                chain.held.clear();
                chain.broken = true;
            }
        }
        self.held = 0;
        self.breaks.extend(gaps);
    }

    /// The attempt and seq a record claims: its key and `execplane_seq`
    /// header, or, where those are missing, its payload's.
    fn identify(&mut self, record: &Published<'_>) -> Option<(Uuid, i64)> {
        let stated = record
            .key
            .and_then(|key| std::str::from_utf8(key).ok()?.parse::<Uuid>().ok())
            .zip(
                record
                    .seq
                    .and_then(|seq| std::str::from_utf8(seq).ok()?.parse::<i64>().ok()),
            );
        if stated.is_some() {
            return stated;
        }
        let decoded = self
            .codec
            .unframe(Family::AttemptEvent, record.payload)
            .map_err(|error| error.to_string())
            .and_then(|(fingerprint, datum)| super::decode(fingerprint, datum));
        match decoded {
            Ok(event) => Some((event.attempt_id, i64::try_from(event.seq).unwrap_or(0))),
            Err(error) => {
                self.records += 1;
                self.breaks.push(ChainBreak {
                    attempt_id: Uuid::nil(),
                    seq: 0,
                    reason: format!(
                        "a record with no attempt key and seq header does not decode: {error} (partition {}, offset {})",
                        record.partition, record.offset
                    ),
                });
                None
            }
        }
    }

    /// The first break in (attempt, seq) order, if any.
    pub fn first_break(&self) -> Option<&ChainBreak> {
        self.breaks
            .iter()
            .min_by_key(|found| (found.attempt_id, found.seq))
    }

    /// How many attempts' chains break.
    pub fn broken(&self) -> usize {
        self.breaks.len()
    }

    /// The event walked at `seq` of `attempt_id`, if any.
    pub fn seen_mut(&mut self, attempt_id: Uuid, seq: i64) -> Option<&mut Seen> {
        let index = usize::try_from(seq.checked_sub(1)?).ok()?;
        self.chains.get_mut(&attempt_id)?.seen.get_mut(index)
    }

    /// Each attempt's events as walked (up to its break, if it has one).
    pub fn attempts(&self) -> impl Iterator<Item = (&Uuid, &[Seen])> {
        self.chains
            .iter()
            .map(|(attempt_id, chain)| (attempt_id, chain.seen.as_slice()))
    }

    /// The number of attempts and of distinct events walked.
    pub fn totals(&self) -> (usize, usize) {
        (
            self.chains.len(),
            self.chains.values().map(|chain| chain.seen.len()).sum(),
        )
    }
}

enum Step {
    /// A new event, and whether its record stated its links.
    Event(Box<Walked>, bool),
    Repeat,
}

fn step(
    codec: &Codec,
    chain: &mut Chain,
    attempt_id: Uuid,
    seq: i64,
    record: &Published<'_>,
    early: bool,
) -> Result<Step, String> {
    let event_id = record
        .ce_id
        .and_then(|id| std::str::from_utf8(id).ok()?.parse::<Uuid>().ok())
        .ok_or("the record has no ce_id header holding an event id")?;
    let (fingerprint, datum) = codec
        .unframe(Family::AttemptEvent, record.payload)
        .map_err(|error| format!("the value is not a framed attempt event: {error}"))?;
    let tip = chain.tip.unwrap_or(Tip::GENESIS);
    if (1..=tip.seq).contains(&seq) {
        // Published before: the same event, byte for byte, or a forgery.
        let index = usize::try_from(seq - 1).unwrap_or(0);
        let first = chain.seen[index];
        if first.event_id != event_id {
            return Err(format!(
                "event {event_id} claims seq {seq}, which event {} holds",
                first.event_id
            ));
        }
        let prev = index
            .checked_sub(1)
            .map_or(GENESIS_HASH, |before| chain.seen[before].hash);
        if super::chain_hash(&prev, datum) != first.hash {
            return Err(format!(
                "a repeat of event {event_id} differs from its first publication"
            ));
        }
        return Ok(Step::Repeat);
    }
    let prev_hash = hex_header(record.prev_hash, PREV_HASH_HEADER)?;
    let hash = hex_header(record.hash, HASH_HEADER)?;
    let link = Link {
        seq,
        prev_hash: prev_hash.as_ref().map(|hash| hash.as_slice()),
        hash: hash.as_ref().map(|hash| hash.as_slice()),
        fingerprint,
        datum,
    };
    let (event, next) = super::check(attempt_id, tip, &link)?;
    if event.event_id != event_id {
        return Err(format!(
            "ce_id {event_id} is not the event's id {}",
            event.event_id
        ));
    }
    chain.tip = Some(next);
    chain.seen.push(Seen {
        event_id,
        hash: next.hash,
        early,
        matched: false,
    });
    Ok(Step::Event(
        Box::new(Walked {
            event,
            prev_hash: tip.hash,
            hash: next.hash,
        }),
        prev_hash.is_some() && hash.is_some(),
    ))
}

fn hex_header(value: Option<&[u8]>, name: &str) -> Result<Option<[u8; 32]>, String> {
    let Some(value) = value else {
        return Ok(None);
    };
    let mut hash = [0u8; 32];
    hex::decode_to_slice(value, &mut hash)
        .map_err(|_| format!("header {name} is not 64 hex digits"))?;
    Ok(Some(hash))
}
