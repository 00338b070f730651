//! Contenders racing for one lease: every holder writes down when it held the lease (from the
//! moment it learnt of the grant until the moment it could count on, the send time of its last
//! successful acquire or renewal plus the time-to-live), and no two such tenures may overlap,
//! in token order.
//!
//! Times are microseconds of this machine's wall clock since the Unix epoch, so that tenures
//! recorded by several processes of one machine compare.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::lease::LeaseAcquired;
use crate::store::Store;

/// One tenure of a lease as its holder saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tenure {
    /// Who held it.
    pub owner: String,
    /// The tenure's token.
    pub token: u64,
    /// When the holder learnt it had the lease.
    pub from_us: u64,
    /// Until when the holder counted on it: the send time of its last successful acquire or
    /// renewal plus the time-to-live, or the send time of its release if earlier.
    pub until_us: u64,
}

impl fmt::Display for Tenure {
    /// `tenure OWNER TOKEN FROM UNTIL`, one line (for a child process to hand its tenures over).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "tenure {} {} {} {}",
            self.owner, self.token, self.from_us, self.until_us
        )
    }
}

impl FromStr for Tenure {
    type Err = String;

    /// Reads what [`Display`](fmt::Display) wrote.
    fn from_str(line: &str) -> Result<Self, String> {
        let parts: Vec<&str> = line.split(' ').collect();
        let number = |s: &str| s.parse::<u64>().map_err(|e| format!("{line:?}: {e}"));
        match parts[..] {
            ["tenure", owner, token, from, until] => Ok(Tenure {
                owner: owner.to_string(),
                token: number(token)?,
                from_us: number(from)?,
                until_us: number(until)?,
            }),
            _ => Err(format!("not a tenure line: {line:?}")),
        }
    }
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// A small deterministic generator (xorshift), so a contender's choices depend on its seed.
struct Choices(u64);

impl Choices {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }

    /// A duration between `lo` and `hi` fractions (in percent) of `of`.
    fn share(&mut self, of: Duration, lo: u64, hi: u64) -> Duration {
        of * (lo + self.below(hi - lo + 1)) as u32 / 100
    }
}

