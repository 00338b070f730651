use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::*;
use crate::delivery::{ConsumerMarks, Sequenced, Verdict};

type Effects = Vec<ProducerEffect<&'static str, u32>>;

fn at(ms: u64) -> Instant {
    Instant::ZERO + Duration::from_millis(ms)
}

fn settings(window: u64) -> ProducerSettings {
    ProducerSettings {
        window,
        ..ProducerSettings::default()
    }
}

/// The (seq, first, payload) of every send in `out`, in order.
fn sends(out: &Effects) -> Vec<(u64, bool, u32)> {
    out.iter()
        .filter_map(|e| match e {
            ProducerEffect::Send {
                seq,
                first,
                payload,
                ..
            } => Some((*seq, *first, *payload)),
            ProducerEffect::Confirmed { .. } => None,
        })
        .collect()
}

#[test]
fn offers_go_out_within_the_window_and_are_held_until_confirmed() {
    let mut p = Producer::new(settings(2), 7);
    let mut out = Effects::new();
    let (stream, seq) = p.offer(at(0), "e1", 10, &mut out).unwrap();
    assert_eq!(
        (stream, seq),
        (
            StreamId {
                epoch: 7,
                number: 1
            },
            1
        )
    );
    p.offer(at(0), "e1", 11, &mut out).unwrap();
    p.offer(at(0), "e1", 12, &mut out).unwrap();
    assert_eq!(
        sends(&out),
        vec![(1, true, 10), (2, false, 11)],
        "the third waits for the entity's grant"
    );
    assert_eq!(p.unconfirmed(), 3);

    out.clear();
    let reply = ConsumerReply::Confirmed {
        confirmed: 2,
        up_to: 4,
    };
    p.on_reply(at(5), &"e1", stream, reply, &mut out);
    assert_eq!(
        out,
        vec![
            ProducerEffect::Confirmed {
                to: "e1",
                stream,
                seq: 2
            },
            ProducerEffect::Send {
                to: "e1",
                stream,
                seq: 3,
                first: false,
                payload: 12
            },
        ]
    );
    assert_eq!(p.unconfirmed(), 1);
}

#[test]
fn an_offer_beyond_the_bound_is_refused_and_memory_does_not_grow() {
    let mut p = Producer::new(
        ProducerSettings {
            max_unconfirmed: 3,
            ..ProducerSettings::default()
        },
        1,
    );
    let mut out = Effects::new();
    for (i, entity) in ["a", "b", "c"].into_iter().enumerate() {
        p.offer(at(0), entity, i as u32, &mut out).unwrap();
    }
    assert_eq!(p.offer(at(0), "d", 9, &mut out), Err(OfferRefused::Full));
    assert_eq!((p.unconfirmed(), p.streams()), (3, 3));
}

#[test]
fn silence_resends_from_the_oldest_marked_first_with_a_growing_interval() {
    let mut p = Producer::new(settings(10), 1);
    let mut out = Effects::new();
    p.offer(at(0), "e1", 1, &mut out).unwrap();
    p.offer(at(0), "e1", 2, &mut out).unwrap();
    let mut waits = Vec::new();
    let mut now = at(0);
    for _ in 0..9 {
        let next = p.poll_timeout().unwrap();
        waits.push(next.saturating_duration_since(now).as_millis() as u64);
        now = next;
        out.clear();
        p.handle_timeout(now, &mut out);
        assert_eq!(sends(&out), vec![(1, true, 1), (2, false, 2)]);
    }
    assert_eq!(
        waits,
        vec![
            2_000, 3_000, 4_500, 6_750, 10_125, 15_187, 22_781, 30_000, 30_000
        ],
        "2 s, then 1.5 times longer each time, up to 30 s"
    );
}

/// A producer with a window of 10 that was offered 1 to 4 for "e1", and its stream.
fn four_offers_to_e1() -> (Producer<&'static str, u32>, StreamId) {
    let mut p = Producer::new(settings(10), 1);
    let mut out = Effects::new();
    let (stream, _) = p.offer(at(0), "e1", 1, &mut out).unwrap();
    for payload in 2..=4 {
        p.offer(at(0), "e1", payload, &mut out).unwrap();
    }
    (p, stream)
}

