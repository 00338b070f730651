//! When a kind's handlers go to its lanes.

use shardik_core::membership::Address;

use super::*;

/// An entity whose handlers the tests only time; they never run.
struct Idle;

impl Entity for Idle {
    type Command = ();

    async fn handle(&mut self, _: (), _: &mut crate::sharding::EntityContext<Self>) {}
}

fn lanes() -> Lanes<Idle> {
    Lanes::start(
        2,
        "idle",
        &UniqueAddress::new(Address::new("127.0.0.1", 1), 7),
    )
}

/// The kind's task times `n` handlers of `each`, then ends its turn.
fn ran(lanes: &mut Lanes<Idle>, n: usize, each: Duration) {
    for _ in 0..n {
        lanes.sampled(each);
    }
    lanes.send();
}

#[tokio::test]
async fn one_slow_handler_does_not_send_short_ones_to_the_lanes() {
    let mut lanes = lanes();
    ran(&mut lanes, 20, Duration::from_nanos(300));
    assert!(!lanes.spreading());
    // Preempted for 5 ms: counted as 8 µs at most.
    ran(&mut lanes, 1, Duration::from_millis(5));
    assert!(
        !lanes.spreading(),
        "one outlier spread a kind of short handlers"
    );
    ran(&mut lanes, 20, Duration::from_nanos(300));
    assert!(!lanes.spreading());
}

#[tokio::test]
async fn handlers_of_a_few_microseconds_go_to_the_lanes_and_short_ones_come_back() {
    let mut lanes = lanes();
    ran(&mut lanes, 40, Duration::from_micros(5));
    assert!(lanes.spreading());
    ran(&mut lanes, 40, Duration::from_nanos(300));
    assert!(!lanes.spreading());
    // A steady stream of long handlers spreads too: the cap does not hold them back.
    ran(&mut lanes, 40, Duration::from_millis(1));
    assert!(lanes.spreading());
}
