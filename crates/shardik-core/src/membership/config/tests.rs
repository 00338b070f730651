//! Unit tests of the membership settings.

use super::*;

#[test]
fn different_view_probability_falls_linearly_from_400_to_1200() {
    let c = MembershipConfig::default();
    assert_eq!(c.different_view_probability(10), 0.8);
    assert_eq!(c.different_view_probability(400), 0.8);
    assert!((c.different_view_probability(800) - 0.44).abs() < 1e-9);
    assert!((c.different_view_probability(1200) - 0.08).abs() < 1e-9);
    assert!((c.different_view_probability(10_000) - 0.08).abs() < 1e-9);
}
