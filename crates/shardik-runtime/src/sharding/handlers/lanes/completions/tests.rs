//! Who wakes the kind's task: the test's thread plays the kind's task (and a lane at its
//! home), another thread a lane elsewhere.

use futures_util::FutureExt;

use super::*;

/// Whether the kind's task was woken (a wake-up waits for it if it was not waiting yet).
fn woken<T>(q: &HomeQueue<T>) -> bool {
    q.wake.notified().now_or_never().is_some()
}

/// A lane on another thread hands back `items`.
fn elsewhere<T: Send>(q: &HomeQueue<T>, items: Vec<T>) {
    std::thread::scope(|s| {
        s.spawn(|| q.hand_back(&mut { items }, false));
    });
}

/// A queue whose home is this thread, with the kind's task waiting.
fn at_home() -> HomeQueue<u32> {
    let q = HomeQueue::new();
    q.take(&mut Vec::new());
    q.settle();
    assert!(!woken(&q));
    q
}

fn take(q: &HomeQueue<u32>) -> Vec<u32> {
    let mut items = Vec::new();
    q.take(&mut items);
    q.settle();
    items
}

#[test]
fn a_lane_elsewhere_wakes_the_kind_when_no_lane_is_at_home() {
    let q = at_home();
    elsewhere(&q, vec![1]);
    assert!(woken(&q));
    assert_eq!(take(&q), vec![1]);
}

#[test]
fn a_lane_at_home_announces_at_the_end_of_its_chunk_what_lanes_elsewhere_handed_back() {
    let q = at_home();
    assert!(q.start_chunk(false, Instant::now()), "this thread is home");
    elsewhere(&q, vec![1, 2]);
    assert!(!woken(&q), "left to the lane at home");
    q.hand_back(&mut Vec::new(), true);
    assert!(woken(&q));
    assert_eq!(take(&q), vec![1, 2]);
    // Still at home: the next chunk's end announces again.
    assert!(q.start_chunk(true, Instant::now()));
    elsewhere(&q, vec![3]);
    assert!(!woken(&q));
    q.hand_back(&mut vec![4], true);
    assert!(woken(&q));
    assert_eq!(take(&q), vec![3, 4]);
}

#[test]
fn the_kind_taking_items_looks_again_before_it_waits() {
    let q = at_home();
    let mut items = Vec::new();
    q.take(&mut items);
    elsewhere(&q, vec![5]);
    assert!(!woken(&q), "the kind's task is running");
    q.settle();
    assert!(woken(&q), "what came meanwhile wakes it at once");
    assert_eq!(take(&q), vec![5]);
}

#[test]
fn a_lane_at_home_that_leaves_announces_what_waits() {
    let q = at_home();
    assert!(q.start_chunk(false, Instant::now()));
    elsewhere(&q, vec![6]);
    assert!(!woken(&q));
    q.leave();
    assert!(woken(&q));
    assert_eq!(take(&q), vec![6]);
    // Nobody is at home any more: a lane elsewhere wakes the kind's task itself.
    elsewhere(&q, vec![7]);
    assert!(woken(&q));
}

#[test]
fn a_lane_at_home_silent_too_long_holds_back_no_one() {
    let q = at_home();
    let long_ago = Instant::now()
        .checked_sub(HOME_WAIT + Duration::from_millis(1))
        .expect("the clock is older than that");
    assert!(q.start_chunk(false, long_ago));
    elsewhere(&q, vec![8]);
    assert!(woken(&q), "the lane at home blocks: not waited for");
    assert_eq!(take(&q), vec![8]);
}

#[test]
fn a_lane_away_from_home_is_not_at_home_and_one_that_moved_away_leaves() {
    let q = at_home();
    assert!(q.start_chunk(false, Instant::now()));
    std::thread::scope(|s| {
        s.spawn(|| {
            assert!(!q.start_chunk(false, Instant::now()), "another thread");
            // The lane at home was moved to this thread: it leaves home.
            assert!(!q.start_chunk(true, Instant::now()));
        });
    });
    elsewhere(&q, vec![9]);
    assert!(woken(&q), "nobody at home is bound to announce it");
}
