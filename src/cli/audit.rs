//! `execplane audit`: the hash chains walked from the database, the
//! published topic or an evidence bundle; the topic compared with the
//! database; timelines; exports. See docs/EVENTS.md ("Proving the
//! published log").

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::audit::bundle::{self, EventLine, Header};
use crate::audit::topic::{self, Walk, Walked};
use crate::contract::topics;
use crate::kafka::KafkaConfig;
use crate::store::{EventSelection, Store, StoredEvent};

/// How many findings of each kind `compare` prints before it counts.
const SHOWN: usize = 20;

pub async fn verify(store: &Store, attempt: Option<Uuid>) -> anyhow::Result<ExitCode> {
    let report = store.verify_chain(attempt).await?;
    match report.first_break {
        None => {
            println!(
                "hash chain intact: {} attempts, {} events",
                report.attempts, report.events
            );
            Ok(ExitCode::SUCCESS)
        }
        Some(broken) => {
            eprintln!("{broken}");
            Ok(ExitCode::from(1))
        }
    }
}

fn published_topic(kafka: &KafkaConfig, topic: Option<String>) -> String {
    topic.unwrap_or_else(|| kafka.topic(topics::ATTEMPT_EVENTS))
}

/// Walks the published log to its end now: the walk, and every event it
/// accepted that `keep` wants.
async fn walk_topic(
    kafka: &KafkaConfig,
    topic: &str,
    only: Option<Uuid>,
    mut keep: impl FnMut(Walked),
) -> anyhow::Result<Walk> {
    let ends = topic::ends(kafka, topic)
        .await
        .with_context(|| format!("reading the ends of {topic}"))?;
    let mut walk = Walk::new(kafka.codec.clone(), only);
    topic::read(kafka, topic, None, &ends, |record| {
        walk.push(record, true).into_iter().for_each(&mut keep);
    })
    .await
    .with_context(|| format!("reading {topic}"))?;
    walk.finish();
    Ok(walk)
}

pub async fn verify_topic(
    kafka: &KafkaConfig,
    topic: Option<String>,
    attempt: Option<Uuid>,
) -> anyhow::Result<ExitCode> {
    let topic = published_topic(kafka, topic);
    let walk = walk_topic(kafka, &topic, attempt, |_| {}).await?;
    let (attempts, events) = walk.totals();
    if let Some(broken) = walk.first_break() {
        eprintln!("{broken}");
        if walk.broken() > 1 {
            eprintln!("{} chains break in all", walk.broken());
        }
        return Ok(ExitCode::from(1));
    }
    println!(
        "published log intact: {attempts} attempts, {events} events in {} records on {topic} ({} repeats dropped, {} without chain headers)",
        walk.records, walk.repeats, walk.unlinked
    );
    Ok(ExitCode::SUCCESS)
}

/// The findings of one kind, the first [`SHOWN`] printed.
struct Findings {
    what: &'static str,
    lines: Vec<String>,
}

impl Findings {
    fn new(what: &'static str) -> Self {
        Self {
            what,
            lines: Vec::new(),
        }
    }

    fn print(&self) {
        for line in self.lines.iter().take(SHOWN) {
            eprintln!("{}: {line}", self.what);
        }
        if self.lines.len() > SHOWN {
            eprintln!("{}: ... and {} more", self.what, self.lines.len() - SHOWN);
        }
    }
}

