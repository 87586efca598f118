//! The CloudEvents Kafka binding (`ce_*` headers, `content-type`, and the
//! W3C trace context), built in one place for every record execplane
//! writes: outbox rows (stored as JSON, published by the relay) and records
//! produced directly (runner reports, presence, log chunks, commands).

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
    /// The headers, in a fixed order.
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        let time = chrono::DateTime::from_timestamp_millis(self.time)
            .unwrap_or_default()
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let mut headers = vec![
            ("ce_specversion", "1.0".to_owned()),
            ("ce_id", self.id.to_owned()),
            ("ce_type", self.ce_type.to_owned()),
            ("ce_source", self.source.to_owned()),
            ("ce_time", time),
        ];
        if let Some(subject) = self.subject {
            headers.push(("ce_subject", subject.to_owned()));
        }
        headers.push(("content-type", "application/avro".to_owned()));
        if let Some(traceparent) = self.traceparent {
            headers.push(("traceparent", traceparent.to_owned()));
        }
        if let Some(tracestate) = self.tracestate {
            headers.push(("tracestate", tracestate.to_owned()));
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
        let names: Vec<&str> = event.headers().iter().map(|(name, _)| *name).collect();
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
        assert_eq!(event.headers()[4].1, "2023-11-14T22:13:20.123Z");
    }
}
