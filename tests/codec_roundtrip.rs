//! Every record type round-trips through its embedded Avro schema, in both
//! framings, and readers refuse what they cannot read with a clear error.

use std::collections::HashMap;

use execplane::codec::RegistryIds;

use execplane::attempt::{attempt_id_for, event_id_for};
use execplane::codec::{
    ApprovePlanRecord, AttemptEventRecord, CancelAttemptRecord, Codec, CodecError, CommandKind,
    CommandRecord, Family, Framing, JobSpecRecord, LogChunkRecord, LogStream, ResultRecord,
    RunnerEventRecord, TerminalStatus, WorkRecord, WorkType,
};
use execplane::contract::{
    validate_jobspec, AttemptEvent, EventBody, FailureCategory, JobSpec, Problem, ReportBody,
    ReportedOutcome, RunnerReport, TerminalOutcome, TimerKind,
};
use serde::{de::DeserializeOwned, Serialize};
use serde_json::json;
use uuid::Uuid;

fn spec() -> JobSpec {
    validate_jobspec(&json!({
        "command_id": "0b6c7f6e-6a59-4c47-9c8e-2f3f9c1d2e4a",
        "job_id": "plan-42/node-7",
        "tenant": "team-a",
        "requested_by": "control-plane",
        "operation": "verify.http.endpoint",
        "inputs": {"url": "https://127.0.0.1/health", "headers": {"authorization": {"$secret": "api"}}, "expect": {"status": 200}},
        "runner_requirements": {"pool": {"zone": "dmz", "arch": "x86"}, "capabilities": ["ipv6"]},
        "targets": [{"kind": "node", "id": "n7", "address": "10.0.0.7", "attributes": {"rack": "r1"}}],
        "secret_refs": [{"name": "api", "mount": "secret", "path": "apps/api", "key": "token"},
                        {"name": "db", "mount": "secret", "path": "apps/db", "key": "password", "generate": {"length": 40}}],
        "timeouts": {"schedule_to_start": "30s", "start_to_close": "10m", "heartbeat": "30s", "schedule_to_close": "15m"},
        "retry": {"max_attempts": 3, "initial_backoff": "1s", "max_backoff": "1m"},
        "policy": {"destructive": false, "elevated": false, "approved_plan_digest": null, "explicit_command": false},
        "callback": {"url": "https://control-plane.example/cb"},
        "trace": {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    }))
    .unwrap()
}

fn round_trip<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(
    family: Family,
    value: &T,
) {
    let confluent = Codec::confluent(HashMap::from([(family, 17)]));
    for codec in [Codec::default(), confluent] {
        let bytes = codec.encode(family, value).unwrap();
        let back: T = codec.decode(family, &bytes).unwrap();
        assert_eq!(&back, value, "{family:?}");
    }
    let datum = Codec::datum(family, value).unwrap();
    assert_eq!(&Codec::from_datum::<T>(family, &datum).unwrap(), value);
    // The datum is deterministic: the hash chain relies on it.
    assert_eq!(datum, Codec::datum(family, value).unwrap());
}

/// An output artifact of `attempt_id`, as a runner lists it.
fn output(attempt_id: Uuid) -> execplane::contract::OutputArtifact {
    let sha256 = "c".repeat(64);
    execplane::contract::OutputArtifact {
        key: execplane::contract::outputs::output_key(attempt_id, &sha256, "plan.bin"),
        name: "plan.bin".into(),
        class: execplane::contract::RetentionClass::Evidence,
        media_type: "application/octet-stream".into(),
        size: 4096,
        sha256,
    }
}

fn all_events() -> Vec<AttemptEvent> {
    let spec = spec();
    let attempt_id = attempt_id_for(spec.command_id, 1);
    let bodies = vec![
        EventBody::Created {
            command_id: spec.command_id,
            attempt_no: 1,
            spec: std::sync::Arc::new(spec.clone()),
            available_at: 1_700_000_000_000,
            previous_attempt_id: Some(Uuid::from_u128(9)),
            policy_digest: Some(format!("sha256:{}", "ab".repeat(32))),
            target_keys: vec![execplane::contract::TargetKey {
                key: "node:10.0.0.5".into(),
                limit: 2,
            }],
        },
        EventBody::Rejected {
            command_id: spec.command_id,
            attempt_no: 1,
            tenant: "team-a".into(),
            operation: "verify.nothing".into(),
            category: FailureCategory::Contract,
            problems: vec![Problem::new("operation", "unknown operation")],
            policy_digest: None,
        },
        EventBody::LeaseGranted {
            lease_id: Uuid::from_u128(5),
            epoch: 3,
            runner_instance: "verification-1".into(),
            expires_at: 1_700_000_030_000,
        },
        EventBody::LeaseExtended {
            epoch: 3,
            expires_at: 1_700_000_060_000,
        },
        EventBody::Started {
            epoch: 3,
            runner_instance: "verification-1".into(),
        },
        EventBody::Progress {
            epoch: 3,
            message: "probing".into(),
            percent: Some(40),
        },
        EventBody::CancelRequested {
            reason: "operator".into(),
            requested_by: "alice".into(),
            grace_deadline: 1_700_000_090_000,
        },
        EventBody::ReportFenced {
            report_kind: "finished".into(),
            report_epoch: 2,
            current_epoch: Some(3),
            runner_instance: "verification-0".into(),
            reason: "stale".into(),
        },
        EventBody::Finished {
            outcome: TerminalOutcome::Failed,
            category: Some(FailureCategory::LeaseLost),
            message: "lease expired".into(),
            result_json: Some("{\"samples\":[]}".into()),
            timer: Some(TimerKind::Heartbeat),
            lease_revoked: true,
            retry_attempt_id: Some(attempt_id_for(spec.command_id, 2)),
            outputs: vec![output(attempt_id)],
        },
        EventBody::PlanApproved {
            command_id: Uuid::from_u128(78),
            plan_digest: format!("sha256:{}", "ab".repeat(32)),
            approved_by: "reviewer".into(),
        },
    ];
    bodies
        .into_iter()
        .enumerate()
        .map(|(index, body)| AttemptEvent {
            event_id: event_id_for(attempt_id, index as u64 + 1),
            attempt_id,
            job_id: spec.job_id.clone(),
            seq: index as u64 + 1,
            occurred_at: 1_700_000_000_000 + index as i64,
            body,
        })
        .collect()
}

#[test]
fn attempt_events_of_every_type_round_trip() {
    for event in all_events() {
        let record = AttemptEventRecord::from(&event);
        round_trip(Family::AttemptEvent, &record);
        assert_eq!(AttemptEvent::try_from(record).unwrap(), event);
    }
}

#[test]
fn commands_round_trip_and_keep_the_spec() {
    let spec = spec();
    let execute = CommandRecord {
        command_id: spec.command_id.to_string(),
        kind: CommandKind::ExecuteJob,
        issued_at: 1_700_000_000_000,
        execute: Some(JobSpecRecord::from(&spec)),
        cancel: None,
        approve: None,
    };
    round_trip(Family::Command, &execute);
    let back = execute.execute.as_ref().unwrap();
    assert_eq!(back.to_spec().unwrap(), spec);
    assert_eq!(validate_jobspec(&back.to_json()).unwrap(), spec);
    let cancel = CommandRecord {
        command_id: Uuid::from_u128(77).to_string(),
        kind: CommandKind::CancelAttempt,
        issued_at: 1_700_000_000_000,
        execute: None,
        cancel: Some(CancelAttemptRecord {
            attempt_id: Uuid::from_u128(3).to_string(),
            reason: "r".into(),
            requested_by: "op".into(),
            grace_ms: Some(5_000),
        }),
        approve: None,
    };
    round_trip(Family::Command, &cancel);
    let approve = CommandRecord::approve(
        Uuid::from_u128(79),
        ApprovePlanRecord {
            plan_attempt_id: Uuid::from_u128(3).to_string(),
            plan_digest: format!("sha256:{}", "cd".repeat(32)),
            tenant: "team-a".into(),
            approved_by: "reviewer".into(),
        },
        1_700_000_000_000,
    );
    round_trip(Family::Command, &approve);
}

#[test]
fn runner_reports_work_items_and_results_round_trip() {
    let attempt_id = Uuid::from_u128(11);
    let bodies = [
        ReportBody::Started,
        ReportBody::Heartbeat {
            progress: Some("50%".into()),
            percent: Some(50),
        },
        ReportBody::Progress {
            message: "step 2".into(),
            percent: None,
        },
        ReportBody::Finished {
            outcome: ReportedOutcome::Failed,
            category: Some(FailureCategory::TargetUnreachable),
            message: "refused".into(),
            result_json: None,
            outputs: vec![output(attempt_id)],
        },
    ];
    for body in bodies {
        let report = RunnerReport {
            attempt_id,
            lease_epoch: 2,
            runner_instance: "i-1".into(),
            body,
        };
        let record =
            RunnerEventRecord::from_report(Uuid::from_u128(12), 1_700_000_000_000, &report);
        round_trip(Family::RunnerEvent, &record);
        assert_eq!(record.to_report().unwrap(), report);
    }
    for kind in [
        WorkType::WorkItem,
        WorkType::LeaseExtended,
        WorkType::LeaseRevoked,
        WorkType::Cancel,
    ] {
        let work = WorkRecord {
            record_id: Uuid::from_u128(1).to_string(),
            runner_instance: "i-1".into(),
            kind,
            attempt_id: attempt_id.to_string(),
            job_id: "j".into(),
            attempt_no: 1,
            lease_id: Uuid::from_u128(2).to_string(),
            lease_epoch: 1,
            expires_at: Some(5),
            spec: (kind == WorkType::WorkItem).then(|| JobSpecRecord::from(&spec())),
            reason: None,
        };
        round_trip(Family::WorkItem, &work);
    }
    for status in [
        TerminalStatus::Succeeded,
        TerminalStatus::Rejected,
        TerminalStatus::OutcomeUnknown,
    ] {
        let result = ResultRecord {
            attempt_id: attempt_id.to_string(),
            job_id: "j".into(),
            command_id: Uuid::from_u128(4).to_string(),
            attempt_no: 1,
            tenant: "t".into(),
            operation: "verify.tcp.connect".into(),
            status,
            category: None,
            message: "ok".into(),
            result_json: None,
            finished_at: 1,
            terminal_seq: 4,
            idempotency_key: format!("{attempt_id}:4"),
            retry_attempt_id: None,
        };
        round_trip(Family::Result, &result);
    }
}

#[test]
fn log_chunks_of_every_stream_round_trip() {
    for (seq, stream) in [LogStream::Stdout, LogStream::Stderr, LogStream::Runner]
        .into_iter()
        .enumerate()
    {
        let chunk = LogChunkRecord {
            chunk_id: Uuid::from_u128(seq as u128).to_string(),
            attempt_id: Uuid::from_u128(11).to_string(),
            lease_epoch: 3,
            runner_instance: "exec-a.1".into(),
            stream,
            seq: seq as i64,
            text: "line one\nline \u{2713} two\n".into(),
            sent_at: 1_700_000_000_000,
        };
        round_trip(Family::LogChunk, &chunk);
    }
}

#[test]
fn readers_refuse_unknown_framing_and_schemas() {
    let codec = Codec::default();
    let event = AttemptEventRecord::from(&all_events()[2]);
    let mut bytes = codec.encode(Family::AttemptEvent, &event).unwrap();
    assert!(matches!(
        codec.decode::<AttemptEventRecord>(Family::AttemptEvent, &[]),
        Err(CodecError::Empty)
    ));
    assert!(matches!(
        codec.decode::<AttemptEventRecord>(Family::AttemptEvent, b"{\"json\":1}"),
        Err(CodecError::UnknownFraming(b'{'))
    ));
    assert!(matches!(
        codec.decode::<AttemptEventRecord>(Family::AttemptEvent, &[0xC3, 0x01, 1]),
        Err(CodecError::TruncatedHeader(_))
    ));
    // A record of another family has another fingerprint.
    assert!(matches!(
        codec.decode::<CommandRecord>(Family::Command, &bytes),
        Err(CodecError::UnknownFingerprint { .. })
    ));
    bytes[3] ^= 0xFF;
    let error = codec
        .decode::<AttemptEventRecord>(Family::AttemptEvent, &bytes)
        .unwrap_err();
    assert!(
        error.to_string().contains("unknown schema fingerprint"),
        "{error}"
    );
    // Confluent framing without a configured id is refused, not guessed.
    let confluent = Codec::confluent(HashMap::from([(Family::AttemptEvent, 3)]));
    let framed = confluent.encode(Family::AttemptEvent, &event).unwrap();
    assert!(matches!(
        codec.decode::<AttemptEventRecord>(Family::AttemptEvent, &framed),
        Err(CodecError::UnknownSchemaId { id: 3, .. })
    ));
    // Garbage after a valid header is an Avro error, never a panic.
    let mut garbage = vec![0xC3, 0x01];
    garbage.extend_from_slice(&Codec::fingerprint(Family::AttemptEvent).to_le_bytes());
    garbage.extend_from_slice(&[0xFF; 7]);
    assert!(codec
        .decode::<AttemptEventRecord>(Family::AttemptEvent, &garbage)
        .is_err());
}

/// The single-object fingerprint of each schema, as an independent
/// implementation computes it: fastavro 1.13.1,
/// `fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO")`, whose
/// hex string is the 8 bytes as written after `C3 01` (little-endian).
/// Computed once from `schemas/*.avsc` and `schemas/previous/*.avsc`.
const FASTAVRO_FINGERPRINTS: [(Family, &str, &str); 8] = [
    (Family::Artifact, "bd5e3cb52f518ce4", "bd5e3cb52f518ce4"),
    (Family::AttemptEvent, "b0099f2ccc9475cc", "18cd5b8292cba420"),
    (Family::Command, "99c205b506448b9e", "c7cd0961e9b67293"),
    (Family::LogChunk, "7fbd3e6c576040ce", "7fbd3e6c576040ce"),
    (Family::Result, "82b536f5207f4b71", "82b536f5207f4b71"),
    (Family::RunnerEvent, "53077da007d4be96", "113fa3d628a5028a"),
    (Family::Presence, "6cfb83b3a795588f", "d7c26a14c9aa5626"),
    (Family::WorkItem, "e6e177e322ffb5da", "40aed7f57f22cac7"),
];

fn wire_bytes(fingerprint: u64) -> String {
    hex::encode(fingerprint.to_le_bytes())
}

#[test]
fn fingerprints_are_the_specifications_as_fastavro_computes_them() {
    for (family, current, previous) in FASTAVRO_FINGERPRINTS {
        assert_eq!(
            wire_bytes(execplane::codec::fingerprint(family.current_text()).unwrap()),
            current,
            "{family:?}"
        );
        assert_eq!(
            wire_bytes(execplane::codec::fingerprint(family.previous_text()).unwrap()),
            previous,
            "{family:?} (previous)"
        );
        assert_eq!(
            wire_bytes(Codec::fingerprint(family)),
            current,
            "{family:?}"
        );
    }
    // The value the issue quotes from the specification for commands.avsc
    // (as of the previous release; ApprovePlan came since).
    assert_eq!(
        execplane::codec::fingerprint(Family::Command.previous_text()).unwrap(),
        0x9372_b6e9_6109_cdc7
    );
}

#[test]
fn a_record_framed_by_a_spec_conforming_producer_is_read_and_old_records_still_are() {
    let event = AttemptEventRecord::from(&all_events()[2]);
    let datum = Codec::datum(Family::AttemptEvent, &event).unwrap();
    // What fastavro's schemaless single-object writer puts on the wire.
    let mut framed = vec![0xC3, 0x01];
    framed.extend_from_slice(&hex::decode(FASTAVRO_FINGERPRINTS[1].1).unwrap());
    framed.extend_from_slice(&datum);
    assert_eq!(
        Codec::default()
            .encode(Family::AttemptEvent, &event)
            .unwrap(),
        framed
    );
    let back: AttemptEventRecord = Codec::default()
        .decode(Family::AttemptEvent, &framed)
        .unwrap();
    assert_eq!(back, event);
    // Records (and attempt_events rows) written before the fix carry
    // apache-avro's fingerprint: still readable.
    let legacy = execplane::codec::legacy_fingerprint(Codec::schema(Family::AttemptEvent));
    assert_ne!(legacy, Codec::fingerprint(Family::AttemptEvent));
    let mut old = vec![0xC3, 0x01];
    old.extend_from_slice(&legacy.to_le_bytes());
    old.extend_from_slice(&datum);
    let back: AttemptEventRecord = Codec::default().decode(Family::AttemptEvent, &old).unwrap();
    assert_eq!(back, event);
    let back: AttemptEventRecord =
        Codec::from_datum_by_fingerprint(Family::AttemptEvent, legacy, &datum).unwrap();
    assert_eq!(back, event);
}

/// Registry ids 100.. for every family, in Confluent framing, with id 7 for
/// the previous attempt-event schema: the ids and the codec.
fn confluent_with_previous() -> (HashMap<Family, u32>, Codec) {
    let ids: HashMap<Family, u32> = Family::ALL
        .into_iter()
        .enumerate()
        .map(|(index, family)| (family, 100 + index as u32))
        .collect();
    let codec = Codec::new(
        Framing::Confluent,
        RegistryIds {
            current: ids.clone(),
            previous: HashMap::from([(Family::AttemptEvent, 7)]),
        },
    )
    .unwrap();
    (ids, codec)
}

#[test]
fn confluent_framing_writes_the_current_id_and_reads_previous_ids() {
    let (ids, codec) = confluent_with_previous();
    let event = AttemptEventRecord::from(&all_events()[2]);
    let bytes = codec.encode(Family::AttemptEvent, &event).unwrap();
    assert_eq!(bytes[0], 0);
    assert_eq!(
        u32::from_be_bytes(bytes[1..5].try_into().unwrap()),
        ids[&Family::AttemptEvent]
    );
    // A single-object reader configured with the same ids reads it too.
    let reader = Codec::new(
        Framing::SingleObject,
        RegistryIds {
            current: ids.clone(),
            previous: HashMap::new(),
        },
    )
    .unwrap();
    assert_eq!(
        reader
            .decode::<AttemptEventRecord>(Family::AttemptEvent, &bytes)
            .unwrap(),
        event
    );
    // Confluent framing without an id for every family, or one id twice, is refused.
    let error = Codec::new(Framing::Confluent, RegistryIds::default()).unwrap_err();
    assert!(
        error.to_string().contains("no registry id for commands"),
        "{error}"
    );
    let error = Codec::new(
        Framing::Confluent,
        RegistryIds {
            current: ids.clone(),
            previous: HashMap::from([(Family::Command, ids[&Family::Result])]),
        },
    )
    .unwrap_err();
    assert!(error.to_string().contains("is given for"), "{error}");
}

#[test]
fn a_stored_datum_is_framed_with_the_schema_it_was_written_with() {
    let (ids, confluent) = confluent_with_previous();
    let datum = Codec::datum(
        Family::AttemptEvent,
        &AttemptEventRecord::from(&all_events()[2]),
    )
    .unwrap();
    // The previous schema's fingerprint, as a reader learns it from its id.
    let mut by_previous_id = vec![0, 0, 0, 0, 7];
    by_previous_id.extend_from_slice(&datum);
    let (previous, _) = confluent
        .unframe(Family::AttemptEvent, &by_previous_id)
        .unwrap();
    assert_ne!(previous, Codec::fingerprint(Family::AttemptEvent));
    // Framed again as written: under its own id, or its own fingerprint.
    assert_eq!(
        confluent
            .frame_written_with(Family::AttemptEvent, previous, &datum)
            .unwrap(),
        by_previous_id
    );
    let single = Codec::default()
        .frame_written_with(Family::AttemptEvent, previous, &datum)
        .unwrap();
    assert_eq!(single[..2], [0xC3, 0x01]);
    assert_eq!(
        u64::from_le_bytes(single[2..10].try_into().unwrap()),
        previous
    );
    // The current schema is framed as `frame` frames it; a schema this
    // release cannot name is refused, never framed as another.
    assert_eq!(
        Codec::default()
            .frame_written_with(
                Family::AttemptEvent,
                Codec::fingerprint(Family::AttemptEvent),
                &datum
            )
            .unwrap(),
        Codec::default()
            .frame(Family::AttemptEvent, &datum)
            .unwrap()
    );
    assert!(Codec::default()
        .frame_written_with(Family::AttemptEvent, 42, &datum)
        .is_err());
    let without_previous_id = Codec::new(
        Framing::Confluent,
        RegistryIds {
            current: ids,
            previous: HashMap::new(),
        },
    )
    .unwrap();
    assert!(without_previous_id
        .frame_written_with(Family::AttemptEvent, previous, &datum)
        .is_err());
}

#[test]
fn single_object_header_is_the_spec_fingerprint() {
    // CRC-64-AVRO of the canonical form, little-endian, after C3 01.
    let bytes = Codec::default()
        .encode(
            Family::Result,
            &ResultRecord {
                attempt_id: "a".into(),
                job_id: "j".into(),
                command_id: "c".into(),
                attempt_no: 1,
                tenant: "t".into(),
                operation: "o".into(),
                status: TerminalStatus::Succeeded,
                category: None,
                message: String::new(),
                result_json: None,
                finished_at: 0,
                terminal_seq: 1,
                idempotency_key: "a:1".into(),
                retry_attempt_id: None,
            },
        )
        .unwrap();
    assert_eq!(&bytes[..2], &[0xC3, 0x01]);
    let expected = rabin(
        execplane::codec::parsing_canonical_form(Family::Result.current_text())
            .unwrap()
            .as_bytes(),
    );
    assert_eq!(
        u64::from_le_bytes(bytes[2..10].try_into().unwrap()),
        expected
    );
}

/// The reference CRC-64-AVRO algorithm from the Avro specification.
fn rabin(bytes: &[u8]) -> u64 {
    const EMPTY: u64 = 0xc15d_213a_a4d7_a795;
    let mut table = [0u64; 256];
    for (index, slot) in table.iter_mut().enumerate() {
        let mut fp = index as u64;
        for _ in 0..8 {
            fp = (fp >> 1) ^ (EMPTY & (0u64.wrapping_sub(fp & 1)));
        }
        *slot = fp;
    }
    let mut fp = EMPTY;
    for byte in bytes {
        fp = (fp >> 8) ^ table[((fp ^ u64::from(*byte)) & 0xff) as usize];
    }
    fp
}
