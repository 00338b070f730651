//! The holder's side of leases, I/O free: when to acquire, renew and release a lease, until
//! when a held lease may be counted on, and what a late or lost answer means (Akka's `Lease`).
//! One keeper type serves every lease a node holds: sharding's shard and coordinator leases
//! (`use-lease`, inside the region and the kind node) and the split-brain resolver's
//! lease-majority lease (`membership/node/sbr_lease.rs`).
//!
//! The store that keeps the leases (and judges expiry by its own clock) is the driver's
//! business: a [`LeaseKeeper`] emits [`LeaseRequest`]s and hears their [`LeaseAnswer`]s. What
//! it decides is the timing:
//!
//! * a lease is counted on only until its *deadline*: the instant the request that granted or
//!   last renewed it was **sent**, plus the time-to-live, minus the operation timeout. The
//!   store counts the same time-to-live from the moment it **handled** the request, which is
//!   later, so the holder always gives up first and nobody else can take the lease while the
//!   holder still uses it;
//! * renewals go out every `renew_interval`; a failed one (an error, or no answer within the
//!   operation timeout) is tried again after the interval or half the time left, whichever is
//!   shorter; a refused one, or a deadline reached without a renewal, loses the lease;
//! * an acquisition that fails (held by another owner, an error, no answer in time) is tried
//!   again after `retry_interval` (the reference's `lease-retry-interval`), unless its user
//!   gives the lease up ([`LeaseKeeper::give_up`]), as the split-brain resolver's holder does;
//! * an answer to a request the keeper no longer waits for is ignored, except a grant, which is
//!   given back at once (nobody here wants it, and it would block others until it expires).
//!
//! Keys are whatever the user of the keeper leases: shards in a region, the coordinator, or
//! `()` for a single lease.

pub mod witness;

use std::collections::BTreeMap;
use std::time::Duration;

use crate::Instant;

pub use witness::{Lapse, StoreLease, owner_name};

/// The timing of leases (`[coordination.lease]` and `lease-retry-interval`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LeaseTiming {
    /// How long a grant or renewal lasts in the store (`heartbeat-timeout`).
    pub ttl: Duration,
    /// How often a held lease is renewed (`heartbeat-interval`), less than `ttl`.
    pub renew_interval: Duration,
    /// How long one store call may take before it counts as failed
    /// (`lease-operation-timeout`); also the safety margin subtracted from the deadline.
    pub operation_timeout: Duration,
    /// How long to wait before trying again to acquire a lease that was not granted
    /// (`lease-retry-interval`).
    pub retry_interval: Duration,
}

impl Default for LeaseTiming {
    /// The reference's defaults: 120 s, 12 s, 5 s, 5 s.
    fn default() -> Self {
        LeaseTiming {
            ttl: Duration::from_secs(120),
            renew_interval: Duration::from_secs(12),
            operation_timeout: Duration::from_secs(5),
            retry_interval: Duration::from_secs(5),
        }
    }
}

impl LeaseTiming {
    /// The deadline of a grant or renewal whose request was sent at `sent`.
    fn deadline_after(&self, sent: Instant) -> Instant {
        sent + self.ttl.saturating_sub(self.operation_timeout)
    }
}

/// A store call the driver must make, then report with [`LeaseKeeper::answer`] (quoting `id`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseRequest<K> {
    /// What is leased.
    pub key: K,
    /// Quoted back in the answer; unique per keeper.
    pub id: u64,
    /// The call.
    pub call: LeaseCall,
}

/// One call to the store's leases.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum LeaseCall {
    /// Take the lease (free, expired, or already ours) for the time-to-live.
    Acquire,
    /// Extend our tenure with this token by the time-to-live.
    Renew {
        /// The tenure's token.
        token: u64,
    },
    /// Give the tenure with this token up. Fire and forget: no answer is expected.
    Release {
        /// The tenure's token.
        token: u64,
    },
}

/// The store's answer to an acquisition or renewal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseAnswer {
    /// Acquired, with the tenure's fencing token.
    Granted {
        /// The token.
        token: u64,
    },
    /// Another owner holds the lease.
    HeldByOther,
    /// The renewal succeeded.
    Renewed,
    /// The renewal was refused: the lease is no longer ours.
    Refused,
    /// The call failed (the store is unreachable, or answered with an error, or not in time).
    Failed(String),
}

