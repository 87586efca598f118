use std::collections::HashMap;
use std::sync::OnceLock;

use apache_avro::rabin::Rabin;
use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::schema_compatibility::SchemaCompatibility;
use apache_avro::writer::datum::GenericDatumWriter;
use apache_avro::Schema;
use serde::de::DeserializeOwned;
use serde::Serialize;

/// The record families, one `.avsc` each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    Command,
    AttemptEvent,
    RunnerEvent,
    WorkItem,
    Result,
    Artifact,
    Presence,
    LogChunk,
}

impl Family {
    pub const ALL: [Family; 8] = [
        Family::Command,
        Family::AttemptEvent,
        Family::RunnerEvent,
        Family::WorkItem,
        Family::Result,
        Family::Artifact,
        Family::Presence,
        Family::LogChunk,
    ];

    /// The schema file name under `schemas/`, without `.avsc`.
    pub const fn file_stem(self) -> &'static str {
        match self {
            Family::Command => "commands",
            Family::AttemptEvent => "attempt-events",
            Family::RunnerEvent => "runner-events",
            Family::WorkItem => "work-items",
            Family::Result => "results",
            Family::Artifact => "artifacts",
            Family::Presence => "runner-presence",
            Family::LogChunk => "log-chunks",
        }
    }

    /// The family whose schema file is `<stem>.avsc`.
    pub fn from_file_stem(stem: &str) -> Option<Family> {
        Family::ALL
            .into_iter()
            .find(|family| family.file_stem() == stem)
    }

    /// The schema as committed now, embedded in the binary.
    pub const fn current_text(self) -> &'static str {
        match self {
            Family::Command => include_str!("../../schemas/commands.avsc"),
            Family::AttemptEvent => include_str!("../../schemas/attempt-events.avsc"),
            Family::RunnerEvent => include_str!("../../schemas/runner-events.avsc"),
            Family::WorkItem => include_str!("../../schemas/work-items.avsc"),
            Family::Result => include_str!("../../schemas/results.avsc"),
            Family::Artifact => include_str!("../../schemas/artifacts.avsc"),
            Family::Presence => include_str!("../../schemas/runner-presence.avsc"),
            Family::LogChunk => include_str!("../../schemas/log-chunks.avsc"),
        }
    }

    /// The previous release's copy, also embedded so old data stays readable.
    pub const fn previous_text(self) -> &'static str {
        match self {
            Family::Command => include_str!("../../schemas/previous/commands.avsc"),
            Family::AttemptEvent => include_str!("../../schemas/previous/attempt-events.avsc"),
            Family::RunnerEvent => include_str!("../../schemas/previous/runner-events.avsc"),
            Family::WorkItem => include_str!("../../schemas/previous/work-items.avsc"),
            Family::Result => include_str!("../../schemas/previous/results.avsc"),
            Family::Artifact => include_str!("../../schemas/previous/artifacts.avsc"),
            Family::Presence => include_str!("../../schemas/previous/runner-presence.avsc"),
            Family::LogChunk => include_str!("../../schemas/previous/log-chunks.avsc"),
        }
    }
}

/// How records are framed when written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Framing {
    /// Avro single-object encoding; needs no registry.
    #[default]
    SingleObject,
    /// Confluent wire format: magic 0, the registry id of the family's
    /// current schema, then the datum.
    Confluent,
}

/// The schema registry ids of each family: what Confluent framing writes
/// (`current`) and what it accepts (`current`, and `previous`: ids under
/// which the previous release's schema was registered, resolved to the
/// current one when read).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RegistryIds {
    pub current: HashMap<Family, u32>,
    pub previous: HashMap<Family, u32>,
}

