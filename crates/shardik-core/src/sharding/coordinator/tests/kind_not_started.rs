//! Members whose node never started the kind: counted as heard with no shards when their node
//! says so to this coordinator incarnation, and reported when silent.

use super::*;

const EPOCH: u64 = 77;

fn joining(i: u16) -> Member {
    Member::joining(node(i), BTreeSet::new(), "1.0")
}

fn not_started(epoch: u64) -> Protocol {
    Protocol::KindNotStarted { epoch }
}

/// A coordinator on node 1 of three Up members, announced (epoch [`EPOCH`]), with node 1's and
/// node 2's regions registered.
fn waiting_for_node_3() -> (Coordinator<LeastShardAllocationStrategy>, ShardingView) {
    let v = view(vec![up(1, 1), up(2, 2), up(3, 3)]);
    let mut c = coordinator().with_epoch(EPOCH);
    let mut out = Vec::new();
    c.announce(&v, &mut out);
    c.handle(Instant::ZERO, &node(1), register(&[]), &v, &mut out);
    c.handle(Instant::ZERO, &node(2), register(&["4"]), &v, &mut out);
    assert!(!c.is_complete());
    (c, v)
}

fn homes_allocated(out: &[CoordinatorEffect]) -> Vec<UniqueAddress> {
    out.iter()
        .filter_map(|e| match e {
            CoordinatorEffect::Send {
                to,
                msg: Protocol::HostShard { .. },
            } => Some(to.clone()),
            _ => None,
        })
        .collect()
}

/// Each row: what node 3 (or a stranger) sends, in order, and whether allocation may then
/// begin, with node 3 counted as not started or not.
#[test]
fn which_answers_count() {
    struct Row {
        name: &'static str,
        from: u16,
        msgs: Vec<Protocol>,
        complete: bool,
        counted: bool,
    }
    let rows = vec![
        Row {
            name: "an answer to this incarnation counts",
            from: 3,
            msgs: vec![not_started(EPOCH)],
            complete: true,
            counted: true,
        },
        Row {
            name: "an answer to another incarnation does not",
            from: 3,
            msgs: vec![not_started(EPOCH + 1)],
            complete: false,
            counted: false,
        },
        Row {
            name: "an answer without an epoch (to a registration) does not",
            from: 3,
            msgs: vec![not_started(0)],
            complete: false,
            counted: false,
        },
        Row {
            name: "a registered region's late answer is ignored",
            from: 3,
            msgs: vec![register(&["9"]), not_started(EPOCH)],
            complete: true,
            counted: false,
        },
        Row {
            name: "a registration after the answer wins",
            from: 3,
            msgs: vec![not_started(EPOCH), register(&[])],
            complete: true,
            counted: false,
        },
        Row {
            name: "a non-member's answer does not count",
            from: 9,
            msgs: vec![not_started(EPOCH)],
            complete: false,
            counted: false,
        },
    ];
    for row in rows {
        let (mut c, v) = waiting_for_node_3();
        let mut out = Vec::new();
        for msg in row.msgs {
            c.handle(Instant::ZERO, &node(row.from), msg, &v, &mut out);
        }
        assert_eq!(c.is_complete(), row.complete, "{}", row.name);
        assert_eq!(
            c.not_started().contains(&node(row.from)),
            row.counted,
            "{}",
            row.name
        );
        assert_eq!(c.state().check(), Ok(()), "{}", row.name);
    }
}

#[test]
fn a_joining_member_is_not_expected_so_its_answer_does_not_count() {
    let v = view(vec![up(1, 1), joining(3)]);
    let mut c = coordinator().with_epoch(EPOCH);
    let mut out = Vec::new();
    c.handle(Instant::ZERO, &node(1), register(&[]), &v, &mut out);
    c.handle(Instant::ZERO, &node(3), not_started(EPOCH), &v, &mut out);
    assert!(c.not_started().is_empty());
}

#[test]
fn allocation_proceeds_among_the_registered_and_never_offers_the_member_a_shard() {
    let (mut c, v) = waiting_for_node_3();
    let mut out = Vec::new();
    c.handle(Instant::ZERO, &node(3), not_started(EPOCH), &v, &mut out);
    assert!(
        out.contains(&CoordinatorEffect::Event(CoordinatorEvent::KindNotStarted(
            node(3)
        )))
    );
    assert!(out.contains(&CoordinatorEffect::Event(CoordinatorEvent::StateComplete)));
    out.clear();
    for shard in 0..40 {
        let ask = Protocol::GetShardHome {
            shard: shard.to_string().into(),
        };
        c.handle(Instant::ZERO, &node(1 + shard % 2), ask, &v, &mut out);
    }
    let homes = homes_allocated(&out);
    assert_eq!(homes.len(), 39, "every new shard allocated (4 was known)");
    assert!(homes.iter().all(|h| *h != node(3)), "{homes:?}");
    assert!(c.state().regions().keys().all(|r| *r != node(3)));
    assert_eq!(c.state().check(), Ok(()));
}

