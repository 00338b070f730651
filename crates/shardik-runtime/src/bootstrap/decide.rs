//! The join decision (Akka Management's `LowestAddressJoinDecider`), a pure function of what
//! discovery found, what the contact points answered, and the time: no I/O, so that every
//! rule is unit-tested.
//!
//! In order:
//! 1. a contact point that belongs to a cluster (its answer lists seed nodes other than this
//!    node's own address) is joined at once, through those seed nodes;
//! 2. otherwise a new cluster is formed only when at least `required-contact-point-nr`
//!    contact points answered, the discovered set has not changed for `stable-margin`, every
//!    discovered contact point answered (`contact-with-all-contact-points`), this node may form
//!    one (`new-cluster-enabled`), and its own contact point is the lowest of those that
//!    answered (see `contact_point.rs` for the order);
//! 3. otherwise it keeps probing, and says what it waits for.
//!
//! An answer counts for `probing-failure-timeout` after it arrived, so a contact point that
//! stopped answering drops out of the decision.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::{Duration, Instant};

use shardik_core::membership::Address;

use super::contact_point::ContactPoint;

/// Seed nodes handed to the join at most (Akka's `take(5)`).
pub const MAX_SEED_NODES: usize = 5;

/// The settings the decision follows.
#[derive(Clone, Debug)]
pub struct Rules {
    /// `required-contact-point-nr`.
    pub required_contact_point_nr: usize,
    /// `stable-margin`.
    pub stable_margin: Duration,
    /// `contact-with-all-contact-points`.
    pub contact_with_all_contact_points: bool,
    /// `new-cluster-enabled`.
    pub new_cluster_enabled: bool,
    /// `probing-failure-timeout`: how long an answer counts.
    pub probing_failure_timeout: Duration,
    /// This node's cluster address: never a seed to join through (a contact point may still
    /// list this address's previous incarnation).
    pub self_address: Address,
}

/// The contact points of the last successful lookup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Discovered {
    /// The contact points.
    pub contact_points: BTreeSet<ContactPoint>,
    /// When the set last changed (first seen, or different from the lookup before).
    pub changed_at: Instant,
}

/// One contact point's last answer to `GET /bootstrap/seed-nodes`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observation {
    /// When it arrived.
    pub observed_at: Instant,
    /// The cluster addresses of the seed nodes it listed (empty: it is in no cluster).
    pub seed_nodes: BTreeSet<Address>,
}

/// What to do now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Join the cluster of `contact_point` through these seed nodes.
    JoinExisting {
        /// The contact point whose answer named them.
        contact_point: ContactPoint,
        /// At most [`MAX_SEED_NODES`], lowest addresses first, never this node's own.
        seed_nodes: Vec<Address>,
    },
    /// Form a new cluster: this node joins itself.
    FormNewCluster {
        /// The contact points that answered (this node's the lowest).
        contact_points: BTreeSet<ContactPoint>,
    },
    /// Probe again next round.
    KeepProbing(Waiting),
}

/// Why no join happens yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Waiting {
    /// No successful lookup yet, the last one failed, or it found nothing.
    NothingDiscovered,
    /// The only seed node any contact point listed is this node's own address (a previous
    /// incarnation that is still listed).
    OnlySelfListed,
    /// Fewer contact points answered than `required-contact-point-nr`.
    TooFewContactPoints {
        /// Answered.
        answered: usize,
        /// Discovered.
        discovered: usize,
        /// Required.
        required: usize,
    },
    /// The discovered set changed less than `stable-margin` ago.
    NotStable {
        /// Time left until the margin has passed.
        remaining: Duration,
    },
    /// Some discovered contact points have not answered (recently).
    Unanswered(Vec<ContactPoint>),
    /// `new-cluster-enabled` is off: this node only joins.
    NewClusterDisabled {
        /// The contact point that would form the cluster.
        lowest: ContactPoint,
    },
    /// Another contact point is the lowest: it forms the cluster, this node joins it then.
    NotLowest {
        /// The lowest contact point.
        lowest: ContactPoint,
        /// Whether this node's own contact point is among the discovered ones at all.
        self_discovered: bool,
    },
}

impl Waiting {
    /// A stable name of the reason, for logging each change once.
    pub fn kind(&self) -> &'static str {
        match self {
            Waiting::NothingDiscovered => "nothing-discovered",
            Waiting::OnlySelfListed => "only-self-listed",
            Waiting::TooFewContactPoints { .. } => "too-few-contact-points",
            Waiting::NotStable { .. } => "not-stable",
            Waiting::Unanswered(_) => "unanswered",
            Waiting::NewClusterDisabled { .. } => "new-cluster-disabled",
            Waiting::NotLowest { .. } => "not-lowest",
        }
    }
}

