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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_and_distinct() {
        let command = Uuid::from_u128(42);
        assert_eq!(attempt_id_for(command, 1), attempt_id_for(command, 1));
        assert_ne!(attempt_id_for(command, 1), attempt_id_for(command, 2));
        let attempt = attempt_id_for(command, 1);
        assert_ne!(event_id_for(attempt, 1), lease_id_for(attempt, 1));
    }
}
