//! Placement: each queued attempt goes to a live instance of its runner type
//! whose pool labels and capabilities cover the requirements and which has
//! free capacity, least loaded first; an attempt with target keys only in
//! its turn on every key. No fit: the attempt stays queued and
//! `schedule_to_start` applies.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::{DispatcherConfig, DispatcherError};
use uuid::Uuid;

use crate::attempt::placement::{key_candidates, place, without_unplaceable, KeyBoard};
use crate::store::{InputEnvelope, Store};
use crate::store::{LiveInstance, QueuedAttempt};

/// What wakes placement, shared by the tasks that may give it work.
#[derive(Clone)]
pub(super) struct Wake {
    notify: Arc<Notify>,
    /// The last round left attempts it could not place, or could not tell
    /// (an error, a runner type with no free slot).
    backlog: Arc<AtomicBool>,
}

impl Wake {
    pub(super) fn new() -> Self {
        Self {
            notify: Arc::new(Notify::new()),
            backlog: Arc::new(AtomicBool::new(true)),
        }
    }

    /// Something may be placeable now: an attempt created and not leased
    /// where it was created, an instance new or with free slots again, a
    /// timer fired.
    pub(super) fn something_waits(&self) {
        self.notify.notify_one();
    }

    /// A slot or a key was freed (an attempt ended): that matters only to
    /// attempts the last round left waiting. At low rates every attempt is
    /// leased where it is created, and a round for every ended attempt
    /// cost three statements for nothing. Any attempt queued since that
    /// round has woken placement itself.
    pub(super) fn freed(&self) {
        if self.backlog.load(Ordering::Acquire) {
            self.notify.notify_one();
        }
    }
}

/// Places whenever intake, presence or the sweeper says something may be
/// placeable, and on a timer (for retry backoffs ending, and for what
/// another dispatcher queued before this one freed a slot).
pub(super) async fn run(
    store: Store,
    config: DispatcherConfig,
    wake: Wake,
    shutdown: CancellationToken,
) -> Result<(), DispatcherError> {
    let mut key_cursor = String::new();
    while !shutdown.is_cancelled() {
        let backlog = match place_once(&store, &config, &mut key_cursor).await {
            Ok(round) => round.backlog,
            Err(error) => {
                warn!(%error, "placement failed");
                true
            }
        };
        wake.backlog.store(backlog, Ordering::Release);
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = wake.notify.notified() => {}
            _ = tokio::time::sleep(config.placement_interval) => {}
        }
    }
    Ok(())
}

/// What one placement round did.
#[derive(Debug, Default)]
pub struct Round {
    /// Leases granted.
    pub granted: usize,
    /// Attempts were left waiting, or may have been: a freed slot or key
    /// may place them.
    pub backlog: bool,
}

/// The placement decision for new attempts inside intake's transaction:
/// each queued attempt to the least loaded live instance of its type whose
/// pool labels and capabilities cover it and which has free capacity
/// (`attempt::placement::place`). Attempts with target keys are never
/// placed here (no key is known to be free): they wait their turn on their
/// keys, which the placement task reads.
pub fn choose(queued: &[QueuedAttempt], instances: &[LiveInstance]) -> Vec<(Uuid, String)> {
    place(queued, instances, &KeyBoard::new())
}

/// Keys visited a round for attempts with target keys: a skip scan that
/// resumes where the last round stopped, so every key gets its turn
/// whatever the number of keys, and a round costs the same whatever the
/// backlog behind them.
const KEYS_PER_ROUND: u32 = 128;
/// How deep a key's queue is read: at most this many attempts take one
/// key in a round (a limit above it only takes more rounds), and a round
/// reads at most KEYS_PER_ROUND × KEY_DEPTH waiters.
const KEY_DEPTH: u32 = 16;

/// Queued attempts read per page.
const PAGE: i64 = 500;
/// Pages read per runner type per round: attempts nobody can take (their
/// pool or capabilities match no live instance) cannot keep the rest of the
/// queue waiting for more than this many pages a round.
const MAX_PAGES: usize = 4;