/// One contender: for `run_for`, takes `lease` as `owner` whenever it is free, and while
/// holding it mostly renews in time, sometimes stalls past the time-to-live before renewing
/// (a paused holder), and sometimes releases it. Returns its tenures.
pub async fn contend_for_lease<S: Store + ?Sized>(
    store: &S,
    lease: &str,
    owner: &str,
    ttl: Duration,
    run_for: Duration,
    seed: u64,
) -> Vec<Tenure> {
    let mut choices = Choices(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let ttl_us = ttl.as_micros() as u64;
    let stop = Instant::now() + run_for;
    let mut tenures = Vec::new();
    let mut held: Option<Tenure> = None;
    while Instant::now() < stop {
        let Some(tenure) = held.as_mut() else {
            let sent = now_us();
            match store.acquire_lease(lease, owner, ttl).await.unwrap() {
                LeaseAcquired::Granted(grant) => {
                    held = Some(Tenure {
                        owner: owner.to_string(),
                        token: grant.token,
                        from_us: now_us(),
                        until_us: sent + ttl_us,
                    });
                }
                LeaseAcquired::HeldByOther { .. } => {
                    tokio::time::sleep(choices.share(ttl, 5, 30)).await;
                }
            }
            continue;
        };
        let pause = match choices.below(10) {
            0 | 1 => {
                // Counted on no longer from the moment the release is sent (it may find the
                // lease already expired and taken: nothing to release then).
                tenure.until_us = tenure.until_us.min(now_us());
                store
                    .release_lease(lease, owner, tenure.token)
                    .await
                    .unwrap();
                tenures.extend(held.take());
                tokio::time::sleep(choices.share(ttl, 0, 50)).await;
                continue;
            }
            2 | 3 => choices.share(ttl, 80, 150),
            _ => choices.share(ttl, 10, 40),
        };
        tokio::time::sleep(pause).await;
        let sent = now_us();
        if store
            .renew_lease(lease, owner, tenure.token, ttl)
            .await
            .unwrap()
        {
            tenure.until_us = sent + ttl_us;
        } else {
            tenures.extend(held.take());
        }
    }
    if let Some(mut tenure) = held {
        // As for any release: counted on no longer from the moment it is sent. (Keeping the
        // last renewal's end here made a contender of another process, still racing, look
        // like a second holder for up to the time-to-live.)
        tenure.until_us = tenure.until_us.min(now_us());
        let _ = store.release_lease(lease, owner, tenure.token).await;
        tenures.push(tenure);
    }
    tenures
}

/// Runs `per_store` contenders on each of `stores` at once (tasks of the current runtime,
/// owners `"{prefix}-{store}-{n}"`) and returns all their tenures.
pub async fn race_for_lease(
    stores: &[Arc<dyn Store>],
    lease: &str,
    prefix: &str,
    per_store: usize,
    ttl: Duration,
    run_for: Duration,
) -> Vec<Tenure> {
    let mut tasks = Vec::new();
    for (s, store) in stores.iter().enumerate() {
        for n in 0..per_store {
            let (store, lease) = (Arc::clone(store), lease.to_string());
            let owner = format!("{prefix}-{s}-{n}");
            let seed = (s * per_store + n + 1) as u64;
            tasks.push(tokio::spawn(async move {
                contend_for_lease(&*store, &lease, &owner, ttl, run_for, seed).await
            }));
        }
    }
    let mut tenures = Vec::new();
    for task in tasks {
        tenures.extend(task.await.expect("a contender panicked"));
    }
    tenures
}

/// Asserts that `tenures` never overlap: in token order, each ends before the next begins
/// (so tokens also grow with time), and no token was granted twice. Also asserts the race
/// was a race: at least `min_handovers` changes of owner. Returns the number of changes of
/// owner.
pub fn check_tenures(tenures: &[Tenure], min_handovers: usize) -> usize {
    let mut sorted = tenures.to_vec();
    sorted.sort_by_key(|t| t.token);
    let tokens: BTreeSet<u64> = sorted.iter().map(|t| t.token).collect();
    assert_eq!(
        tokens.len(),
        sorted.len(),
        "a token granted twice: {sorted:#?}"
    );
    for (i, earlier) in sorted.iter().enumerate() {
        // A tenure whose grant arrived after it could count on it held nothing.
        if earlier.until_us <= earlier.from_us {
            continue;
        }
        for later in &sorted[i + 1..] {
            assert!(
                earlier.until_us <= later.from_us,
                "two holders at once: {earlier} overlaps {later} by {} µs",
                earlier.until_us - later.from_us
            );
        }
    }
    let handovers = sorted
        .windows(2)
        .filter(|w| w[0].owner != w[1].owner)
        .count();
    assert!(
        handovers >= min_handovers,
        "only {handovers} handovers in {} tenures; the race did not race",
        sorted.len()
    );
    handovers
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenure(owner: &str, token: u64, from_us: u64, until_us: u64) -> Tenure {
        Tenure {
            owner: owner.into(),
            token,
            from_us,
            until_us,
        }
    }

    #[test]
    fn tenures_in_token_order_without_overlap_pass() {
        let ok = [
            tenure("a", 1, 0, 100),
            tenure("b", 2, 100, 250),
            // Its grant came after its end: it held nothing, and overlaps nothing.
            tenure("c", 3, 300, 200),
            tenure("a", 4, 260, 400),
        ];
        assert_eq!(check_tenures(&ok, 3), 3);
    }

    #[test]
    #[should_panic(expected = "two holders at once")]
    fn overlapping_tenures_fail() {
        check_tenures(&[tenure("a", 1, 0, 101), tenure("b", 2, 100, 200)], 0);
    }

    #[test]
    #[should_panic(expected = "two holders at once")]
    fn a_newer_token_held_before_an_older_one_fails() {
        check_tenures(&[tenure("a", 1, 200, 300), tenure("b", 2, 0, 100)], 0);
    }

    #[test]
    #[should_panic(expected = "a token granted twice")]
    fn a_token_granted_twice_fails() {
        check_tenures(&[tenure("a", 1, 0, 100), tenure("b", 1, 200, 300)], 0);
    }

    #[test]
    #[should_panic(expected = "did not race")]
    fn a_race_without_handovers_fails() {
        check_tenures(&[tenure("a", 1, 0, 100), tenure("a", 2, 200, 300)], 1);
    }

    #[test]
    fn tenure_lines_round_trip() {
        let t = tenure("node-1", 7, 10, 20);
        assert_eq!(t.to_string().parse::<Tenure>(), Ok(t));
        assert!("tenure x 1 2".parse::<Tenure>().is_err());
    }
}
