//! The load generator behind `shopping-cart-load`: drives carts over the HTTP API at a fixed
//! rate and reports the throughput achieved and latency percentiles.
//!
//! The load is open-loop: request `k` is due at `start + k / rate`, whether or not earlier
//! requests have been answered, and its latency is measured from that due time to the end of
//! its answer. A slow cluster therefore shows up as higher latency, not as a quietly lower
//! rate (a closed loop, which waits for each answer before sending the next request, measures
//! only the requests a slow server lets through: coordinated omission). Only
//! `--max-in-flight` requests are outstanding at once; when that many wait, the generator
//! falls behind its schedule, and the report says by how much.
//!
//! Each request goes to one of `--carts` carts, through the targets in turn; what it does is
//! drawn from `--mix`. The generator keeps a model of each cart's items from the answers, so
//! that adjustments name items that are there and additions name new ones: a healthy cluster
//! refuses (almost) nothing. A cart holding `--max-items` items has one removed instead of one
//! more added. Cart ids start with a fresh prefix per run, so every run starts from empty carts
//! even on a store that keeps earlier runs' carts.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use hdrhistogram::Histogram;
use serde::Serialize;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// Arguments of `shopping-cart-load`.
#[derive(clap::Parser, Debug, Clone)]
#[command(
    name = "shopping-cart-load",
    version,
    about = "Drives shopping carts at a fixed rate over HTTP and reports throughput and latency"
)]
pub struct LoadArgs {
    /// HTTP address (HOST:PORT or http://HOST:PORT) of a `shopping-cart` node; repeatable or
    /// comma separated. Requests go to the targets in turn.
    #[arg(long = "target", required = true, value_delimiter = ',')]
    pub targets: Vec<String>,
    /// Requests per second to send, as `N` or `N/s`.
    #[arg(long, default_value = "100/s", value_parser = parse_rate)]
    pub rate: f64,
    /// How long to send for (then the answers still due are awaited).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// How many carts to spread the requests over.
    #[arg(long, default_value_t = 100)]
    pub carts: usize,
    /// Relative weights of the operations, as `add=W,adjust=W,get=W`.
    #[arg(long, default_value = "add=2,adjust=3,get=5")]
    pub mix: Mix,
    /// A cart holding this many items gets one removed instead of one more added.
    #[arg(long, default_value_t = 20)]
    pub max_items: usize,
    /// The most requests outstanding at once.
    #[arg(long, default_value_t = 1024)]
    pub max_in_flight: usize,
    /// How long one request may take before it counts as failed (timed out).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Prefix of the cart ids (letters, digits, `-`, `_`); default `load-` and a fresh run id.
    #[arg(long)]
    pub cart_prefix: Option<String>,
    /// Seed of the random choices (cart, operation, quantity); default from the clock.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Print the report as one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Parses a rate: `250`, `250/s` or `12.5/s`.
pub fn parse_rate(s: &str) -> Result<f64, String> {
    let number = s.trim().strip_suffix("/s").unwrap_or(s.trim());
    let rate: f64 = number
        .parse()
        .map_err(|_| format!("{s:?} is not a rate (N or N/s)"))?;
    if !(rate.is_finite() && rate > 0.0) {
        return Err(format!("the rate must be positive, not {s:?}"));
    }
    Ok(rate)
}

/// An operation of the load.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Op {
    /// `POST /carts/{id}/items` with a new item.
    Add,
    /// `PUT /carts/{id}/items/{item}` of an item in the cart.
    Adjust,
    /// `GET /carts/{id}`.
    Get,
    /// `DELETE /carts/{id}/items/{item}` (only when a cart is full).
    Remove,
}

impl Op {
    const ALL: [Op; 4] = [Op::Add, Op::Adjust, Op::Get, Op::Remove];

    fn name(self) -> &'static str {
        match self {
            Op::Add => "add",
            Op::Adjust => "adjust",
            Op::Get => "get",
            Op::Remove => "remove",
        }
    }
}

/// Relative weights of add, adjust and get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mix {
    /// Weight of additions.
    pub add: u32,
    /// Weight of adjustments.
    pub adjust: u32,
    /// Weight of reads.
    pub get: u32,
}

