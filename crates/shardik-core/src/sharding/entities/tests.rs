//! The lifecycle driven the way its drivers drive it, with handlers that are plain functions:
//! run at once, or held back (a handler that awaits) until the test completes them.

use std::sync::Arc;
use std::time::Duration;

use shardik_passivation::{IdleCheck, ReplacementPolicy, ResolvedStrategy};

use super::*;

/// What the test entity is told.
#[derive(Clone, Debug, PartialEq)]
enum Cmd {
    /// Add to the sum; answers the new sum.
    Add(u64),
    /// Ask to be passivated after adding nothing.
    Passivate,
    /// Fail (the incarnation ends).
    Fail,
    /// Start a one-shot timer that adds `add` after `ms`.
    Timer { ms: u64, add: u64 },
    /// The kind's stop message.
    Stop,
}

/// Counts what it is told.
struct Sum(u64);

struct Kind;

/// An ask's number, or nobody.
#[derive(Debug, PartialEq)]
struct AskId(Option<u32>);

impl Asker for AskId {
    fn nobody() -> Self {
        AskId(None)
    }
    fn waits(&self) -> bool {
        self.0.is_some()
    }
}

impl Lifecycle for Kind {
    type Entity = Sum;
    type Command = Cmd;
    type Reply = u64;
    type Asker = AskId;
}

/// Runs handlers at once, or holds them back while `hold` is set; records what ran.
#[derive(Default)]
struct Handlers {
    hold: bool,
    held: Vec<Run<Kind>>,
    ran: Vec<(String, Cmd)>,
    /// Incarnations that had to be recorded as started first.
    recorded: Vec<String>,
}

impl Handlers {
    fn handle(&mut self, run: Run<Kind>) -> Done<Kind> {
        let Run {
            shard,
            id,
            mut entity,
            job,
            was_stop,
            record_first,
        } = run;
        if record_first {
            self.recorded.push(id.to_string());
        }
        self.ran.push((id.to_string(), job.cmd.clone()));
        let mut requests = Vec::new();
        let mut passivate = false;
        let outcome = match job.cmd {
            Cmd::Add(n) => {
                entity.0 += n;
                Ok(Some(entity.0))
            }
            Cmd::Passivate => {
                passivate = true;
                Ok(Some(entity.0))
            }
            Cmd::Fail => Err("told to fail".to_string()),
            Cmd::Timer { ms, add } => {
                requests.push(ContextRequest::StartTimer {
                    key: "t".into(),
                    command: TimerCommand::Once(Cmd::Add(add)),
                    delay: Duration::from_millis(ms),
                });
                Ok(Some(entity.0))
            }
            Cmd::Stop => Ok(None),
        };
        Done {
            shard,
            id,
            entity: outcome.is_ok().then_some(entity),
            reply: job.reply,
            outcome,
            passivate,
            was_stop,
            from_context: job.from_context,
            requests,
            unrecorded: false,
        }
    }

    /// Completes the oldest held handler.
    fn finish_one(&mut self) -> Done<Kind> {
        let run = self.held.remove(0);
        self.handle(run)
    }
}

impl Runner<Kind> for Handlers {
    fn run(&mut self, run: Run<Kind>) -> Option<Done<Kind>> {
        if self.hold {
            self.held.push(run);
            None
        } else {
            Some(self.handle(run))
        }
    }
}

/// One kind's entities with their handlers and what they output.
struct Fixture {
    e: Entities<Kind>,
    h: Handlers,
    out: Vec<Output<Kind>>,
    now: Instant,
}

fn fixture(settings: EntitySettings, stop: bool) -> Fixture {
    let stop_message: Option<StopMessage<Cmd>> = stop.then(|| Arc::new(|| Cmd::Stop) as _);
    Fixture {
        e: Entities::new(&settings, Arc::new(|_| Sum(0)), stop_message, Instant::ZERO),
        h: Handlers::default(),
        out: Vec::new(),
        now: Instant::ZERO,
    }
}

