//! The CloudEvents Kafka binding (`ce_*` headers, `content-type`, and the
//! W3C trace context), built in one place for every record execplane
//! writes: the events and derived records the relay publishes from the log,
//! the rows it publishes from `outbox` (stored as JSON), and records
//! produced directly (runner reports, presence, log chunks, commands).

use std::borrow::Cow;

/// A record's headers, in the order they go out: what the relay publishes
/// is built as this, never through a JSON object (stored outbox rows and
/// queued topic callbacks keep theirs as JSON, read back with
/// [`Headers::from_json`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Headers(Vec<(Cow<'static, str>, String)>);

impl Headers {
    pub fn with_capacity(capacity: usize) -> Self {
        Self(Vec::with_capacity(capacity))
    }

    pub fn push(&mut self, name: &'static str, value: String) {
        self.0.push((Cow::Borrowed(name), value));
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0
            .iter()
            .map(|(name, value)| (name.as_ref(), value.as_str()))
    }

    /// The value of the first header called `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.iter()
            .find(|(candidate, _)| *candidate == name)
            .map(|(_, value)| value)
    }

    /// Headers stored as a JSON object of strings (anything else is
    /// written as its JSON text).
    pub fn from_json(object: &serde_json::Map<String, serde_json::Value>) -> Self {
        Self(
            object
                .iter()
                .map(|(name, value)| {
                    let text = match value {
                        serde_json::Value::String(text) => text.clone(),
                        other => other.to_string(),
                    };
                    (Cow::Owned(name.clone()), text)
                })
                .collect(),
        )
    }

    /// The JSON object they are stored as.
    pub fn to_json(&self) -> serde_json::Map<String, serde_json::Value> {
        self.iter()
            .map(|(name, value)| (name.to_owned(), serde_json::Value::from(value)))
            .collect()
    }
}

/// What the headers of one record say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CloudEvent<'a> {
    /// `ce_id`: stable across re-sends of the same record.
    pub id: &'a str,
    /// `ce_type`, e.g. `io.execplane.attempt.started`.
    pub ce_type: &'a str,
    /// `ce_source`, e.g. `execplane/dispatcher`.
    pub source: &'a str,
    /// `ce_time`, milliseconds since the epoch.
    pub time: i64,
    /// `ce_subject` (the attempt), when there is one.
    pub subject: Option<&'a str>,
    pub traceparent: Option<&'a str>,
    pub tracestate: Option<&'a str>,
}

impl CloudEvent<'_> {
    /// The headers, in a fixed order (with room for the three the relay
    /// adds to an event: its chain links).
    pub fn headers(&self) -> Headers {
        let time = chrono::DateTime::from_timestamp_millis(self.time)
            .unwrap_or_default()
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let mut headers = Headers::with_capacity(12);
        headers.push("ce_specversion", "1.0".to_owned());
        headers.push("ce_id", self.id.to_owned());
        headers.push("ce_type", self.ce_type.to_owned());
        headers.push("ce_source", self.source.to_owned());
        headers.push("ce_time", time);
        if let Some(subject) = self.subject {
            headers.push("ce_subject", subject.to_owned());
        }
        headers.push("content-type", "application/avro".to_owned());
        if let Some(traceparent) = self.traceparent {
            headers.push("traceparent", traceparent.to_owned());
        }
        if let Some(tracestate) = self.tracestate {
            headers.push("tracestate", tracestate.to_owned());
        }
        headers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_binding_names_and_orders_every_header() {
        let event = CloudEvent {
            id: "e1",
            ce_type: "io.execplane.attempt.started",
            source: "execplane/dispatcher",
            time: 1_700_000_000_123,
            subject: Some("a1"),
            traceparent: Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
            tracestate: None,
        };
        let headers = event.headers();
        let names: Vec<&str> = headers.iter().map(|(name, _)| name).collect();
        assert_eq!(
            names,
            [
                "ce_specversion",
                "ce_id",
                "ce_type",
                "ce_source",
                "ce_time",
                "ce_subject",
                "content-type",
                "traceparent"
            ]
        );
        assert_eq!(headers.get("ce_time"), Some("2023-11-14T22:13:20.123Z"));
    }

    #[test]
    fn stored_headers_read_back_as_they_were_written() {
        let mut headers = Headers::with_capacity(2);
        headers.push("ce_id", "e1".to_owned());
        headers.push("execplane_seq", "3".to_owned());
        let stored = headers.to_json();
        assert_eq!(Headers::from_json(&stored), headers);
        let odd: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(r#"{"n": 3}"#).unwrap();
        assert_eq!(Headers::from_json(&odd).get("n"), Some("3"));
    }
}
