//! `cargo run --release -p shardik-passivation-sim --example passivation_sim -- --help`
//! (the same entry point the `shardik passivation-sim` subcommand calls).

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match shardik_passivation_sim::run_from_args(&args) {
        Ok(out) => print!("{out}"),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    }
}
