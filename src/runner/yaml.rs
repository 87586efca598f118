//! Tenant YAML read as the tools read it, bounded by what it expands to
//! (docs/SECURITY.md, "Content the runner reads before the tool does"),
//! and a tool's JSON of the tenant's content bounded the same way
//! ([`json`]).
//!
//! Two ways a second parse of our own differed from what helm and the
//! API server read: an alias is expanded wherever it is used, so a few
//! megabytes with one anchored string aliased many times expand to
//! gigabytes before any check (the YAML parser's alias limit counts
//! replays, not bytes); and a merge key (`<<`) adds the keys of the
//! mapping it names, which a plain reader keeps as one key called `<<`,
//! so `metadata: {name: x, <<: {namespace: kube-system}}` looked like an
//! object without a namespace. Here every node a document expands to is
//! charged against a budget as it is built (the read stops at the first
//! byte over it), and merge keys are applied: the mapping's own keys win
//! (as go-yaml v3 and PyYAML read them), then the merged mappings' in the
//! order given. Manifests helm reads again ([`manifests`]) refuse a key the
//! mapping and a merge both set: go-yaml v2, which helm's client reads
//! them with through `sigs.k8s.io/yaml`, lets the merge override the keys
//! before it. A merge this reader might read differently from the tools
//! (a merged mapping with a merge key of its own, a merge of something
//! that is not a mapping) is refused.

use std::cell::Cell;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// What a node costs besides its text: a document of many small nodes is
/// bounded as one of few large strings is.
const NODE_COST: usize = 16;

/// The merge key.
const MERGE: &str = "<<";

/// The documents of a YAML stream (JSON is YAML), each with its aliases
/// expanded and its merge keys applied, all of them together at most
/// `max_expanded` bytes (strings' bytes and [`NODE_COST`] per node). A key
/// a mapping sets and a merge sets too is the mapping's own, as go-yaml v3
/// and PyYAML (ansible) read it; see [`manifests`] for what helm reads.
pub fn documents(bytes: &[u8], max_expanded: usize) -> Result<Vec<Value>, YamlError> {
    read(bytes, max_expanded, Collisions::MappingWins)
}

/// [`documents`] that a reader on go-yaml v2 reads again (helm's client,
/// through `sigs.k8s.io/yaml`, lets a merge override the keys before it):
/// a key a mapping sets and a merge sets too is refused, as no reading of
/// it is safe to judge.
pub fn manifests(bytes: &[u8], max_expanded: usize) -> Result<Vec<Value>, YamlError> {
    read(bytes, max_expanded, Collisions::Refused)
}

/// What a key both a mapping and its merge set becomes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Collisions {
    MappingWins,
    Refused,
}

fn read(
    bytes: &[u8],
    max_expanded: usize,
    collisions: Collisions,
) -> Result<Vec<Value>, YamlError> {
    let budget = Budget {
        left: Cell::new(max_expanded),
        max: max_expanded,
        exceeded: Cell::new(false),
    };
    let mut documents = Vec::new();
    for (index, document) in serde_yaml::Deserializer::from_slice(bytes).enumerate() {
        let mut value = Node(&budget)
            .deserialize(document)
            .map_err(|error| YamlError {
                message: format!("document {index}: {error}"),
                too_large: budget.exceeded.get(),
            })?;
        merge(&mut value, 0, collisions).map_err(|problem| YamlError {
            message: format!("document {index}: {problem}"),
            too_large: false,
        })?;
        documents.push(value);
    }
    Ok(documents)
}

/// Why YAML was not read.
#[derive(Debug)]
pub struct YamlError {
    pub message: String,
    /// It expanded past its bound (else: not YAML the tools would read
    /// as this reader does).
    pub too_large: bool,
}

impl fmt::Display for YamlError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// One JSON document, bounded as [`documents`] bounds YAML (its strings'
/// bytes and [`NODE_COST`] a node, together at most `max_expanded`) and
/// read as JSON is read: no merge keys, nothing after it. A key set twice
/// is refused. A tool's JSON (OpenTofu's plan and state) is the tenant's
/// content: `[[],[],…]` is three bytes a node in the text and ten times
/// that held as a `Value`.
pub fn json(bytes: &[u8], max_expanded: usize) -> Result<Value, YamlError> {
    let budget = Budget {
        left: Cell::new(max_expanded),
        max: max_expanded,
        exceeded: Cell::new(false),
    };
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    Node(&budget)
        .deserialize(&mut deserializer)
        .and_then(|value| deserializer.end().map(|()| value))
        .map_err(|error| YamlError {
            message: error.to_string(),
            too_large: budget.exceeded.get(),
        })
}