impl FromStr for Mix {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let mut mix = Mix {
            add: 0,
            adjust: 0,
            get: 0,
        };
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (op, weight) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?} is not OP=WEIGHT"))?;
            let weight: u32 = weight
                .trim()
                .parse()
                .map_err(|_| format!("{part:?}: the weight is not a whole number"))?;
            match op.trim() {
                "add" => mix.add = weight,
                "adjust" => mix.adjust = weight,
                "get" => mix.get = weight,
                other => {
                    return Err(format!(
                        "unknown operation {other:?} (add, adjust and get are)"
                    ));
                }
            }
        }
        if mix.add as u64 + mix.adjust as u64 + mix.get as u64 == 0 {
            return Err("at least one weight must be positive".into());
        }
        Ok(mix)
    }
}

impl fmt::Display for Mix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "add={},adjust={},get={}",
            self.add, self.adjust, self.get
        )
    }
}

impl Mix {
    /// The operation for a uniform draw `r`.
    fn pick(&self, r: u64) -> Op {
        let total = self.add as u64 + self.adjust as u64 + self.get as u64;
        let x = r % total;
        if x < self.add as u64 {
            Op::Add
        } else if x < self.add as u64 + self.adjust as u64 {
            Op::Adjust
        } else {
            Op::Get
        }
    }
}

/// SplitMix64: enough randomness to spread a load, reproducible from its seed, no dependency.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// What the generator knows of one cart.
#[derive(Default)]
struct CartModel {
    /// Items whose addition was answered 200 and that were not picked for removal since.
    items: Vec<String>,
    /// Additions sent and not answered yet.
    adding: usize,
    /// The number of the next new item.
    next_item: u64,
}

/// One request to make.
#[derive(Debug)]
enum Request {
    Add { item: String, quantity: u32 },
    Adjust { item: String, quantity: u32 },
    Get,
    Remove { item: String },
}

impl Request {
    fn op(&self) -> Op {
        match self {
            Request::Add { .. } => Op::Add,
            Request::Adjust { .. } => Op::Adjust,
            Request::Get => Op::Get,
            Request::Remove { .. } => Op::Remove,
        }
    }
}

impl CartModel {
    /// The request for a draw of `op`: an addition becomes a removal on a full cart, and an
    /// adjustment becomes an addition on a cart with no item known yet.
    fn request(&mut self, op: Op, max_items: usize, rng: &mut SplitMix64) -> Request {
        let quantity = 1 + rng.below(9) as u32;
        match op {
            Op::Adjust if !self.items.is_empty() => Request::Adjust {
                item: self.items[rng.below(self.items.len())].clone(),
                quantity,
            },
            Op::Get => Request::Get,
            Op::Add | Op::Adjust | Op::Remove => {
                if self.items.len() + self.adding < max_items {
                    self.adding += 1;
                    self.next_item += 1;
                    Request::Add {
                        item: format!("item-{}", self.next_item),
                        quantity,
                    }
                } else if !self.items.is_empty() {
                    // Forgotten at once, so that no later request adjusts it.
                    let item = self.items.swap_remove(rng.below(self.items.len()));
                    Request::Remove { item }
                } else {
                    // Full of additions not answered yet.
                    Request::Get
                }
            }
        }
    }

    /// Takes the answer to an addition into account.
    fn added(&mut self, item: String, ok: bool) {
        self.adding -= 1;
        if ok {
            self.items.push(item);
        }
        // Unanswered or failed: the item may or may not be in the cart. It is never named
        // again (names are fresh), so not knowing costs nothing.
    }
}

/// How one request ended.
enum Outcome {
    Ok,
    Refused,
    Failed,
    TimedOut,
}

/// Counts and latencies of one operation.
struct OpStats {
    sent: u64,
    ok: u64,
    refused: u64,
    failed: u64,
    timed_out: u64,
    /// Microseconds from the due time to the end of the answer, of answered requests.
    latency_us: Histogram<u64>,
}

