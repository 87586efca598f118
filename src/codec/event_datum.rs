//! The attempt event's Avro datum, written field by field.
//!
//! Intake encodes every event it appends on its one serial loop, and
//! apache-avro's serde writer looked each field up by name in its schema
//! (a tree of strings) for every field of every record: that was the
//! largest single cost of an append (docs/BENCHMARKS.md). This writes the
//! same bytes straight from the record, in the schema's field order
//! (`schemas/attempt-events.avsc`). Each record is destructured whole, so
//! a field added to a record does not compile until it is written here,
//! and the tests compare every byte with apache-avro's for records of every
//! shape, every event type and every enum symbol.
//!
//! Avro's binary encoding, as used here: `int` and `long` are zig-zag
//! varints; `string` is its length then its bytes; `boolean` one byte; a
//! `["null", T]` union the branch index then the value; an `array` one
//! block (its count, the items) and the closing zero block (an empty array
//! is the zero alone); an `enum` the symbol's index.

use crate::contract::{
    Callback, FailureCategory, GenerateSecret, Label, OutputArtifact, PolicyFlags, Problem,
    RetentionClass, SecretRef, TerminalOutcome, TimerKind, TraceContext,
};

use super::records::{
    AttemptEventRecord, EventType, JobSpecRecord, RetryPolicyRecord, RunnerRequirementsRecord,
    TargetKeyRecord, TargetRecord, TimeoutsRecord,
};

/// The datum of `record`: byte for byte what apache-avro writes for it
/// with the current `AttemptEvent` schema.
pub(crate) fn attempt_event_datum(record: &AttemptEventRecord) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    record.write(&mut out);
    out
}

/// A value of the schema, written in Avro's binary encoding.
trait Avro {
    fn write(&self, out: &mut Vec<u8>);
}

fn long(value: i64, out: &mut Vec<u8>) {
    let mut zigzag = ((value << 1) ^ (value >> 63)) as u64;
    while zigzag >= 0x80 {
        out.push((zigzag as u8) | 0x80);
        zigzag >>= 7;
    }
    out.push(zigzag as u8);
}

impl Avro for i64 {
    fn write(&self, out: &mut Vec<u8>) {
        long(*self, out);
    }
}

impl Avro for i32 {
    fn write(&self, out: &mut Vec<u8>) {
        long(i64::from(*self), out);
    }
}

/// `GenerateSecret.length`: an Avro `int`.
impl Avro for u16 {
    fn write(&self, out: &mut Vec<u8>) {
        long(i64::from(*self), out);
    }
}

impl Avro for bool {
    fn write(&self, out: &mut Vec<u8>) {
        out.push(u8::from(*self));
    }
}

impl Avro for String {
    fn write(&self, out: &mut Vec<u8>) {
        long(self.len() as i64, out);
        out.extend_from_slice(self.as_bytes());
    }
}

/// `["null", T]`: every optional field of these schemas puts null first.
impl<T: Avro> Avro for Option<T> {
    fn write(&self, out: &mut Vec<u8>) {
        match self {
            None => out.push(0),
            Some(value) => {
                out.push(2);
                value.write(out);
            }
        }
    }
}

impl<T: Avro> Avro for Vec<T> {
    fn write(&self, out: &mut Vec<u8>) {
        if !self.is_empty() {
            long(self.len() as i64, out);
            for item in self {
                item.write(out);
            }
        }
        out.push(0);
    }
}

/// Enums whose variants are declared in the order of their schema's
/// symbols (the tests write every variant).
macro_rules! symbols {
    ($($enum:ty),*) => {
        $(impl Avro for $enum {
            fn write(&self, out: &mut Vec<u8>) {
                long(*self as i64, out);
            }
        })*
    };
}

symbols!(
    EventType,
    TerminalOutcome,
    FailureCategory,
    TimerKind,
    RetentionClass
);

/// Records: their fields, in the schema's order.
macro_rules! fields {
    ($record:ident { $($field:ident),* $(,)? }) => {
        impl Avro for $record {
            fn write(&self, out: &mut Vec<u8>) {
                let $record { $($field),* } = self;
                $($field.write(out);)*
            }
        }
    };
}

fields!(Label { key, value });
fields!(Problem { path, message });
fields!(TargetKeyRecord { key, limit });
fields!(RunnerRequirementsRecord { pool, capabilities });
fields!(TargetRecord {
    kind,
    id,
    address,
    attributes
});
fields!(TimeoutsRecord {
    schedule_to_start_ms,
    start_to_close_ms,
    heartbeat_ms,
    schedule_to_close_ms
});
fields!(RetryPolicyRecord {
    max_attempts,
    initial_backoff_ms,
    max_backoff_ms
});
fields!(PolicyFlags {
    destructive,
    elevated,
    approved_plan_digest,
    explicit_command
});
fields!(Callback { url, topic });
fields!(TraceContext {
    traceparent,
    tracestate
});
fields!(OutputArtifact {
    name,
    class,
    media_type,
    size,
    sha256,
    key
});
fields!(JobSpecRecord {
    command_id,
    job_id,
    tenant,
    requested_by,
    operation,
    inputs_json,
    runner_requirements,
    targets,
    secret_refs,
    timeouts,
    retry,
    policy,
    callback,
    trace,
});

