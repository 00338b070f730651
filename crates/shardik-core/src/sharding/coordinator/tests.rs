//! The coordinator on its own, fed messages by hand.

use std::collections::BTreeSet;
use std::time::Duration;

use super::*;
use crate::membership::{Member, MemberStatus};
use crate::sharding::LeastShardAllocationStrategy;
use crate::sharding::testkit::node;

mod kind_not_started;

fn up(i: u16, up_number: u32) -> Member {
    let mut m = Member::joining(node(i), BTreeSet::new(), "1.0");
    m.status = MemberStatus::Up;
    m.up_number = up_number;
    m
}

fn view(members: Vec<Member>) -> ShardingView {
    let mut v = ShardingView::new(node(1), None, Duration::from_secs(5));
    v.update(Instant::ZERO, members, BTreeSet::new());
    v
}

fn coordinator() -> Coordinator<LeastShardAllocationStrategy> {
    Coordinator::new(
        node(1),
        CoordinatorSettings::default(),
        LeastShardAllocationStrategy::new(20, 0.1),
        Instant::ZERO,
    )
}

fn register(hosted: &[&str]) -> Protocol {
    Protocol::Register {
        hosted: hosted.iter().map(|s| ShardId::from(*s)).collect(),
        proxy: false,
    }
}

fn sent_to(out: &[CoordinatorEffect], to: &UniqueAddress) -> Vec<Protocol> {
    out.iter()
        .filter_map(|e| match e {
            CoordinatorEffect::Send { to: t, msg } if t == to => Some(msg.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn registrations_rebuild_the_table_and_unknown_shards_wait_for_every_region() {
    let v = view(vec![up(1, 1), up(2, 2), up(3, 3)]);
    let mut c = coordinator();
    let mut out = Vec::new();
    c.handle(Instant::ZERO, &node(2), register(&["4", "9"]), &v, &mut out);
    c.handle(Instant::ZERO, &node(1), register(&[]), &v, &mut out);
    assert!(!c.is_complete(), "node 3 has not reported yet");
    out.clear();
    c.handle(
        Instant::ZERO,
        &node(1),
        Protocol::GetShardHome { shard: "5".into() },
        &v,
        &mut out,
    );
    assert!(out.is_empty(), "no allocation before every region reported");
    c.handle(
        Instant::ZERO,
        &node(1),
        Protocol::GetShardHome { shard: "4".into() },
        &v,
        &mut out,
    );
    assert_eq!(
        sent_to(&out, &node(1)),
        vec![Protocol::ShardHome {
            shard: "4".into(),
            region: node(2)
        }],
        "known shards are answered at once"
    );
    out.clear();
    c.handle(Instant::ZERO, &node(3), register(&["5"]), &v, &mut out);
    assert!(c.is_complete());
    assert_eq!(c.state().home(&"5".into()), Some(&node(3)));
    assert_eq!(c.state().check(), Ok(()));
}

#[test]
fn a_second_claim_on_a_shard_is_reported_not_accepted() {
    let v = view(vec![up(1, 1), up(2, 2), up(3, 3)]);
    let mut c = coordinator();
    let mut out = Vec::new();
    c.handle(Instant::ZERO, &node(2), register(&["4"]), &v, &mut out);
    c.handle(Instant::ZERO, &node(3), register(&["4"]), &v, &mut out);
    assert_eq!(c.state().home(&"4".into()), Some(&node(2)));
    assert!(out.iter().any(|e| matches!(
        e,
        CoordinatorEffect::Event(CoordinatorEvent::ConflictingClaim { .. })
    )));
}

#[test]
fn registration_from_a_non_member_is_refused() {
    let v = view(vec![up(1, 1)]);
    let mut c = coordinator();
    let mut out = Vec::new();
    c.handle(Instant::ZERO, &node(7), register(&["1"]), &v, &mut out);
    assert!(sent_to(&out, &node(7)).is_empty());
    assert_eq!(c.state().home(&"1".into()), None);
}

#[test]
fn no_rebalance_while_a_member_is_unreachable() {
    let mut v = view(vec![up(1, 1), up(2, 2)]);
    let mut c = coordinator();
    let mut out = Vec::new();
    let many: Vec<String> = (0..30).map(|i| i.to_string()).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    c.handle(Instant::ZERO, &node(1), register(&many), &v, &mut out);
    c.handle(Instant::ZERO, &node(2), register(&[]), &v, &mut out);
    v.update(Instant::ZERO, vec![up(1, 1), up(2, 2)], [node(2)].into());
    out.clear();
    let t = Instant::ZERO + Duration::from_secs(10);
    c.handle_timeout(t, &v, &mut out);
    assert!(c.handoffs_in_progress().next().is_none());
    v.update(t, vec![up(1, 1), up(2, 2)], BTreeSet::new());
    c.handle_timeout(t + Duration::from_secs(10), &v, &mut out);
    assert!(
        c.handoffs_in_progress().count() > 0,
        "rebalances once reachable"
    );
}

#[test]
fn a_hand_off_that_times_out_leaves_the_shard_where_it_was() {
    let v = view(vec![up(1, 1), up(2, 2)]);
    let mut c = coordinator();
    let mut out = Vec::new();
    c.handle(Instant::ZERO, &node(1), register(&[]), &v, &mut out);
    c.handle(Instant::ZERO, &node(2), register(&["3"]), &v, &mut out);
    c.handle(
        Instant::ZERO,
        &node(2),
        Protocol::GracefulShutdownReq,
        &v,
        &mut out,
    );
    assert_eq!(c.handoffs_in_progress().count(), 1);
    out.clear();
    c.handle_timeout(Instant::ZERO + Duration::from_secs(61), &v, &mut out);
    assert!(
        out.contains(&CoordinatorEffect::Event(CoordinatorEvent::HandOffDone {
            shard: "3".into(),
            ok: false
        }))
    );
    assert_eq!(c.state().home(&"3".into()), Some(&node(2)));
}

/// A region asked for a shard's home while none could be given (here: not every region had
/// registered yet); it hears the home the moment the shard gets one, which is the moment
/// allocation may begin, not at its next retry.
#[test]
fn regions_that_asked_in_vain_hear_the_home_when_the_shard_gets_one() {
    let v = view(vec![up(1, 1), up(2, 2), up(3, 3)]);
    let mut c = coordinator();
    let mut out = Vec::new();
    c.handle(Instant::ZERO, &node(1), register(&[]), &v, &mut out);
    c.handle(Instant::ZERO, &node(2), register(&[]), &v, &mut out);
    let ask = || Protocol::GetShardHome { shard: "5".into() };
    out.clear();
    c.handle(Instant::ZERO, &node(2), ask(), &v, &mut out);
    c.handle(Instant::ZERO, &node(1), ask(), &v, &mut out);
    assert!(out.is_empty(), "not allocated before every region reported");
    c.handle(Instant::ZERO, &node(3), register(&[]), &v, &mut out);
    let home = out
        .iter()
        .find_map(|e| match e {
            CoordinatorEffect::Send {
                to,
                msg: Protocol::HostShard { .. },
            } => Some(to.clone()),
            _ => None,
        })
        .expect("allocated");
    let answer = Protocol::ShardHome {
        shard: "5".into(),
        region: home.clone(),
    };
    assert_eq!(home, node(1), "ties go to the smallest region");
    assert!(sent_to(&out, &node(2)).contains(&answer), "{out:?}");
    // Answered once: a later allocation round does not repeat it.
    out.clear();
    c.handle(Instant::ZERO, &node(3), ask(), &v, &mut out);
    assert!(sent_to(&out, &node(2)).is_empty());
}

/// A coordinator under the lease takeover, standing in on node 2 for node 1 (oldest, silent):
/// it does not wait for node 1's region; the homes regions report on node 1 (`SilentHomes`)
/// enter the table there, where the takeover watches them (a lease read is asked for) and no
/// new shard is offered; and a region that registers claiming one of those shards replaces
/// the hearsay.
#[test]
fn a_stand_in_learns_a_silent_members_shards_from_the_regions_and_the_claimant_wins() {
    let members = vec![up(1, 1), up(2, 2), up(3, 3)];
    let mut v = ShardingView::new(node(2), None, Duration::from_secs(5));
    v.update(Instant::ZERO, members, [node(1)].into());
    let mut c = Coordinator::new(
        node(2),
        CoordinatorSettings {
            lease_takeover: Some(crate::lease::LeaseTiming::default()),
            ..CoordinatorSettings::default()
        },
        LeastShardAllocationStrategy::new(20, 0.1),
        Instant::ZERO,
    );
    let mut out = Vec::new();
    let silent = Protocol::SilentHomes {
        homes: vec![(node(1), vec![ShardId::from("4"), ShardId::from("5")])],
    };
    c.handle(Instant::ZERO, &node(3), silent, &v, &mut out);
    c.handle(Instant::ZERO, &node(2), register(&[]), &v, &mut out);
    c.handle(Instant::ZERO, &node(3), register(&["5"]), &v, &mut out);
    assert!(c.is_complete(), "waits for the silent member");
    let table = c.state();
    assert_eq!(
        table.home(&ShardId::from("4")),
        Some(&node(1)),
        "hearsay entered"
    );
    assert_eq!(
        table.home(&ShardId::from("5")),
        Some(&node(3)),
        "the region that runs it wins over hearsay"
    );
    out.clear();
    let due = c.poll_timeout().expect("a lease read is due");
    c.handle_timeout(due, &v, &mut out);
    assert!(
        out.iter().any(|e| matches!(
            e,
            CoordinatorEffect::ReadLeases { shards, .. } if shards.contains(&ShardId::from("4"))
        )),
        "the silent member's shards are watched: {out:?}"
    );
    // A new shard goes to a registered region, never to the silent one.
    out.clear();
    c.handle(
        Instant::ZERO,
        &node(3),
        Protocol::GetShardHome {
            shard: ShardId::from("9"),
        },
        &v,
        &mut out,
    );
    assert_eq!(
        c.state().home(&ShardId::from("9")).map(|h| *h != node(1)),
        Some(true)
    );
    // Without the takeover, SilentHomes changes nothing.
    let mut plain = coordinator();
    v = view(vec![up(1, 1), up(2, 2)]);
    let homes = Protocol::SilentHomes {
        homes: vec![(node(2), vec![ShardId::from("4")])],
    };
    plain.handle(Instant::ZERO, &node(2), homes, &v, &mut out);
    assert_eq!(plain.state().home(&ShardId::from("4")), None);
}