/// One YAML document, as [`documents`] reads it: an empty stream is
/// `null`, more than one document is refused.
pub fn document(bytes: &[u8], max_expanded: usize) -> Result<Value, YamlError> {
    let mut read = documents(bytes, max_expanded)?;
    match read.len() {
        0 => Ok(Value::Null),
        1 => Ok(read.remove(0)),
        count => Err(YamlError {
            message: format!("{count} documents where one was expected"),
            too_large: false,
        }),
    }
}

struct Budget {
    left: Cell<usize>,
    max: usize,
    exceeded: Cell<bool>,
}

impl Budget {
    fn charge<E: de::Error>(&self, bytes: usize) -> Result<(), E> {
        let cost = bytes.saturating_add(NODE_COST);
        match self.left.get().checked_sub(cost) {
            Some(left) => {
                self.left.set(left);
                Ok(())
            }
            None => {
                self.exceeded.set(true);
                Err(E::custom(format_args!(
                    "expands to more than {} bytes once read (strings, {NODE_COST} a node, aliases expanded); refused before it is held",
                    self.max
                )))
            }
        }
    }
}

/// A node, charged as it is built.
struct Node<'a>(&'a Budget);

impl<'de> DeserializeSeed<'de> for Node<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a YAML node")
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<Value, E> {
        self.0.charge(0)?;
        Ok(Value::Bool(value))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Value, E> {
        self.0.charge(0)?;
        Ok(value.into())
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Value, E> {
        self.0.charge(0)?;
        Ok(value.into())
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Value, E> {
        self.0.charge(0)?;
        Ok(serde_json::Number::from_f64(value).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Value, E> {
        self.0.charge(value.len())?;
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<Value, E> {
        self.0.charge(value.len())?;
        Ok(Value::String(value))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.0.charge(0)?;
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }

    fn visit_some<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.0.charge(0)?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(Node(self.0))? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.0.charge(0)?;
        let mut object = Map::new();
        while let Some(key) = map.next_key_seed(Key(self.0))? {
            let value = map.next_value_seed(Node(self.0))?;
            if object.contains_key(&key) {
                return Err(de::Error::custom(format_args!(
                    "duplicate key `{}`",
                    crate::contract::limits::loggable(&key.chars().take(64).collect::<String>())
                )));
            }
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

/// A mapping's key: text, charged.
struct Key<'a>(&'a Budget);

impl<'de> DeserializeSeed<'de> for Key<'_> {
    type Value = String;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<String, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key<'_> {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string key")
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<String, E> {
        self.0.charge(value.len())?;
        Ok(value.to_owned())
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<String, E> {
        self.0.charge(value.len())?;
        Ok(value)
    }
}

/// Applies the merge keys of `value` and everything in it, the mapping's
/// own keys first; refuses a merge a tool might read differently (and, for
/// [`Collisions::Refused`], a key both the mapping and a merge set).
fn merge(value: &mut Value, depth: usize, collisions: Collisions) -> Result<(), String> {
    // serde_yaml refuses deeper documents before this.
    if depth > 256 {
        return Err("nested too deep".into());
    }
    match value {
        Value::Object(object) => {
            if let Some(merged) = object.remove(MERGE) {
                let sources = match merged {
                    Value::Object(source) => vec![source],
                    Value::Array(items) => items
                        .into_iter()
                        .map(|item| match item {
                            Value::Object(source) => Ok(source),
                            _ => Err("a merge key (`<<`) lists something that is not a mapping"),
                        })
                        .collect::<Result<_, _>>()?,
                    _ => {
                        return Err(
                            "a merge key (`<<`) names something that is not a mapping".into()
                        )
                    }
                };
                let own: std::collections::BTreeSet<String> = object.keys().cloned().collect();
                for source in sources {
                    if source.contains_key(MERGE) {
                        return Err(
                            "a merge key (`<<`) names a mapping with a merge key of its own".into(),
                        );
                    }
                    if collisions == Collisions::Refused
                        && source.keys().any(|key| own.contains(key))
                    {
                        return Err(
                            "a merge key (`<<`) sets a key its mapping sets too (YAML readers disagree on which wins)".into(),
                        );
                    }
                    for (key, item) in source {
                        object.entry(key).or_insert(item);
                    }
                }
            }
            for item in object.values_mut() {
                merge(item, depth + 1, collisions)?;
            }
        }
        Value::Array(items) => {
            for item in items {
                merge(item, depth + 1, collisions)?;
            }
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_is_bounded_by_its_nodes_and_read_as_json() {
        let many = format!("[{}[]]", "[],".repeat(100_000));
        let refused = json(many.as_bytes(), 1 << 20).unwrap_err();
        assert!(refused.too_large, "{}", refused.message);
        let read = json(br#"{"<<": {"a": 1}, "b": [1, "x"]}"#, 1 << 20).unwrap();
        assert_eq!(read, json!({"<<": {"a": 1}, "b": [1, "x"]}));
        assert!(json(br#"{"a": 1, "a": 2}"#, 1 << 20).is_err());
        assert!(json(br#"{"a": 1} {"b": 2}"#, 1 << 20).is_err());
    }

    #[test]
    fn merge_keys_are_applied_as_the_tools_apply_them() {
        let text = "base: &base {namespace: kube-system, name: base}\n\
                    one:\n  name: x\n  <<: *base\n\
                    two:\n  <<: [{a: 1}, {a: 2, b: 2}]\n  b: 3\n";
        let read = document(text.as_bytes(), 1 << 20).unwrap();
        assert_eq!(
            read["one"],
            json!({"name": "x", "namespace": "kube-system"})
        );
        assert_eq!(read["two"], json!({"a": 1, "b": 3}));
        // A key both the mapping and a merge set, in what helm reads again:
        // the readers disagree.
        let merged = "one:\n  kind: x\n  <<: {name: base}\n";
        assert_eq!(
            manifests(merged.as_bytes(), 1 << 20).unwrap()[0]["one"],
            json!({"kind": "x", "name": "base"})
        );
        for ambiguous in [
            "metadata: {name: x, namespace: team-a, <<: {namespace: team-b}}",
            "metadata: {<<: {namespace: team-b}, namespace: team-a}",
            "one: {<<: [{a: 1}, {b: 2}], b: 3}",
        ] {
            let refused = manifests(ambiguous.as_bytes(), 1 << 20).unwrap_err();
            assert!(
                refused
                    .to_string()
                    .contains("sets a key its mapping sets too"),
                "{ambiguous}: {refused}"
            );
        }
        // The manifest a plain reader saw as having no namespace.
        let hidden = document(
            b"metadata: {name: x, <<: {namespace: kube-system}}",
            1 << 20,
        )
        .unwrap();
        assert_eq!(hidden["metadata"]["namespace"], "kube-system");
    }

    #[test]
    fn merges_that_could_read_differently_are_refused() {
        for text in [
            "a: {<<: 3}",
            "a: {<<: [1]}",
            "a: {<<: {<<: {namespace: kube-system}}}",
        ] {
            assert!(document(text.as_bytes(), 1 << 20).is_err(), "{text}");
        }
        let duplicate = document(b"a: 1\na: 2\n", 1 << 20).unwrap_err();
        assert!(duplicate.message.contains("duplicate") && !duplicate.too_large);
    }

    #[test]
    fn an_alias_bomb_is_refused_by_what_it_expands_to() {
        // One 64 KiB string aliased 1,000 times: 64 KiB of text, 64 MiB
        // expanded.
        let mut text = format!("a: &a {}\nb: [", "x".repeat(64 * 1024));
        text.push_str(&vec!["*a"; 1000].join(", "));
        text.push_str("]\n");
        let error = document(text.as_bytes(), 4 << 20).unwrap_err();
        assert!(error.too_large, "{error}");
        assert!(
            error.message.contains("expands to more than 4194304 bytes"),
            "{error}"
        );
        // Many small nodes count too.
        let nodes = format!(
            "a: &a [{}]\nb: [{}]\n",
            vec!["1"; 1000].join(","),
            vec!["*a"; 1000].join(",")
        );
        assert!(document(nodes.as_bytes(), 4 << 20).unwrap_err().too_large);
        // What fits is read whole, every document.
        let fine = documents(b"a: &a {x: 1}\nb: *a\n---\nc: 2\n", 1 << 20).unwrap();
        assert_eq!(
            fine,
            vec![json!({"a": {"x": 1}, "b": {"x": 1}}), json!({"c": 2})]
        );
    }
}
