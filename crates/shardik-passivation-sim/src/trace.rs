//! Trace files (one of the two modules that touch the file system, with `cli`). Reads LIRS,
//! Corda, plain-id and ARC traces, gzip-compressed or not (detected by the magic bytes), into
//! memory, and caches them so several runs over one file read it once.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use flate2::read::GzDecoder;
use shardik_passivation::{java_decimal_hash, java_string_hash};

use crate::error::SimError;
use crate::id::SimId;

/// Trace file formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceFormat {
    /// LIRS traces: one integer id per line (`*` and empty lines skipped).
    Lirs,
    /// R3 Corda traces: big-endian signed 64-bit ids.
    Corda,
    /// One id (any string) per line.
    Simple,
    /// ARC traces: `start count ...` per line, ids `start..start+count`.
    Arc,
}

impl TraceFormat {
    /// Parse a format name.
    pub fn parse(name: &str) -> Result<Self, SimError> {
        match name {
            "lirs" => Ok(TraceFormat::Lirs),
            "corda" => Ok(TraceFormat::Corda),
            "simple" => Ok(TraceFormat::Simple),
            "arc" => Ok(TraceFormat::Arc),
            other => Err(SimError::Usage(format!(
                "unknown trace format `{other}` (expected lirs, corda, simple or arc)"
            ))),
        }
    }
}

fn open(path: &Path) -> Result<Box<dyn Read>, SimError> {
    let io = |e: std::io::Error| SimError::Io(format!("{}: {e}", path.display()));
    let mut file = BufReader::new(std::fs::File::open(path).map_err(io)?);
    let magic = file.fill_buf().map_err(io)?;
    if magic.len() >= 2 && magic[0] == 0x1f && magic[1] == 0x8b {
        Ok(Box::new(BufReader::new(GzDecoder::new(file))))
    } else {
        Ok(Box::new(file))
    }
}

fn numeric_id(s: &str) -> Option<SimId> {
    let v: i64 = s.parse().ok()?;
    Some(SimId {
        id: v as u64,
        hash: java_string_hash(s),
    })
}

/// Read a whole trace into memory.
pub fn read_trace(format: TraceFormat, path: &Path) -> Result<Vec<SimId>, SimError> {
    let io = |e: std::io::Error| SimError::Io(format!("{}: {e}", path.display()));
    let mut reader = open(path)?;
    let mut ids = Vec::new();
    match format {
        TraceFormat::Corda => {
            let mut bytes = Vec::new();
            reader.read_to_end(&mut bytes).map_err(io)?;
            if bytes.len() % 8 != 0 {
                return Err(SimError::Trace(format!(
                    "{}: corda trace length {} is not a multiple of 8",
                    path.display(),
                    bytes.len()
                )));
            }
            ids.reserve(bytes.len() / 8);
            for chunk in bytes.chunks_exact(8) {
                let v = i64::from_be_bytes(chunk.try_into().expect("8 bytes"));
                ids.push(SimId {
                    id: v as u64,
                    hash: java_decimal_hash(v),
                });
            }
        }
        TraceFormat::Lirs | TraceFormat::Simple | TraceFormat::Arc => {
            let mut interned: HashMap<String, u64> = HashMap::new();
            for (n, line) in BufReader::new(reader).lines().enumerate() {
                let line = line.map_err(io)?;
                let t = line.trim();
                if t.is_empty() || (format == TraceFormat::Lirs && t == "*") {
                    continue;
                }
                let bad = |what: &str| {
                    SimError::Trace(format!("{}:{}: {what}: `{t}`", path.display(), n + 1))
                };
                match format {
                    TraceFormat::Lirs => {
                        ids.push(numeric_id(t).ok_or_else(|| bad("expected an integer id"))?)
                    }
                    TraceFormat::Simple => match numeric_id(t) {
                        Some(id) => ids.push(id),
                        None => {
                            // non-numeric ids are interned above the numeric range
                            let next = (1u64 << 63) + interned.len() as u64;
                            let id = *interned.entry(t.to_string()).or_insert(next);
                            ids.push(SimId {
                                id,
                                hash: java_string_hash(t),
                            });
                        }
                    },
                    TraceFormat::Arc => {
                        let mut parts = t.split_whitespace();
                        let start: i64 = parts
                            .next()
                            .and_then(|s| s.parse().ok())
                            .ok_or_else(|| bad("expected `start count`"))?;
                        let count: i64 = parts
                            .next()
                            .and_then(|s| s.parse().ok())
                            .ok_or_else(|| bad("expected `start count`"))?;
                        if !(0..=MAX_ARC_RUN).contains(&count) {
                            return Err(bad(&format!(
                                "count {count} out of range: 0 to {MAX_ARC_RUN} ids per line"
                            )));
                        }
                        for v in start..start.saturating_add(count) {
                            ids.push(SimId {
                                id: v as u64,
                                hash: java_decimal_hash(v),
                            });
                        }
                    }
                    TraceFormat::Corda => unreachable!(),
                }
            }
        }
    }
    Ok(ids)
}

/// Cache of loaded traces, so several runs over the same pattern read each file once.
#[derive(Default)]
pub struct TraceCache {
    loaded: HashMap<(PathBuf, u8), Rc<Vec<SimId>>>,
}

impl TraceCache {
    /// Load (or reuse) a trace.
    pub fn get(&mut self, format: TraceFormat, path: &Path) -> Result<Rc<Vec<SimId>>, SimError> {
        let key = (path.to_path_buf(), format as u8);
        if let Some(t) = self.loaded.get(&key) {
            return Ok(t.clone());
        }
        let t = Rc::new(read_trace(format, path)?);
        self.loaded.insert(key, t.clone());
        Ok(t)
    }
}

/// Most ids one line of an ARC trace may name: the published traces' runs are a few thousand
/// at most, and a line must not make the reader allocate without bound.
const MAX_ARC_RUN: i64 = 1 << 24;
