//! `shopping-cart-load`: drives the carts of a `shopping-cart` cluster over HTTP at a fixed
//! rate and reports the throughput achieved and latency percentiles (see
//! [`shopping_cart::load`]). Exits 1 when no request succeeded, 2 for bad arguments.

use std::process::ExitCode;

use clap::Parser;
use shopping_cart::load::{self, LoadArgs};

fn main() -> ExitCode {
    let args = LoadArgs::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    if !args.json {
        eprintln!(
            "sending {}/s for {} to {} carts through {} (mix {})",
            args.rate,
            humantime::format_duration(args.duration),
            args.carts,
            args.targets.join(", "),
            args.mix
        );
    }
    let report = match runtime.block_on(load::run(&args)) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(2);
        }
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&report).expect("a report is plain data")
        );
    } else {
        print!("{report}");
    }
    if report.all.ok == 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
