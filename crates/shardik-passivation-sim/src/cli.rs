//! Command-line front end of the simulator: flags and JSON config files become runs (parsed by
//! hand, so the `shardik` binary can forward its `passivation-sim` arguments unchanged to
//! [`run_from_args`]).

use std::path::PathBuf;

use serde::Deserialize;

use crate::error::SimError;
use crate::pattern::AccessPattern;
use crate::policy::SimPolicy;
use crate::replay::{Run, simulate};
use crate::report::render;
use crate::synthetic::Synthetic;
use crate::trace::{TraceCache, TraceFormat};

/// Usage text.
pub const USAGE: &str = "\
shardik passivation-sim [OPTIONS]

Pattern (repeat --trace/--synthetic to concatenate them, in order):
  --trace [N*]FORMAT:PATH     trace file; FORMAT = lirs | corda | simple | arc (gzip detected);
                              an `N*` prefix repeats it N times, e.g. `3*lirs:loop.trace.gz`
  --trace joined:P1,P2,...    same as several --trace options (each Pi is [N*]FORMAT:PATH)
  --synthetic KIND            loop | uniform | zipfian | scrambled-zipfian | shifting-zipfian
      --events N              accesses to generate (default 1000000)
      --start N --end N       loop range (default 1..=100000)
      --min N --max N         id range for the random generators (default 1..=100000)
      --constant F            zipfian constant (default 0.99)
      --shifts N              shifting-zipfian: number of shifts (default 10)
      --seed S                RNG seed (default 0)
Cluster and policies (each limit x policy combination is one run):
  --shards N                  shards (default 10)
  --regions N                 regions (default 1)
  --limit N[,N...]            per-region active entity limit (repeatable; default 100000)
  --policy P[,P...]           optimal, lru, slru, s4lru, mru, lfu, lfuda, lru-fs-slru,
                              lru-fs-slru-hc, lru-fs-lfu-hc, lru-slru, default, none
  --config FILE               JSON file: {\"runs\": [{\"name\"?, \"policy\", \"limit\", \"shards\"?,
                              \"regions\"?, \"seed\"?, \"pattern\": [\"lirs:PATH\" | {\"synthetic\": KIND, ...}]}]}
  --json                      one JSON object per run per line
";

/// Parsed options.
#[derive(Debug, Clone, Default)]
pub struct CliOptions {
    /// Runs to perform, in order.
    pub runs: Vec<Run>,
    /// JSON lines output.
    pub json: bool,
}

#[derive(Debug, Clone)]
struct SynthArgs {
    kind: String,
    events: u64,
    start: u64,
    end: u64,
    min: u64,
    max: u64,
    constant: f64,
    shifts: u64,
}

impl SynthArgs {
    fn new(kind: &str) -> Self {
        SynthArgs {
            kind: kind.to_string(),
            events: 1_000_000,
            start: 1,
            end: 100_000,
            min: 1,
            max: 100_000,
            constant: 0.99,
            shifts: 10,
        }
    }

    fn build(&self, seed: u64) -> Result<AccessPattern, SimError> {
        let generator = match self.kind.as_str() {
            "loop" => Synthetic::Loop {
                start: self.start,
                end: self.end,
            },
            "uniform" => Synthetic::Uniform {
                min: self.min,
                max: self.max,
            },
            "zipfian" | "scrambled-zipfian" => Synthetic::Zipfian {
                min: self.min,
                max: self.max,
                constant: self.constant,
                scrambled: self.kind == "scrambled-zipfian",
            },
            "shifting-zipfian" | "shifting-scrambled-zipfian" => Synthetic::ShiftingZipfian {
                min: self.min,
                max: self.max,
                constant: self.constant,
                shifts: self.shifts,
                scrambled: self.kind == "shifting-scrambled-zipfian",
            },
            other => {
                return Err(SimError::Usage(format!(
                    "unknown synthetic pattern `{other}` (expected loop, uniform, zipfian, scrambled-zipfian, shifting-zipfian)"
                )));
            }
        };
        if !(self.constant > 0.0 && self.constant < 1.0) {
            return Err(SimError::Usage(format!(
                "--constant must be in (0, 1), got {}",
                self.constant
            )));
        }
        Ok(AccessPattern::Synthetic {
            generator,
            events: self.events,
            seed,
        })
    }
}

fn parse_trace(spec: &str) -> Result<Vec<AccessPattern>, SimError> {
    if let Some(rest) = spec.strip_prefix("joined:") {
        let mut all = Vec::new();
        for part in rest.split(',').filter(|p| !p.trim().is_empty()) {
            all.extend(parse_trace(part.trim())?);
        }
        return Ok(all);
    }
    let (times, spec) = match spec.split_once('*') {
        Some((n, rest)) if !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()) => (
            n.parse::<usize>()
                .map_err(|_| SimError::Usage(format!("bad repeat count in `{spec}`")))?,
            rest,
        ),
        _ => (1, spec),
    };
    let (format, path) = spec
        .split_once(':')
        .ok_or_else(|| SimError::Usage(format!("--trace expects FORMAT:PATH, got `{spec}`")))?;
    let format = TraceFormat::parse(format)?;
    if path.is_empty() {
        return Err(SimError::Usage(format!(
            "--trace `{spec}` has an empty path"
        )));
    }
    Ok(vec![
        AccessPattern::Trace {
            format,
            path: PathBuf::from(path),
        };
        times
    ])
}

