//! One poller per ingress process for what event streams and long polls
//! wait on, instead of one query loop per open request: every tick it asks
//! Postgres (at most two small queries, only while someone waits) which
//! watched attempts have new events and which watched runner instances have
//! new leases, and wakes exactly their waiters. A waiter queries its own
//! data only when woken, or after a fallback interval.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::store::Store;

/// How often the shared poller looks for changes.
pub const TICK: Duration = Duration::from_millis(150);

#[derive(Default)]
struct Watched {
    /// attempt → (waiters, its change counter).
    attempts: HashMap<Uuid, (usize, watch::Sender<u64>)>,
    /// runner instance → its waiters.
    instances: HashMap<String, InstanceWatch>,
}

struct InstanceWatch {
    waiters: usize,
    changes: watch::Sender<u64>,
    /// Last seen (active leases, newest epoch).
    mark: Option<(i64, i64)>,
}

/// The shared change feed of one ingress process.
#[derive(Default)]
pub struct Feed {
    watched: Mutex<Watched>,
}

/// A registration; dropping it stops the watching. A change that happens
/// while its holder is busy is not lost: the next wait returns at once.
pub struct Watch {
    feed: Arc<Feed>,
    key: WatchKey,
    changes: watch::Receiver<u64>,
}

enum WatchKey {
    Attempt(Uuid),
    Instance(String),
}

impl Watch {
    /// Waits for a change since the last wait, or `fallback` at most.
    pub async fn changed(&mut self, fallback: Duration) {
        let _ = tokio::time::timeout(fallback, self.changes.changed()).await;
    }
}

fn bump(changes: &watch::Sender<u64>) {
    changes.send_modify(|count| *count = count.wrapping_add(1));
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut watched = self.feed.lock();
        match &self.key {
            WatchKey::Attempt(attempt_id) => {
                if let Some(entry) = watched.attempts.get_mut(attempt_id) {
                    entry.0 -= 1;
                    if entry.0 == 0 {
                        watched.attempts.remove(attempt_id);
                    }
                }
            }
            WatchKey::Instance(instance) => {
                if let Some(entry) = watched.instances.get_mut(instance) {
                    entry.waiters -= 1;
                    if entry.waiters == 0 {
                        watched.instances.remove(instance);
                    }
                }
            }
        }
    }
}

impl Feed {
    fn lock(&self) -> std::sync::MutexGuard<'_, Watched> {
        self.watched
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Watches an attempt's events.
    pub fn attempt(self: &Arc<Self>, attempt_id: Uuid) -> Watch {
        let mut watched = self.lock();
        let entry = watched
            .attempts
            .entry(attempt_id)
            .or_insert_with(|| (0, watch::Sender::new(0)));
        entry.0 += 1;
        let changes = entry.1.subscribe();
        drop(watched);
        Watch {
            feed: self.clone(),
            key: WatchKey::Attempt(attempt_id),
            changes,
        }
    }

    /// Watches the leases granted to a runner instance.
    pub fn instance(self: &Arc<Self>, instance: &str) -> Watch {
        let mut watched = self.lock();
        let entry = watched
            .instances
            .entry(instance.to_owned())
            .or_insert_with(|| InstanceWatch {
                waiters: 0,
                changes: watch::Sender::new(0),
                mark: None,
            });
        entry.waiters += 1;
        let changes = entry.changes.subscribe();
        drop(watched);
        Watch {
            feed: self.clone(),
            key: WatchKey::Instance(instance.to_owned()),
            changes,
        }
    }

    /// How many requests wait on the feed (attempts, instances).
    pub fn waiting(&self) -> (usize, usize) {
        let watched = self.lock();
        (watched.attempts.len(), watched.instances.len())
    }

    /// Polls until `shutdown`, waking waiters whose data changed.
    pub async fn run(self: Arc<Self>, store: Store, shutdown: CancellationToken) {
        // The newest event position seen; None while nobody watches (then
        // nothing is queried, and it is taken afresh when someone does).
        let mut position: Option<i64> = None;
        while !shutdown.is_cancelled() {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(TICK) => {}
            }
            let (attempts, instances): (Vec<Uuid>, Vec<String>) = {
                let watched = self.lock();
                (
                    watched.attempts.keys().copied().collect(),
                    watched.instances.keys().cloned().collect(),
                )
            };
            if attempts.is_empty() {
                position = None;
            } else if let Some(after) = position {
                match store.attempts_changed_since(after, &attempts).await {
                    Ok((newest, changed)) => {
                        position = Some(newest);
                        let watched = self.lock();
                        for attempt_id in changed {
                            if let Some((_, changes)) = watched.attempts.get(&attempt_id) {
                                bump(changes);
                            }
                        }
                    }
                    Err(error) => tracing::debug!(%error, "event feed poll failed"),
                }
            } else {
                // Someone started watching: where the log is now. Waiters
                // read their own data before this, so wake them all once:
                // whatever landed in between is read then.
                position = store.event_position().await.ok();
                if position.is_some() {
                    let watched = self.lock();
                    for (_, changes) in watched.attempts.values() {
                        bump(changes);
                    }
                }
            }
            if !instances.is_empty() {
                match store.lease_marks(&instances).await {
                    Ok(marks) => {
                        let mut watched = self.lock();
                        for instance in &instances {
                            let mark = marks.get(instance).copied().unwrap_or((0, 0));
                            if let Some(entry) = watched.instances.get_mut(instance) {
                                if entry.mark != Some(mark) {
                                    entry.mark = Some(mark);
                                    bump(&entry.changes);
                                }
                            }
                        }
                    }
                    Err(error) => tracing::debug!(%error, "lease feed poll failed"),
                }
            }
        }
        // Wake everyone so their requests end with the shutdown.
        let watched = self.lock();
        for (_, changes) in watched.attempts.values() {
            bump(changes);
        }
        for entry in watched.instances.values() {
            bump(&entry.changes);
        }
    }
}