/// One placement round. It costs the same whatever the backlog: only
/// runner types with free capacity are read, a page at a time, as far as
/// that capacity goes.
pub async fn place_once(
    store: &Store,
    config: &DispatcherConfig,
    key_cursor: &mut String,
) -> Result<Round, DispatcherError> {
    let now = chrono::Utc::now().timestamp_millis();
    let fresh_after = now - i64::try_from(config.presence_ttl.as_millis()).unwrap_or(i64::MAX);
    // Instances with what this round already gave them.
    let mut loaded = store.live_instances(fresh_after).await?;
    let (mut grants, mut backlog) = place_keyed(store, now, key_cursor, &mut loaded).await?;
    let mut free: BTreeMap<String, i64> = Default::default();
    for instance in &loaded {
        *free.entry(instance.runner_type.clone()).or_default() +=
            (instance.capacity - instance.in_flight).max(0);
    }
    for (runner_type, capacity) in free {
        let mut left = capacity;
        let mut after = None;
        // Whether this type's queue was read to its end and all placed.
        let mut drained = false;
        for _ in 0..MAX_PAGES {
            if left <= 0 {
                break;
            }
            let page = store
                .queued_attempts(&runner_type, now, after, PAGE.min(left * 4).max(1))
                .await?;
            let Some((_, last)) = page.last() else {
                drained = true;
                break;
            };
            after = Some(*last);
            let full_page = page.len() as i64 >= PAGE.min(left * 4).max(1);
            let queued: Vec<_> = page.into_iter().map(|(attempt, _)| attempt).collect();
            let placed = choose(&queued, &loaded);
            count_in(&mut loaded, &placed);
            left -= placed.len() as i64;
            let all_placed = placed.len() == queued.len();
            grants.extend(placed);
            if !full_page {
                drained = all_placed;
                break;
            }
        }
        backlog |= !drained;
    }
    let granted = grants.len();
    if grants.is_empty() {
        return Ok(Round { granted, backlog });
    }
    let inputs: Vec<InputEnvelope> = grants
        .into_iter()
        .map(|(attempt_id, runner_instance)| InputEnvelope::grant(attempt_id, runner_instance))
        .collect();
    let outcome = store
        .process_batch(&inputs, chrono::Utc::now().timestamp_millis())
        .await?;
    crate::telemetry::metrics::record_events(&outcome.events);
    Ok(Round { granted, backlog })
}

/// Attempts with target keys: the next keys in turn, who holds each and
/// who waits first, and of those waiters the ones in their turn on every
/// key, placed oldest first. With whether any attempt may still wait on a
/// key (every instance full, or any key waited for).
async fn place_keyed(
    store: &Store,
    now: i64,
    cursor: &mut String,
    loaded: &mut [LiveInstance],
) -> Result<(Vec<(Uuid, String)>, bool), DispatcherError> {
    if loaded
        .iter()
        .all(|instance| instance.in_flight >= instance.capacity)
    {
        return Ok((Vec::new(), true));
    }
    let keys = store.waited_keys(cursor, now, KEYS_PER_ROUND).await?;
    let waited = !keys.is_empty();
    // The end of the keys: the next round starts again from the first.
    *cursor = match keys.last() {
        Some(last) if keys.len() as u32 >= KEYS_PER_ROUND => last.clone(),
        _ => String::new(),
    };
    let (mut board, waiters) = placeable_board(store, &keys, now, loaded).await?;
    let candidates = key_candidates(&board);
    if candidates.is_empty() {
        return Ok((Vec::new(), waited));
    }
    let queued: Vec<QueuedAttempt> = waiters
        .into_iter()
        .filter(|attempt| candidates.contains(&attempt.attempt_id))
        .collect();
    // Their other keys, which this round's scan may not have reached.
    let others: Vec<String> = queued
        .iter()
        .flat_map(|attempt| attempt.target_keys.iter())
        .filter(|key| !board.contains_key(&key.key))
        .map(|key| key.key.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    board.extend(placeable_board(store, &others, now, loaded).await?.0);
    let placed = place(&queued, loaded, &board);
    count_in(loaded, &placed);
    Ok((placed, waited))
}

/// Who holds and who waits for `keys`, without the waiters no live
/// instance could take, and the waiters as read.
async fn placeable_board(
    store: &Store,
    keys: &[String],
    now: i64,
    loaded: &[LiveInstance],
) -> Result<(KeyBoard, Vec<QueuedAttempt>), DispatcherError> {
    let board = store.key_board(keys, now, KEY_DEPTH).await?;
    let waiting = waiting_in(&board);
    if waiting.is_empty() {
        return Ok((board, Vec::new()));
    }
    let waiters = store.queued_by_id(&waiting, now).await?;
    Ok((without_unplaceable(&board, &waiters, loaded), waiters))
}

/// Every attempt `board` lists as waiting.
fn waiting_in(board: &KeyBoard) -> Vec<Uuid> {
    board
        .values()
        .flat_map(|queue| queue.waiting.iter().map(|(attempt_id, _)| *attempt_id))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// Adds this round's grants to the instances' loads.
fn count_in(loaded: &mut [LiveInstance], placed: &[(Uuid, String)]) {
    for (_, instance_id) in placed {
        if let Some(instance) = loaded
            .iter_mut()
            .find(|instance| &instance.instance_id == instance_id)
        {
            instance.in_flight += 1;
        }
    }
}