impl RegistryIds {
    /// Which family and schema version an id stands for.
    fn lookup(&self, id: u32) -> Option<(Family, bool)> {
        self.current
            .iter()
            .find(|(_, known)| **known == id)
            .map(|(family, _)| (*family, true))
            .or_else(|| {
                self.previous
                    .iter()
                    .find(|(_, known)| **known == id)
                    .map(|(family, _)| (*family, false))
            })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("empty record")]
    Empty,
    #[error("unknown framing: first byte 0x{0:02x} is neither Avro single-object (0xC3 0x01) nor Confluent (0x00)")]
    UnknownFraming(u8),
    #[error("truncated {0} header")]
    TruncatedHeader(&'static str),
    #[error("unknown schema fingerprint {fingerprint:016x} for {family:?}: written with a schema this build does not know")]
    UnknownFingerprint { family: Family, fingerprint: u64 },
    #[error("unknown Confluent schema id {id} for {family:?}")]
    UnknownSchemaId { family: Family, id: u32 },
    #[error("schema id {id} is registered for {actual:?}, not {expected:?}")]
    WrongFamily {
        id: u32,
        expected: Family,
        actual: Family,
    },
    #[error("avro: {0}")]
    Avro(String),
    #[error("{0}")]
    Invalid(String),
}

impl CodecError {
    fn avro(error: impl std::fmt::Display) -> Self {
        CodecError::Avro(error.to_string())
    }
}

struct Known {
    schema: &'static Schema,
    fingerprint: u64,
    writer: GenericDatumWriter<'static>,
    reader: GenericDatumReader<'static>,
}

struct Registry {
    current: HashMap<Family, Known>,
    /// The specification fingerprint of each family's previous schema (what
    /// a Confluent id of that schema stands for).
    previous: HashMap<Family, u64>,
    /// Every schema a reader accepts by fingerprint: current and previous,
    /// each with a reader that resolves it to the current schema. Each is
    /// known by its specification fingerprint and by the one releases up to
    /// 0.1 wrote (`apache-avro`'s, see [`legacy_fingerprint`]), so records and
    /// `attempt_events.schema_fingerprint` rows written then stay readable.
    by_fingerprint: HashMap<(Family, u64), GenericDatumReader<'static>>,
}

fn parse(text: &str, family: Family) -> &'static Schema {
    let schema = Schema::parse_str(text)
        .unwrap_or_else(|error| panic!("embedded schema {family:?} does not parse: {error}"));
    // Parsed once per process; the cached writers and readers borrow them.
    Box::leak(Box::new(schema))
}

/// The CRC-64-AVRO fingerprint of a schema's Parsing Canonical Form, as the
/// Avro specification defines it (and Java, fastavro and others compute it).
pub fn fingerprint(schema_json: &str) -> Result<u64, CodecError> {
    super::canonical::spec_fingerprint(schema_json).map_err(CodecError::Invalid)
}

/// The fingerprint execplane wrote before it computed the specification's:
/// `apache-avro`'s, whose canonical form keeps `{"type":"long"}` where a
/// `logicalType` was (upstream AVRO-4004). Read, never written.
pub fn legacy_fingerprint(schema: &Schema) -> u64 {
    let bytes = schema.fingerprint::<Rabin>().bytes;
    let mut array = [0u8; 8];
    array.copy_from_slice(&bytes[..8]);
    u64::from_le_bytes(array)
}

fn reader(writer: &'static Schema, current: &'static Schema) -> GenericDatumReader<'static> {
    let resolved = if writer == current {
        None
    } else {
        Some(current)
    };
    GenericDatumReader::builder(writer)
        .maybe_reader_schema(resolved)
        .build()
        .unwrap_or_else(|error| panic!("embedded schema does not resolve: {error}"))
}

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let mut current = HashMap::new();
        let mut previous_fingerprints = HashMap::new();
        let mut by_fingerprint = HashMap::new();
        let spec = |family: Family, text: &str| {
            fingerprint(text).unwrap_or_else(|error| {
                panic!("embedded schema {family:?} has no canonical form: {error}")
            })
        };
        for family in Family::ALL {
            let schema = parse(family.current_text(), family);
            let previous = parse(family.previous_text(), family);
            let current_fingerprint = spec(family, family.current_text());
            // Previous first: where a schema did not change, current wins.
            for key in [
                legacy_fingerprint(previous),
                spec(family, family.previous_text()),
            ] {
                by_fingerprint.insert((family, key), reader(previous, schema));
            }
            for key in [legacy_fingerprint(schema), current_fingerprint] {
                by_fingerprint.insert((family, key), reader(schema, schema));
            }
            previous_fingerprints.insert(family, spec(family, family.previous_text()));
            let writer = GenericDatumWriter::builder(schema)
                .build()
                .unwrap_or_else(|error| {
                    panic!("embedded schema {family:?} does not resolve: {error}")
                });
            current.insert(
                family,
                Known {
                    schema,
                    fingerprint: current_fingerprint,
                    writer,
                    reader: reader(schema, schema),
                },
            );
        }
        Registry {
            current,
            previous: previous_fingerprints,
            by_fingerprint,
        }
    })
}

