//! Proof, from the nodes' own reports, that no counter ran on two nodes at once.
//!
//! Each node answers `GET /demo/counters/live` with the instant `now` and, for every counter
//! incarnation live on it at that instant, the instant it began; both are `CLOCK_MONOTONIC`,
//! which every process of the machine shares. So each report proves an interval
//! `[startedAt, now]` during which that incarnation was live. Merging a node's reports gives,
//! per incarnation, `[startedAt, last now that listed it]`: a lower bound of its real life.
//! Two incarnations of one counter on two node processes overlapped for certain when
//! `max(start_a, start_b) < min(last_a, last_b)`, whatever the polls' timing; polling often
//! only makes the bounds tighter (an overlap shorter than the polling interval can be missed,
//! never invented).

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

/// One answer of `GET /demo/counters/live`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// `host:port` of the node.
    pub node: String,
    /// The node process's incarnation.
    pub node_uid: String,
    /// When the node read its table.
    pub now: u64,
    /// `(counter id, startedAt)` of every live incarnation.
    pub counters: Vec<(String, u64)>,
}

impl Report {
    /// Parses the JSON answer, refusing anything that is not one.
    pub fn parse(v: &Value) -> Result<Report, String> {
        let text = |key: &str| {
            v[key]
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| format!("no {key} in {v}"))
        };
        let now = v["now"].as_u64().ok_or_else(|| format!("no now in {v}"))?;
        let mut counters = Vec::new();
        for c in v["counters"]
            .as_array()
            .ok_or_else(|| format!("no counters in {v}"))?
        {
            let id = c["id"].as_str().ok_or_else(|| format!("no id in {c}"))?;
            let started = c["startedAt"]
                .as_u64()
                .ok_or_else(|| format!("no startedAt in {c}"))?;
            if started > now {
                return Err(format!("{id} started after the report's instant: {v}"));
            }
            counters.push((id.to_string(), started));
        }
        Ok(Report {
            node: text("node")?,
            node_uid: text("nodeUid")?,
            now,
            counters,
        })
    }
}

/// What the reports say of one incarnation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Incarnation {
    /// The node's address.
    pub node: String,
    /// The node process's incarnation.
    pub node_uid: String,
    /// When it began.
    pub started: u64,
    /// The first report listing it.
    pub first_seen: u64,
    /// The last report listing it: it was live at least until then.
    pub last_seen: u64,
}

impl fmt::Display for Incarnation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "on {} (uid {}) started at {} ns, listed from {} to {} ns",
            self.node, self.node_uid, self.started, self.first_seen, self.last_seen
        )
    }
}

/// Two incarnations of one counter on two node processes that were live at the same time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Overlap {
    /// The counter.
    pub counter: String,
    /// One incarnation.
    pub a: Incarnation,
    /// The other.
    pub b: Incarnation,
}

impl fmt::Display for Overlap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let from = self.a.started.max(self.b.started);
        let to = self.a.last_seen.min(self.b.last_seen);
        write!(
            f,
            "{} was live on two nodes for at least {:.1} ms ({from}..{to} ns):\n  {}\n  {}",
            self.counter,
            (to - from) as f64 / 1e6,
            self.a,
            self.b
        )
    }
}

/// Everything the reports said, merged.
#[derive(Debug, Default)]
pub struct Liveness {
    /// Counter id → (node uid, startedAt) → incarnation.
    by_counter: BTreeMap<String, BTreeMap<(String, u64), Incarnation>>,
    /// Node uid → its newest report.
    latest: BTreeMap<String, Report>,
    reports: u64,
}

impl Liveness {
    /// Takes one report in.
    pub fn record(&mut self, r: Report) {
        for (id, started) in &r.counters {
            let seen = self
                .by_counter
                .entry(id.clone())
                .or_default()
                .entry((r.node_uid.clone(), *started))
                .or_insert_with(|| Incarnation {
                    node: r.node.clone(),
                    node_uid: r.node_uid.clone(),
                    started: *started,
                    first_seen: r.now,
                    last_seen: r.now,
                });
            seen.first_seen = seen.first_seen.min(r.now);
            seen.last_seen = seen.last_seen.max(r.now);
        }
        self.reports += 1;
        let newer = self
            .latest
            .get(&r.node_uid)
            .is_none_or(|prev| prev.now <= r.now);
        if newer {
            self.latest.insert(r.node_uid.clone(), r);
        }
    }

