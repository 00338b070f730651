use std::time::Duration;

use super::*;

const P: &str = "producer-1";

fn stream(epoch: u64, number: u64) -> StreamId {
    StreamId { epoch, number }
}

fn msg(stream: StreamId, seq: u64, first: bool) -> Sequenced<'static> {
    Sequenced {
        producer: P,
        stream,
        seq,
        first,
    }
}

fn at(secs: u64) -> Instant {
    Instant::ZERO + Duration::from_secs(secs)
}

/// Judges `m` and, when it is to be delivered, records it: what an entity does.
fn receive(marks: &mut ConsumerMarks, m: Sequenced<'static>) -> Verdict {
    let verdict = marks.judge(&m);
    if verdict == Verdict::Deliver {
        marks.processed(&m, at(0));
    }
    verdict
}

#[test]
fn a_stream_is_delivered_in_order_and_duplicates_are_confirmed_again() {
    let s = stream(1, 1);
    let mut marks = ConsumerMarks::new();
    assert_eq!(receive(&mut marks, msg(s, 1, true)), Verdict::Deliver);
    assert_eq!(receive(&mut marks, msg(s, 2, false)), Verdict::Deliver);
    assert_eq!(
        receive(&mut marks, msg(s, 1, true)),
        Verdict::Duplicate { confirmed: 2 },
        "a resent first message is not processed twice"
    );
    assert_eq!(
        receive(&mut marks, msg(s, 2, false)),
        Verdict::Duplicate { confirmed: 2 }
    );
    assert_eq!(marks.mark(P).map(|m| m.seq), Some(2));
}

#[test]
fn a_gap_asks_for_the_next_expected_message_and_the_message_is_not_processed() {
    let s = stream(1, 1);
    let mut marks = ConsumerMarks::new();
    receive(&mut marks, msg(s, 1, true));
    assert_eq!(
        receive(&mut marks, msg(s, 3, false)),
        Verdict::Gap { expected: 2 }
    );
    assert_eq!(marks.mark(P).map(|m| m.seq), Some(1), "3 was not recorded");
    assert_eq!(receive(&mut marks, msg(s, 2, false)), Verdict::Deliver);
    assert_eq!(receive(&mut marks, msg(s, 3, false)), Verdict::Deliver);
}

#[test]
fn an_unknown_stream_starts_only_at_a_message_marked_first() {
    let mut marks = ConsumerMarks::new();
    assert_eq!(
        receive(&mut marks, msg(stream(1, 1), 4, false)),
        Verdict::NeedFirst,
        "an entity that knows nothing of the producer cannot tell what is missing"
    );
    assert_eq!(
        receive(&mut marks, msg(stream(1, 1), 4, true)),
        Verdict::Deliver,
        "a producer resending from its oldest unconfirmed message starts there"
    );
    assert_eq!(
        receive(&mut marks, msg(stream(1, 1), 5, false)),
        Verdict::Deliver
    );
}

/// The bug another framework shipped: a producer restarted without a durable queue numbers
/// from 1 again, and the consumer took every new message for a duplicate of the old run's.
/// Here the restarted producer's epoch is greater, so its stream is new.
#[test]
fn a_restarted_producer_numbering_from_one_again_is_not_taken_for_duplicates() {
    let mut marks = ConsumerMarks::new();
    let before = stream(1_000, 1);
    for seq in 1..=5 {
        assert_eq!(
            receive(&mut marks, msg(before, seq, seq == 1)),
            Verdict::Deliver
        );
    }
    let after = stream(2_000, 1);
    for seq in 1..=3 {
        assert_eq!(
            receive(&mut marks, msg(after, seq, seq == 1)),
            Verdict::Deliver,
            "message {seq} after the restart"
        );
    }
    assert_eq!(
        receive(&mut marks, msg(before, 5, false)),
        Verdict::Stale,
        "a late copy from before the restart is dropped"
    );
    assert_eq!(
        receive(&mut marks, msg(before, 6, false)),
        Verdict::Stale,
        "even one the entity never saw: its producer has moved on"
    );
}

#[test]
fn a_new_stream_not_marked_first_asks_for_its_first_message() {
    let mut marks = ConsumerMarks::new();
    receive(&mut marks, msg(stream(1, 1), 1, true));
    assert_eq!(
        receive(&mut marks, msg(stream(1, 2), 2, false)),
        Verdict::NeedFirst,
        "the first message of the new stream was lost or overtaken"
    );
    assert_eq!(
        receive(&mut marks, msg(stream(1, 2), 1, true)),
        Verdict::Deliver
    );
    assert_eq!(
        receive(&mut marks, msg(stream(1, 2), 2, false)),
        Verdict::Deliver
    );
}

#[test]
fn producers_are_followed_apart() {
    let mut marks = ConsumerMarks::new();
    let s = stream(1, 1);
    receive(&mut marks, msg(s, 1, true));
    let other = Sequenced {
        producer: "producer-2",
        stream: s,
        seq: 1,
        first: true,
    };
    assert_eq!(marks.judge(&other), Verdict::Deliver);
    marks.processed(&other, at(0));
    assert_eq!(marks.len(), 2);
}

#[test]
fn marks_of_producers_gone_quiet_expire_and_recovered_marks_judge_as_before() {
    let mut marks = ConsumerMarks::new();
    let s = stream(1, 1);
    marks.processed(&msg(s, 1, true), at(10));
    let other = Sequenced {
        producer: "producer-2",
        stream: s,
        seq: 1,
        first: true,
    };
    marks.processed(&other, at(100));
    let expired = marks.expire(at(150), Duration::from_secs(60));
    assert_eq!(expired, vec![Arc::<str>::from(P)]);
    assert_eq!(marks.len(), 1);
    assert!(marks.mark("producer-2").is_some());

    let mut recovered = ConsumerMarks::new();
    recovered.restore(
        "producer-2",
        Mark {
            stream: s,
            seq: 1,
            touched: at(100),
        },
    );
    assert_eq!(
        recovered.judge(&Sequenced { seq: 1, ..other }),
        Verdict::Duplicate { confirmed: 1 }
    );
}

#[test]
fn each_verdict_answers_the_producer_and_a_stale_message_gets_no_answer() {
    assert_eq!(
        Verdict::Deliver.reply(7, 50),
        Some(ConsumerReply::Confirmed {
            confirmed: 7,
            up_to: 57
        })
    );
    assert_eq!(
        Verdict::Duplicate { confirmed: 9 }.reply(4, 50),
        Some(ConsumerReply::Confirmed {
            confirmed: 9,
            up_to: 59
        }),
        "a duplicate confirms how far the entity got, not the duplicate"
    );
    assert_eq!(
        Verdict::Gap { expected: 3 }.reply(5, 50),
        Some(ConsumerReply::Gap { expected: 3 })
    );
    assert_eq!(
        Verdict::NeedFirst.reply(5, 50),
        Some(ConsumerReply::NeedFirst)
    );
    assert_eq!(Verdict::Stale.reply(5, 50), None);
}
