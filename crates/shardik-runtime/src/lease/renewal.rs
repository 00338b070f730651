//! The background renewal of one tenure: every `heartbeat-interval` a renewal, bounded by
//! `lease-operation-timeout` and by the holder's deadline; a refused renewal or a deadline
//! reached without a successful one loses the lease. A failed renewal (store error, timeout)
//! is retried after the interval or half the time left before the deadline, whichever is
//! shorter, so that a lease close to its deadline gets more than one more try.
//!
//! The task holds only a weak reference between renewals, so dropping every [`Lease`] handle
//! ends it.
//!
//! [`Lease`]: super::Lease

use std::sync::Weak;
use std::time::Duration;

use tokio::time::Instant;

use super::{LostReason, Shared};

pub(super) async fn run(shared: Weak<Shared>, tenure: u64, token: u64) {
    let Some(interval) = shared.upgrade().map(|s| s.settings.heartbeat_interval) else {
        return;
    };
    let mut next = Instant::now() + interval;
    loop {
        let Some(deadline) = shared.upgrade().and_then(|s| s.deadline_of(tenure)) else {
            return;
        };
        tokio::time::sleep_until(next.min(deadline)).await;
        let Some(s) = shared.upgrade() else {
            return;
        };
        // The deadline may have moved (a renewal by `acquire`) or the tenure ended meanwhile.
        let Some(deadline) = s.deadline_of(tenure) else {
            return;
        };
        if Instant::now() >= deadline {
            s.lose(tenure, token, LostReason::Expired);
            return;
        }
        let sent = Instant::now();
        let limit = (sent + s.settings.lease_operation_timeout).min(deadline);
        let renewal = s
            .store
            .renew_lease(&s.name, &s.owner, token, s.settings.heartbeat_timeout);
        match tokio::time::timeout_at(limit, renewal).await {
            Ok(Ok(true)) => {
                s.renewed(tenure, sent);
                next = sent + interval;
            }
            Ok(Ok(false)) => {
                s.lose(tenure, token, LostReason::Refused);
                return;
            }
            Ok(Err(error)) => {
                s.renewal_failed(tenure, format!("renewing: {error}"));
                next = retry(interval, deadline);
            }
            Err(_) if Instant::now() >= deadline => {
                s.lose(tenure, token, LostReason::Expired);
                return;
            }
            Err(_) => {
                s.renewal_failed(
                    tenure,
                    format!(
                        "renewing: the store did not answer within {:?}",
                        s.settings.lease_operation_timeout
                    ),
                );
                next = retry(interval, deadline);
            }
        }
    }
}

/// When to try again after a failed renewal.
fn retry(interval: Duration, deadline: Instant) -> Instant {
    let now = Instant::now();
    let half_left = deadline.saturating_duration_since(now) / 2;
    now + interval.min(half_left).max(Duration::from_millis(10))
}