/// The topic against the database. The topic is read to its end before
/// the database's snapshot and then to its end after it: every event the
/// snapshot holds was published before the second end or waits in the
/// outbox, and every record before the first end is in the snapshot. So
/// nothing in flight is counted missing or extra.
pub async fn compare(
    store: &Store,
    kafka: &KafkaConfig,
    topic: Option<String>,
    attempt: Option<Uuid>,
) -> anyhow::Result<ExitCode> {
    let topic = published_topic(kafka, topic);
    let first = topic::ends(kafka, &topic).await?;
    let mut walk = Walk::new(kafka.codec.clone(), attempt);
    topic::read(kafka, &topic, None, &first, |record| {
        walk.push(record, true);
    })
    .await?;
    let (mut missing, mut different) = (
        Findings::new("missing on the topic"),
        Findings::new("different"),
    );
    let mut unseen = Vec::new();
    let mut stored = 0u64;
    let pending = store
        .event_links(attempt, |link| {
            stored += 1;
            match walk.seen_mut(link.attempt_id, link.seq) {
                Some(seen) => {
                    seen.matched = true;
                    if let Some(difference) = differs(seen, &link) {
                        different.lines.push(difference);
                    }
                }
                None => unseen.push(link),
            }
        })
        .await?;
    let second = topic::ends(kafka, &topic).await?;
    topic::read(kafka, &topic, Some(&first), &second, |record| {
        walk.push(record, false);
    })
    .await?;
    walk.finish();
    for link in unseen {
        match walk.seen_mut(link.attempt_id, link.seq) {
            Some(seen) => {
                seen.matched = true;
                if let Some(difference) = differs(seen, &link) {
                    different.lines.push(difference);
                }
            }
            None if pending.contains(&link.event_id) => {}
            None => missing.lines.push(format!(
                "attempt {} seq {} (event {})",
                link.attempt_id, link.seq, link.event_id
            )),
        }
    }
    let extra = extras(&walk);
    missing.lines.sort();
    different.lines.sort();
    let (topic_attempts, topic_events) = walk.totals();
    println!(
        "compared {topic}: {topic_events} events of {topic_attempts} attempts ({} records, {} repeats dropped) with {stored} events in the database ({} waiting in the outbox)",
        walk.records,
        walk.repeats,
        pending.len()
    );
    let broken = walk.first_break().cloned();
    if let Some(broken) = &broken {
        eprintln!("{broken}");
    }
    for findings in [&missing, &extra, &different] {
        findings.print();
    }
    let agree = broken.is_none()
        && missing.lines.is_empty()
        && extra.lines.is_empty()
        && different.lines.is_empty();
    if agree {
        println!("the topic and the database agree");
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!(
        "the topic and the database disagree: {} missing on the topic, {} on the topic only, {} different, {} broken chains",
        missing.lines.len(),
        extra.lines.len(),
        different.lines.len(),
        walk.broken()
    );
    Ok(ExitCode::from(1))
}

/// The events read before the first end that no event of the database
/// matched.
fn extras(walk: &Walk) -> Findings {
    let mut extra = Findings::new("on the topic only");
    let mut attempts: Vec<_> = walk.attempts().collect();
    attempts.sort_by_key(|(attempt_id, _)| **attempt_id);
    for (attempt_id, seen) in attempts {
        for (index, event) in seen.iter().enumerate() {
            if event.early && !event.matched {
                extra.lines.push(format!(
                    "attempt {attempt_id} seq {} (event {})",
                    index + 1,
                    event.event_id
                ));
            }
        }
    }
    extra
}

fn differs(seen: &topic::Seen, link: &crate::store::EventLink) -> Option<String> {
    if seen.event_id != link.event_id {
        return Some(format!(
            "attempt {} seq {}: event {} on the topic, {} in the database",
            link.attempt_id, link.seq, seen.event_id, link.event_id
        ));
    }
    (seen.hash.as_slice() != link.hash.as_slice()).then(|| {
        format!(
            "attempt {} seq {}: the topic's chain hash {} is not the database's {}",
            link.attempt_id,
            link.seq,
            hex::encode(seen.hash),
            hex::encode(&link.hash)
        )
    })
}

/// A time given as RFC 3339 or as a duration before now.
fn instant(text: &str, now: DateTime<Utc>) -> anyhow::Result<DateTime<Utc>> {
    if let Ok(time) = DateTime::parse_from_rfc3339(text) {
        return Ok(time.with_timezone(&Utc));
    }
    let ago = humantime::parse_duration(text)
        .ok()
        .and_then(|ago| chrono::Duration::from_std(ago).ok())
        .with_context(|| {
            format!("{text:?} is neither an RFC 3339 time nor a duration before now (`2h`)")
        })?;
    Ok(now - ago)
}

/// What `replay` shows, from its flags (clap makes them exclusive).
pub fn selection(
    attempt: Option<Uuid>,
    job: Option<String>,
    since: Option<&str>,
) -> anyhow::Result<EventSelection> {
    let now = Utc::now();
    Ok(match (attempt, job, since) {
        (Some(attempt), ..) => EventSelection::Attempt(attempt),
        (None, Some(job), _) => EventSelection::Job(job),
        (None, None, Some(since)) => EventSelection::Window(instant(since, now)?, now),
        (None, None, None) => anyhow::bail!("name --attempt, --job or --since"),
    })
}

/// One line of a timeline.
struct Entry {
    event: crate::contract::AttemptEvent,
    prev_hash: Vec<u8>,
    hash: Vec<u8>,
}

fn print_timeline(mut entries: Vec<Entry>, several: bool, json: bool) -> anyhow::Result<ExitCode> {
    if entries.is_empty() {
        eprintln!("no events");
        return Ok(ExitCode::from(1));
    }
    entries.sort_by_key(|entry| {
        (
            entry.event.occurred_at,
            entry.event.attempt_id,
            entry.event.seq,
        )
    });
    if json {
        let mut values = Vec::with_capacity(entries.len());
        for entry in &entries {
            let mut value = serde_json::to_value(&entry.event)?;
            value["hash"] = serde_json::json!(hex::encode(&entry.hash));
            value["prev_hash"] = serde_json::json!(hex::encode(&entry.prev_hash));
            values.push(value);
        }
        println!("{}", serde_json::to_string_pretty(&values)?);
        return Ok(ExitCode::SUCCESS);
    }
    for Entry { event, .. } in &entries {
        let time = DateTime::from_timestamp_millis(event.occurred_at)
            .unwrap_or_default()
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let attempt = if several {
            format!("{}  ", event.attempt_id)
        } else {
            String::new()
        };
        println!(
            "{attempt}#{:<3} {time}  {:<16} {}",
            event.seq,
            event.body.kind(),
            event.summary()
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn replay(
    store: &Store,
    selection: &EventSelection,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let mut entries = Vec::new();
    store
        .for_each_event(selection, |stored| {
            entries.push(Entry {
                event: stored.decode()?,
                prev_hash: stored.prev_hash,
                hash: stored.hash,
            });
            Ok(())
        })
        .await?;
    let several = !matches!(selection, EventSelection::Attempt(_));
    print_timeline(entries, several, json)
}

pub async fn replay_topic(
    kafka: &KafkaConfig,
    topic: Option<String>,
    selection: &EventSelection,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let topic = published_topic(kafka, topic);
    let only = match selection {
        EventSelection::Attempt(attempt) => Some(*attempt),
        _ => None,
    };
    let mut entries = Vec::new();
    let walk = walk_topic(kafka, &topic, only, |walked| {
        let wanted = match selection {
            EventSelection::Attempt(_) => true,
            EventSelection::Job(job) => walked.event.job_id == *job,
            EventSelection::Window(from, to) => {
                (from.timestamp_millis()..to.timestamp_millis()).contains(&walked.event.occurred_at)
            }
        };
        if wanted {
            entries.push(Entry {
                event: walked.event,
                prev_hash: walked.prev_hash.to_vec(),
                hash: walked.hash.to_vec(),
            });
        }
    })
    .await?;
    if let Some(broken) = walk.first_break() {
        // A timeline is shown even so; the break is said first.
        eprintln!("warning: {broken}");
    }
    print_timeline(entries, only.is_none(), json)
}

pub async fn export(
    store: &Store,
    since: &str,
    until: Option<&str>,
    signing_key: Option<&Path>,
) -> anyhow::Result<ExitCode> {
    let now = Utc::now();
    let (from, to) = (
        instant(since, now)?,
        until.map_or(Ok(now), |until| instant(until, now))?,
    );
    anyhow::ensure!(from < to, "--since must be before --until");
    let key = signing_key
        .map(|path| {
            let pem = std::fs::read(path)
                .with_context(|| format!("reading the signing key {}", path.display()))?;
            bundle::signing_key(&pem).with_context(|| format!("{}", path.display()))
        })
        .transpose()?;
    let rfc3339 = |time: DateTime<Utc>| time.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let header = Header {
        format: bundle::FORMAT.into(),
        since: rfc3339(from),
        until: rfc3339(to),
        exported_at: rfc3339(now),
    };
    let stdout = std::io::stdout().lock();
    let mut writer = bundle::Writer::new(std::io::BufWriter::new(stdout), &header)?;
    let events = store
        .for_each_event(&EventSelection::Window(from, to), |stored| {
            let line = event_line(&stored)?;
            writer
                .event(&line)
                .map_err(|error| crate::store::StoreError::Corrupt(error.to_string()))
        })
        .await?;
    writer.finish(key.as_ref())?;
    eprintln!(
        "exported {events} events that occurred in [{}, {}){}",
        header.since,
        header.until,
        if key.is_some() {
            ", signed"
        } else {
            ", unsigned (no signing key)"
        }
    );
    Ok(ExitCode::SUCCESS)
}

fn event_line(stored: &StoredEvent) -> Result<EventLine, crate::store::StoreError> {
    use base64::Engine;
    let event = stored.decode()?;
    Ok(EventLine {
        attempt_id: stored.attempt_id,
        seq: stored.seq,
        fingerprint: format!("{:016x}", stored.schema_fingerprint as u64),
        prev_hash: hex::encode(&stored.prev_hash),
        hash: hex::encode(&stored.hash),
        datum: base64::engine::general_purpose::STANDARD.encode(&stored.payload),
        event: serde_json::to_value(&event)?,
    })
}

pub fn verify_file(file: &Path, public_key: Option<&Path>) -> anyhow::Result<ExitCode> {
    let key = match public_key {
        None => None,
        Some(path) => {
            let loaded = std::fs::read(path)
                .map_err(anyhow::Error::from)
                .and_then(|pem| bundle::public_key(&pem).map_err(anyhow::Error::from));
            match loaded {
                Ok(key) => Some(key),
                Err(error) => {
                    eprintln!("error: the public key {}: {error}", path.display());
                    return Ok(ExitCode::from(2));
                }
            }
        }
    };
    let input = match std::fs::File::open(file) {
        Ok(input) => std::io::BufReader::new(input),
        Err(error) => {
            eprintln!("error: {}: {error}", file.display());
            return Ok(ExitCode::from(2));
        }
    };
    match bundle::verify(input, key.as_ref()) {
        Ok(verified) => {
            let mut out = std::io::stdout().lock();
            writeln!(
                out,
                "bundle intact: {} events of {} attempts that occurred in [{}, {}), {}",
                verified.events,
                verified.attempts,
                verified.header.since,
                verified.header.until,
                if verified.signed {
                    "signed by the given key"
                } else {
                    "signature not checked (no --public-key)"
                }
            )?;
            Ok(ExitCode::SUCCESS)
        }
        Err(error) => {
            eprintln!("{}: {error}", file.display());
            Ok(ExitCode::from(1))
        }
    }
}