    /// How many reports came in.
    pub fn reports(&self) -> u64 {
        self.reports
    }

    /// Every pair of incarnations of one counter, on two node processes, proven live at the
    /// same time.
    pub fn overlaps(&self) -> Vec<Overlap> {
        let mut found = Vec::new();
        for (counter, incarnations) in &self.by_counter {
            let all: Vec<&Incarnation> = incarnations.values().collect();
            for (i, a) in all.iter().enumerate() {
                for b in &all[i + 1..] {
                    if a.node_uid != b.node_uid
                        && a.started.max(b.started) < a.last_seen.min(b.last_seen)
                    {
                        found.push(Overlap {
                            counter: counter.clone(),
                            a: (*a).clone(),
                            b: (*b).clone(),
                        });
                    }
                }
            }
        }
        found
    }

    /// The incarnations of `counter`, oldest first.
    pub fn incarnations(&self, counter: &str) -> Vec<Incarnation> {
        let mut all: Vec<Incarnation> = self
            .by_counter
            .get(counter)
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        all.sort_by_key(|i| (i.started, i.node_uid.clone()));
        all
    }

    /// The counters listed by the newest report of the node process `node_uid`.
    pub fn live_on(&self, node_uid: &str) -> Vec<String> {
        self.latest
            .get(node_uid)
            .map(|r| r.counters.iter().map(|(id, _)| id.clone()).collect())
            .unwrap_or_default()
    }

    /// The last instant the node process `node_uid` was seen running any counter.
    pub fn last_running(&self, node_uid: &str) -> Option<u64> {
        self.by_counter
            .values()
            .flat_map(BTreeMap::values)
            .filter(|i| i.node_uid == node_uid)
            .map(|i| i.last_seen)
            .max()
    }

    /// The instant of the newest report of the node process `node_uid`.
    pub fn last_report(&self, node_uid: &str) -> Option<u64> {
        self.latest.get(node_uid).map(|r| r.now)
    }

    /// The uids of the node processes at `node` (address) that reported, oldest report first.
    pub fn uids_at(&self, node: &str) -> Vec<String> {
        let mut at: Vec<&Report> = self.latest.values().filter(|r| r.node == node).collect();
        at.sort_by_key(|r| r.now);
        at.into_iter().map(|r| r.node_uid.clone()).collect()
    }

    /// Every move of a counter from one node process to another, in the order of their
    /// incarnations.
    pub fn moves(&self) -> Vec<Move> {
        let mut moves = Vec::new();
        for counter in self.by_counter.keys() {
            let all = self.incarnations(counter);
            for w in all.windows(2) {
                if w[0].node_uid != w[1].node_uid {
                    moves.push(Move {
                        counter: counter.clone(),
                        gap_ns: i128::from(w[1].started) - i128::from(w[0].last_seen),
                        from: w[0].clone(),
                        to: w[1].clone(),
                    });
                }
            }
        }
        moves
    }
}