/// What an answer or a timeout changed, for the keeper's user to act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseEvent<K> {
    /// The lease of `key` is held with `token`: what runs under it may start.
    Acquired {
        /// What is leased.
        key: K,
        /// The tenure's token.
        token: u64,
    },
    /// The lease of `key` is no longer held: what runs under it must stop now.
    Lost {
        /// What was leased.
        key: K,
        /// The lost tenure's token. Comparing it with the next grant's tells whether another
        /// owner held the lease in between (the store raises the token on every change of hands).
        token: u64,
        /// Why.
        reason: LeaseLoss,
    },
    /// Renewing `key`'s held lease failed (the first failure since it last succeeded); the
    /// lease is kept until its deadline, and renewals go on.
    RenewalFailing {
        /// What is leased.
        key: K,
        /// What went wrong.
        error: String,
    },
    /// A renewal of `key` succeeded again after [`LeaseEvent::RenewalFailing`].
    RenewalRecovered {
        /// What is leased.
        key: K,
    },
    /// An acquisition of `key` failed for a reason other than another holder; it is tried
    /// again after the retry interval.
    Unavailable {
        /// What is wanted.
        key: K,
        /// What went wrong.
        error: String,
    },
}

/// Why a held lease was lost.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum LeaseLoss {
    /// The store refused a renewal: someone else has it, or it was released behind our back.
    Refused,
    /// No renewal succeeded before the deadline.
    Expired,
}

impl LeaseLoss {
    /// A label for metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            LeaseLoss::Refused => "refused",
            LeaseLoss::Expired => "expired",
        }
    }
}

/// Where one key's lease stands.
#[derive(Clone, Debug)]
enum Tenure {
    /// An acquisition is out.
    Acquiring { id: u64, sent: Instant },
    /// Not held; the next acquisition goes out at `at`.
    Retrying { at: Instant },
    /// Held until `deadline`, unless renewed.
    Held {
        token: u64,
        deadline: Instant,
        /// When the next renewal goes out (none while one is out).
        next_renewal: Instant,
        /// The renewal that is out: its id and when it was sent.
        renewing: Option<(u64, Instant)>,
        /// Whether the last renewal failed.
        failing: bool,
    },
}

/// The leases one component holds or wants, by key.
#[derive(Debug)]
pub struct LeaseKeeper<K> {
    timing: LeaseTiming,
    tenures: BTreeMap<K, Tenure>,
    /// The last token released per key. The release is fire and forget and may reach the
    /// store after a later acquisition of the same key: the store answers that acquisition
    /// with the tenure it still holds for us (the same token), then frees it. A grant of a
    /// released token is therefore never counted on (see [`answer`](Self::answer)).
    released: BTreeMap<K, u64>,
    next_id: u64,
}

impl<K: Ord + Clone> LeaseKeeper<K> {
    /// A keeper holding nothing.
    pub fn new(timing: LeaseTiming) -> Self {
        LeaseKeeper {
            timing,
            tenures: BTreeMap::new(),
            released: BTreeMap::new(),
            next_id: 1,
        }
    }

    /// The timing it follows.
    pub fn timing(&self) -> &LeaseTiming {
        &self.timing
    }

    /// The token of `key`'s lease if it is held and may be counted on at `now`.
    pub fn held(&self, now: Instant, key: &K) -> Option<u64> {
        match self.tenures.get(key) {
            Some(Tenure::Held {
                token, deadline, ..
            }) if now < *deadline => Some(*token),
            _ => None,
        }
    }

    /// The deadline of `key`'s held lease (for checkers: until when this holder may act).
    pub fn deadline(&self, key: &K) -> Option<Instant> {
        match self.tenures.get(key) {
            Some(Tenure::Held { deadline, .. }) => Some(*deadline),
            _ => None,
        }
    }

    /// Whether `key`'s lease is wanted (held, being acquired, or waiting to be tried again).
    pub fn wants(&self, key: &K) -> bool {
        self.tenures.contains_key(key)
    }

    /// Wants `key`'s lease: an acquisition goes out now unless one is out, waiting, or the
    /// lease is held.
    pub fn want(&mut self, now: Instant, key: K, out: &mut Vec<LeaseRequest<K>>) {
        if !self.tenures.contains_key(&key) {
            self.acquire(now, key, out);
        }
    }

    /// No longer wants `key`'s lease: a held one is released; an acquisition that is out is
    /// abandoned (a grant arriving later is given back).
    pub fn give_up(&mut self, key: &K, out: &mut Vec<LeaseRequest<K>>) {
        if let Some(Tenure::Held { token, .. }) = self.tenures.remove(key) {
            self.released.insert(key.clone(), token);
            let id = self.id();
            out.push(LeaseRequest {
                key: key.clone(),
                id,
                call: LeaseCall::Release { token },
            });
        }
    }

    fn acquire(&mut self, now: Instant, key: K, out: &mut Vec<LeaseRequest<K>>) {
        let id = self.id();
        self.tenures
            .insert(key.clone(), Tenure::Acquiring { id, sent: now });
        out.push(LeaseRequest {
            key,
            id,
            call: LeaseCall::Acquire,
        });
    }