fields!(GenerateSecret { length });
fields!(SecretRef {
    name,
    mount,
    path,
    key,
    generate
});
fields!(AttemptEventRecord {
    event_id,
    attempt_id,
    job_id,
    seq,
    occurred_at,
    kind,
    command_id,
    attempt_no,
    spec,
    available_at,
    previous_attempt_id,
    tenant,
    operation,
    problems,
    lease_id,
    epoch,
    runner_instance,
    expires_at,
    message,
    percent,
    reason,
    requested_by,
    grace_deadline,
    report_kind,
    current_epoch,
    outcome,
    category,
    result_json,
    timer,
    lease_revoked,
    retry_attempt_id,
    url,
    delivered,
    delivery_attempts,
    http_status,
    error,
    idempotency_key,
    policy_digest,
    outputs,
    target_keys,
    plan_digest,
});

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::codec::{Codec, Family};

    /// apache-avro's bytes for the record, with the current schema.
    fn reference(record: &AttemptEventRecord) -> Vec<u8> {
        Codec::datum(Family::AttemptEvent, record).expect("apache-avro writes the record")
    }

    fn assert_agrees(record: &AttemptEventRecord, what: impl std::fmt::Debug) {
        assert_eq!(attempt_event_datum(record), reference(record), "{what:?}");
    }

    fn label(key: &str, value: &str) -> Label {
        Label {
            key: key.to_owned(),
            value: value.to_owned(),
        }
    }

    /// Every optional field set, every array of two, numbers at their
    /// extremes, a string longer than one varint byte of length.
    fn full() -> AttemptEventRecord {
        let text = |name: &str| Some(format!("{name} ✓ {}", "x".repeat(200)));
        let spec = JobSpecRecord {
            command_id: "c".to_owned(),
            job_id: "j".to_owned(),
            tenant: "t".to_owned(),
            requested_by: "r".to_owned(),
            operation: "verify.tcp.connect".to_owned(),
            inputs_json: r#"{"host":"h","port":22}"#.to_owned(),
            runner_requirements: RunnerRequirementsRecord {
                pool: vec![label("a", "1"), label("b", "")],
                capabilities: vec!["ipv6".to_owned(), String::new()],
            },
            targets: vec![
                TargetRecord {
                    kind: "host".to_owned(),
                    id: "h1".to_owned(),
                    address: Some("10.0.0.1".to_owned()),
                    attributes: vec![label("zone", "a")],
                },
                TargetRecord {
                    kind: "host".to_owned(),
                    id: "h2".to_owned(),
                    address: None,
                    attributes: Vec::new(),
                },
            ],
            secret_refs: vec![
                SecretRef {
                    name: "n".to_owned(),
                    mount: "m".to_owned(),
                    path: "p".to_owned(),
                    key: "k".to_owned(),
                    generate: Some(GenerateSecret { length: u16::MAX }),
                },
                SecretRef {
                    name: "n2".to_owned(),
                    mount: "m".to_owned(),
                    path: "p".to_owned(),
                    key: "k".to_owned(),
                    generate: None,
                },
            ],
            timeouts: TimeoutsRecord {
                schedule_to_start_ms: i64::MAX,
                start_to_close_ms: i64::MIN,
                heartbeat_ms: 0,
                schedule_to_close_ms: -1,
            },
            retry: RetryPolicyRecord {
                max_attempts: i32::MIN,
                initial_backoff_ms: 64,
                max_backoff_ms: -65,
            },
            policy: PolicyFlags {
                destructive: true,
                elevated: false,
                approved_plan_digest: Some("d".to_owned()),
                explicit_command: true,
            },
            callback: Some(Callback {
                url: Some("https://example.test/cb".to_owned()),
                topic: None,
            }),
            trace: Some(TraceContext {
                traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".to_owned(),
                tracestate: Some("k=v".to_owned()),
            }),
        };
        let output = |name: &str, class| OutputArtifact {
            name: name.to_owned(),
            class,
            media_type: "text/plain".to_owned(),
            size: i64::MAX,
            sha256: "0".repeat(64),
            key: format!("k/{name}"),
        };
        AttemptEventRecord {
            event_id: "e".to_owned(),
            attempt_id: "a".to_owned(),
            job_id: "j".to_owned(),
            seq: 1 << 40,
            occurred_at: 1_700_000_000_123,
            kind: EventType::Finished,
            command_id: text("command"),
            attempt_no: Some(i32::MAX),
            spec: Some(spec),
            available_at: Some(-1),
            previous_attempt_id: text("previous"),
            tenant: text("tenant"),
            operation: text("operation"),
            problems: vec![Problem::new("$.a", "bad"), Problem::new("", "ünïcödé")],
            lease_id: text("lease"),
            epoch: Some(i64::MIN),
            runner_instance: text("runner"),
            expires_at: Some(63),
            message: text("message"),
            percent: Some(-64),
            reason: text("reason"),
            requested_by: text("requested_by"),
            grace_deadline: Some(8_191),
            report_kind: text("report_kind"),
            current_epoch: Some(-8_192),
            outcome: Some(TerminalOutcome::OutcomeUnknown),
            category: Some(FailureCategory::Cancelled),
            result_json: text("result"),
            timer: Some(TimerKind::CancelGrace),
            lease_revoked: true,
            retry_attempt_id: text("retry"),
            url: text("url"),
            delivered: Some(false),
            delivery_attempts: Some(0),
            http_status: Some(503),
            error: text("error"),
            idempotency_key: text("idempotency"),
            policy_digest: text("policy"),
            outputs: vec![
                output("log.txt", RetentionClass::Logs),
                output("plan.json", RetentionClass::Evidence),
            ],
            target_keys: vec![
                TargetKeyRecord {
                    key: "host:h1".to_owned(),
                    limit: 1,
                },
                TargetKeyRecord {
                    key: String::new(),
                    limit: i32::MIN,
                },
            ],
            plan_digest: text("plan"),
        }
    }

    #[test]
    fn an_empty_and_a_full_record_are_written_as_apache_avro_writes_them() {
        assert_agrees(&AttemptEventRecord::default(), "empty");
        assert_agrees(&full(), "full");
    }

    #[test]
    fn every_symbol_of_every_enum_is_written_at_its_schema_index() {
        let mut record = full();
        for kind in [
            EventType::Created,
            EventType::Rejected,
            EventType::LeaseGranted,
            EventType::LeaseExtended,
            EventType::Started,
            EventType::Progress,
            EventType::CancelRequested,
            EventType::ReportFenced,
            EventType::Finished,
            EventType::CallbackRecorded,
            EventType::PlanApproved,
        ] {
            record.kind = kind;
            assert_agrees(&record, kind);
        }
        for outcome in [
            TerminalOutcome::Succeeded,
            TerminalOutcome::Failed,
            TerminalOutcome::TimedOut,
            TerminalOutcome::Cancelled,
            TerminalOutcome::OutcomeUnknown,
        ] {
            record.outcome = Some(outcome);
            assert_agrees(&record, outcome);
        }
        for category in FailureCategory::ALL {
            record.category = Some(category);
            assert_agrees(&record, category);
        }
        for timer in TimerKind::ALL {
            record.timer = Some(timer);
            assert_agrees(&record, timer);
        }
        for class in [
            RetentionClass::Logs,
            RetentionClass::Rendered,
            RetentionClass::Evidence,
        ] {
            record.outputs[0].class = class;
            assert_agrees(&record, class);
        }
    }

    proptest! {
        #[test]
        fn numbers_strings_and_arrays_of_any_size_are_written_as_apache_avro_writes_them(
            seq in any::<i64>(),
            occurred_at in any::<i64>(),
            attempt_no in any::<Option<i32>>(),
            epoch in any::<Option<i64>>(),
            message in any::<Option<String>>(),
            problems in proptest::collection::vec((".{0,40}", ".{0,300}"), 0..4),
            lease_revoked in any::<bool>(),
            delivered in any::<Option<bool>>(),
            sizes in proptest::collection::vec(any::<i64>(), 0..3),
            length in any::<u16>(),
        ) {
            let mut record = full();
            record.seq = seq;
            record.occurred_at = occurred_at;
            record.attempt_no = attempt_no;
            record.epoch = epoch;
            record.message = message;
            record.problems = problems
                .into_iter()
                .map(|(path, message)| Problem::new(path, message))
                .collect();
            record.lease_revoked = lease_revoked;
            record.delivered = delivered;
            let template = record.outputs[0].clone();
            record.outputs = sizes
                .into_iter()
                .map(|size| OutputArtifact { size, ..template.clone() })
                .collect();
            if let Some(spec) = record.spec.as_mut() {
                spec.secret_refs[0].generate = Some(GenerateSecret { length });
            }
            prop_assert_eq!(attempt_event_datum(&record), reference(&record));
        }
    }
}