impl OpStats {
    fn new() -> Self {
        OpStats {
            sent: 0,
            ok: 0,
            refused: 0,
            failed: 0,
            timed_out: 0,
            // Up to an hour at 3 significant digits.
            latency_us: Histogram::new_with_bounds(1, 3_600_000_000, 3)
                .expect("valid histogram bounds"),
        }
    }

    fn add(&mut self, other: &OpStats) {
        self.sent += other.sent;
        self.ok += other.ok;
        self.refused += other.refused;
        self.failed += other.failed;
        self.timed_out += other.timed_out;
        self.latency_us
            .add(&other.latency_us)
            .expect("histograms with the same bounds");
    }

    fn report(&self) -> OpReport {
        let ms = |q: f64| self.latency_us.value_at_quantile(q) as f64 / 1000.0;
        let answered = !self.latency_us.is_empty();
        OpReport {
            sent: self.sent,
            ok: self.ok,
            refused: self.refused,
            failed: self.failed,
            timed_out: self.timed_out,
            latency_ms: answered.then(|| Latency {
                p50: ms(0.5),
                p90: ms(0.9),
                p99: ms(0.99),
                p999: ms(0.999),
                max: self.latency_us.max() as f64 / 1000.0,
            }),
        }
    }
}

/// Latency percentiles in milliseconds.
#[derive(Clone, Debug, Serialize)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// The slowest.
    pub max: f64,
}

/// The results of one operation (or of all).
#[derive(Clone, Debug, Serialize)]
pub struct OpReport {
    /// Requests sent.
    pub sent: u64,
    /// Answered 2xx.
    pub ok: u64,
    /// Answered 400 or 409: the cart refused.
    pub refused: u64,
    /// No answer, or another status (timeouts included).
    pub failed: u64,
    /// Of the failed, those that timed out.
    pub timed_out: u64,
    /// Latency of the answered (ok and refused) requests; none if none was answered.
    pub latency_ms: Option<Latency>,
}

/// What a run achieved.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The rate asked for, requests per second.
    pub target_rate: f64,
    /// Seconds from the first due time to the last answer.
    pub elapsed_s: f64,
    /// Answers 2xx per second over `elapsed_s`.
    pub throughput: f64,
    /// The most the generator fell behind its schedule, in milliseconds (it waits when
    /// `--max-in-flight` requests are outstanding).
    pub max_schedule_lag_ms: f64,
    /// The cart ids used: this prefix and a number.
    pub cart_prefix: String,
    /// The seed of the random choices.
    pub seed: u64,
    /// All operations together.
    pub all: OpReport,
    /// Per operation (`add`, `adjust`, `get`, `remove`).
    pub ops: BTreeMap<&'static str, OpReport>,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} requests in {:.2}s: {} ok, {} refused, {} failed ({} timed out)",
            self.all.sent,
            self.elapsed_s,
            self.all.ok,
            self.all.refused,
            self.all.failed,
            self.all.timed_out
        )?;
        writeln!(
            f,
            "throughput {:.1} ok/s (target {}/s); behind schedule by at most {:.1} ms",
            self.throughput, self.target_rate, self.max_schedule_lag_ms
        )?;
        writeln!(
            f,
            "latency in ms, from each request's due time to the end of its answer:"
        )?;
        writeln!(
            f,
            "{:<8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "op", "sent", "ok", "refused", "failed", "p50", "p90", "p99", "p99.9", "max"
        )?;
        let rows = self
            .ops
            .iter()
            .map(|(name, r)| (*name, r))
            .chain(std::iter::once(("all", &self.all)));
        for (name, r) in rows.filter(|(_, r)| r.sent > 0) {
            write!(
                f,
                "{name:<8} {:>8} {:>8} {:>8} {:>8}",
                r.sent, r.ok, r.refused, r.failed
            )?;
            match &r.latency_ms {
                Some(l) => writeln!(
                    f,
                    " {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
                    l.p50, l.p90, l.p99, l.p999, l.max
                )?,
                None => writeln!(f, " {:>9}", "-")?,
            }
        }
        Ok(())
    }
}

/// The base URL of a target: `http://` added unless a scheme is there, no trailing `/`.
fn base_url(target: &str) -> String {
    let target = target.trim().trim_end_matches('/');
    if target.contains("://") {
        target.to_string()
    } else {
        format!("http://{target}")
    }
}

