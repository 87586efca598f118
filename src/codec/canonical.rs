//! The Avro specification's Parsing Canonical Form and its CRC-64-AVRO
//! fingerprint, computed from the schema's JSON text.
//!
//! Written here rather than taken from `apache-avro`: that crate keeps
//! `{"type":"long"}` for a field with a `logicalType` (upstream AVRO-4004),
//! so its fingerprint of every schema with `timestamp-millis` differs from
//! what Java, fastavro and every other conforming implementation compute,
//! and their single-object records would be refused as "unknown schema
//! fingerprint". The transformation follows the specification's rules:
//! PRIMITIVES, FULLNAMES, STRIP, ORDER, STRINGS, INTEGERS, WHITESPACE.

use std::collections::HashSet;

use serde_json::{Map, Value};

const PRIMITIVES: [&str; 8] = [
    "null", "boolean", "int", "long", "float", "double", "bytes", "string",
];

/// The Parsing Canonical Form of a schema given as JSON text.
pub fn parsing_canonical_form(schema_json: &str) -> Result<String, String> {
    let value: Value = serde_json::from_str(schema_json)
        .map_err(|error| format!("schema is not JSON: {error}"))?;
    let mut out = String::new();
    let mut defined = HashSet::new();
    write_schema(&value, "", &mut defined, &mut out)?;
    Ok(out)
}

/// CRC-64-AVRO (the specification's Rabin fingerprint) of `bytes`.
pub fn crc64_avro(bytes: &[u8]) -> u64 {
    const EMPTY: u64 = 0xc15d_213a_a4d7_a795;
    static TABLE: std::sync::OnceLock<[u64; 256]> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut table = [0u64; 256];
        for (index, slot) in table.iter_mut().enumerate() {
            let mut fp = index as u64;
            for _ in 0..8 {
                fp = (fp >> 1) ^ (EMPTY & 0u64.wrapping_sub(fp & 1));
            }
            *slot = fp;
        }
        table
    });
    let mut fp = EMPTY;
    for byte in bytes {
        fp = (fp >> 8) ^ table[((fp ^ u64::from(*byte)) & 0xff) as usize];
    }
    fp
}

/// The fingerprint of a schema's canonical form: what single-object
/// encoding writes (little-endian) after `C3 01`.
pub fn spec_fingerprint(schema_json: &str) -> Result<u64, String> {
    Ok(crc64_avro(parsing_canonical_form(schema_json)?.as_bytes()))
}

/// `name` qualified by `namespace` unless it is already a full name.
fn full_name(name: &str, namespace: &str) -> String {
    if name.contains('.') || namespace.is_empty() {
        name.to_owned()
    } else {
        format!("{namespace}.{name}")
    }
}

/// The namespace a named type's children resolve against.
fn namespace_of(full: &str) -> &str {
    full.rsplit_once('.').map(|(space, _)| space).unwrap_or("")
}

fn write_string(text: &str, out: &mut String) {
    // serde_json writes strings with UTF-8 kept as is and only the escapes
    // JSON requires: the STRINGS rule.
    out.push_str(&Value::String(text.to_owned()).to_string());
}

fn write_schema(
    schema: &Value,
    namespace: &str,
    defined: &mut HashSet<String>,
    out: &mut String,
) -> Result<(), String> {
    match schema {
        Value::String(name) => {
            if PRIMITIVES.contains(&name.as_str()) {
                write_string(name, out);
            } else {
                write_string(&full_name(name, namespace), out);
            }
            Ok(())
        }
        Value::Array(branches) => {
            out.push('[');
            for (index, branch) in branches.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_schema(branch, namespace, defined, out)?;
            }
            out.push(']');
            Ok(())
        }
        Value::Object(object) => write_object(object, namespace, defined, out),
        other => Err(format!("not a schema: {other}")),
    }
}

fn write_object(
    object: &Map<String, Value>,
    namespace: &str,
    defined: &mut HashSet<String>,
    out: &mut String,
) -> Result<(), String> {
    let Some(kind) = object.get("type") else {
        return Err("a schema object without `type`".into());
    };
    let kind = match kind {
        Value::String(kind) => kind.as_str(),
        // {"type": {...}} or {"type": [...]}: the inner schema is the schema.
        nested => return write_schema(nested, namespace, defined, out),
    };
    match kind {
        "record" | "error" | "enum" | "fixed" => write_named(object, kind, namespace, defined, out),
        "array" => {
            out.push_str("{\"type\":\"array\",\"items\":");
            let items = object.get("items").ok_or("an array without items")?;
            write_schema(items, namespace, defined, out)?;
            out.push('}');
            Ok(())
        }
        "map" => {
            out.push_str("{\"type\":\"map\",\"values\":");
            let values = object.get("values").ok_or("a map without values")?;
            write_schema(values, namespace, defined, out)?;
            out.push('}');
            Ok(())
        }
        // A primitive, with or without a logicalType or other attributes:
        // its simple form (PRIMITIVES + STRIP). A name of a defined type
        // written as {"type": "Name"} is that name.
        primitive_or_name => write_schema(
            &Value::String(primitive_or_name.to_owned()),
            namespace,
            defined,
            out,
        ),
    }
}

