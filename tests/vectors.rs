//! The shared test vectors (`schemas/vectors/`, docs/EVENTS.md "Test
//! vectors"): every record decodes in Rust to the JSON the vector gives,
//! by the mapping the docs define, exactly as the Python and Java example
//! consumers decode it (their own tests read the same files); and each
//! decodes into its typed record, which encodes back to the same bytes.

mod common;

use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::types::Value;
use execplane::codec::{
    ArtifactRecord, AttemptEventRecord, Codec, CommandRecord, Family, LogChunkRecord,
    PresenceRecord, ResultRecord, RunnerEventRecord, WorkRecord,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value as Json};

/// A decoded datum as docs/EVENTS.md ("The decoded JSON mapping") writes
/// it: unions bare, enums as symbols, bytes and fixed as hex, times as
/// integers.
fn mapped(value: &Value) -> Json {
    match value {
        Value::Null => Json::Null,
        Value::Boolean(value) => json!(value),
        Value::Int(value) | Value::Date(value) | Value::TimeMillis(value) => json!(value),
        Value::Long(value)
        | Value::TimestampMillis(value)
        | Value::TimestampMicros(value)
        | Value::TimeMicros(value)
        | Value::LocalTimestampMillis(value)
        | Value::LocalTimestampMicros(value) => json!(value),
        Value::Float(value) => json!(value),
        Value::Double(value) => json!(value),
        Value::Bytes(bytes) | Value::Fixed(_, bytes) => json!(hex::encode(bytes)),
        Value::String(text) | Value::Enum(_, text) => json!(text),
        Value::Uuid(uuid) => json!(uuid.to_string()),
        Value::Union(_, inner) => mapped(inner),
        Value::Array(items) => Json::Array(items.iter().map(mapped).collect()),
        Value::Record(fields) => Json::Object(
            fields
                .iter()
                .map(|(name, value)| (name.clone(), mapped(value)))
                .collect(),
        ),
        other => panic!("the schemas hold no {other:?}"),
    }
}

/// The typed record decodes, and encodes back to the same bytes (the
/// datum is a deterministic function of the record).
fn typed<T: DeserializeOwned + Serialize>(family: Family, name: &str, bytes: &[u8]) -> T {
    let codec = Codec::default();
    let record: T = codec
        .decode(family, bytes)
        .unwrap_or_else(|error| panic!("{name}: {error}"));
    assert_eq!(
        codec.encode(family, &record).unwrap(),
        bytes,
        "{name}: encoded again"
    );
    record
}

#[test]
fn every_shared_vector_decodes_identically_and_into_its_typed_record() {
    let mut total = 0;
    for family in Family::ALL {
        let path = format!(
            "{}/schemas/vectors/{}.json",
            env!("CARGO_MANIFEST_DIR"),
            family.file_stem()
        );
        let vectors: Vec<Json> = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
            .unwrap_or_else(|error| panic!("{path}: {error}"));
        assert!(!vectors.is_empty(), "{path} holds no vector");
        let reader = GenericDatumReader::builder(Codec::schema(family))
            .build()
            .unwrap();
        for vector in &vectors {
            let name = format!("{}: {}", family.file_stem(), vector["name"]);
            let bytes = hex::decode(vector["hex"].as_str().unwrap()).unwrap();
            let (fingerprint, mut datum) = Codec::default().unframe(family, &bytes).unwrap();
            assert_eq!(fingerprint, Codec::fingerprint(family), "{name}");
            let value = reader.read_value(&mut datum).unwrap();
            assert!(datum.is_empty(), "{name}: trailing bytes");
            assert_eq!(mapped(&value), vector["decoded"], "{name}");
            match family {
                Family::Command => drop(typed::<CommandRecord>(family, &name, &bytes)),
                Family::AttemptEvent => {
                    let record = typed::<AttemptEventRecord>(family, &name, &bytes);
                    execplane::contract::AttemptEvent::try_from(record)
                        .unwrap_or_else(|error| panic!("{name}: {error}"));
                }
                Family::RunnerEvent => drop(typed::<RunnerEventRecord>(family, &name, &bytes)),
                Family::WorkItem => drop(typed::<WorkRecord>(family, &name, &bytes)),
                Family::Result => drop(typed::<ResultRecord>(family, &name, &bytes)),
                Family::Artifact => drop(typed::<ArtifactRecord>(family, &name, &bytes)),
                Family::Presence => drop(typed::<PresenceRecord>(family, &name, &bytes)),
                Family::LogChunk => drop(typed::<LogChunkRecord>(family, &name, &bytes)),
            }
            total += 1;
        }
    }
    assert!(total >= Family::ALL.len());
}

#[test]
fn every_shared_vector_decodes_identically_in_python_and_java() {
    for (name, mut command) in common::consumers::vector_checks() {
        let output = command.output().unwrap();
        assert!(
            output.status.success(),
            "the {name} consumer's vector check: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
