//! Console sessions, held in the ingress process (docs/INGRESS.md, "The
//! console"): a random token in an HttpOnly, `SameSite=Strict` cookie names
//! a session that remembers the principal and its key's digest, never the
//! key. The principal's roles are read from the live policy on every
//! request, so a policy reload that removes a principal or changes its key
//! ends its sessions at once. Sessions expire after [`IDLE`] unused and
//! [`LIFETIME`] in all; a principal holds at most
//! [`MAX_SESSIONS_PER_PRINCIPAL`] (its own oldest go), so one that signs
//! in again and again never ends another's, and at most [`MAX_SESSIONS`]
//! are held in all (the oldest go).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rand::RngCore;
use sha2::{Digest, Sha256};

/// A session unused this long is over.
pub const IDLE: Duration = Duration::from_secs(60 * 60);
/// A session is over this long after sign-in, used or not.
pub const LIFETIME: Duration = Duration::from_secs(12 * 60 * 60);
/// Sessions held at once; signing in past it ends the oldest.
pub const MAX_SESSIONS: usize = 4096;
/// Sessions one principal holds at once; its signing in past it ends its
/// own oldest.
pub const MAX_SESSIONS_PER_PRINCIPAL: usize = 16;
/// Failed sign-ins a client address may make per [`FAILURE_WINDOW`].
pub const MAX_FAILURES: u32 = 10;
pub const FAILURE_WINDOW: Duration = Duration::from_secs(60);
/// Client addresses whose failures are remembered at once.
const MAX_FAILING_CLIENTS: usize = 4096;

/// One signed-in operator.
#[derive(Clone, Debug)]
pub struct Session {
    pub principal: String,
    /// SHA-256 of the key it signed in with.
    pub key_digest: [u8; 32],
    /// The token every state-changing form must carry.
    pub csrf: String,
    started: Instant,
    used: Instant,
}

#[derive(Default)]
struct Held {
    /// sha256(token) → session.
    sessions: HashMap<[u8; 32], Session>,
    /// client → (failures, window start).
    failures: HashMap<IpAddr, (u32, Instant)>,
}

#[derive(Default)]
pub struct Sessions {
    held: Mutex<Held>,
}

fn random_hex() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

fn token_digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl Sessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Starts a session; its token (for the cookie) and CSRF token.
    pub fn start(&self, principal: &str, key_digest: [u8; 32]) -> (String, String) {
        let token = random_hex();
        let csrf = random_hex();
        let now = Instant::now();
        let mut held = self.lock();
        held.sessions.retain(|_, session| !session.expired(now));
        let own = held
            .sessions
            .values()
            .filter(|session| session.principal == principal)
            .count();
        if own >= MAX_SESSIONS_PER_PRINCIPAL || held.sessions.len() >= MAX_SESSIONS {
            let oldest = held
                .sessions
                .iter()
                .filter(|(_, session)| {
                    own < MAX_SESSIONS_PER_PRINCIPAL || session.principal == principal
                })
                .min_by_key(|(_, session)| session.used)
                .map(|(digest, _)| *digest);
            if let Some(oldest) = oldest {
                held.sessions.remove(&oldest);
            }
        }
        held.sessions.insert(
            token_digest(&token),
            Session {
                principal: principal.to_owned(),
                key_digest,
                csrf: csrf.clone(),
                started: now,
                used: now,
            },
        );
        (token, csrf)
    }

    /// The session `token` names, if it has not expired (and marks it used).
    pub fn get(&self, token: &str) -> Option<Session> {
        let now = Instant::now();
        let digest = token_digest(token);
        let mut held = self.lock();
        let session = held.sessions.get_mut(&digest)?;
        if session.expired(now) {
            held.sessions.remove(&digest);
            return None;
        }
        session.used = now;
        Some(session.clone())
    }

    /// Whether the session `token` names is still there and has not
    /// expired (without marking it used: a stream open on it does not
    /// keep it alive).
    pub fn is_live(&self, token: &str) -> bool {
        let now = Instant::now();
        self.lock()
            .sessions
            .get(&token_digest(token))
            .is_some_and(|session| !session.expired(now))
    }

    pub fn end(&self, token: &str) {
        self.lock().sessions.remove(&token_digest(token));
    }

    /// Whether `client` may try to sign in now (fewer than
    /// [`MAX_FAILURES`] failures in the current window).
    /// When [`MAX_FAILING_CLIENTS`] addresses all have live windows, an
    /// address not among them may not try either (closed, not open: a
    /// flood of addresses must not lift the limit).
    pub fn may_try(&self, client: IpAddr) -> bool {
        let client = failing(client);
        let now = Instant::now();
        let mut held = self.lock();
        if held.failures.len() >= MAX_FAILING_CLIENTS && !held.failures.contains_key(&client) {
            held.failures
                .retain(|_, (_, since)| now.duration_since(*since) < FAILURE_WINDOW);
            return held.failures.len() < MAX_FAILING_CLIENTS;
        }
        held.failures.get(&client).is_none_or(|(count, since)| {
            *count < MAX_FAILURES || now.duration_since(*since) >= FAILURE_WINDOW
        })
    }

    /// Counts a failed sign-in of `client`.
    pub fn failed(&self, client: IpAddr) {
        let client = failing(client);
        let now = Instant::now();
        let mut held = self.lock();
        if held.failures.len() >= MAX_FAILING_CLIENTS {
            held.failures
                .retain(|_, (_, since)| now.duration_since(*since) < FAILURE_WINDOW);
        }
        if held.failures.len() >= MAX_FAILING_CLIENTS && !held.failures.contains_key(&client) {
            // Every slot is a live window: `may_try` refuses newcomers
            // until one ends.
            return;
        }
        let entry = held.failures.entry(client).or_insert((0, now));
        if now.duration_since(entry.1) >= FAILURE_WINDOW {
            *entry = (0, now);
        }
        entry.0 += 1;
    }
}