fn id(s: &str) -> Arc<str> {
    Arc::from(s)
}

impl Fixture {
    fn send(&mut self, shard: &str, entity: &str, cmd: Cmd, ask: Option<u32>) {
        let job = Job::new(cmd, AskId(ask));
        self.e.deliver(
            self.now,
            id(shard),
            id(entity),
            job,
            &mut self.h,
            &mut self.out,
        );
    }

    fn complete_one(&mut self) {
        let done = self.h.finish_one();
        self.e.completed(self.now, done, &mut self.h, &mut self.out);
    }

    fn tick(&mut self, to: Instant) {
        self.now = to;
        self.e
            .handle_timeout(to, |_| true, &mut self.h, &mut self.out);
    }

    /// Replies handed out so far: (ask, result), in order; other outputs stay.
    fn replies(&mut self) -> Vec<(u32, Result<u64, String>)> {
        let mut replies = Vec::new();
        self.out.retain_mut(|o| match o {
            Output::Reply(to, r) => {
                replies.push((to.0.expect("only waiting askers get replies"), r.clone()));
                false
            }
            _ => true,
        });
        replies
    }

    fn has(&self, pred: impl Fn(&Output<Kind>) -> bool) -> bool {
        self.out.iter().any(pred)
    }
}

#[test]
fn commands_run_one_at_a_time_in_order_and_are_answered() {
    let mut f = fixture(EntitySettings::default(), false);
    f.h.hold = true;
    f.send("a", "e", Cmd::Add(1), Some(1));
    f.send("a", "e", Cmd::Add(2), Some(2));
    f.send("a", "e", Cmd::Add(3), None);
    assert_eq!(f.h.held.len(), 1, "one command at a time");
    assert_eq!(f.e.queued(), 2);
    f.h.hold = false;
    f.complete_one();
    assert_eq!(f.e.queued(), 0);
    assert_eq!(f.replies(), vec![(1, Ok(1)), (2, Ok(3))]);
    let cmds: Vec<Cmd> = f.h.ran.iter().map(|(_, c)| c.clone()).collect();
    assert_eq!(cmds, vec![Cmd::Add(1), Cmd::Add(2), Cmd::Add(3)]);
    assert_eq!(f.e.active_entities(), 1);
}

#[test]
fn a_command_naming_another_shard_than_its_entity_s_is_refused() {
    let mut f = fixture(EntitySettings::default(), false);
    f.send("a", "e", Cmd::Add(1), None);
    f.send("b", "e", Cmd::Add(1), Some(9));
    assert!(f.has(|o| matches!(o, Output::Refused { reply: AskId(Some(9)), why, .. } if why.contains("shard a"))));
    assert_eq!(f.e.entity_counts(), vec![(id("a"), 1)]);
}

#[test]
fn a_stop_waits_behind_queued_commands_and_the_shard_is_reported_empty() {
    let mut f = fixture(EntitySettings::default(), true);
    f.h.hold = true;
    f.send("a", "e1", Cmd::Add(1), Some(1));
    f.send("a", "e1", Cmd::Add(1), Some(2));
    f.send("b", "e2", Cmd::Add(5), None);
    f.e.stop_shard(f.now, &id("a"), &mut f.h, &mut f.out);
    assert!(!f.has(|o| matches!(o, Output::ShardEmpty(_))));
    f.h.hold = false;
    f.complete_one();
    let ran: Vec<(String, Cmd)> = f.h.ran.clone();
    assert_eq!(
        ran.iter()
            .filter(|(e, _)| e == "e1")
            .map(|(_, c)| c.clone())
            .collect::<Vec<_>>(),
        vec![Cmd::Add(1), Cmd::Add(1), Cmd::Stop],
        "the stop message ran after every queued command"
    );
    assert_eq!(f.replies(), vec![(1, Ok(1)), (2, Ok(2))]);
    assert!(f.has(|o| matches!(o, Output::ShardEmpty(s) if **s == *"a")));
    // The other shard's entity is untouched (its handler still held).
    assert_eq!(f.e.entity_counts(), vec![(id("b"), 1)]);
}