impl fmt::Display for Waiting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Waiting::NothingDiscovered => write!(f, "no contact points discovered yet"),
            Waiting::OnlySelfListed => write!(
                f,
                "contact points list only this node's own address as a seed node (a previous \
                 incarnation); waiting for them to list other members"
            ),
            Waiting::TooFewContactPoints {
                answered,
                discovered,
                required,
            } => write!(
                f,
                "{answered} of {discovered} discovered contact points answered, fewer than \
                 required-contact-point-nr = {required}"
            ),
            Waiting::NotStable { remaining } => write!(
                f,
                "the discovered contact points changed less than stable-margin ago \
                 ({remaining:?} to go)"
            ),
            Waiting::Unanswered(points) => {
                let list: Vec<String> = points.iter().map(ToString::to_string).collect();
                write!(
                    f,
                    "no recent answer from {} (contact-with-all-contact-points is on)",
                    list.join(", ")
                )
            }
            Waiting::NewClusterDisabled { lowest } => write!(
                f,
                "no contact point belongs to a cluster, and new-cluster-enabled is off: this \
                 node only joins an existing cluster (the lowest contact point is {lowest})"
            ),
            Waiting::NotLowest {
                lowest,
                self_discovered,
            } => {
                write!(
                    f,
                    "no contact point belongs to a cluster yet; the lowest, {lowest}, forms it \
                     and this node joins it then"
                )?;
                if !self_discovered {
                    write!(
                        f,
                        " (this node's own management endpoint is not among the discovered \
                         contact points, so it can never form a cluster itself)"
                    )?;
                }
                Ok(())
            }
        }
    }
}