impl Session {
    fn expired(&self, now: Instant) -> bool {
        now.duration_since(self.used) >= IDLE || now.duration_since(self.started) >= LIFETIME
    }

    /// Whether `presented` is this session's CSRF token (constant time).
    pub fn csrf_matches(&self, presented: &str) -> bool {
        use subtle::ConstantTimeEq;
        presented.len() == self.csrf.len()
            && bool::from(presented.as_bytes().ct_eq(self.csrf.as_bytes()))
    }
}

/// Whose failures an address's are: an IPv6 address's /48 (one site's
/// allocation, which holds 65,536 /64s: counted apart, one site could
/// fill the table that, full, refuses every newcomer).
fn failing(client: IpAddr) -> IpAddr {
    match client {
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1_u128 << 80) - 1);
            IpAddr::V6(std::net::Ipv6Addr::from(bits))
        }
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_is_found_by_its_token_only_and_ends() {
        let sessions = Sessions::default();
        let (token, csrf) = sessions.start("alice", [7; 32]);
        let session = sessions.get(&token).unwrap();
        assert_eq!(session.principal, "alice");
        assert!(session.csrf_matches(&csrf));
        assert!(!session.csrf_matches(""));
        assert!(!session.csrf_matches(&token));
        assert!(sessions.get(&csrf).is_none());
        sessions.end(&token);
        assert!(sessions.get(&token).is_none());
    }

    #[test]
    fn a_principal_signing_in_again_and_again_ends_only_its_own_sessions() {
        let sessions = Sessions::default();
        let (alice, _) = sessions.start("alice", [1; 32]);
        let mallory: Vec<String> = (0..MAX_SESSIONS + 1)
            .map(|_| sessions.start("mallory", [2; 32]).0)
            .collect();
        assert!(sessions.get(&alice).is_some(), "another's session ended");
        let live = mallory.iter().filter(|token| sessions.get(token).is_some());
        assert_eq!(live.count(), MAX_SESSIONS_PER_PRINCIPAL);
        // Its newest are the ones it keeps.
        assert!(sessions.get(mallory.last().unwrap()).is_some());
    }

    #[test]
    fn failures_close_sign_in_for_a_window() {
        let sessions = Sessions::default();
        let client: IpAddr = "192.0.2.1".parse().unwrap();
        for _ in 0..MAX_FAILURES {
            assert!(sessions.may_try(client));
            sessions.failed(client);
        }
        assert!(!sessions.may_try(client));
        assert!(sessions.may_try("192.0.2.2".parse().unwrap()));
        // An IPv6 site's whole /48 is one client.
        let host: IpAddr = "2001:db8:0:1::1".parse().unwrap();
        for _ in 0..MAX_FAILURES {
            sessions.failed(host);
        }
        assert!(!sessions.may_try("2001:db8:0:ffff::2".parse().unwrap()));
        assert!(sessions.may_try("2001:db8:1::1".parse().unwrap()));
        // Every slot a live window: a new address is refused, not let in.
        for n in 0..MAX_FAILING_CLIENTS as u32 {
            sessions.failed(IpAddr::from((0x0a00_0000_u32 + n).to_be_bytes()));
        }
        assert!(!sessions.may_try("192.0.2.3".parse().unwrap()));
    }
}
