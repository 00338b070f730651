//! Driving the demo's durable counters (`shardik node --demo-counters`) through the management
//! API, and the books that check no acknowledged increment is ever lost or applied twice.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use super::BOUND;

/// Sharding timers fast enough for a test that takes seconds.
pub const SHARDING_FAST: &[(&str, &str)] = &[
    ("SHARDIK_CLUSTER__SHARDING__NUMBER_OF_SHARDS", "30"),
    ("SHARDIK_CLUSTER__SHARDING__RETRY_INTERVAL", "300ms"),
    ("SHARDIK_CLUSTER__SHARDING__REBALANCE_INTERVAL", "1s"),
    ("SHARDIK_CLUSTER__SHARDING__HANDOFF_TIMEOUT", "10s"),
];

/// What the clients know of each counter (`c0`, `c1`, ...).
#[derive(Default)]
pub struct Books {
    /// Increments answered 200.
    pub acked: Vec<u64>,
    /// Increments sent (an unanswered one may have been applied).
    pub tried: Vec<u64>,
    /// Increments not answered 200.
    pub failures: u64,
}

impl Books {
    /// Books for `counters` counters, nothing sent yet.
    pub fn new(counters: usize) -> Self {
        Books {
            acked: vec![0; counters],
            tried: vec![0; counters],
            failures: 0,
        }
    }

    /// What is wrong with a value read or answered for counter `i`, if anything: it must
    /// count every acknowledged increment and no more than were sent.
    pub fn violation(&self, i: usize, value: u64, when: &str) -> Option<String> {
        if value < self.acked[i] {
            return Some(format!(
                "c{i} {when}: value {value} lost increments ({} acknowledged)",
                self.acked[i]
            ));
        }
        if value > self.tried[i] {
            return Some(format!(
                "c{i} {when}: value {value} applied an increment twice ({} sent)",
                self.tried[i]
            ));
        }
        None
    }

    /// Panics if a value read or answered for counter `i` is wrong (see [`Books::violation`]).
    pub fn check(&self, i: usize, value: u64, when: &str) {
        if let Some(v) = self.violation(i, value, when) {
            panic!("{v}");
        }
    }
}

/// `POST /demo/counter/c{i}/increment` on `management`: the value answered, or `None` if it
/// was not answered 200 in time.
pub async fn post_increment(http: &reqwest::Client, management: &str, i: usize) -> Option<u64> {
    try_increment(http, management, i).await.ok()
}

/// [`post_increment`], saying why when the increment was not answered 200 with a value.
pub async fn try_increment(
    http: &reqwest::Client,
    management: &str,
    i: usize,
) -> Result<u64, String> {
    let resp = http
        .post(format!("http://{management}/demo/counter/c{i}/increment"))
        .timeout(Duration::from_secs(6))
        .send()
        .await
        .map_err(|e| format!("c{i} through {management}: {e}"))?;
    let status = resp.status().as_u16();
    let body = resp.text().await.unwrap_or_default();
    if status != 200 {
        return Err(format!("c{i} through {management}: {status} {body}"));
    }
    serde_json::from_str::<Value>(&body)
        .ok()
        .and_then(|v| v["value"].as_u64())
        .ok_or_else(|| format!("c{i} through {management}: no value in {body}"))
}

/// `GET /demo/counter/c{i}` on `management`.
pub async fn read_counter(
    http: &reqwest::Client,
    management: &str,
    i: usize,
) -> Result<u64, String> {
    let resp = http
        .get(format!("http://{management}/demo/counter/c{i}"))
        .timeout(Duration::from_secs(6))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let body: Value = resp.json().await.map_err(|e| e.to_string())?;
    if status != 200 {
        return Err(format!("c{i}: {status} {body}"));
    }
    body["value"]
        .as_u64()
        .ok_or_else(|| format!("no value in {body}"))
}

/// One increment of every counter, round-robin through `managements`; returns how many were
/// not answered.
pub async fn round(http: &reqwest::Client, managements: &[String], books: &mut Books) -> u64 {
    let mut failed = 0;
    for i in 0..books.acked.len() {
        books.tried[i] += 1;
        match post_increment(http, &managements[i % managements.len()], i).await {
            Some(value) => {
                books.acked[i] += 1;
                books.check(i, value, "answering an increment");
            }
            None => failed += 1,
        }
    }
    books.failures += failed;
    failed
}

/// [`Books`] shared by the test and the tasks that send increments, with every wrong answer
/// kept for the test to report (a task cannot fail the test itself).
#[derive(Clone)]
pub struct Ledger(Arc<Mutex<LedgerState>>);

/// What a [`Ledger`] holds.
pub struct LedgerState {
    /// The books.
    pub books: Books,
    /// Answers that lost an increment or applied one twice.
    pub violations: Vec<String>,
    /// Why increments were not answered, each with when it was sent (unix seconds, to read
    /// against the nodes' logs): the first [`KEPT_FAILURES`], what a test that expects none
    /// reports.
    pub failed: Vec<String>,
}

/// How many reasons for unanswered increments a [`Ledger`] keeps.
const KEPT_FAILURES: usize = 20;

