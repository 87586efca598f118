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
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Framing {
    /// Avro single-object encoding; needs no registry.
    #[default]
    SingleObject,
    /// Confluent wire format with the registry ids of each family's schema.
    Confluent(HashMap<Family, u32>),
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
    /// Every schema a reader accepts by fingerprint: current and previous,
    /// each with a reader that resolves it to the current schema.
    by_fingerprint: HashMap<(Family, u64), GenericDatumReader<'static>>,
}

fn parse(text: &str, family: Family) -> &'static Schema {
    let schema = Schema::parse_str(text)
        .unwrap_or_else(|error| panic!("embedded schema {family:?} does not parse: {error}"));
    // Parsed once per process; the cached writers and readers borrow them.
    Box::leak(Box::new(schema))
}

/// The 64-bit Rabin fingerprint of the schema's parsing canonical form.
pub fn fingerprint(schema: &Schema) -> u64 {
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
        let mut by_fingerprint = HashMap::new();
        for family in Family::ALL {
            let schema = parse(family.current_text(), family);
            let previous = parse(family.previous_text(), family);
            let current_fingerprint = fingerprint(schema);
            by_fingerprint.insert((family, fingerprint(previous)), reader(previous, schema));
            by_fingerprint.insert((family, current_fingerprint), reader(schema, schema));
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
            by_fingerprint,
        }
    })
}

/// Encodes and decodes the record families. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Codec {
    framing: Framing,
}

impl Codec {
    pub fn new(framing: Framing) -> Self {
        Self { framing }
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

    /// Encodes with the configured framing.
    pub fn encode<T: Serialize>(&self, family: Family, value: &T) -> Result<Vec<u8>, CodecError> {
        self.frame(family, &Self::datum(family, value)?)
    }

    /// Frames an already encoded datum.
    pub fn frame(&self, family: Family, datum: &[u8]) -> Result<Vec<u8>, CodecError> {
        let mut framed = Vec::with_capacity(datum.len() + 10);
        match &self.framing {
            Framing::SingleObject => {
                framed.extend_from_slice(&[0xC3, 0x01]);
                framed.extend_from_slice(&Self::fingerprint(family).to_le_bytes());
            }
            Framing::Confluent(ids) => {
                let id = ids.get(&family).ok_or_else(|| {
                    CodecError::Invalid(format!("no registry schema id configured for {family:?}"))
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
        match bytes {
            [] => Err(CodecError::Empty),
            [0xC3, 0x01, rest @ ..] => {
                if rest.len() < 8 {
                    return Err(CodecError::TruncatedHeader("single-object"));
                }
                let mut array = [0u8; 8];
                array.copy_from_slice(&rest[..8]);
                let fingerprint = u64::from_le_bytes(array);
                let reader = registry()
                    .by_fingerprint
                    .get(&(family, fingerprint))
                    .ok_or(CodecError::UnknownFingerprint {
                        family,
                        fingerprint,
                    })?;
                read_datum(reader, &rest[8..])
            }
            [0xC3, ..] => Err(CodecError::TruncatedHeader("single-object")),
            [0x00, rest @ ..] => {
                if rest.len() < 4 {
                    return Err(CodecError::TruncatedHeader("Confluent"));
                }
                let id = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]);
                let Framing::Confluent(ids) = &self.framing else {
                    return Err(CodecError::UnknownSchemaId { family, id });
                };
                match ids.iter().find(|(_, known)| **known == id) {
                    Some((actual, _)) if *actual == family => {
                        read_datum(&registry().current[&family].reader, &rest[4..])
                    }
                    Some((actual, _)) => Err(CodecError::WrongFamily {
                        id,
                        expected: family,
                        actual: *actual,
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
