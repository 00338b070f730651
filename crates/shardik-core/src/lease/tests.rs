use std::time::Duration;

use super::*;

fn timing() -> LeaseTiming {
    LeaseTiming {
        ttl: Duration::from_secs(10),
        renew_interval: Duration::from_secs(2),
        operation_timeout: Duration::from_secs(1),
        retry_interval: Duration::from_secs(3),
    }
}

fn at(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

/// The one request in `out`, taken out.
fn only(out: &mut Vec<LeaseRequest<&'static str>>) -> LeaseRequest<&'static str> {
    assert_eq!(out.len(), 1, "{out:?}");
    out.pop().unwrap()
}

#[test]
fn a_grant_counts_from_the_request_minus_the_operation_timeout() {
    let mut k = LeaseKeeper::new(timing());
    let mut out = Vec::new();
    k.want(at(1_000), "s", &mut out);
    let req = only(&mut out);
    assert_eq!(req.call, LeaseCall::Acquire);
    assert_eq!(k.held(at(1_000), &"s"), None, "not held before the answer");
    // Answered half a second later: the deadline still counts from the request.
    let ev = k.answer(
        at(1_500),
        &"s",
        req.id,
        LeaseAnswer::Granted { token: 7 },
        &mut out,
    );
    assert_eq!(ev, Some(LeaseEvent::Acquired { key: "s", token: 7 }));
    assert_eq!(k.held(at(1_500), &"s"), Some(7));
    assert_eq!(k.deadline(&"s"), Some(at(10_000)));
    assert_eq!(k.held(at(10_000), &"s"), None, "not at the deadline itself");
    // Wanting it again changes nothing.
    k.want(at(2_000), "s", &mut out);
    assert!(out.is_empty());
}

#[test]
fn renewals_move_the_deadline_and_a_refusal_loses_the_lease() {
    let mut k = LeaseKeeper::new(timing());
    let mut out = Vec::new();
    k.want(at(0), "s", &mut out);
    let id = only(&mut out).id;
    k.answer(
        at(10),
        &"s",
        id,
        LeaseAnswer::Granted { token: 3 },
        &mut out,
    );
    assert_eq!(k.poll_timeout(), Some(at(2_000)), "first renewal");
    assert!(k.handle_timeout(at(2_000), &mut out).is_empty());
    let renew = only(&mut out);
    assert_eq!(renew.call, LeaseCall::Renew { token: 3 });
    assert!(
        k.answer(at(2_100), &"s", renew.id, LeaseAnswer::Renewed, &mut out)
            .is_none()
    );
    assert_eq!(k.deadline(&"s"), Some(at(11_000)));
    k.handle_timeout(at(4_000), &mut out);
    let renew = only(&mut out);
    let ev = k.answer(at(4_050), &"s", renew.id, LeaseAnswer::Refused, &mut out);
    assert_eq!(
        ev,
        Some(LeaseEvent::Lost {
            key: "s",
            token: 3,
            reason: LeaseLoss::Refused
        })
    );
    assert_eq!(k.held(at(4_050), &"s"), None);
    assert!(!k.wants(&"s"));
}

#[test]
fn failed_renewals_retry_sooner_and_the_deadline_loses_the_lease() {
    let mut k = LeaseKeeper::new(timing());
    let mut out = Vec::new();
    k.want(at(0), "s", &mut out);
    let id = only(&mut out).id;
    k.answer(at(0), &"s", id, LeaseAnswer::Granted { token: 1 }, &mut out);
    // Deadline 9 s. Renewal at 2 s fails, retried after min(2 s, half of 7 s) = 2 s.
    k.handle_timeout(at(2_000), &mut out);
    let r = only(&mut out);
    k.answer(
        at(2_000),
        &"s",
        r.id,
        LeaseAnswer::Failed("down".into()),
        &mut out,
    );
    assert_eq!(k.poll_timeout(), Some(at(4_000)));
    // The next one is never answered: after the operation timeout it counts as failed.
    k.handle_timeout(at(4_000), &mut out);
    let r = only(&mut out);
    assert_eq!(k.poll_timeout(), Some(at(5_000)));
    assert!(
        k.handle_timeout(at(5_000), &mut out).is_empty(),
        "still failing: reported once"
    );
    assert!(out.is_empty());
    // Retried after min(2 s, half of 4 s) = 2 s.
    assert_eq!(k.poll_timeout(), Some(at(7_000)));
    // Its late answer is ignored.
    assert!(
        k.answer(at(6_000), &"s", r.id, LeaseAnswer::Renewed, &mut out)
            .is_none()
    );
    assert_eq!(
        k.deadline(&"s"),
        Some(at(9_000)),
        "a late renewal does not count"
    );
    k.handle_timeout(at(7_000), &mut out);
    out.clear();
    assert_eq!(k.poll_timeout(), Some(at(8_000)));
    k.handle_timeout(at(8_000), &mut out);
    assert_eq!(k.poll_timeout(), Some(at(8_500)), "half the time left");
    k.handle_timeout(at(8_500), &mut out);
    let r = only(&mut out);
    // A success now would recover it (reported), but this one comes too late.
    assert!(k.held(at(8_900), &"s").is_some());
    let _ = r;
    let evs = k.handle_timeout(at(9_000), &mut out);
    assert_eq!(
        evs,
        vec![LeaseEvent::Lost {
            key: "s",
            token: 1,
            reason: LeaseLoss::Expired
        }]
    );
}

#[test]
fn an_unavailable_or_taken_lease_is_tried_again_after_the_retry_interval() {
    let mut k = LeaseKeeper::new(timing());
    let mut out = Vec::new();
    k.want(at(0), "s", &mut out);
    let id = only(&mut out).id;
    assert!(
        k.answer(at(5), &"s", id, LeaseAnswer::HeldByOther, &mut out)
            .is_none()
    );
    assert_eq!(k.poll_timeout(), Some(at(3_005)));
    k.handle_timeout(at(3_005), &mut out);
    let id = only(&mut out).id;
    let ev = k.answer(
        at(3_010),
        &"s",
        id,
        LeaseAnswer::Failed("refused".into()),
        &mut out,
    );
    assert_eq!(
        ev,
        Some(LeaseEvent::Unavailable {
            key: "s",
            error: "refused".into()
        })
    );
    k.handle_timeout(at(6_010), &mut out);
    only(&mut out);
    // Not answered within the operation timeout: unavailable, and tried again later.
    let evs = k.handle_timeout(at(7_010), &mut out);
    assert!(matches!(evs[..], [LeaseEvent::Unavailable { .. }]));
    assert_eq!(k.poll_timeout(), Some(at(10_010)));
}

#[test]
fn a_grant_nobody_waits_for_is_given_back() {
    let mut k = LeaseKeeper::new(timing());
    let mut out = Vec::new();
    k.want(at(0), "s", &mut out);
    let id = only(&mut out).id;
    k.give_up(&"s", &mut out);
    assert!(out.is_empty(), "nothing held, nothing to release");
    assert!(
        k.answer(
            at(10),
            &"s",
            id,
            LeaseAnswer::Granted { token: 4 },
            &mut out
        )
        .is_none()
    );
    assert_eq!(only(&mut out).call, LeaseCall::Release { token: 4 });
    // A grant that arrives after the operation timeout is given back too.
    k.want(at(20), "t", &mut out);
    let id = only(&mut out).id;
    k.handle_timeout(at(1_020), &mut out);
    k.answer(
        at(1_100),
        &"t",
        id,
        LeaseAnswer::Granted { token: 9 },
        &mut out,
    );
    assert_eq!(only(&mut out).call, LeaseCall::Release { token: 9 });
    assert_eq!(k.held(at(1_100), &"t"), None);
}

#[test]
fn a_grant_too_late_to_use_is_not_counted_on() {
    let mut k = LeaseKeeper::new(timing());
    let mut out = Vec::new();
    k.want(at(0), "s", &mut out);
    let id = only(&mut out).id;
    // The driver's own timeout did not run (a pause), and the grant comes at 9.5 s.
    let ev = k.answer(
        at(9_500),
        &"s",
        id,
        LeaseAnswer::Granted { token: 2 },
        &mut out,
    );
    assert!(matches!(ev, Some(LeaseEvent::Unavailable { .. })));
    assert_eq!(k.held(at(9_500), &"s"), None);
}

#[test]
fn a_deadline_passed_during_a_pause_is_caught_before_use() {
    let mut k = LeaseKeeper::new(timing());
    let mut out = Vec::new();
    k.want(at(0), "s", &mut out);
    let id = only(&mut out).id;
    k.answer(at(0), &"s", id, LeaseAnswer::Granted { token: 5 }, &mut out);
    assert!(k.expire_if_due(at(8_999), &"s").is_none());
    assert_eq!(
        k.expire_if_due(at(9_000), &"s"),
        Some(LeaseEvent::Lost {
            key: "s",
            token: 5,
            reason: LeaseLoss::Expired
        })
    );
    k.acquire_again(at(9_000), "s", &mut out);
    assert_eq!(only(&mut out).call, LeaseCall::Acquire);
}

/// A release and the next acquisition of one key run concurrently: the store may take the
/// acquisition first, answer it with the tenure it still holds for us (the same token), then
/// apply the release. That grant is never counted on; the next one, a new tenure, is.
/// (Simulator: a shard handed off and given back to the same node, seed 4296 of a store-cut
/// sweep, where another node then took the freed lease while this one ran the shard.)
#[test]
fn a_grant_of_the_tenure_just_released_is_not_counted_on() {
    let mut k = LeaseKeeper::new(timing());
    let mut out = Vec::new();
    k.want(at(0), "s", &mut out);
    let req = only(&mut out);
    k.answer(
        at(10),
        &"s",
        req.id,
        LeaseAnswer::Granted { token: 5 },
        &mut out,
    );
    k.give_up(&"s", &mut out);
    assert_eq!(only(&mut out).call, LeaseCall::Release { token: 5 });
    k.want(at(20), "s", &mut out);
    let req = only(&mut out);
    assert_eq!(req.call, LeaseCall::Acquire);
    // Answered before the release landed: the same tenure.
    let ev = k.answer(
        at(30),
        &"s",
        req.id,
        LeaseAnswer::Granted { token: 5 },
        &mut out,
    );
    assert_eq!(ev, None);
    assert_eq!(
        k.held(at(30), &"s"),
        None,
        "counted on a tenure it released"
    );
    assert!(k.wants(&"s"), "still wanted");
    assert_eq!(
        only(&mut out).call,
        LeaseCall::Release { token: 5 },
        "released again, in case the first release was lost"
    );
    // Tried again after the retry interval: the release has landed, a new tenure.
    let retry = k.poll_timeout().expect("a retry");
    assert_eq!(retry, at(30) + timing().retry_interval);
    let _ = k.handle_timeout(retry, &mut out);
    let req = only(&mut out);
    assert_eq!(req.call, LeaseCall::Acquire);
    let ev = k.answer(
        retry,
        &"s",
        req.id,
        LeaseAnswer::Granted { token: 6 },
        &mut out,
    );
    assert_eq!(ev, Some(LeaseEvent::Acquired { key: "s", token: 6 }));
}

/// A release lost on the way (the store cut off) leaves the tenure in the store, and the next
/// acquisition renews it: the keeper releases it again each time it is granted it, until an
/// acquisition finds a new tenure. (Simulator: the stand-in branch's store-cut seed 2284,
/// where the oldest node's coordinator never started again, its retries keeping the released
/// tenure alive and every other node out.)
#[test]
fn a_released_tenure_granted_again_is_released_again_until_a_new_one_comes() {
    let mut k = LeaseKeeper::new(timing());
    let mut out = Vec::new();
    k.want(at(0), "s", &mut out);
    let req = only(&mut out);
    k.answer(
        at(10),
        &"s",
        req.id,
        LeaseAnswer::Granted { token: 5 },
        &mut out,
    );
    k.give_up(&"s", &mut out);
    assert_eq!(only(&mut out).call, LeaseCall::Release { token: 5 });
    // That release is lost.
    k.want(at(20), "s", &mut out);
    let mut now = at(20);
    let mut req = only(&mut out);
    for _ in 0..2 {
        // The store still holds tenure 5 for us and renews it.
        let ev = k.answer(
            now,
            &"s",
            req.id,
            LeaseAnswer::Granted { token: 5 },
            &mut out,
        );
        assert_eq!(ev, None);
        assert_eq!(only(&mut out).call, LeaseCall::Release { token: 5 });
        now = k.poll_timeout().expect("a retry");
        let _ = k.handle_timeout(now, &mut out);
        req = only(&mut out);
        assert_eq!(req.call, LeaseCall::Acquire);
    }
    // A release landed: the next grant is a new tenure, counted on.
    let ev = k.answer(
        now,
        &"s",
        req.id,
        LeaseAnswer::Granted { token: 6 },
        &mut out,
    );
    assert_eq!(ev, Some(LeaseEvent::Acquired { key: "s", token: 6 }));
    assert_eq!(k.held(now, &"s"), Some(6));
    assert!(out.is_empty());
}

#[test]
fn giving_up_releases_what_is_held() {
    let mut k = LeaseKeeper::new(timing());
    let mut out = Vec::new();
    k.want(at(0), "a", &mut out);
    k.want(at(0), "b", &mut out);
    let reqs = std::mem::take(&mut out);
    k.answer(
        at(1),
        &"a",
        reqs[0].id,
        LeaseAnswer::Granted { token: 1 },
        &mut out,
    );
    k.give_up_all(&mut out);
    assert_eq!(only(&mut out).call, LeaseCall::Release { token: 1 });
    assert_eq!(k.poll_timeout(), None);
}

#[test]
fn a_renewal_that_succeeds_again_after_failures_is_reported_once() {
    let mut k = LeaseKeeper::new(timing());
    let mut out = Vec::new();
    k.want(at(0), "s", &mut out);
    let id = only(&mut out).id;
    k.answer(at(0), &"s", id, LeaseAnswer::Granted { token: 1 }, &mut out);
    k.handle_timeout(at(2_000), &mut out);
    let r = only(&mut out);
    assert!(matches!(
        k.answer(
            at(2_000),
            &"s",
            r.id,
            LeaseAnswer::Failed("x".into()),
            &mut out
        ),
        Some(LeaseEvent::RenewalFailing { .. })
    ));
    k.handle_timeout(at(4_000), &mut out);
    let r = only(&mut out);
    assert_eq!(
        k.answer(at(4_010), &"s", r.id, LeaseAnswer::Renewed, &mut out),
        Some(LeaseEvent::RenewalRecovered { key: "s" })
    );
    assert_eq!(k.deadline(&"s"), Some(at(13_000)));
    k.handle_timeout(at(6_000), &mut out);
    let r = only(&mut out);
    assert_eq!(
        k.answer(at(6_010), &"s", r.id, LeaseAnswer::Renewed, &mut out),
        None
    );
}
