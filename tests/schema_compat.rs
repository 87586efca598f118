//! Schema evolution is backward compatible only: every current schema can
//! read data written with the previous release's copy in `schemas/previous/`.

use apache_avro::Schema;
use execplane::codec::{can_read, fingerprint, Family};

#[test]
fn every_schema_reads_its_previous_version() {
    for family in Family::ALL {
        let previous = Schema::parse_str(family.previous_text()).unwrap();
        let current = Schema::parse_str(family.current_text()).unwrap();
        if let Err(error) = can_read(&previous, &current) {
            panic!(
                "schemas/{}.avsc cannot read data written with its previous version: {error}",
                family.file_stem()
            );
        }
    }
}

#[test]
fn the_embedded_schemas_are_the_committed_files() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas");
    for family in Family::ALL {
        let on_disk =
            std::fs::read_to_string(root.join(format!("{}.avsc", family.file_stem()))).unwrap();
        assert_eq!(on_disk, family.current_text());
        Schema::parse_str(&on_disk).unwrap();
        assert_ne!(fingerprint(&on_disk).unwrap(), 0);
    }
}

#[test]
fn the_jobspec_record_is_defined_identically_wherever_it_is_inlined() {
    // commands, attempt events and work items each inline the JobSpec record
    // so that every schema file stands alone; the copies must not drift.
    fn find(value: &serde_json::Value) -> Option<serde_json::Value> {
        match value {
            serde_json::Value::Object(map)
                if map.get("name").and_then(|name| name.as_str()) == Some("JobSpec")
                    && map.contains_key("fields") =>
            {
                Some(value.clone())
            }
            serde_json::Value::Object(map) => map.values().find_map(find),
            serde_json::Value::Array(items) => items.iter().find_map(find),
            _ => None,
        }
    }
    let copies: Vec<serde_json::Value> = [Family::Command, Family::AttemptEvent, Family::WorkItem]
        .into_iter()
        .map(|family| {
            find(&serde_json::from_str(family.current_text()).unwrap()).expect("JobSpec inlined")
        })
        .collect();
    assert_eq!(copies[0], copies[1]);
    assert_eq!(copies[0], copies[2]);
}