impl Ledger {
    /// A ledger for `counters` counters.
    pub fn new(counters: usize) -> Ledger {
        Ledger(Arc::new(Mutex::new(LedgerState {
            books: Books::new(counters),
            violations: Vec::new(),
            failed: Vec::new(),
        })))
    }

    /// The books and violations, locked (never across an `await`).
    pub fn lock(&self) -> MutexGuard<'_, LedgerState> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many counters there are.
    pub fn counters(&self) -> usize {
        self.lock().books.acked.len()
    }

    /// Acknowledged increments per counter.
    pub fn acked(&self) -> Vec<u64> {
        self.lock().books.acked.clone()
    }

    /// Sends one increment of counter `i` through `management` and books it.
    pub async fn increment(&self, http: &reqwest::Client, management: &str, i: usize) -> bool {
        self.lock().books.tried[i] += 1;
        let sent = std::time::SystemTime::now();
        let answer = try_increment(http, management, i).await;
        let mut st = self.lock();
        match answer {
            Ok(value) => {
                st.books.acked[i] += 1;
                if let Some(v) = st.books.violation(i, value, "answering an increment") {
                    st.violations.push(v);
                }
                true
            }
            Err(why) => {
                st.books.failures += 1;
                if st.failed.len() < KEPT_FAILURES {
                    let at = sent
                        .duration_since(std::time::UNIX_EPOCH)
                        .unwrap_or_default()
                        .as_secs_f64();
                    st.failed.push(format!("sent at unix {at:.3}: {why}"));
                }
                false
            }
        }
    }

    /// Reads every counter (counter `i` through `managements[i % n]`) and checks it against
    /// the books. Call it with no increment in flight. Returns the values.
    pub async fn check_all(
        &self,
        http: &reqwest::Client,
        managements: &[String],
    ) -> Result<Vec<u64>, String> {
        let mut values = Vec::new();
        for i in 0..self.counters() {
            let value = read_counter(http, &managements[i % managements.len()], i).await?;
            if let Some(v) = self.lock().books.violation(i, value, "read back") {
                return Err(v);
            }
            values.push(value);
        }
        Ok(values)
    }
}

/// One increment of every counter through every node in `managements`: the counters all at
/// once (so that increments that wait for their answer in vain hold up few others), each
/// counter's one node after the other (so that its answers come in order, as the books'
/// checks need). Returns how many were answered.
pub async fn burst(http: &reqwest::Client, managements: &[String], ledger: &Ledger) -> usize {
    let mut sent = JoinSet::new();
    for i in 0..ledger.counters() {
        let (http, managements, ledger) = (http.clone(), managements.to_vec(), ledger.clone());
        sent.spawn(async move {
            let mut answered = 0;
            for m in &managements {
                if ledger.increment(&http, m, i).await {
                    answered += 1;
                }
            }
            answered
        });
    }
    sent.join_all().await.into_iter().sum()
}

/// What [`SteadyLoad`] is asked to do, and reports doing.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Send increments.
    Run,
    /// Send nothing until resumed.
    Pause,
    /// End.
    Stop,
}

/// Steady increments from a background task: one at a time, counter after counter, counter
/// `i`'s `k`-th through the node `(k + i) % n`, so every counter is reached through every
/// node. The test pauses and resumes it.
pub struct SteadyLoad {
    asked: watch::Sender<Mode>,
    doing: watch::Receiver<Mode>,
    task: JoinHandle<()>,
}

impl SteadyLoad {
    /// Starts sending increments through `managements`, booked in `ledger`.
    pub fn start(http: &reqwest::Client, managements: &[String], ledger: &Ledger) -> SteadyLoad {
        let (asked, mut asked_rx) = watch::channel(Mode::Run);
        let (doing_tx, doing) = watch::channel(Mode::Run);
        let (http, managements, ledger) = (http.clone(), managements.to_vec(), ledger.clone());
        let task = tokio::spawn(async move {
            let counters = ledger.counters();
            for k in 0.. {
                let mode = *asked_rx.borrow_and_update();
                doing_tx.send_replace(mode);
                match mode {
                    Mode::Stop => return,
                    Mode::Pause => {
                        if asked_rx.changed().await.is_err() {
                            return;
                        }
                        continue;
                    }
                    Mode::Run => {}
                }
                let i = k % counters;
                let m = &managements[(k / counters + i) % managements.len()];
                ledger.increment(&http, m, i).await;
            }
        });
        SteadyLoad { asked, doing, task }
    }

    /// Pauses, and returns once no increment is in flight.
    pub async fn pause(&mut self) {
        self.asked.send_replace(Mode::Pause);
        tokio::time::timeout(BOUND, self.doing.wait_for(|m| *m == Mode::Pause))
            .await
            .expect("the load pauses within the bound")
            .expect("the load task runs");
    }

    /// Sends increments again.
    pub fn resume(&self) {
        self.asked.send_replace(Mode::Run);
    }

    /// Stops, and waits for the task (failing if it panicked).
    pub async fn stop(self) {
        self.asked.send_replace(Mode::Stop);
        self.task.await.expect("the load task ends cleanly");
    }
}