#[test]
fn a_gap_sends_again_from_what_the_entity_expects_and_confirms_what_came_before() {
    let (mut p, stream) = four_offers_to_e1();
    let mut out = Effects::new();
    p.on_reply(
        at(1),
        &"e1",
        stream,
        ConsumerReply::Gap { expected: 3 },
        &mut out,
    );
    assert_eq!(
        out[0],
        ProducerEffect::Confirmed {
            to: "e1",
            stream,
            seq: 2
        }
    );
    assert_eq!(sends(&out), vec![(3, false, 3), (4, false, 4)]);
}

#[test]
fn a_gap_is_sent_again_once_however_many_answers_name_it() {
    let (mut p, stream) = four_offers_to_e1();
    let mut out = Effects::new();
    // Message 1 was lost: 2, 3 and 4 each come back as the same gap.
    let gap = ConsumerReply::Gap { expected: 1 };
    p.on_reply(at(1), &"e1", stream, gap, &mut out);
    assert_eq!(
        sends(&out),
        vec![(1, false, 1), (2, false, 2), (3, false, 3), (4, false, 4)]
    );
    out.clear();
    p.on_reply(at(1), &"e1", stream, gap, &mut out);
    p.on_reply(at(1), &"e1", stream, gap, &mut out);
    assert_eq!(
        sends(&out),
        vec![],
        "the window is not sent again per answer"
    );
    // Progress, then a new gap: sent again from there.
    let confirmed = ConsumerReply::Confirmed {
        confirmed: 2,
        up_to: 12,
    };
    p.on_reply(at(2), &"e1", stream, confirmed, &mut out);
    out.clear();
    p.on_reply(
        at(3),
        &"e1",
        stream,
        ConsumerReply::Gap { expected: 3 },
        &mut out,
    );
    assert_eq!(sends(&out), vec![(3, false, 3), (4, false, 4)]);
}

#[test]
fn an_entity_that_lost_track_gets_the_oldest_unconfirmed_marked_first() {
    let mut p = Producer::new(settings(10), 1);
    let mut out = Effects::new();
    let (stream, _) = p.offer(at(0), "e1", 1, &mut out).unwrap();
    p.offer(at(0), "e1", 2, &mut out).unwrap();
    let confirmed = ConsumerReply::Confirmed {
        confirmed: 1,
        up_to: 11,
    };
    p.on_reply(at(1), &"e1", stream, confirmed, &mut out);
    out.clear();
    p.on_reply(at(2), &"e1", stream, ConsumerReply::NeedFirst, &mut out);
    assert_eq!(sends(&out), vec![(2, true, 2)]);
}

#[test]
fn answers_about_a_stream_the_producer_left_are_ignored() {
    let mut p = Producer::new(settings(10), 2);
    let mut out = Effects::new();
    p.offer(at(0), "e1", 1, &mut out).unwrap();
    out.clear();
    let old = StreamId {
        epoch: 1,
        number: 1,
    };
    let reply = ConsumerReply::Confirmed {
        confirmed: 1,
        up_to: 11,
    };
    p.on_reply(at(1), &"e1", old, reply, &mut out);
    assert!(out.is_empty());
    assert_eq!(p.unconfirmed(), 1);
}

#[test]
fn a_quiet_stream_is_forgotten_and_the_next_message_opens_a_greater_one() {
    let mut p = Producer::new(settings(10), 1);
    let mut out = Effects::new();
    let (first, _) = p.offer(at(0), "e1", 1, &mut out).unwrap();
    let reply = ConsumerReply::Confirmed {
        confirmed: 1,
        up_to: 11,
    };
    p.on_reply(at(10), &"e1", first, reply, &mut out);
    assert_eq!(p.poll_timeout(), Some(at(10) + Duration::from_secs(120)));
    p.handle_timeout(at(10) + Duration::from_secs(119), &mut out);
    assert_eq!(p.streams(), 1, "not quiet long enough");
    p.handle_timeout(at(10) + Duration::from_secs(120), &mut out);
    assert_eq!((p.streams(), p.poll_timeout()), (0, None));

    out.clear();
    let (second, seq) = p.offer(at(200_000), "e1", 2, &mut out).unwrap();
    assert!(second > first);
    assert_eq!(seq, 1);
    assert_eq!(sends(&out), vec![(1, true, 2)]);
}