/// A counter's move from one node process to another.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Move {
    /// The counter.
    pub counter: String,
    /// The earlier incarnation.
    pub from: Incarnation,
    /// The later one.
    pub to: Incarnation,
    /// From the last report of the earlier to the start of the later: how far apart they
    /// were at least (negative: an overlap).
    pub gap_ns: i128,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(node: &str, now: u64, counters: &[(&str, u64)]) -> Report {
        Report {
            node: format!("10.0.0.{node}:2552"),
            node_uid: node.to_string(),
            now,
            counters: counters
                .iter()
                .map(|(id, s)| (id.to_string(), *s))
                .collect(),
        }
    }

    /// (counter, node uid, node uid) of an overlap.
    type Pair = (String, String, String);

    fn overlapping(reports: &[Report]) -> Vec<Pair> {
        let mut l = Liveness::default();
        for r in reports {
            l.record(r.clone());
        }
        l.overlaps()
            .into_iter()
            .map(|o| (o.counter, o.a.node_uid, o.b.node_uid))
            .collect()
    }

    #[test]
    fn overlaps_are_proven_from_intervals_not_from_poll_order() {
        let none: Vec<Pair> = Vec::new();
        let c1 = || ("c1".to_string(), "1".to_string(), "2".to_string());
        let cases: Vec<(&str, Vec<Report>, Vec<Pair>)> = vec![
            (
                "a handover: node 2 starts after node 1 was last seen",
                vec![
                    report("1", 100, &[("c1", 10)]),
                    report("1", 200, &[("c1", 10)]),
                    report("2", 300, &[("c1", 250)]),
                ],
                none.clone(),
            ),
            (
                "node 2 started before node 1's last listing: both live at 200",
                vec![
                    report("1", 200, &[("c1", 10)]),
                    report("2", 300, &[("c1", 150)]),
                ],
                vec![c1()],
            ),
            (
                "reports may arrive in any order",
                vec![
                    report("2", 300, &[("c1", 150)]),
                    report("1", 200, &[("c1", 10)]),
                    report("1", 100, &[("c1", 10)]),
                ],
                vec![c1()],
            ),
            (
                "a start at the other's last listing is not proven to overlap",
                vec![
                    report("1", 200, &[("c1", 10)]),
                    report("2", 300, &[("c1", 200)]),
                ],
                none.clone(),
            ),
            (
                "two incarnations on one node process are its own business",
                vec![
                    report("1", 200, &[("c1", 10)]),
                    report("1", 300, &[("c1", 150)]),
                ],
                none.clone(),
            ),
            (
                "other counters do not mix",
                vec![
                    report("1", 200, &[("c1", 10)]),
                    report("2", 300, &[("c2", 150)]),
                ],
                none,
            ),
        ];
        for (what, reports, want) in cases {
            assert_eq!(overlapping(&reports), want, "{what}");
        }
    }

    #[test]
    fn moves_measure_the_gap_and_the_newest_report_says_what_runs() {
        let mut l = Liveness::default();
        l.record(report("1", 200, &[("c1", 10), ("c2", 20)]));
        l.record(report("2", 300, &[("c1", 260)]));
        l.record(report("1", 320, &[("c2", 20)]));
        let moves = l.moves();
        assert_eq!(moves.len(), 1);
        assert_eq!(moves[0].counter, "c1");
        assert_eq!(
            (
                moves[0].from.node_uid.as_str(),
                moves[0].to.node_uid.as_str()
            ),
            ("1", "2")
        );
        assert_eq!(
            moves[0].gap_ns, 60,
            "started at 260, last seen elsewhere at 200"
        );
        assert_eq!(l.live_on("1"), ["c2"]);
        assert_eq!(l.live_on("2"), ["c1"]);
        assert_eq!(l.uids_at("10.0.0.1:2552"), ["1"]);
        assert_eq!(l.last_running("1"), Some(320));
        assert_eq!(l.last_running("2"), Some(300));
        assert_eq!(l.last_running("3"), None);
        l.record(report("1", 400, &[]));
        assert_eq!(
            l.last_running("1"),
            Some(320),
            "an empty report runs nothing"
        );
        assert_eq!(l.last_report("1"), Some(400));
        assert_eq!(l.reports(), 4);
    }

    #[test]
    fn a_report_is_parsed_or_refused() {
        let v = serde_json::json!({"node": "10.0.0.1:2552", "nodeUid": "9", "now": 50,
            "counters": [{"id": "c1", "startedAt": 40}]});
        assert_eq!(
            Report::parse(&v).unwrap(),
            Report {
                node: "10.0.0.1:2552".into(),
                node_uid: "9".into(),
                now: 50,
                counters: vec![("c1".into(), 40)],
            }
        );
        let later = serde_json::json!({"node": "n", "nodeUid": "9", "now": 50,
            "counters": [{"id": "c1", "startedAt": 60}]});
        assert!(Report::parse(&later).unwrap_err().contains("after"));
        assert!(Report::parse(&serde_json::json!({"now": 1})).is_err());
    }
}