    fn id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// The store answered request `id` about `key`. Returns what changed.
    pub fn answer(
        &mut self,
        now: Instant,
        key: &K,
        id: u64,
        answer: LeaseAnswer,
        out: &mut Vec<LeaseRequest<K>>,
    ) -> Option<LeaseEvent<K>> {
        let timing = self.timing;
        match self.tenures.get_mut(key) {
            Some(Tenure::Acquiring { id: out_id, sent }) if *out_id == id => {
                let sent = *sent;
                match answer {
                    // The tenure this keeper released: its release may still be on the way
                    // and free the lease behind our back (a release and an acquisition of one
                    // key run concurrently). Not counted on: released again and tried again
                    // after the retry interval, by when a release has landed and a grant is
                    // a new tenure. Released again, because the first release may have been
                    // lost (the store cut off), and this grant renewed the old tenure: tried
                    // again and again without a release, it would never end.
                    LeaseAnswer::Granted { token } if self.released.get(key) == Some(&token) => {
                        self.tenures.insert(
                            key.clone(),
                            Tenure::Retrying {
                                at: now + timing.retry_interval,
                            },
                        );
                        let id = self.id();
                        out.push(LeaseRequest {
                            key: key.clone(),
                            id,
                            call: LeaseCall::Release { token },
                        });
                        None
                    }
                    LeaseAnswer::Granted { token } => {
                        self.released.remove(key);
                        let deadline = timing.deadline_after(sent);
                        if deadline <= now {
                            // Granted, but too late to count on: try again later.
                            self.tenures.insert(
                                key.clone(),
                                Tenure::Retrying {
                                    at: now + timing.retry_interval,
                                },
                            );
                            return Some(LeaseEvent::Unavailable {
                                key: key.clone(),
                                error: "the lease was granted too late to be used".into(),
                            });
                        }
                        self.tenures.insert(
                            key.clone(),
                            Tenure::Held {
                                token,
                                deadline,
                                next_renewal: sent + timing.renew_interval,
                                renewing: None,
                                failing: false,
                            },
                        );
                        Some(LeaseEvent::Acquired {
                            key: key.clone(),
                            token,
                        })
                    }
                    LeaseAnswer::HeldByOther | LeaseAnswer::Renewed | LeaseAnswer::Refused => {
                        self.tenures.insert(
                            key.clone(),
                            Tenure::Retrying {
                                at: now + timing.retry_interval,
                            },
                        );
                        None
                    }
                    LeaseAnswer::Failed(error) => {
                        self.tenures.insert(
                            key.clone(),
                            Tenure::Retrying {
                                at: now + timing.retry_interval,
                            },
                        );
                        Some(LeaseEvent::Unavailable {
                            key: key.clone(),
                            error,
                        })
                    }
                }
            }
            Some(Tenure::Held {
                token,
                deadline,
                next_renewal,
                renewing,
                failing,
            }) if renewing.is_some_and(|(r, _)| r == id) => {
                let (_, sent) = renewing.take().expect("checked");
                match answer {
                    LeaseAnswer::Renewed | LeaseAnswer::Granted { .. } => {
                        *deadline = (*deadline).max(timing.deadline_after(sent));
                        *next_renewal = sent + timing.renew_interval;
                        std::mem::take(failing)
                            .then(|| LeaseEvent::RenewalRecovered { key: key.clone() })
                    }
                    LeaseAnswer::Refused | LeaseAnswer::HeldByOther => {
                        let token = *token;
                        self.tenures.remove(key);
                        Some(LeaseEvent::Lost {
                            key: key.clone(),
                            token,
                            reason: LeaseLoss::Refused,
                        })
                    }
                    LeaseAnswer::Failed(error) => {
                        *next_renewal = retry_after_failure(&timing, now, *deadline);
                        (!std::mem::replace(failing, true)).then(|| LeaseEvent::RenewalFailing {
                            key: key.clone(),
                            error,
                        })
                    }
                }
            }
            _ => {
                // Nobody waits for this answer. A grant would keep everyone else out until it
                // expires: give it back.
                if let LeaseAnswer::Granted { token } = answer {
                    let held_now = self.held(now, key) == Some(token);
                    if !held_now {
                        self.released.insert(key.clone(), token);
                        let id = self.id();
                        out.push(LeaseRequest {
                            key: key.clone(),
                            id,
                            call: LeaseCall::Release { token },
                        });
                    }
                }
                None
            }
        }
    }