/// Runs the load `args` describe and reports what it achieved.
pub async fn run(args: &LoadArgs) -> anyhow::Result<Report> {
    if args.carts == 0 || args.max_items == 0 || args.max_in_flight == 0 {
        anyhow::bail!("--carts, --max-items and --max-in-flight must be positive");
    }
    let clock = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let seed = args.seed.unwrap_or(clock);
    let prefix = match &args.cart_prefix {
        Some(p) => p.clone(),
        None => format!("load-{:08x}-", SplitMix64(clock).next() as u32),
    };
    if !prefix
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        anyhow::bail!("--cart-prefix takes letters, digits, - and _ only: {prefix:?}");
    }
    let bases: Vec<String> = args.targets.iter().map(|t| base_url(t)).collect();
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(args.timeout)
        .pool_max_idle_per_host(args.max_in_flight)
        .build()
        .context("cannot build the HTTP client")?;

    let models: Arc<Vec<Mutex<CartModel>>> =
        Arc::new((0..args.carts).map(|_| Mutex::default()).collect());
    let stats: Arc<Mutex<BTreeMap<Op, OpStats>>> = Arc::new(Mutex::new(
        Op::ALL.iter().map(|op| (*op, OpStats::new())).collect(),
    ));
    let in_flight = Arc::new(Semaphore::new(args.max_in_flight));
    let mut rng = SplitMix64(seed);
    let total = (args.rate * args.duration.as_secs_f64()).round() as u64;
    let mut tasks = JoinSet::new();
    let mut max_lag = Duration::ZERO;

    let start = Instant::now();
    for k in 0..total {
        let due = start + Duration::from_secs_f64(k as f64 / args.rate);
        tokio::time::sleep_until(due.into()).await;
        let permit = Arc::clone(&in_flight)
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        max_lag = max_lag.max(due.elapsed());
        let cart = rng.below(args.carts);
        let op = args.mix.pick(rng.next());
        let request = models[cart]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .request(op, args.max_items, &mut rng);
        let url = format!(
            "{}/carts/{prefix}{cart}",
            bases[(k % bases.len() as u64) as usize]
        );
        let (http, models, stats) = (http.clone(), Arc::clone(&models), Arc::clone(&stats));
        tasks.spawn(async move {
            let op = request.op();
            let outcome = send(&http, &url, &request).await;
            let latency = due.elapsed();
            if let Request::Add { item, .. } = request {
                let ok = matches!(outcome, Outcome::Ok);
                models[cart]
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .added(item, ok);
            }
            let mut stats = stats.lock().unwrap_or_else(|e| e.into_inner());
            let s = stats.get_mut(&op).expect("every op has stats");
            s.sent += 1;
            match outcome {
                Outcome::Ok => s.ok += 1,
                Outcome::Refused => s.refused += 1,
                Outcome::Failed => s.failed += 1,
                Outcome::TimedOut => {
                    s.failed += 1;
                    s.timed_out += 1;
                }
            }
            if matches!(outcome, Outcome::Ok | Outcome::Refused) {
                s.latency_us.saturating_record(latency.as_micros() as u64);
            }
            drop(permit);
        });
        // Finished tasks are reaped as we go, so that a long run does not keep them all.
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
    let elapsed = start.elapsed();

    let stats = stats.lock().unwrap_or_else(|e| e.into_inner());
    let mut all = OpStats::new();
    for s in stats.values() {
        all.add(s);
    }
    Ok(Report {
        target_rate: args.rate,
        elapsed_s: elapsed.as_secs_f64(),
        throughput: all.ok as f64 / elapsed.as_secs_f64().max(1e-9),
        max_schedule_lag_ms: max_lag.as_secs_f64() * 1000.0,
        cart_prefix: prefix,
        seed,
        all: all.report(),
        ops: stats
            .iter()
            .map(|(op, s)| (op.name(), s.report()))
            .collect(),
    })
}

