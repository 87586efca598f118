//! The Avro datums of the hottest records, written and read field by
//! field: attempt events, the work items and results the relay derives
//! from them, and the commands and runner reports intake reads.
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
//! Reading is the mirror image, for a datum written with the current
//! schema (the relay reads every event it publishes, the audit every event
//! it checks, intake every command and report, a runner every work item):
//! anything it does not read exactly as written here (another schema, a
//! negative block count, trailing bytes, a bad union branch) is left to
//! apache-avro, whose answer, or error, stands (`Codec::record`).
//!
//! Avro's binary encoding, as used here: `int` and `long` are zig-zag
//! varints; `string` is its length then its bytes; `boolean` one byte; a
//! `["null", T]` union the branch index then the value; an `array` one
//! block (its count, the items) and the closing zero block (an empty array
//! is the zero alone); an `enum` the symbol's index.

use crate::contract::{
    Callback, FailureCategory, GenerateSecret, Label, OutputArtifact, PolicyFlags, Problem,
    ReportedOutcome, RetentionClass, SecretRef, TerminalOutcome, TimerKind, TraceContext,
};

use super::framing::Family;
use super::records::{
    ApprovePlanRecord, AttemptEventRecord, CancelAttemptRecord, CommandKind, CommandRecord,
    EventType, JobSpecRecord, ReportType, ResultRecord, RetryPolicyRecord, RunnerEventRecord,
    RunnerRequirementsRecord, TargetKeyRecord, TargetRecord, TerminalStatus, TimeoutsRecord,
    WorkRecord, WorkType,
};

/// The datum of `record`: byte for byte what apache-avro writes for it
/// with its family's current schema (the event log hashes an event's;
/// `Codec::encode_record` frames the others).
pub(crate) fn datum<T: Datum>(record: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    record.write(&mut out);
    out
}

/// A record whose datum is written (and, but for a result, read) here,
/// and the family it is a record of.
pub(crate) trait Datum: Avro + serde::de::DeserializeOwned {
    const FAMILY: Family;
}

impl Datum for AttemptEventRecord {
    const FAMILY: Family = Family::AttemptEvent;
}

impl Datum for WorkRecord {
    const FAMILY: Family = Family::WorkItem;
}

impl Datum for CommandRecord {
    const FAMILY: Family = Family::Command;
}

impl Datum for RunnerEventRecord {
    const FAMILY: Family = Family::RunnerEvent;
}

impl Datum for ResultRecord {
    const FAMILY: Family = Family::Result;
}

/// The record a datum written with the current schema holds, when it
/// holds exactly one in the encoding written here; `None` otherwise.
pub(crate) fn read_exact<T: Datum>(datum: &[u8]) -> Option<T> {
    let mut input = datum;
    let record = T::read(&mut input)?;
    input.is_empty().then_some(record)
}

/// A value of the schema, in Avro's binary encoding.
pub(crate) trait Avro: Sized {
    fn write(&self, out: &mut Vec<u8>);
    /// Reads a value off the front of `input`; `None` for anything not
    /// written as `write` writes it.
    fn read(input: &mut &[u8]) -> Option<Self>;
}

fn read_long(input: &mut &[u8]) -> Option<i64> {
    let mut zigzag = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = input.split_first()?;
        *input = rest;
        if shift == 63 && byte > 1 {
            return None;
        }
        zigzag |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(((zigzag >> 1) as i64) ^ -((zigzag & 1) as i64));
        }
    }
    None
}

fn read_bytes<'a>(input: &mut &'a [u8], len: usize) -> Option<&'a [u8]> {
    let (bytes, rest) = input.split_at_checked(len)?;
    *input = rest;
    Some(bytes)
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

    fn read(input: &mut &[u8]) -> Option<Self> {
        read_long(input)
    }
}

impl Avro for i32 {
    fn write(&self, out: &mut Vec<u8>) {
        long(i64::from(*self), out);
    }

    fn read(input: &mut &[u8]) -> Option<Self> {
        i32::try_from(read_long(input)?).ok()
    }
}

/// `GenerateSecret.length`: an Avro `int`.
impl Avro for u16 {
    fn write(&self, out: &mut Vec<u8>) {
        long(i64::from(*self), out);
    }

    fn read(input: &mut &[u8]) -> Option<Self> {
        u16::try_from(read_long(input)?).ok()
    }
}

