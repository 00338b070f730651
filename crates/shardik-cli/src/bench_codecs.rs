//! `shardik bench codecs`: what each codec costs for a few representative commands, replies
//! and events: encoded size, and the time to encode and to decode one value. Postcard, JSON and
//! CBOR are measured through the runtime's own codecs (`StorageCodec`, which the network
//! codecs `Postcard` and `Cbor` share the code of: CBOR's decode includes its nesting check);
//! ciborium, the other serde CBOR crate, is measured beside them because it was the other
//! candidate (docs/PERFORMANCE.md, "Codecs").

use std::collections::BTreeMap;
use std::hint::black_box;
use std::process::ExitCode;
use std::time::Instant;

use clap::Args;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use shardik_runtime::persistence::StorageCodec;

/// Arguments of `shardik bench codecs`.
#[derive(Args, Debug)]
pub struct CodecsArgs {
    /// Values encoded (then decoded) per timed run; the best of `--runs` runs is reported.
    #[arg(long, default_value_t = 200_000)]
    iterations: u32,
    /// Timed runs per codec and value.
    #[arg(long, default_value_t = 7)]
    runs: u32,
}

/// A counter's command: one number.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Add(u64);

/// A shopping cart's commands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum CartCommand {
    AddItem {
        item_id: String,
        quantity: u32,
        price_cents: u64,
    },
    Checkout,
    Get,
}

/// A cart's answer to `Get`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct CartSummary {
    lines: BTreeMap<String, u32>,
    total_cents: u64,
    checked_out: bool,
}

/// A cart's event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum CartEvent {
    ItemAdded {
        item_id: String,
        quantity: u32,
        price_cents: u64,
        at_ms: u64,
    },
    CheckedOut {
        at_ms: u64,
    },
}

/// One codec under test.
#[derive(Clone, Copy)]
enum Candidate {
    Runtime(StorageCodec),
    Ciborium,
}

impl Candidate {
    fn name(self) -> &'static str {
        match self {
            Candidate::Runtime(codec) => codec.name(),
            Candidate::Ciborium => "ciborium",
        }
    }

    fn encode<T: Serialize>(self, value: &T) -> Vec<u8> {
        match self {
            Candidate::Runtime(codec) => codec.encode(value).expect("encodes"),
            Candidate::Ciborium => {
                let mut out = Vec::new();
                ciborium::into_writer(value, &mut out).expect("encodes");
                out
            }
        }
    }

    fn decode<T: DeserializeOwned>(self, bytes: &[u8]) -> T {
        match self {
            Candidate::Runtime(codec) => codec.decode(bytes).expect("decodes"),
            Candidate::Ciborium => ciborium::from_reader(bytes).expect("decodes"),
        }
    }
}

const CANDIDATES: [Candidate; 4] = [
    Candidate::Runtime(StorageCodec::Postcard),
    Candidate::Runtime(StorageCodec::Json),
    Candidate::Runtime(StorageCodec::Cbor),
    Candidate::Ciborium,
];

/// Runs the command.
pub fn run(args: CodecsArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        args.iterations > 0 && args.runs > 0,
        "--iterations and --runs must be positive"
    );
    println!(
        "{:<14} {:<9} {:>6} {:>10} {:>10}",
        "value", "codec", "bytes", "encode ns", "decode ns"
    );
    let summary = CartSummary {
        lines: (0..5).map(|i| (format!("sku-{i:06}"), i + 1)).collect(),
        total_cents: 12_345,
        checked_out: false,
    };
    let add_item = CartCommand::AddItem {
        item_id: "sku-000123".into(),
        quantity: 2,
        price_cents: 1_999,
    };
    let event = CartEvent::ItemAdded {
        item_id: "sku-000123".into(),
        quantity: 2,
        price_cents: 1_999,
        at_ms: 1_764_000_000_000,
    };
    for candidate in CANDIDATES {
        measure(&args, candidate, "counter-add", &Add(42));
        measure(&args, candidate, "cart-add-item", &add_item);
        measure(&args, candidate, "cart-get", &CartCommand::Get);
        measure(&args, candidate, "cart-summary", &summary);
        measure(&args, candidate, "cart-event", &event);
        measure(
            &args,
            candidate,
            "cart-checkout",
            &CartEvent::CheckedOut { at_ms: 1 },
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints the size of `value` under `candidate` and the best per-value encode and decode
/// times over the runs, after checking that it decodes back to itself.
fn measure<T>(args: &CodecsArgs, candidate: Candidate, what: &str, value: &T)
where
    T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let bytes = candidate.encode(value);
    assert_eq!(&candidate.decode::<T>(&bytes), value, "{what} round trip");
    let per_value = |started: Instant| started.elapsed().as_nanos() as f64 / args.iterations as f64;
    let (mut encode, mut decode) = (f64::MAX, f64::MAX);
    for _ in 0..args.runs {
        let started = Instant::now();
        for _ in 0..args.iterations {
            black_box(candidate.encode(black_box(value)));
        }
        encode = encode.min(per_value(started));
        let started = Instant::now();
        for _ in 0..args.iterations {
            black_box(candidate.decode::<T>(black_box(&bytes)));
        }
        decode = decode.min(per_value(started));
    }
    println!(
        "{what:<14} {:<9} {:>6} {encode:>10.1} {decode:>10.1}",
        candidate.name(),
        bytes.len()
    );
}