#[test]
fn a_resumed_stream_sends_its_held_messages_again_and_continues() {
    let mut p = Producer::new(settings(10), 5);
    let mut out = Effects::new();
    let stream = StreamId {
        epoch: 4,
        number: 9,
    };
    p.resume(at(0), "e1", stream, vec![(7, 70), (8, 80)], &mut out);
    assert_eq!(p.offer(at(0), "e1", 90, &mut out), Ok((stream, 9)));
    assert_eq!(
        sends(&out),
        vec![(7, true, 70), (8, false, 80), (9, false, 90)]
    );
    assert_eq!(p.unconfirmed(), 3);
}

/// Whatever the network does to the messages and the answers (loses, duplicates, delays
/// and reorders them), the entity processes every accepted message exactly once, in order.
#[test]
fn over_a_lossy_reordering_network_every_message_is_processed_once_in_order() {
    for seed in 0..200u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let window = rng.random_range(1..20u64);
        let total = rng.random_range(1..60u32);
        let mut p = Producer::new(settings(window), 1);
        let mut marks = ConsumerMarks::new();
        let mut processed = Vec::new();
        // In flight: (arrival, message) toward the entity and (arrival, answer) back.
        let mut to_entity: Vec<(u64, StreamId, u64, bool, u32)> = Vec::new();
        let mut to_producer: Vec<(u64, StreamId, ConsumerReply)> = Vec::new();
        let mut out = Effects::new();
        let mut offered = 0;
        let mut now_ms = 0u64;
        while processed.len() < total as usize {
            now_ms += rng.random_range(1..200);
            assert!(now_ms < 3_600_000, "seed {seed}: no progress");
            let now = at(now_ms);
            if offered < total && p.offer(now, "e", offered, &mut out).is_ok() {
                offered += 1;
            }
            if p.poll_timeout().is_some_and(|t| t <= now) {
                p.handle_timeout(now, &mut out);
            }
            for effect in out.drain(..) {
                if let ProducerEffect::Send {
                    stream,
                    seq,
                    first,
                    payload,
                    ..
                } = effect
                {
                    let copies = match rng.random_range(0..10) {
                        0 | 1 => 0,
                        2 => 2,
                        _ => 1,
                    };
                    for _ in 0..copies {
                        let arrival = now_ms + rng.random_range(0..500);
                        to_entity.push((arrival, stream, seq, first, payload));
                    }
                }
            }
            to_entity.sort_by_key(|m| m.0);
            while to_entity.first().is_some_and(|m| m.0 <= now_ms) {
                let (_, stream, seq, first, payload) = to_entity.remove(0);
                let msg = Sequenced {
                    producer: "p",
                    stream,
                    seq,
                    first,
                };
                let verdict = marks.judge(&msg);
                if verdict == Verdict::Deliver {
                    marks.processed(&msg, now);
                    processed.push(payload);
                }
                let reply = verdict.reply(seq, window);
                if let Some(reply) = reply
                    && rng.random_range(0..10) >= 2
                {
                    to_producer.push((now_ms + rng.random_range(0..500), stream, reply));
                }
            }
            to_producer.sort_by_key(|m| m.0);
            while to_producer.first().is_some_and(|m| m.0 <= now_ms) {
                let (_, stream, reply) = to_producer.remove(0);
                p.on_reply(now, &"e", stream, reply, &mut out);
            }
        }
        let expected: Vec<u32> = (0..total).collect();
        assert_eq!(processed, expected, "seed {seed}");
    }
}