impl Avro for bool {
    fn write(&self, out: &mut Vec<u8>) {
        out.push(u8::from(*self));
    }

    fn read(input: &mut &[u8]) -> Option<Self> {
        match read_bytes(input, 1)? {
            [0] => Some(false),
            [1] => Some(true),
            _ => None,
        }
    }
}

impl Avro for String {
    fn write(&self, out: &mut Vec<u8>) {
        long(self.len() as i64, out);
        out.extend_from_slice(self.as_bytes());
    }

    fn read(input: &mut &[u8]) -> Option<Self> {
        let len = usize::try_from(read_long(input)?).ok()?;
        let bytes = read_bytes(input, len)?;
        String::from_utf8(bytes.to_vec()).ok()
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

    fn read(input: &mut &[u8]) -> Option<Self> {
        match read_bytes(input, 1)? {
            [0] => Some(None),
            [2] => Some(Some(T::read(input)?)),
            _ => None,
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

    /// One block or more, each reserving what `room_for` allows.
    fn read(input: &mut &[u8]) -> Option<Self> {
        let mut items = Vec::new();
        loop {
            let count = usize::try_from(read_long(input)?).ok()?;
            if count == 0 {
                return Some(items);
            }
            items.reserve(room_for::<T>(count, input.len()));
            for _ in 0..count {
                items.push(T::read(input)?);
            }
        }
    }
}

/// How many items a block that claims `count` may reserve room for, with
/// `left` bytes of the datum still to read: the count is the writer's word
/// (a command's is the requester's), and an item takes a byte of the datum
/// or more but may take a hundred of memory (a target), so a block never
/// reserves more bytes than are left to read. What it reads beyond that
/// grows the vector as the items arrive.
fn room_for<T>(count: usize, left: usize) -> usize {
    count.min(left / std::mem::size_of::<T>().max(1))
}

/// Enums, with their symbols in the schema's order. The variants are
/// declared in that order too (written as `variant as i64`; the tests
/// write and read every symbol), and a variant left out of the list does
/// not compile.
macro_rules! symbols {
    ($($enum:ident [$($variant:ident),* $(,)?]);* $(;)?) => {
        $(impl Avro for $enum {
            fn write(&self, out: &mut Vec<u8>) {
                long(*self as i64, out);
            }

            fn read(input: &mut &[u8]) -> Option<Self> {
                const SYMBOLS: &[$enum] = &[$($enum::$variant),*];
                let _every_variant = |symbol: $enum| match symbol {
                    $($enum::$variant)|* => (),
                };
                SYMBOLS.get(usize::try_from(read_long(input)?).ok()?).copied()
            }
        })*
    };
}

symbols!(
    EventType [
        Created, Rejected, LeaseGranted, LeaseExtended, Started, Progress, CancelRequested,
        ReportFenced, Finished, CallbackRecorded, PlanApproved,
    ];
    TerminalOutcome [Succeeded, Failed, TimedOut, Cancelled, OutcomeUnknown];
    FailureCategory [
        Contract, Policy, RunnerError, TargetUnreachable, VerificationFailed, LeaseLost,
        Infrastructure, Timeout, Cancelled,
    ];
    TimerKind [ScheduleToStart, StartToClose, Heartbeat, ScheduleToClose, CancelGrace];
    RetentionClass [Logs, Rendered, Evidence];
    WorkType [WorkItem, LeaseExtended, LeaseRevoked, Cancel];
    TerminalStatus [Succeeded, Failed, TimedOut, Cancelled, Rejected, OutcomeUnknown];
    CommandKind [ExecuteJob, CancelAttempt, ApprovePlan];
    ReportType [Started, Heartbeat, Progress, Finished];
    ReportedOutcome [Succeeded, Failed, Cancelled];
);

/// Records: their fields, in the schema's order (a struct expression
/// evaluates its fields in the order written).
macro_rules! fields {
    ($record:ident { $($field:ident),* $(,)? }) => {
        impl Avro for $record {
            fn write(&self, out: &mut Vec<u8>) {
                let $record { $($field),* } = self;
                $($field.write(out);)*
            }

            fn read(input: &mut &[u8]) -> Option<Self> {
                Some($record { $($field: Avro::read(input)?),* })
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
fields!(WorkRecord {
    record_id,
    runner_instance,
    kind,
    attempt_id,
    job_id,
    attempt_no,
    lease_id,
    lease_epoch,
    expires_at,
    spec,
    reason,
});
fields!(ResultRecord {
    attempt_id,
    job_id,
    command_id,
    attempt_no,
    tenant,
    operation,
    status,
    category,
    message,
    result_json,
    finished_at,
    terminal_seq,
    idempotency_key,
    retry_attempt_id,
});
fields!(CancelAttemptRecord {
    attempt_id,
    reason,
    requested_by,
    grace_ms
});
fields!(ApprovePlanRecord {
    plan_attempt_id,
    plan_digest,
    tenant,
    approved_by
});
fields!(CommandRecord {
    command_id,
    kind,
    issued_at,
    execute,
    cancel,
    approve
});
fields!(RunnerEventRecord {
    event_id,
    attempt_id,
    lease_epoch,
    runner_instance,
    sent_at,
    kind,
    message,
    percent,
    outcome,
    category,
    result_json,
    outputs
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

    /// What apache-avro reads from `datum`.
    fn reference_read(datum: &[u8]) -> Option<AttemptEventRecord> {
        Codec::from_datum(Family::AttemptEvent, datum).ok()
    }

    /// Written as apache-avro writes it, and read back as it was.
    fn assert_agrees(record: &AttemptEventRecord, what: impl std::fmt::Debug) {
        let bytes = datum(record);
        assert_eq!(bytes, reference(record), "{what:?}");
        assert_eq!(
            read_exact::<AttemptEventRecord>(&bytes).as_ref(),
            Some(record),
            "{what:?}"
        );
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
        full_with(200)
    }

    fn full_with(filler: usize) -> AttemptEventRecord {
        let text = |name: &str| Some(format!("{name} ✓ {}", "x".repeat(filler)));
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
    fn work_items_and_results_are_written_as_apache_avro_writes_them() {
        let spec = full().spec;
        for kind in [
            WorkType::WorkItem,
            WorkType::LeaseExtended,
            WorkType::LeaseRevoked,
            WorkType::Cancel,
        ] {
            for (spec, optional) in [(spec.clone(), Some(1)), (None, None)] {
                let record = WorkRecord {
                    record_id: "r".to_owned(),
                    runner_instance: "verification-1".to_owned(),
                    kind,
                    attempt_id: "a".to_owned(),
                    job_id: "j".to_owned(),
                    attempt_no: i32::MAX,
                    lease_id: "l".to_owned(),
                    lease_epoch: i64::MIN,
                    expires_at: optional.map(|_| 1_700_000_000_123),
                    spec,
                    reason: optional.map(|_| "why ✓".to_owned()),
                };
                let reference = Codec::datum(Family::WorkItem, &record).expect("apache-avro");
                assert_eq!(datum(&record), reference, "{kind:?}");
                assert_eq!(read_exact(&reference).as_ref(), Some(&record), "{kind:?}");
            }
        }
        for status in [
            TerminalStatus::Succeeded,
            TerminalStatus::Failed,
            TerminalStatus::TimedOut,
            TerminalStatus::Cancelled,
            TerminalStatus::Rejected,
            TerminalStatus::OutcomeUnknown,
        ] {
            for category in FailureCategory::ALL.map(Some).into_iter().chain([None]) {
                let optional = category.map(|category| format!("{category:?} {}", "x".repeat(70)));
                let record = ResultRecord {
                    attempt_id: "a".to_owned(),
                    job_id: "j".to_owned(),
                    command_id: "c".to_owned(),
                    attempt_no: 1,
                    tenant: "t".to_owned(),
                    operation: "verify.tcp.connect".to_owned(),
                    status,
                    category,
                    message: "m".repeat(130),
                    result_json: optional.clone(),
                    finished_at: -1,
                    terminal_seq: 4,
                    idempotency_key: "k".to_owned(),
                    retry_attempt_id: optional,
                };
                let reference = Codec::datum(Family::Result, &record).expect("apache-avro");
                assert_eq!(datum(&record), reference, "{status:?} {category:?}");
            }
        }
    }

    /// Commands of every kind and runner reports of every type and
    /// outcome: written as apache-avro writes them, and read back.
    #[test]
    fn commands_and_reports_are_written_and_read_as_apache_avro_does() {
        for command in commands() {
            let bytes = datum(&command);
            let reference = Codec::datum(Family::Command, &command).expect("apache-avro");
            assert_eq!(bytes, reference, "{:?}", command.kind);
            assert_eq!(
                read_exact(&bytes).as_ref(),
                Some(&command),
                "{:?}",
                command.kind
            );
        }
        for report in reports() {
            let reference = Codec::datum(Family::RunnerEvent, &report).expect("apache-avro");
            assert_eq!(datum(&report), reference, "{:?}", report.kind);
            assert_eq!(
                read_exact(&reference).as_ref(),
                Some(&report),
                "{:?}",
                report.kind
            );
        }
    }

    fn commands() -> Vec<CommandRecord> {
        let execute = CommandRecord {
            command_id: "c".to_owned(),
            kind: CommandKind::ExecuteJob,
            issued_at: 1_700_000_000_123,
            execute: full().spec,
            cancel: None,
            approve: None,
        };
        let cancel = CommandRecord {
            kind: CommandKind::CancelAttempt,
            issued_at: -1,
            execute: None,
            cancel: Some(CancelAttemptRecord {
                attempt_id: "a".to_owned(),
                reason: "r ✓".repeat(50),
                requested_by: "u".to_owned(),
                grace_ms: Some(i64::MAX),
            }),
            ..execute.clone()
        };
        let approve = CommandRecord {
            kind: CommandKind::ApprovePlan,
            execute: None,
            approve: Some(ApprovePlanRecord {
                plan_attempt_id: "p".to_owned(),
                plan_digest: format!("sha256:{}", "0".repeat(64)),
                tenant: "t".to_owned(),
                approved_by: String::new(),
            }),
            ..execute.clone()
        };
        vec![execute, cancel, approve]
    }

    fn reports() -> Vec<RunnerEventRecord> {
        let started = RunnerEventRecord {
            event_id: "e".to_owned(),
            attempt_id: "a".to_owned(),
            lease_epoch: i64::MIN,
            runner_instance: "verification-1".to_owned(),
            sent_at: 1_700_000_000_123,
            kind: ReportType::Started,
            message: None,
            percent: None,
            outcome: None,
            category: None,
            result_json: None,
            outputs: Vec::new(),
        };
        let mut reports = vec![
            started.clone(),
            RunnerEventRecord {
                kind: ReportType::Heartbeat,
                message: Some("m".repeat(200)),
                percent: Some(100),
                ..started.clone()
            },
            RunnerEventRecord {
                kind: ReportType::Progress,
                percent: Some(-1),
                ..started.clone()
            },
        ];
        let outputs = full().outputs;
        for outcome in [
            ReportedOutcome::Succeeded,
            ReportedOutcome::Failed,
            ReportedOutcome::Cancelled,
        ] {
            for category in FailureCategory::ALL.map(Some).into_iter().chain([None]) {
                reports.push(RunnerEventRecord {
                    kind: ReportType::Finished,
                    message: Some("done".to_owned()),
                    outcome: Some(outcome),
                    category,
                    result_json: Some(r#"{"ok":true}"#.to_owned()),
                    outputs: outputs.clone(),
                    ..started.clone()
                });
            }
        }
        reports
    }

    /// Every byte of `datum` changed to each of the values where readers
    /// could differ (union branches, booleans, varint ends and
    /// continuations): whatever it reads, apache-avro reads too.
    fn assert_damage_reads_as_apache_avro<T: Datum + PartialEq + std::fmt::Debug>(datum: &[u8]) {
        for at in 0..datum.len() {
            for byte in [0, 1, 2, 3, 4, 0x7f, 0x80, 0x81, 0xff] {
                let mut damaged = datum.to_vec();
                damaged[at] = byte;
                if let Some(read) = read_exact::<T>(&damaged) {
                    let reference: Option<T> = Codec::from_datum(T::FAMILY, &damaged).ok();
                    assert_eq!(Some(read), reference, "{byte:#x} at {at}");
                }
            }
        }
    }

    #[test]
    fn what_is_read_from_a_damaged_datum_is_what_apache_avro_reads() {
        for record in [AttemptEventRecord::default(), full_with(0)] {
            assert_damage_reads_as_apache_avro::<AttemptEventRecord>(&datum(&record));
        }
        for command in commands() {
            assert_damage_reads_as_apache_avro::<CommandRecord>(&datum(&command));
        }
        for report in [
            reports().remove(1),
            reports().pop().expect("a finished report"),
        ] {
            assert_damage_reads_as_apache_avro::<RunnerEventRecord>(&datum(&report));
        }
        let work = WorkRecord {
            record_id: "r".to_owned(),
            runner_instance: "i".to_owned(),
            kind: WorkType::WorkItem,
            attempt_id: "a".to_owned(),
            job_id: "j".to_owned(),
            attempt_no: 1,
            lease_id: "l".to_owned(),
            lease_epoch: 2,
            expires_at: Some(3),
            spec: full_with(0).spec,
            reason: None,
        };
        assert_damage_reads_as_apache_avro::<WorkRecord>(&datum(&work));
    }

    /// A command claiming more targets than it holds bytes: refused (by
    /// both readers), having reserved no more memory than the datum's
    /// size however large the claim.
    #[test]
    fn a_claimed_count_reserves_no_more_than_the_bytes_left() {
        let left = 1 << 20;
        for count in [left, left * 4, usize::MAX] {
            let room = room_for::<TargetRecord>(count, left);
            assert!(
                room * std::mem::size_of::<TargetRecord>() <= left,
                "{count}"
            );
            assert!(room > 0);
        }
        assert_eq!(room_for::<u8>(3, left), 3, "a true count is reserved whole");
        let mut command = commands().remove(0);
        command
            .execute
            .as_mut()
            .expect("an execute")
            .targets
            .clear();
        let honest = datum(&command);
        // Where `targets` is: before what the datum holds after it.
        let spec = command.execute.as_ref().expect("an execute");
        let mut from_targets = Vec::new();
        spec.targets.write(&mut from_targets);
        spec.secret_refs.write(&mut from_targets);
        spec.timeouts.write(&mut from_targets);
        spec.retry.write(&mut from_targets);
        spec.policy.write(&mut from_targets);
        spec.callback.write(&mut from_targets);
        spec.trace.write(&mut from_targets);
        command.cancel.write(&mut from_targets);
        command.approve.write(&mut from_targets);
        let at = honest.len() - from_targets.len();
        assert_eq!(honest[at], 0, "the empty array");
        // The empty array becomes a claim of 2^40 targets.
        let mut claimed = honest[..at].to_vec();
        long(1 << 40, &mut claimed);
        claimed.extend_from_slice(&honest[at + 1..]);
        assert_eq!(read_exact::<CommandRecord>(&claimed), None);
        assert!(Codec::from_datum::<CommandRecord>(Family::Command, &claimed).is_err());
    }

    #[test]
    fn what_it_does_not_read_exactly_is_left_to_apache_avro() {
        let bytes = datum(&full());
        for end in 0..bytes.len() {
            assert_eq!(
                read_exact::<AttemptEventRecord>(&bytes[..end]),
                None,
                "cut at {end}"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(
            read_exact::<AttemptEventRecord>(&longer),
            None,
            "a trailing byte"
        );
        // `command_id`, the first union, after three empty strings, two
        // zero longs and the first symbol, a byte each: branch 2 does not
        // exist.
        let empty = datum(&AttemptEventRecord::default());
        let mut branch = empty.clone();
        branch[6] = 4;
        assert_eq!(read_exact::<AttemptEventRecord>(&branch), None);
        assert_eq!(reference_read(&branch), None);
        // A long of eleven bytes overflows.
        let mut overlong = empty[..3].to_vec();
        overlong.extend([0xff; 10]);
        overlong.push(0x01);
        overlong.extend(&empty[4..]);
        assert_eq!(read_exact::<AttemptEventRecord>(&overlong), None);
        // Another schema's datum goes to apache-avro, by its fingerprint.
        assert!(matches!(
            Codec::record::<AttemptEventRecord>(0, &bytes),
            Err(crate::codec::CodecError::UnknownFingerprint { .. })
        ));
        assert_eq!(
            Codec::record::<AttemptEventRecord>(Codec::fingerprint(Family::AttemptEvent), &bytes)
                .ok(),
            Some(full())
        );
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
            let bytes = datum(&record);
            prop_assert_eq!(&bytes, &reference(&record));
            prop_assert_eq!(read_exact::<AttemptEventRecord>(&bytes), Some(record));
        }
    }
}
