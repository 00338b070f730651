//! Unit tests of entity timers and receive timeouts.

use super::*;

const MS: u64 = 1_000_000;

fn ids() -> (ShardId, EntityId) {
    ("s".into(), "e".into())
}

fn start(t: &mut Timers<u32>, key: &str, cmd: u32, ms: u64, repeat: bool, now: u64) {
    let (s, e) = ids();
    let command = if repeat {
        TimerCommand::Repeat(Box::new(move || cmd))
    } else {
        TimerCommand::Once(cmd)
    };
    t.apply(
        &s,
        &e,
        ContextRequest::StartTimer {
            key: key.into(),
            command,
            delay: Duration::from_millis(ms),
        },
        now,
    );
}

fn fired(t: &mut Timers<u32>, now: u64) -> Vec<u32> {
    std::iter::from_fn(|| t.pop_due(now).map(|(_, _, c)| c)).collect()
}

#[test]
fn a_single_timer_fires_once_and_is_forgotten() {
    let mut t = Timers::default();
    start(&mut t, "a", 1, 10, false, 0);
    assert_eq!(t.next_due(), Some(10 * MS));
    assert!(fired(&mut t, 9 * MS).is_empty());
    assert_eq!(fired(&mut t, 10 * MS), vec![1]);
    assert!(fired(&mut t, 100 * MS).is_empty());
    assert!(
        t.owners.is_empty(),
        "nothing kept for an entity without timers"
    );
}

#[test]
fn a_repeating_timer_of_zero_delay_does_not_fire_forever_at_once() {
    let mut t = Timers::default();
    start(&mut t, "z", 3, 0, true, 0);
    assert_eq!(fired(&mut t, 0), Vec::<u32>::new());
    assert_eq!(fired(&mut t, MS), vec![3]);
    assert_eq!(fired(&mut t, MS), Vec::<u32>::new());
}

#[test]
fn restarting_a_key_replaces_the_timer() {
    let mut t = Timers::default();
    start(&mut t, "a", 1, 10, false, 0);
    start(&mut t, "a", 2, 20, false, 5 * MS);
    assert_eq!(fired(&mut t, 30 * MS), vec![2]);
    assert_eq!(t.scheduled(), 0);
}

#[test]
fn a_repeating_timer_repeats_until_cancelled() {
    let mut t = Timers::default();
    start(&mut t, "r", 7, 10, true, 0);
    assert_eq!(fired(&mut t, 10 * MS), vec![7]);
    assert_eq!(fired(&mut t, 20 * MS), vec![7]);
    let (s, e) = ids();
    t.apply(&s, &e, ContextRequest::CancelTimer("r".into()), 25 * MS);
    assert!(fired(&mut t, 100 * MS).is_empty());
    assert!(t.owners.is_empty());
}

#[test]
fn activity_postpones_the_receive_timeout() {
    let mut t: Timers<u32> = Timers::default();
    let (s, e) = ids();
    let set = ContextRequest::ReceiveTimeout(Some((
        Duration::from_millis(10),
        Box::new(|| 9u32) as CommandMaker<u32>,
    )));
    t.apply(&s, &e, set, 0);
    t.activity(&s, &e, 8 * MS);
    assert!(fired(&mut t, 17 * MS).is_empty());
    assert_eq!(fired(&mut t, 18 * MS), vec![9]);
    t.cancel_entity(&s, &e);
    assert!(fired(&mut t, 1000 * MS).is_empty());
}