/// A record, enum or fixed: in full the first time (name, type, then its
/// fields, symbols or size: the ORDER rule), by full name afterwards.
fn write_named(
    object: &Map<String, Value>,
    kind: &str,
    namespace: &str,
    defined: &mut HashSet<String>,
    out: &mut String,
) -> Result<(), String> {
    let name = object
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("a {kind} without a name"))?;
    let own_namespace = object
        .get("namespace")
        .and_then(Value::as_str)
        .unwrap_or(namespace);
    let full = full_name(name, own_namespace);
    if !defined.insert(full.clone()) {
        write_string(&full, out);
        return Ok(());
    }
    out.push_str("{\"name\":");
    write_string(&full, out);
    out.push_str(",\"type\":");
    write_string(if kind == "error" { "record" } else { kind }, out);
    let inner_namespace = namespace_of(&full).to_owned();
    match kind {
        "record" | "error" => write_fields(object, &full, &inner_namespace, defined, out)?,
        "enum" => {
            out.push_str(",\"symbols\":[");
            let symbols = object
                .get("symbols")
                .and_then(Value::as_array)
                .ok_or_else(|| format!("enum {full} without symbols"))?;
            for (index, symbol) in symbols.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                let symbol = symbol
                    .as_str()
                    .ok_or_else(|| format!("enum {full}: a symbol is not a string"))?;
                write_string(symbol, out);
            }
            out.push(']');
        }
        _ => {
            let size = object
                .get("size")
                .and_then(|size| {
                    size.as_u64()
                        .or_else(|| size.as_str().and_then(|text| text.parse().ok()))
                })
                .ok_or_else(|| format!("fixed {full} without a size"))?;
            out.push_str(&format!(",\"size\":{size}"));
        }
    }
    out.push('}');
    Ok(())
}

/// A record's fields: each its name and type only (STRIP).
fn write_fields(
    object: &Map<String, Value>,
    full: &str,
    namespace: &str,
    defined: &mut HashSet<String>,
    out: &mut String,
) -> Result<(), String> {
    out.push_str(",\"fields\":[");
    let fields = object
        .get("fields")
        .and_then(Value::as_array)
        .ok_or_else(|| format!("record {full} without fields"))?;
    for (index, field) in fields.iter().enumerate() {
        if index > 0 {
            out.push(',');
        }
        let field_name = field
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("a field of {full} without a name"))?;
        let field_type = field
            .get("type")
            .ok_or_else(|| format!("field {full}.{field_name} without a type"))?;
        out.push_str("{\"name\":");
        write_string(field_name, out);
        out.push_str(",\"type\":");
        write_schema(field_type, namespace, defined, out)?;
        out.push('}');
    }
    out.push(']');
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_specification_examples() {
        // Rules from the Avro specification, one at a time.
        assert_eq!(
            parsing_canonical_form(r#"{"type":"long","logicalType":"timestamp-millis"}"#).unwrap(),
            r#""long""#
        );
        assert_eq!(
            parsing_canonical_form(
                r#"{"type":"record","name":"R","namespace":"a.b","doc":"x","fields":[
                    {"name":"f","type":{"type":"fixed","name":"F","size":"016"},"default":"x"},
                    {"name":"g","type":"F"},
                    {"name":"h","type":["null",{"type":"enum","name":"c.E","symbols":["A","B"],"aliases":["Z"]}]},
                    {"name":"i","type":{"type":"array","items":{"type":"map","values":"int"}}}]}"#
            )
            .unwrap(),
            r#"{"name":"a.b.R","type":"record","fields":[{"name":"f","type":{"name":"a.b.F","type":"fixed","size":16}},{"name":"g","type":"a.b.F"},{"name":"h","type":["null",{"name":"c.E","type":"enum","symbols":["A","B"]}]},{"name":"i","type":{"type":"array","items":{"type":"map","values":"int"}}}]}"#
        );
        // The empty string's fingerprint is the algorithm's seed.
        assert_eq!(crc64_avro(b""), 0xc15d_213a_a4d7_a795);
    }
}