fn num<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T, SimError> {
    v.trim()
        .replace('_', "")
        .parse()
        .map_err(|_| SimError::Usage(format!("{flag}: invalid number `{v}`")))
}

fn limit_label(limit: usize) -> String {
    if limit >= 10_000 && limit.is_multiple_of(1000) {
        format!("{}k", limit / 1000)
    } else {
        limit.to_string()
    }
}

enum Part {
    Trace(Vec<AccessPattern>),
    Synth(SynthArgs),
}

fn last_synth<'a>(parts: &'a mut [Part], flag: &str) -> Result<&'a mut SynthArgs, SimError> {
    match parts.last_mut() {
        Some(Part::Synth(s)) => Ok(s),
        _ => Err(SimError::Usage(format!("{flag} must follow --synthetic"))),
    }
}

/// Parse command-line arguments (without the program / subcommand name).
pub fn parse_args(args: &[String]) -> Result<CliOptions, SimError> {
    let mut parts: Vec<Part> = Vec::new();
    let mut shards = 10u32;
    let mut regions = 1u32;
    let mut limits: Vec<usize> = Vec::new();
    let mut policies: Vec<String> = Vec::new();
    let mut seed = 0u64;
    let mut json = false;
    let mut config: Option<PathBuf> = None;
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .ok_or_else(|| SimError::Usage(format!("{flag} needs a value")))
        };
        let synth = last_synth;
        match flag.as_str() {
            "--help" | "-h" => return Err(SimError::Usage(USAGE.to_string())),
            "--trace" => parts.push(Part::Trace(parse_trace(&value()?)?)),
            "--synthetic" => parts.push(Part::Synth(SynthArgs::new(&value()?))),
            "--events" => {
                let v = num(flag, &value()?)?;
                synth(&mut parts, flag)?.events = v
            }
            "--start" => {
                let v = num(flag, &value()?)?;
                synth(&mut parts, flag)?.start = v
            }
            "--end" => {
                let v = num(flag, &value()?)?;
                synth(&mut parts, flag)?.end = v
            }
            "--min" => {
                let v = num(flag, &value()?)?;
                synth(&mut parts, flag)?.min = v
            }
            "--max" => {
                let v = num(flag, &value()?)?;
                synth(&mut parts, flag)?.max = v
            }
            "--constant" => {
                let v = num(flag, &value()?)?;
                synth(&mut parts, flag)?.constant = v
            }
            "--shifts" => {
                let v = num(flag, &value()?)?;
                synth(&mut parts, flag)?.shifts = v
            }
            "--shards" => shards = num(flag, &value()?)?,
            "--regions" => regions = num(flag, &value()?)?,
            "--seed" => seed = num(flag, &value()?)?,
            "--limit" => {
                for l in value()?.split(',') {
                    limits.push(num(flag, l)?);
                }
            }
            "--policy" => {
                for p in value()?.split(',') {
                    SimPolicy::parse(p)?;
                    policies.push(p.trim().to_string());
                }
            }
            "--config" => config = Some(PathBuf::from(value()?)),
            "--json" => json = true,
            other => {
                return Err(SimError::Usage(format!(
                    "unknown argument `{other}`\n\n{USAGE}"
                )));
            }
        }
    }
    if shards == 0 || regions == 0 {
        return Err(SimError::Usage(
            "--shards and --regions must be at least 1".into(),
        ));
    }
    // Shard numbers come from a signed 32-bit hash modulo the shard count.
    if shards > i32::MAX as u32 {
        return Err(SimError::Usage(format!(
            "--shards must be at most {}",
            i32::MAX
        )));
    }
    let mut runs = Vec::new();
    if let Some(path) = config {
        runs.extend(parse_config(&path, shards, regions, seed)?);
    }
    if !parts.is_empty() {
        let mut pattern = Vec::new();
        for p in &parts {
            match p {
                Part::Trace(t) => pattern.extend(t.iter().cloned()),
                Part::Synth(s) => pattern.push(s.build(seed)?),
            }
        }
        let pattern = if pattern.len() == 1 {
            pattern.remove(0)
        } else {
            AccessPattern::Joined(pattern)
        };
        if limits.is_empty() {
            limits.push(100_000);
        }
        if policies.is_empty() {
            policies.push("default".into());
        }
        for &limit in &limits {
            for p in &policies {
                let (label, policy) = SimPolicy::parse(p)?;
                runs.push(Run {
                    name: format!("{label} {}", limit_label(limit)),
                    policy,
                    policy_name: p.clone(),
                    per_region_limit: limit,
                    shards,
                    regions,
                    pattern: pattern.clone(),
                });
            }
        }
    } else if runs.is_empty() {
        return Err(SimError::Usage(format!(
            "no access pattern: give --trace, --synthetic or --config\n\n{USAGE}"
        )));
    }
    Ok(CliOptions { runs, json })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    runs: Vec<ConfigRun>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigRun {
    name: Option<String>,
    policy: String,
    limit: usize,
    shards: Option<u32>,
    regions: Option<u32>,
    seed: Option<u64>,
    pattern: Vec<ConfigPattern>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ConfigPattern {
    Trace(String),
    Synthetic {
        synthetic: String,
        events: Option<u64>,
        start: Option<u64>,
        end: Option<u64>,
        min: Option<u64>,
        max: Option<u64>,
        constant: Option<f64>,
        shifts: Option<u64>,
    },
}

fn parse_config(
    path: &PathBuf,
    shards: u32,
    regions: u32,
    seed: u64,
) -> Result<Vec<Run>, SimError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| SimError::Io(format!("{}: {e}", path.display())))?;
    let file: ConfigFile = serde_json::from_str(&text)
        .map_err(|e| SimError::Usage(format!("{}: {e}", path.display())))?;
    let mut runs = Vec::new();
    for r in file.runs {
        let (label, policy) = SimPolicy::parse(&r.policy)?;
        let mut pattern = Vec::new();
        for p in r.pattern {
            match p {
                ConfigPattern::Trace(t) => pattern.extend(parse_trace(&t)?),
                ConfigPattern::Synthetic {
                    synthetic,
                    events,
                    start,
                    end,
                    min,
                    max,
                    constant,
                    shifts,
                } => {
                    let mut s = SynthArgs::new(&synthetic);
                    s.events = events.unwrap_or(s.events);
                    s.start = start.unwrap_or(s.start);
                    s.end = end.unwrap_or(s.end);
                    s.min = min.unwrap_or(s.min);
                    s.max = max.unwrap_or(s.max);
                    s.constant = constant.unwrap_or(s.constant);
                    s.shifts = shifts.unwrap_or(s.shifts);
                    pattern.push(s.build(r.seed.unwrap_or(seed))?);
                }
            }
        }
        if pattern.is_empty() {
            return Err(SimError::Usage(format!(
                "{}: run `{}` has an empty pattern",
                path.display(),
                r.name.as_deref().unwrap_or(&r.policy)
            )));
        }
        let pattern = if pattern.len() == 1 {
            pattern.remove(0)
        } else {
            AccessPattern::Joined(pattern)
        };
        runs.push(Run {
            name: r
                .name
                .unwrap_or_else(|| format!("{label} {}", limit_label(r.limit))),
            policy,
            policy_name: r.policy,
            per_region_limit: r.limit,
            shards: match r.shards.unwrap_or(shards) {
                n @ 1..=0x7fff_ffff => n,
                n => {
                    return Err(SimError::Usage(format!(
                        "run {label}: shards {n} must be 1 to {}",
                        i32::MAX
                    )));
                }
            },
            regions: r.regions.unwrap_or(regions),
            pattern,
        });
    }
    Ok(runs)
}

/// Entry point for `shardik passivation-sim ARGS...`: parse, run every simulation, render.
pub fn run_from_args(args: &[String]) -> Result<String, SimError> {
    let opts = parse_args(args)?;
    let mut cache = TraceCache::default();
    let mut results = Vec::with_capacity(opts.runs.len());
    for run in opts.runs {
        let stats = simulate(&run, &mut cache)?;
        results.push((run, stats));
    }
    Ok(render(&results, opts.json))
}