/// Encodes and decodes the record families. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Codec {
    framing: Framing,
    ids: std::sync::Arc<RegistryIds>,
}

impl Codec {
    /// A codec writing `framing`; Confluent records are read with `ids`
    /// whatever the framing written. Confluent framing needs a current id
    /// for every family, and no id may stand for two schemas.
    pub fn new(framing: Framing, ids: RegistryIds) -> Result<Self, CodecError> {
        let mut problems = Vec::new();
        if framing == Framing::Confluent {
            for family in Family::ALL {
                if !ids.current.contains_key(&family) {
                    problems.push(format!("no registry id for {}", family.file_stem()));
                }
            }
        }
        let mut seen = HashMap::new();
        for (family, id) in ids.current.iter().chain(ids.previous.iter()) {
            if let Some(other) = seen.insert(*id, *family) {
                problems.push(format!(
                    "registry id {id} is given for {} and {}",
                    other.file_stem(),
                    family.file_stem()
                ));
            }
        }
        if !problems.is_empty() {
            problems.sort();
            return Err(CodecError::Invalid(problems.join("; ")));
        }
        Ok(Self {
            framing,
            ids: std::sync::Arc::new(ids),
        })
    }

    /// Confluent framing with these current ids (tests and tools).
    pub fn confluent(current: HashMap<Family, u32>) -> Self {
        Self {
            framing: Framing::Confluent,
            ids: std::sync::Arc::new(RegistryIds {
                current,
                previous: HashMap::new(),
            }),
        }
    }

    pub fn framing(&self) -> Framing {
        self.framing
    }

