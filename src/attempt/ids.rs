//! Deterministic ids (uuid v5): the same input always names the same thing.

use uuid::Uuid;

const NAMESPACE: Uuid = Uuid::from_u128(0x6f1c_2d0e_8a4b_4f3e_9d6a_3b7e_5c21_a904);

/// Attempt `attempt_no` of the job created by `command_id`.
pub fn attempt_id_for(command_id: Uuid, attempt_no: u32) -> Uuid {
    let mut name = command_id.as_bytes().to_vec();
    name.extend_from_slice(b"/attempt/");
    name.extend_from_slice(&attempt_no.to_be_bytes());
    Uuid::new_v5(&NAMESPACE, &name)
}

/// Event `seq` of an attempt; a re-published event keeps its id.
pub fn event_id_for(attempt_id: Uuid, seq: u64) -> Uuid {
    let mut name = attempt_id.as_bytes().to_vec();
    name.extend_from_slice(b"/event/");
    name.extend_from_slice(&seq.to_be_bytes());
    Uuid::new_v5(&NAMESPACE, &name)
}

/// The lease of `epoch` on an attempt.
pub fn lease_id_for(attempt_id: Uuid, epoch: u64) -> Uuid {
    let mut name = attempt_id.as_bytes().to_vec();
    name.extend_from_slice(b"/lease/");
    name.extend_from_slice(&epoch.to_be_bytes());
    Uuid::new_v5(&NAMESPACE, &name)
}

/// A report an executor names with `idempotency_key`: the same report of
/// the same lease, sent again, is the same event (the inbox records it
/// once). Its kind is part of the name, so that a key reused for another
/// kind of report cannot swallow it.
pub fn report_event_id_for(
    attempt_id: Uuid,
    epoch: u64,
    runner_instance: &str,
    kind: &str,
    idempotency_key: &str,
) -> Uuid {
    let mut name = attempt_id.as_bytes().to_vec();
    name.extend_from_slice(b"/report/");
    name.extend_from_slice(&epoch.to_be_bytes());
    for part in [runner_instance, kind, idempotency_key] {
        // Length-prefixed: no two triples spell the same name.
        name.extend_from_slice(&(part.len() as u64).to_be_bytes());
        name.extend_from_slice(part.as_bytes());
    }
    Uuid::new_v5(&NAMESPACE, &name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_and_distinct() {
        let command = Uuid::from_u128(42);
        assert_eq!(attempt_id_for(command, 1), attempt_id_for(command, 1));
        assert_ne!(attempt_id_for(command, 1), attempt_id_for(command, 2));
        let attempt = attempt_id_for(command, 1);
        let report = |instance, kind, key| report_event_id_for(attempt, 1, instance, kind, key);
        assert_eq!(report("a", "finished", "k"), report("a", "finished", "k"));
        assert_ne!(report("a", "finished", "k"), report("a", "progress", "k"));
        assert_ne!(report("ab", "finished", "k"), report("a", "bfinished", "k"));
        assert_ne!(
            report_event_id_for(attempt, 1, "a", "finished", "k"),
            report_event_id_for(attempt, 2, "a", "finished", "k")
        );
        assert_ne!(event_id_for(attempt, 1), lease_id_for(attempt, 1));
    }
}