/// Akka's vector: address 10,000 entities once, let them go quiet, and the producer keeps
/// nothing of them; the earliest deadline is always the next thing to do.
#[test]
fn ten_thousand_entities_addressed_once_are_all_forgotten_once_quiet() {
    let mut p: Producer<u32, u32> = Producer::new(settings(10), 1);
    let mut out = Vec::new();
    for entity in 0..10_000u32 {
        let now = at(u64::from(entity));
        let (stream, seq) = p.offer(now, entity, entity, &mut out).unwrap();
        let reply = ConsumerReply::Confirmed {
            confirmed: seq,
            up_to: seq + 10,
        };
        p.on_reply(now, &entity, stream, reply, &mut out);
    }
    assert_eq!((p.streams(), p.unconfirmed()), (10_000, 0));
    assert_eq!(p.poll_timeout(), Some(at(0) + Duration::from_secs(120)));
    p.handle_timeout(at(5_000) + Duration::from_secs(120), &mut out);
    assert_eq!(p.streams(), 4_999, "the first 5,001 went quiet long enough");
    assert_eq!(p.poll_timeout(), Some(at(5_001) + Duration::from_secs(120)));
    p.handle_timeout(at(10_000) + Duration::from_secs(120), &mut out);
    assert_eq!((p.streams(), p.poll_timeout()), (0, None));
}

#[test]
fn a_confirmation_beyond_what_was_sent_confirms_only_what_was_sent() {
    let mut p = Producer::new(settings(1), 1);
    let mut out = Effects::new();
    let (stream, _) = p.offer(at(0), "e1", 1, &mut out).unwrap();
    p.offer(at(0), "e1", 2, &mut out).unwrap();
    assert_eq!(sends(&out), vec![(1, true, 1)], "the window holds 2 back");
    out.clear();
    let overclaim = ConsumerReply::Confirmed {
        confirmed: 2,
        up_to: 3,
    };
    p.on_reply(at(1), &"e1", stream, overclaim, &mut out);
    assert_eq!(
        out[0],
        ProducerEffect::Confirmed {
            to: "e1",
            stream,
            seq: 1
        }
    );
    assert_eq!(sends(&out), vec![(2, false, 2)], "2 still goes out");
    assert_eq!(p.unconfirmed(), 1);
}

#[test]
fn a_resend_racing_new_offers_never_lets_them_overtake_it() {
    // Three messages go out and their answers are lost; at the very instant the resend
    // timer fires, two new offers arrive. Whichever comes first, every message of the stream
    // reaches the entity in sequence order, once.
    for timer_first in [true, false] {
        let mut p = Producer::new(settings(10), 1);
        let mut out = Effects::new();
        for payload in 1..=3 {
            p.offer(at(0), "e1", payload, &mut out).unwrap();
        }
        let due = p.poll_timeout().unwrap();
        if timer_first {
            p.handle_timeout(due, &mut out);
        }
        p.offer(due, "e1", 4, &mut out).unwrap();
        p.offer(due, "e1", 5, &mut out).unwrap();
        if !timer_first {
            p.handle_timeout(due, &mut out);
        }
        // Each pass over the stream sends in order from where it starts: the resend starts
        // at the oldest (marked first), and a new offer only ever follows what was sent.
        let sent = sends(&out);
        let resend_at = sent
            .iter()
            .rposition(|(seq, first, _)| *seq == 1 && *first)
            .unwrap();
        let after: Vec<u64> = sent[resend_at..].iter().map(|(seq, _, _)| *seq).collect();
        assert!(
            after.windows(2).all(|w| w[0] < w[1]),
            "timer first: {timer_first}; sent {sent:?}"
        );
        // Delivered in the order sent, the entity processes 1..=5 once each.
        let mut marks = ConsumerMarks::new();
        let stream = StreamId {
            epoch: 1,
            number: 1,
        };
        let mut processed = Vec::new();
        for (seq, first, payload) in sent {
            let msg = Sequenced {
                producer: "p",
                stream,
                seq,
                first,
            };
            if marks.judge(&msg) == Verdict::Deliver {
                marks.processed(&msg, due);
                processed.push(payload);
            }
        }
        assert_eq!(processed, vec![1, 2, 3, 4, 5], "timer first: {timer_first}");
    }
}