    /// The current schema of a family.
    pub fn schema(family: Family) -> &'static Schema {
        registry().current[&family].schema
    }

    pub fn fingerprint(family: Family) -> u64 {
        registry().current[&family].fingerprint
    }

    /// The bare Avro datum, without framing. Deterministic for a value (the
    /// schemas use no maps), which is why the event log hashes it.
    pub fn datum<T: Serialize>(family: Family, value: &T) -> Result<Vec<u8>, CodecError> {
        let known = &registry().current[&family];
        known
            .writer
            .write_ser_to_vec(value)
            .map_err(CodecError::avro)
    }

    /// Reads a bare datum written with the current schema.
    pub fn from_datum<T: DeserializeOwned>(family: Family, bytes: &[u8]) -> Result<T, CodecError> {
        read_datum(&registry().current[&family].reader, bytes)
    }

    /// Reads a bare datum written with the schema of `fingerprint` (current
    /// or previous), resolved to the current one.
    pub fn from_datum_by_fingerprint<T: DeserializeOwned>(
        family: Family,
        fingerprint: u64,
        bytes: &[u8],
    ) -> Result<T, CodecError> {
        let reader = registry()
            .by_fingerprint
            .get(&(family, fingerprint))
            .ok_or(CodecError::UnknownFingerprint {
                family,
                fingerprint,
            })?;
        read_datum(reader, bytes)
    }

    /// A record from its datum and its writer schema's fingerprint: read
    /// directly when written with the current schema (`codec::datums`),
    /// resolved by apache-avro otherwise.
    pub(crate) fn record<T: super::datums::Datum>(
        fingerprint: u64,
        datum: &[u8],
    ) -> Result<T, CodecError> {
        if fingerprint == Self::fingerprint(T::FAMILY) {
            if let Some(record) = super::datums::read_exact(datum) {
                return Ok(record);
            }
        }
        Self::from_datum_by_fingerprint(T::FAMILY, fingerprint, datum)
    }

    /// A record of either framing (`record`).
    pub(crate) fn decode_record<T: super::datums::Datum>(
        &self,
        bytes: &[u8],
    ) -> Result<T, CodecError> {
        let (fingerprint, datum) = self.unframe(T::FAMILY, bytes)?;
        Self::record(fingerprint, datum)
    }

    /// Encodes with the configured framing.
    pub fn encode<T: Serialize>(&self, family: Family, value: &T) -> Result<Vec<u8>, CodecError> {
        self.frame(family, &Self::datum(family, value)?)
    }

    /// A record with the configured framing, its datum written by
    /// `codec::datums` (the bytes apache-avro writes).
    pub(crate) fn encode_record<T: super::datums::Datum>(
        &self,
        record: &T,
    ) -> Result<Vec<u8>, CodecError> {
        self.frame(T::FAMILY, &super::datums::datum(record))
    }

    /// Frames a datum written with the current schema.
    pub fn frame(&self, family: Family, datum: &[u8]) -> Result<Vec<u8>, CodecError> {
        self.frame_written_with(family, Self::fingerprint(family), datum)
    }

    /// Frames a datum written with the schema of `fingerprint`, as it was
    /// framed when written: a stored event is published with its own writer
    /// schema, whatever the current one is now. Refused for a schema this
    /// release cannot name (in Confluent framing, the current and the
    /// previous one, each by its configured registry id).
    pub fn frame_written_with(
        &self,
        family: Family,
        fingerprint: u64,
        datum: &[u8],
    ) -> Result<Vec<u8>, CodecError> {
        let unknown = || CodecError::UnknownFingerprint {
            family,
            fingerprint,
        };
        if !registry()
            .by_fingerprint
            .contains_key(&(family, fingerprint))
        {
            return Err(unknown());
        }
        let mut framed = Vec::with_capacity(datum.len() + 10);
        match &self.framing {
            Framing::SingleObject => {
                framed.extend_from_slice(&[0xC3, 0x01]);
                framed.extend_from_slice(&fingerprint.to_le_bytes());
            }
            Framing::Confluent => {
                let (ids, which) = if fingerprint == Self::fingerprint(family) {
                    (&self.ids.current, "current")
                } else if registry().previous.get(&family) == Some(&fingerprint) {
                    (&self.ids.previous, "previous")
                } else {
                    return Err(unknown());
                };
                let id = ids.get(&family).ok_or_else(|| {
                    CodecError::Invalid(format!(
                        "no registry schema id configured for the {which} schema of {family:?}"
                    ))
                })?;
                framed.push(0x00);
                framed.extend_from_slice(&id.to_be_bytes());
            }
        }
        framed.extend_from_slice(datum);
        Ok(framed)
    }

    /// Decodes either framing, resolving an older writer schema to the
    /// current one.
    pub fn decode<T: DeserializeOwned>(
        &self,
        family: Family,
        bytes: &[u8],
    ) -> Result<T, CodecError> {
        let (fingerprint, datum) = self.unframe(family, bytes)?;
        Self::from_datum_by_fingerprint(family, fingerprint, datum)
    }

    /// A record of either framing split into its writer schema's
    /// specification fingerprint and its bare datum: the bytes the event
    /// log's hash chain covers, however the record was framed.
    pub fn unframe<'a>(
        &self,
        family: Family,
        bytes: &'a [u8],
    ) -> Result<(u64, &'a [u8]), CodecError> {
        match bytes {
            [] => Err(CodecError::Empty),
            [0xC3, 0x01, rest @ ..] => {
                let Some((fingerprint, datum)) = rest.split_first_chunk::<8>() else {
                    return Err(CodecError::TruncatedHeader("single-object"));
                };
                Ok((u64::from_le_bytes(*fingerprint), datum))
            }
            [0xC3, ..] => Err(CodecError::TruncatedHeader("single-object")),
            [0x00, rest @ ..] => {
                let Some((id, datum)) = rest.split_first_chunk::<4>() else {
                    return Err(CodecError::TruncatedHeader("Confluent"));
                };
                let id = u32::from_be_bytes(*id);
                match self.ids.lookup(id) {
                    Some((actual, true)) if actual == family => {
                        Ok((Self::fingerprint(family), datum))
                    }
                    Some((actual, false)) if actual == family => {
                        Ok((registry().previous[&family], datum))
                    }
                    Some((actual, _)) => Err(CodecError::WrongFamily {
                        id,
                        expected: family,
                        actual,
                    }),
                    None => Err(CodecError::UnknownSchemaId { family, id }),
                }
            }
            [first, ..] => Err(CodecError::UnknownFraming(*first)),
        }
    }
}

fn read_datum<T: DeserializeOwned>(
    reader: &GenericDatumReader<'static>,
    mut bytes: &[u8],
) -> Result<T, CodecError> {
    let value = reader.read_value(&mut bytes).map_err(CodecError::avro)?;
    if !bytes.is_empty() {
        return Err(CodecError::Invalid(format!(
            "{} trailing bytes after the datum",
            bytes.len()
        )));
    }
    apache_avro::from_value(&value).map_err(CodecError::avro)
}

/// Whether `reader` can read everything written with `writer`.
pub fn can_read(writer: &Schema, reader: &Schema) -> Result<(), String> {
    SchemaCompatibility::can_read(writer, reader)
        .map(|_| ())
        .map_err(|error| error.to_string())
}