#[test]
fn forcing_a_shard_to_stop_answers_what_waits_and_keeps_no_entity() {
    let mut f = fixture(EntitySettings::default(), false);
    f.h.hold = true;
    f.send("a", "e", Cmd::Add(1), Some(1));
    f.send("a", "e", Cmd::Add(1), Some(2));
    f.e.force_stop_shard(f.now, &id("a"), &mut f.h, &mut f.out);
    assert_eq!(f.e.active_entities(), 0);
    assert_eq!(f.e.queued(), 0);
    // The running handler finishes, but its entity is not kept.
    f.h.hold = false;
    f.complete_one();
    let replies = f.replies();
    assert_eq!(replies.len(), 2);
    assert!(matches!(&replies[0], (2, Err(why)) if why.contains("stopped")));
    assert_eq!(replies[1], (1, Ok(1)));
    assert_eq!(f.e.active_entities(), 0);
}

#[test]
fn a_passivating_handler_ends_its_incarnation_and_a_new_one_starts_on_the_next_command() {
    let mut f = fixture(EntitySettings::default(), true);
    f.send("a", "e", Cmd::Add(4), None);
    f.send("a", "e", Cmd::Passivate, Some(1));
    assert_eq!(f.replies(), vec![(1, Ok(4))]);
    assert_eq!(f.e.active_entities(), 0);
    assert_eq!(f.h.ran.last().map(|(_, c)| c.clone()), Some(Cmd::Stop));
    f.send("a", "e", Cmd::Add(1), Some(2));
    assert_eq!(f.replies(), vec![(2, Ok(1))], "a new incarnation");
}

#[test]
fn each_incarnation_is_announced_when_it_starts_and_when_it_ends() {
    let mut f = fixture(EntitySettings::default(), true);
    f.h.hold = true;
    f.send("a", "e", Cmd::Passivate, None);
    // The passivation completes and its stop message starts (held).
    f.complete_one();
    assert_eq!(f.h.held.len(), 1);
    // Queued behind the stop: it goes to a new incarnation.
    f.send("a", "e", Cmd::Add(1), Some(1));
    f.h.hold = false;
    f.complete_one();
    f.e.force_stop_shard(f.now, &id("a"), &mut f.h, &mut f.out);
    let lives: Vec<&str> = f
        .out
        .iter()
        .filter_map(|o| match o {
            Output::Started { .. } => Some("started"),
            Output::Stopped { .. } => Some("stopped"),
            _ => None,
        })
        .collect();
    assert_eq!(lives, ["started", "stopped", "started", "stopped"]);
    assert_eq!(f.replies(), vec![(1, Ok(1))]);
}

#[test]
fn a_failure_ends_the_incarnation_and_is_reported() {
    let mut f = fixture(EntitySettings::default(), false);
    f.send("a", "e", Cmd::Add(4), None);
    f.send("a", "e", Cmd::Fail, Some(1));
    assert!(matches!(&f.replies()[..], [(1, Err(why))] if why == "told to fail"));
    assert!(f.has(|o| matches!(o, Output::Failed { .. })));
    assert_eq!(f.e.active_entities(), 0);
    f.send("a", "e", Cmd::Add(1), Some(2));
    assert_eq!(f.replies(), vec![(2, Ok(1))]);
}

