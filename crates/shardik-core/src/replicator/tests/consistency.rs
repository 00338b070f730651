//! The counts each level requires: the reference's documented examples.

use crate::replicator::consistency::Level;

#[test]
fn a_majority_is_more_than_half_and_min_cap_raises_it_up_to_all() {
    let majority = Level::Majority { min_cap: 0 };
    assert_eq!(majority.required(5), Some(3));
    assert_eq!(majority.required(6), Some(4));
    assert_eq!(majority.required(7), Some(4));
    let capped = Level::Majority { min_cap: 5 };
    assert_eq!(capped.required(3), Some(3));
    assert_eq!(capped.required(6), Some(5));
    assert_eq!(capped.required(12), Some(7));
}

#[test]
fn exact_counts_fail_when_too_few_replicas_exist_and_the_rest_shrink() {
    assert_eq!(Level::Exactly(3).required(2), None);
    assert_eq!(Level::Exactly(2).required(2), Some(2));
    assert_eq!(Level::All.required(1), Some(1));
    assert_eq!(Level::Majority { min_cap: 0 }.required(1), Some(1));
    assert_eq!(Level::Local.required(9), Some(1));
}
