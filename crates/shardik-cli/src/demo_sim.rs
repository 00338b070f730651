//! `shardik demo --simulated`: the narrated cluster run in the deterministic simulator.
//!
//! This runs the real protocol core in the deterministic
//! simulator: five nodes form a cluster, one crashes and is removed by the split-brain
//! resolver, a replacement joins. Every line is one membership change as node-00000 sees it.

use std::process::ExitCode;
use std::time::Duration;

use shardik_core::membership::MemberStatus;
use shardik_sim::scenario::form_cluster;
use shardik_sim::world::{World, WorldConfig};

use crate::simulate::format_entry;

fn print_new(world: &World, from: &mut usize, observer: usize) {
    for e in &world.timeline()[*from..] {
        if e.node.is_none() || e.node == Some(observer) {
            println!("{}", format_entry(e));
        }
    }
    *from = world.timeline().len();
}

/// Runs the demo.
pub fn run(seed: u64) -> anyhow::Result<ExitCode> {
    println!("shardik demo (simulated network, real membership protocol, seed {seed})");
    println!("Five nodes start at once with three seed nodes; lines show what node-00000 sees.\n");
    let mut world = World::new(WorldConfig::new(seed));
    let mut printed = 0;
    let formed = form_cluster(&mut world, 5);
    print_new(&world, &mut printed, 0);
    let Some(t) = formed else {
        anyhow::bail!("the cluster did not form; this is a bug: please report it with the seed");
    };
    println!(
        "\n-> all 5 nodes Up after {:.1} simulated seconds. Now node-00004 crashes.\n",
        t.as_nanos() as f64 / 1e9
    );
    world.crash(4);
    let survivors = [0, 1, 2, 3];
    let removed = world.run_until_pred(Duration::from_secs(120), |w| w.all_up(&survivors));
    print_new(&world, &mut printed, 0);
    let Some(t2) = removed else {
        anyhow::bail!(
            "the crashed node was not removed; this is a bug: please report it with the seed"
        );
    };
    println!(
        "\n-> node-00004 detected, downed by keep-majority and removed at {:.1}s. A new incarnation rejoins.\n",
        t2.as_nanos() as f64 / 1e9
    );
    world.restart(4);
    world.join(4, &[0, 1, 2]);
    let all = [0, 1, 2, 3, 4];
    let back = world.run_until_pred(Duration::from_secs(60), |w| w.all_up(&all));
    print_new(&world, &mut printed, 0);
    let Some(t3) = back else {
        anyhow::bail!(
            "the restarted node did not rejoin; this is a bug: please report it with the seed"
        );
    };
    let up = world
        .members_seen_by(0)
        .iter()
        .filter(|m| m.status == MemberStatus::Up)
        .count();
    println!(
        "\n-> {up} members Up again at {:.1}s. Checker violations: {}.",
        t3.as_nanos() as f64 / 1e9,
        world.checker().violations().len()
    );
    Ok(ExitCode::SUCCESS)
}