/// Sends one request to the cart at `cart_url` and reads the whole answer.
async fn send(http: &reqwest::Client, cart_url: &str, request: &Request) -> Outcome {
    let builder = match request {
        Request::Add { item, quantity } => http
            .post(format!("{cart_url}/items"))
            .json(&serde_json::json!({ "item": item, "quantity": quantity })),
        Request::Adjust { item, quantity } => http
            .put(format!("{cart_url}/items/{item}"))
            .json(&serde_json::json!({ "quantity": quantity })),
        Request::Get => http.get(cart_url),
        Request::Remove { item } => http.delete(format!("{cart_url}/items/{item}")),
    };
    let answer = match builder.send().await {
        Ok(response) => {
            let status = response.status();
            response.bytes().await.map(|_| status)
        }
        Err(e) => Err(e),
    };
    match answer {
        Ok(status) if status.is_success() => Outcome::Ok,
        Ok(status) if status.as_u16() == 400 || status.as_u16() == 409 => Outcome::Refused,
        Ok(_) => Outcome::Failed,
        Err(e) if e.is_timeout() => Outcome::TimedOut,
        Err(_) => Outcome::Failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_mixes_parse() {
        assert_eq!(parse_rate("250"), Ok(250.0));
        assert_eq!(parse_rate("12.5/s"), Ok(12.5));
        assert!(parse_rate("0/s").is_err());
        assert!(parse_rate("fast").is_err());
        let mix: Mix = "add=1, get=3".parse().unwrap();
        assert_eq!(
            mix,
            Mix {
                add: 1,
                adjust: 0,
                get: 3
            }
        );
        assert_eq!(mix.to_string(), "add=1,adjust=0,get=3");
        assert!("add=0,adjust=0,get=0".parse::<Mix>().is_err());
        assert!("checkout=1".parse::<Mix>().is_err());
        assert!("add".parse::<Mix>().is_err());
    }

    #[test]
    fn the_mix_draws_each_operation_in_proportion() {
        let mix: Mix = "add=1,adjust=2,get=7".parse().unwrap();
        let mut rng = SplitMix64(7);
        let mut counts = BTreeMap::new();
        for _ in 0..10_000 {
            *counts.entry(mix.pick(rng.next())).or_insert(0u32) += 1;
        }
        let share = |op| f64::from(counts[&op]) / 10_000.0;
        assert!((share(Op::Add) - 0.1).abs() < 0.02, "{counts:?}");
        assert!((share(Op::Adjust) - 0.2).abs() < 0.02, "{counts:?}");
        assert!((share(Op::Get) - 0.7).abs() < 0.02, "{counts:?}");
    }

    #[test]
    fn the_model_adds_new_items_adjusts_known_ones_and_removes_when_full() {
        let mut rng = SplitMix64(1);
        let mut cart = CartModel::default();
        // Nothing known yet: an adjustment becomes an addition.
        let Request::Add { item, .. } = cart.request(Op::Adjust, 2, &mut rng) else {
            panic!("an addition");
        };
        assert_eq!(item, "item-1");
        cart.added(item, true);
        assert!(matches!(
            cart.request(Op::Adjust, 2, &mut rng),
            Request::Adjust { item, quantity } if item == "item-1" && (1..=9).contains(&quantity)
        ));
        // A failed addition is forgotten.
        let Request::Add { item, .. } = cart.request(Op::Add, 2, &mut rng) else {
            panic!("an addition");
        };
        assert_eq!(item, "item-2");
        cart.added(item, false);
        let Request::Add { item, .. } = cart.request(Op::Add, 2, &mut rng) else {
            panic!("an addition");
        };
        assert_eq!(item, "item-3");
        // Full (one known, one on its way): nothing to add, and the known one goes.
        assert!(matches!(
            cart.request(Op::Add, 2, &mut rng),
            Request::Remove { item } if item == "item-1"
        ));
        // Full of additions on their way: read instead.
        assert!(matches!(cart.request(Op::Add, 1, &mut rng), Request::Get));
        cart.added(item, true);
        assert_eq!(cart.items, ["item-3"]);
    }

    #[test]
    fn targets_become_base_urls() {
        assert_eq!(base_url("127.0.0.1:8080"), "http://127.0.0.1:8080");
        assert_eq!(base_url("http://cart.local:80/"), "http://cart.local:80");
    }
}