#[test]
fn a_member_that_starts_the_kind_later_registers_and_may_receive_shards() {
    let (mut c, v) = waiting_for_node_3();
    let mut out = Vec::new();
    c.handle(Instant::ZERO, &node(3), not_started(EPOCH), &v, &mut out);
    c.handle(Instant::ZERO, &node(3), register(&[]), &v, &mut out);
    assert!(c.not_started().is_empty());
    out.clear();
    for shard in 10..40 {
        let ask = Protocol::GetShardHome {
            shard: shard.to_string().into(),
        };
        c.handle(Instant::ZERO, &node(3), ask, &v, &mut out);
    }
    assert!(
        homes_allocated(&out).contains(&node(3)),
        "least-shard allocation gives the empty region its share"
    );
}

#[test]
fn a_silent_member_is_reported_after_the_grace_and_again_until_the_state_is_complete() {
    let (mut c, v) = waiting_for_node_3();
    let grace = CoordinatorSettings::default().unheard_warning_after;
    let reports = |c: &mut Coordinator<_>, from: u64, to: u64| {
        let mut at = Vec::new();
        for s in from..to {
            let mut out = Vec::new();
            let now = Instant::ZERO + Duration::from_secs(s);
            if c.poll_timeout().is_some_and(|t| t <= now) {
                c.handle_timeout(now, &v, &mut out);
            }
            for e in out {
                if let CoordinatorEffect::Event(CoordinatorEvent::RegionsUnheard(waited)) = e {
                    assert_eq!(waited, vec![(node(3), Duration::from_secs(s))]);
                    at.push(s);
                }
            }
        }
        at
    };
    assert_eq!(grace, Duration::from_secs(10));
    assert_eq!(reports(&mut c, 0, 100), vec![10, 20, 40, 80]);
    let mut out = Vec::new();
    let later = Instant::ZERO + Duration::from_secs(100);
    c.handle(later, &node(3), not_started(EPOCH), &v, &mut out);
    assert!(c.is_complete());
    assert_eq!(reports(&mut c, 100, 1_000), Vec::<u64>::new());
}

#[test]
fn a_member_that_becomes_expected_is_announced_to_at_once_and_once() {
    let mut v = view(vec![up(1, 1), joining(2)]);
    let mut c = coordinator().with_epoch(EPOCH);
    let mut out = Vec::new();
    c.announce(&v, &mut out);
    assert!(sent_to(&out, &node(2)).is_empty(), "Joining: not expected");
    v.update(Instant::ZERO, vec![up(1, 1), up(2, 2)], BTreeSet::new());
    out.clear();
    c.view_changed(Instant::ZERO, &v, &mut out);
    assert_eq!(
        sent_to(&out, &node(2)),
        vec![Protocol::CoordinatorStarted { epoch: EPOCH }]
    );
    out.clear();
    c.view_changed(Instant::ZERO, &v, &mut out);
    assert!(
        sent_to(&out, &node(2)).is_empty(),
        "not again at each view change"
    );
    // Every rebalance interval while it is silent, as before.
    c.handle_timeout(Instant::ZERO + Duration::from_secs(10), &v, &mut out);
    assert_eq!(
        sent_to(&out, &node(2)),
        vec![Protocol::CoordinatorStarted { epoch: EPOCH }]
    );
}

#[test]
fn a_member_that_said_so_is_not_asked_again() {
    let (mut c, v) = waiting_for_node_3();
    let mut out = Vec::new();
    c.handle(Instant::ZERO, &node(3), not_started(EPOCH), &v, &mut out);
    out.clear();
    c.announce(&v, &mut out);
    assert!(sent_to(&out, &node(3)).is_empty());
}

#[test]
fn a_removed_member_is_forgotten() {
    let (mut c, mut v) = waiting_for_node_3();
    let mut out = Vec::new();
    c.handle(Instant::ZERO, &node(3), not_started(EPOCH), &v, &mut out);
    let mut leaving = up(3, 3);
    leaving.status = MemberStatus::Exiting;
    v.update(
        Instant::ZERO,
        vec![up(1, 1), up(2, 2), leaving],
        BTreeSet::new(),
    );
    v.update(Instant::ZERO, vec![up(1, 1), up(2, 2)], BTreeSet::new());
    c.view_changed(Instant::ZERO, &v, &mut out);
    assert!(c.not_started().is_empty());
}