    /// The next instant [`handle_timeout`](Self::handle_timeout) has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.tenures
            .values()
            .map(|t| match t {
                Tenure::Acquiring { sent, .. } => *sent + self.timing.operation_timeout,
                Tenure::Retrying { at } => *at,
                Tenure::Held {
                    deadline,
                    next_renewal,
                    renewing,
                    ..
                } => {
                    let renewal = match renewing {
                        Some((_, sent)) => *sent + self.timing.operation_timeout,
                        None => *next_renewal,
                    };
                    renewal.min(*deadline)
                }
            })
            .min()
    }

    /// Runs what is due at `now`: renewals, retries, calls that took too long, deadlines.
    /// Returns what changed, in key order.
    pub fn handle_timeout(
        &mut self,
        now: Instant,
        out: &mut Vec<LeaseRequest<K>>,
    ) -> Vec<LeaseEvent<K>> {
        let timing = self.timing;
        let mut events = Vec::new();
        let mut acquire = Vec::new();
        let mut lost = Vec::new();
        let mut renew = Vec::new();
        for (key, tenure) in self.tenures.iter_mut() {
            match tenure {
                Tenure::Acquiring { sent, .. } if *sent + timing.operation_timeout <= now => {
                    *tenure = Tenure::Retrying {
                        at: now + timing.retry_interval,
                    };
                    events.push(LeaseEvent::Unavailable {
                        key: key.clone(),
                        error: format!(
                            "the store did not answer an acquisition within {:?}",
                            timing.operation_timeout
                        ),
                    });
                }
                Tenure::Retrying { at } if *at <= now => acquire.push(key.clone()),
                Tenure::Held {
                    token, deadline, ..
                } if *deadline <= now => lost.push((key.clone(), *token)),
                Tenure::Held {
                    token,
                    deadline,
                    next_renewal,
                    renewing,
                    failing,
                } => match renewing {
                    Some((_, sent)) if *sent + timing.operation_timeout <= now => {
                        *renewing = None;
                        *next_renewal = retry_after_failure(&timing, now, *deadline);
                        if !std::mem::replace(failing, true) {
                            events.push(LeaseEvent::RenewalFailing {
                                key: key.clone(),
                                error: format!(
                                    "the store did not answer a renewal within {:?}",
                                    timing.operation_timeout
                                ),
                            });
                        }
                    }
                    None if *next_renewal <= now => renew.push((key.clone(), *token)),
                    _ => {}
                },
                _ => {}
            }
        }
        for (key, token) in lost {
            self.tenures.remove(&key);
            events.push(LeaseEvent::Lost {
                key,
                token,
                reason: LeaseLoss::Expired,
            });
        }
        for (key, token) in renew {
            let id = self.id();
            if let Some(Tenure::Held { renewing, .. }) = self.tenures.get_mut(&key) {
                *renewing = Some((id, now));
            }
            out.push(LeaseRequest {
                key,
                id,
                call: LeaseCall::Renew { token },
            });
        }
        for key in acquire {
            self.acquire(now, key, out);
        }
        events
    }

    /// Checks `key`'s deadline at `now` before something runs under the lease: a held lease
    /// past its deadline is lost here (the timeout may not have run yet, e.g. after a pause).
    pub fn expire_if_due(&mut self, now: Instant, key: &K) -> Option<LeaseEvent<K>> {
        match self.tenures.get(key) {
            Some(Tenure::Held {
                token, deadline, ..
            }) if *deadline <= now => {
                let token = *token;
                self.tenures.remove(key);
                Some(LeaseEvent::Lost {
                    key: key.clone(),
                    token,
                    reason: LeaseLoss::Expired,
                })
            }
            _ => None,
        }
    }

    /// After a loss: forgets the tenure without releasing it (what ran under it has stopped)
    /// and acquires again at once.
    pub fn acquire_again(&mut self, now: Instant, key: K, out: &mut Vec<LeaseRequest<K>>) {
        self.tenures.remove(&key);
        self.acquire(now, key, out);
    }

    /// Every key whose lease is held, with its token (in key order).
    pub fn held_keys(&self) -> impl Iterator<Item = (&K, u64)> {
        self.tenures.iter().filter_map(|(k, t)| match t {
            Tenure::Held { token, .. } => Some((k, *token)),
            _ => None,
        })
    }

    /// Gives every lease up (the owner stops): releases for the held ones.
    pub fn give_up_all(&mut self, out: &mut Vec<LeaseRequest<K>>) {
        let keys: Vec<K> = self.tenures.keys().cloned().collect();
        for key in keys {
            self.give_up(&key, out);
        }
    }
}

/// When to renew again after a failed renewal: after the interval or half the time left,
/// whichever is sooner (at least 10 ms on), so a lease close to its deadline gets more tries.
fn retry_after_failure(timing: &LeaseTiming, now: Instant, deadline: Instant) -> Instant {
    let half_left = deadline.saturating_duration_since(now) / 2;
    now + timing
        .renew_interval
        .min(half_left)
        .max(Duration::from_millis(10))
}

#[cfg(test)]
mod tests;