#[test]
fn an_idle_entity_is_passivated_by_the_scan_and_a_busy_one_is_not() {
    let settings = EntitySettings {
        passivation: ResolvedStrategy::Idle(IdleCheck {
            timeout_ms: 2_000,
            interval_ms: 1_000,
        }),
        ..EntitySettings::default()
    };
    let mut f = fixture(settings, false);
    f.send("a", "idle", Cmd::Add(1), None);
    f.h.hold = true;
    f.send("a", "busy", Cmd::Add(1), None);
    assert_eq!(f.e.poll_timeout(), Some(Instant::from_millis(1_000)));
    f.tick(Instant::from_millis(1_000));
    f.tick(Instant::from_millis(2_000));
    assert_eq!(f.e.active_entities(), 2, "not idle long enough yet");
    f.tick(Instant::from_millis(3_000));
    assert_eq!(f.e.entity_ids(), vec![(id("a"), vec![id("busy")])]);
}

#[test]
fn a_limit_strategy_passivates_the_least_recently_used() {
    let settings = EntitySettings {
        passivation: ResolvedStrategy::Limit {
            per_region_limit: 2,
            policy: ReplacementPolicy::LeastRecentlyUsed,
            idle: None,
        },
        ..EntitySettings::default()
    };
    let mut f = fixture(settings, false);
    for (t, e) in ["e1", "e2", "e1", "e3"].iter().enumerate() {
        f.now = Instant::from_millis(t as u64);
        f.send("a", e, Cmd::Add(1), None);
    }
    assert_eq!(f.e.entity_ids(), vec![(id("a"), vec![id("e1"), id("e3")])]);
}

#[test]
fn an_entity_timer_delivers_to_its_incarnation_and_dies_with_it() {
    let mut f = fixture(EntitySettings::default(), false);
    f.send("a", "e", Cmd::Timer { ms: 50, add: 7 }, None);
    assert_eq!(f.e.poll_timeout(), Some(Instant::from_millis(50)));
    f.tick(Instant::from_millis(50));
    f.send("a", "e", Cmd::Add(0), Some(1));
    assert_eq!(f.replies(), vec![(1, Ok(7))]);
    // Set again, then passivated before it fires: it never re-creates the entity.
    f.send("a", "e", Cmd::Timer { ms: 50, add: 7 }, None);
    f.send("a", "e", Cmd::Passivate, None);
    f.tick(Instant::from_millis(200));
    assert_eq!(f.e.active_entities(), 0);
}

#[test]
fn commands_queued_before_a_hand_off_s_stop_run_even_if_the_entity_fails_first() {
    let mut f = fixture(EntitySettings::default(), true);
    f.h.hold = true;
    f.send("a", "e", Cmd::Fail, None);
    f.send("a", "e", Cmd::Add(2), Some(1));
    f.e.stop_shard(f.now, &id("a"), &mut f.h, &mut f.out);
    f.h.hold = false;
    f.complete_one();
    assert_eq!(f.replies(), vec![(1, Ok(2))], "run by a new incarnation");
    assert_eq!(f.h.ran.last().map(|(_, c)| c.clone()), Some(Cmd::Stop));
    assert!(f.has(|o| matches!(o, Output::ShardEmpty(_))));
    assert_eq!(f.e.active_entities(), 0);
}

#[test]
fn a_hand_off_during_a_passivation_still_runs_what_was_queued_behind_it() {
    let mut f = fixture(EntitySettings::default(), true);
    f.h.hold = true;
    f.send("a", "e", Cmd::Passivate, None);
    f.complete_one(); // the passivation's stop message starts (held)
    f.send("a", "e", Cmd::Add(3), Some(1)); // queued behind that stop
    f.e.stop_shard(f.now, &id("a"), &mut f.h, &mut f.out);
    f.h.hold = false;
    while !f.h.held.is_empty() {
        f.complete_one();
    }
    assert_eq!(f.replies(), vec![(1, Ok(3))]);
    assert!(f.has(|o| matches!(o, Output::ShardEmpty(_))));
    assert_eq!(f.e.active_entities(), 0);
}