/// The decision at `now`. `discovered` is `None` before the first successful lookup and
/// after a failed one; `self_points` are the contact points that are this node.
pub fn decide(
    rules: &Rules,
    now: Instant,
    discovered: Option<&Discovered>,
    observations: &BTreeMap<ContactPoint, Observation>,
    self_points: &BTreeSet<ContactPoint>,
) -> Decision {
    let Some(discovered) = discovered.filter(|d| !d.contact_points.is_empty()) else {
        return Decision::KeepProbing(Waiting::NothingDiscovered);
    };
    // Only answers from contact points still discovered, and recent enough.
    let fresh: BTreeMap<&ContactPoint, &Observation> = observations
        .iter()
        .filter(|(cp, obs)| {
            discovered.contact_points.contains(*cp)
                && now.saturating_duration_since(obs.observed_at) <= rules.probing_failure_timeout
        })
        .collect();

    // 1. An existing cluster wins: the lowest contact point that lists other seed nodes.
    let mut only_self_listed = false;
    for (cp, obs) in &fresh {
        let seeds: Vec<Address> = obs
            .seed_nodes
            .iter()
            .filter(|a| **a != rules.self_address)
            .take(MAX_SEED_NODES)
            .cloned()
            .collect();
        if !seeds.is_empty() {
            return Decision::JoinExisting {
                contact_point: (*cp).clone(),
                seed_nodes: seeds,
            };
        }
        only_self_listed |= !obs.seed_nodes.is_empty();
    }
    if only_self_listed {
        return Decision::KeepProbing(Waiting::OnlySelfListed);
    }

    // 2. No cluster anywhere: may this node form one?
    if fresh.len() < rules.required_contact_point_nr {
        return Decision::KeepProbing(Waiting::TooFewContactPoints {
            answered: fresh.len(),
            discovered: discovered.contact_points.len(),
            required: rules.required_contact_point_nr,
        });
    }
    let stable_for = now.saturating_duration_since(discovered.changed_at);
    if stable_for < rules.stable_margin {
        return Decision::KeepProbing(Waiting::NotStable {
            remaining: rules.stable_margin - stable_for,
        });
    }
    if rules.contact_with_all_contact_points {
        let unanswered: Vec<ContactPoint> = discovered
            .contact_points
            .iter()
            .filter(|cp| !fresh.contains_key(cp))
            .cloned()
            .collect();
        if !unanswered.is_empty() {
            return Decision::KeepProbing(Waiting::Unanswered(unanswered));
        }
    }
    let lowest = (*fresh
        .keys()
        .next()
        .expect("at least required-contact-point-nr (>= 1) answered"))
    .clone();
    if !rules.new_cluster_enabled {
        return Decision::KeepProbing(Waiting::NewClusterDisabled { lowest });
    }
    if !self_points.contains(&lowest) {
        let self_discovered = discovered
            .contact_points
            .iter()
            .any(|cp| self_points.contains(cp));
        return Decision::KeepProbing(Waiting::NotLowest {
            lowest,
            self_discovered,
        });
    }
    Decision::FormNewCluster {
        contact_points: fresh.keys().map(|cp| (*cp).clone()).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    fn cp(i: u8) -> ContactPoint {
        ContactPoint::new(&format!("node-{i}.shop.test"), 8558, None)
    }

    fn addr(i: u8) -> Address {
        Address::new(format!("10.0.0.{i}"), 2552)
    }

    fn rules(self_i: u8) -> Rules {
        Rules {
            required_contact_point_nr: 3,
            stable_margin: 5 * SECOND,
            contact_with_all_contact_points: true,
            new_cluster_enabled: true,
            probing_failure_timeout: 3 * SECOND,
            self_address: addr(self_i),
        }
    }

    /// Nodes `ids` discovered at `t0`.
    fn discovered(t0: Instant, ids: &[u8]) -> Discovered {
        Discovered {
            contact_points: ids.iter().map(|&i| cp(i)).collect(),
            changed_at: t0,
        }
    }

    /// Answers of nodes `ids` at `at`, none in a cluster.
    fn no_cluster(at: Instant, ids: &[u8]) -> BTreeMap<ContactPoint, Observation> {
        ids.iter()
            .map(|&i| {
                (
                    cp(i),
                    Observation {
                        observed_at: at,
                        seed_nodes: BTreeSet::new(),
                    },
                )
            })
            .collect()
    }

    fn me(i: u8) -> BTreeSet<ContactPoint> {
        BTreeSet::from([cp(i)])
    }

    #[test]
    fn the_lowest_forms_only_once_the_set_is_stable_and_all_answered() {
        let t0 = Instant::now();
        let d = discovered(t0, &[1, 2, 3]);
        let later = t0 + 5 * SECOND;
        // Stable and everyone answered: node 1 forms.
        assert!(matches!(
            decide(
                &rules(1),
                later,
                Some(&d),
                &no_cluster(later, &[1, 2, 3]),
                &me(1)
            ),
            Decision::FormNewCluster { .. }
        ));
        // The others wait for it.
        for i in [2, 3] {
            assert_eq!(
                decide(
                    &rules(i),
                    later,
                    Some(&d),
                    &no_cluster(later, &[1, 2, 3]),
                    &me(i)
                ),
                Decision::KeepProbing(Waiting::NotLowest {
                    lowest: cp(1),
                    self_discovered: true
                })
            );
        }
        // Not stable yet: nobody forms.
        let early = t0 + 4 * SECOND;
        assert_eq!(
            decide(
                &rules(1),
                early,
                Some(&d),
                &no_cluster(early, &[1, 2, 3]),
                &me(1)
            ),
            Decision::KeepProbing(Waiting::NotStable { remaining: SECOND })
        );
    }

    #[test]
    fn a_slow_lowest_node_delays_the_cluster_and_nobody_else_forms() {
        let t0 = Instant::now();
        let d = discovered(t0, &[1, 2, 3, 4]);
        let later = t0 + 60 * SECOND;
        // Node 1 is discovered but does not answer: enough others answered, but not all.
        for i in [2, 3, 4] {
            assert_eq!(
                decide(
                    &rules(i),
                    later,
                    Some(&d),
                    &no_cluster(later, &[2, 3, 4]),
                    &me(i)
                ),
                Decision::KeepProbing(Waiting::Unanswered(vec![cp(1)]))
            );
        }
        // Without contact-with-all-contact-points, the lowest of those that answered forms.
        let lenient = Rules {
            contact_with_all_contact_points: false,
            ..rules(2)
        };
        assert!(matches!(
            decide(
                &lenient,
                later,
                Some(&d),
                &no_cluster(later, &[2, 3, 4]),
                &me(2)
            ),
            Decision::FormNewCluster { .. }
        ));
    }

    #[test]
    fn too_few_answers_or_nothing_discovered_never_form() {
        let t0 = Instant::now();
        let later = t0 + 60 * SECOND;
        let d = discovered(t0, &[1, 2]);
        assert_eq!(
            decide(
                &rules(1),
                later,
                Some(&d),
                &no_cluster(later, &[1, 2]),
                &me(1)
            ),
            Decision::KeepProbing(Waiting::TooFewContactPoints {
                answered: 2,
                discovered: 2,
                required: 3
            })
        );
        assert_eq!(
            decide(
                &rules(1),
                later,
                None,
                &no_cluster(later, &[1, 2, 3]),
                &me(1)
            ),
            Decision::KeepProbing(Waiting::NothingDiscovered)
        );
    }

    #[test]
    fn old_answers_and_answers_of_contact_points_gone_from_discovery_do_not_count() {
        let t0 = Instant::now();
        let d = discovered(t0, &[1, 2, 3]);
        let later = t0 + 60 * SECOND;
        let mut obs = no_cluster(later - 4 * SECOND, &[3]);
        obs.extend(no_cluster(later, &[1, 2]));
        assert_eq!(
            decide(&rules(1), later, Some(&d), &obs, &me(1)),
            Decision::KeepProbing(Waiting::TooFewContactPoints {
                answered: 2,
                discovered: 3,
                required: 3
            })
        );
        // A cluster seen through a contact point no longer discovered is not joined.
        let mut obs = no_cluster(later, &[1, 2, 3]);
        obs.insert(
            cp(9),
            Observation {
                observed_at: later,
                seed_nodes: BTreeSet::from([addr(9)]),
            },
        );
        assert!(matches!(
            decide(&rules(1), later, Some(&d), &obs, &me(1)),
            Decision::FormNewCluster { .. }
        ));
    }

    #[test]
    fn an_existing_cluster_is_joined_before_anything_else() {
        let t0 = Instant::now();
        let d = discovered(t0, &[1, 2, 3]);
        // Right after discovery (not stable) and with too few answers, the lowest node still
        // joins the cluster one contact point reports, through its seeds (never itself).
        let mut obs = no_cluster(t0, &[1]);
        obs.insert(
            cp(3),
            Observation {
                observed_at: t0,
                seed_nodes: BTreeSet::from([addr(1), addr(3), addr(2)]),
            },
        );
        assert_eq!(
            decide(&rules(1), t0, Some(&d), &obs, &me(1)),
            Decision::JoinExisting {
                contact_point: cp(3),
                seed_nodes: vec![addr(2), addr(3)],
            }
        );
    }

    #[test]
    fn at_most_five_seed_nodes_from_the_lowest_contact_point_in_a_cluster() {
        let t0 = Instant::now();
        let d = discovered(t0, &[1, 2, 3]);
        let mut obs = no_cluster(t0, &[1]);
        obs.insert(
            cp(2),
            Observation {
                observed_at: t0,
                seed_nodes: (10..20).map(addr).collect(),
            },
        );
        obs.insert(
            cp(3),
            Observation {
                observed_at: t0,
                seed_nodes: BTreeSet::from([addr(30)]),
            },
        );
        let Decision::JoinExisting {
            contact_point,
            seed_nodes,
        } = decide(&rules(1), t0, Some(&d), &obs, &me(1))
        else {
            panic!("joins")
        };
        assert_eq!(contact_point, cp(2));
        assert_eq!(seed_nodes, (10..15).map(addr).collect::<Vec<_>>());
    }

    #[test]
    fn a_node_listed_only_by_its_own_old_incarnation_keeps_probing() {
        let t0 = Instant::now();
        let later = t0 + 60 * SECOND;
        let d = discovered(t0, &[1, 2, 3]);
        let mut obs = no_cluster(later, &[1, 2]);
        obs.insert(
            cp(3),
            Observation {
                observed_at: later,
                seed_nodes: BTreeSet::from([addr(1)]),
            },
        );
        assert_eq!(
            decide(&rules(1), later, Some(&d), &obs, &me(1)),
            Decision::KeepProbing(Waiting::OnlySelfListed)
        );
    }

    #[test]
    fn never_forms_with_new_cluster_disabled_but_still_joins() {
        let t0 = Instant::now();
        let d = discovered(t0, &[1, 2, 3]);
        let off = Rules {
            new_cluster_enabled: false,
            ..rules(1)
        };
        // Every condition to form holds, for hours: still no.
        for minutes in [1, 10, 600] {
            let now = t0 + 60 * minutes * SECOND;
            assert_eq!(
                decide(&off, now, Some(&d), &no_cluster(now, &[1, 2, 3]), &me(1)),
                Decision::KeepProbing(Waiting::NewClusterDisabled { lowest: cp(1) })
            );
        }
        let now = t0 + 10 * SECOND;
        let mut obs = no_cluster(now, &[1, 3]);
        obs.insert(
            cp(2),
            Observation {
                observed_at: now,
                seed_nodes: BTreeSet::from([addr(2), addr(3)]),
            },
        );
        assert!(matches!(
            decide(&off, now, Some(&d), &obs, &me(1)),
            Decision::JoinExisting { .. }
        ));
    }

    #[test]
    fn a_node_not_among_the_contact_points_never_forms_and_says_so() {
        let t0 = Instant::now();
        let later = t0 + 60 * SECOND;
        let d = discovered(t0, &[2, 3, 4]);
        assert_eq!(
            decide(
                &rules(1),
                later,
                Some(&d),
                &no_cluster(later, &[2, 3, 4]),
                &me(1)
            ),
            Decision::KeepProbing(Waiting::NotLowest {
                lowest: cp(2),
                self_discovered: false
            })
        );
    }
}