#[test]
fn a_failure_in_place_of_a_queued_stop_completes_the_stop() {
    let mut f = fixture(EntitySettings::default(), true);
    f.h.hold = true;
    f.send("a", "e", Cmd::Fail, None);
    f.e.stop_shard(f.now, &id("a"), &mut f.h, &mut f.out);
    f.h.hold = false;
    f.complete_one();
    assert!(f.has(|o| matches!(o, Output::ShardEmpty(_))));
    assert!(
        !f.h.ran.iter().any(|(_, c)| *c == Cmd::Stop),
        "no incarnation just to stop"
    );
}

#[test]
fn a_timer_queued_behind_a_failing_command_dies_with_its_incarnation() {
    let mut f = fixture(EntitySettings::default(), false);
    f.send("a", "e", Cmd::Timer { ms: 10, add: 7 }, None);
    f.h.hold = true;
    f.send("a", "e", Cmd::Fail, None);
    // The timer fires while the entity is busy: its command queues behind the failing one.
    f.tick(Instant::from_millis(10));
    assert_eq!(f.e.queued(), 1);
    f.send("a", "e", Cmd::Add(1), Some(1));
    f.h.hold = false;
    f.complete_one();
    // The client's command goes to the next incarnation; the timer's does not.
    assert_eq!(f.replies(), vec![(1, Ok(1))]);
    assert_eq!(f.e.queued(), 0);
    assert!(!f.h.ran.iter().any(|(_, c)| *c == Cmd::Add(7)));
}

#[test]
fn a_failed_remembered_entity_starts_again_after_the_backoff_unless_its_shard_went() {
    let settings = EntitySettings {
        remember: true,
        restart_backoff: Duration::from_secs(1),
        ..EntitySettings::default()
    };
    let mut f = fixture(settings, false);
    f.send("a", "e", Cmd::Add(1), None);
    assert_eq!(
        f.h.recorded,
        vec!["e".to_string()],
        "recorded before its first command"
    );
    f.send("a", "e", Cmd::Fail, None);
    assert_eq!(f.e.active_entities(), 0);
    assert_eq!(f.e.poll_timeout(), Some(Instant::from_millis(1_000)));
    f.tick(Instant::from_millis(1_000));
    assert!(f.has(|o| matches!(o, Output::Restarted { id, .. } if **id == *"e")));
    assert_eq!(f.e.active_entities(), 1);
    // A second failure, then a hand-off: no restart here.
    f.send("a", "e", Cmd::Fail, None);
    f.e.stop_shard(f.now, &id("a"), &mut f.h, &mut f.out);
    assert_eq!(f.e.poll_timeout(), None);
}

#[test]
fn passivation_forgets_a_remembered_entity_but_a_hand_off_does_not() {
    let settings = EntitySettings {
        remember: true,
        ..EntitySettings::default()
    };
    let mut f = fixture(settings, false);
    f.send("a", "p", Cmd::Add(1), None);
    f.send("a", "h", Cmd::Add(1), None);
    f.send("a", "p", Cmd::Passivate, None);
    f.e.stop_shard(f.now, &id("a"), &mut f.h, &mut f.out);
    let forgotten: Vec<String> = f
        .out
        .iter()
        .filter_map(|o| match o {
            Output::Forget { id, .. } => Some(id.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(forgotten, vec!["p".to_string()]);
}

#[test]
fn a_load_does_not_start_what_was_passivated_while_it_ran() {
    let settings = EntitySettings {
        remember: true,
        ..EntitySettings::default()
    };
    let mut f = fixture(settings, false);
    let a = id("a");
    f.e.load_started(&a);
    f.send("a", "p", Cmd::Passivate, None);
    let started =
        f.e.start_loaded(f.now, &a, &[id("p"), id("q")], true, &mut f.h, &mut f.out);
    assert_eq!(started, 1);
    assert_eq!(f.e.entity_ids(), vec![(a, vec![id("q")])]);
}

#[test]
fn an_idle_entity_s_record_stays_four_words() {
    // Memory per idle entity is a headline number: the shard index and the stop flag must
    // not grow the record of a one-word entity.
    assert_eq!(std::mem::size_of::<Slot<Kind>>(), 32);
}
