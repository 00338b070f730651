//! A small network of Linux network namespaces for multi-process tests: one namespace per
//! node, all on one bridge, and an address in the test's own namespace on that bridge (for a
//! relay to servers on the test's loopback, see `relay.rs`). Links between nodes can be cut
//! and restored while the path to the test's address stays up.
//!
//! ```text
//!   test's namespace            hub namespace              node namespaces
//!   {prefix}h 10.213.X.1 ──veth── up0 ┐
//!                                     ├ br0 ── n0 ──veth── eth0 10.213.X.11  ({prefix}-n0)
//!                                     │     ── n1 ──veth── eth0 10.213.X.12  ({prefix}-n1)
//!                                     └     ── …
//! ```
//!
//! The bridge lives in a namespace of its own, not in the test's: there it meets no firewall
//! rules or bridge netfilter settings of the machine, and deleting that namespace takes the
//! bridge and every veth pair with it. Names carry the test process's id, so runs on one
//! machine do not collide, and leftovers of runs whose process is gone are removed first.
//!
//! A namespace may get a hosts file of its own ([`Lab::write_hosts`]): `ip netns exec`
//! bind-mounts `/etc/netns/NAME/hosts` over `/etc/hosts` for the processes it starts, so names
//! resolve differently in each namespace without a DNS server. Those directories go with the
//! lab too.
//!
//! Needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN) and the `ip` program of iproute2.

use std::net::Ipv4Addr;
use std::process::Command;

/// What every name of this module's namespaces and links starts with, unless a test names
/// its own (`Lab::create_named`, so that two tests' networks can exist side by side).
const NETNS_PREFIX: &str = "shardik-np";
/// Where `ip netns exec NAME` finds files it bind-mounts over `/etc` (`/etc/netns/NAME/hosts`).
const ETC_NETNS: &str = "/etc/netns";
/// What the link in the test's namespace is called, before the process id (interface names
/// are at most 15 bytes: "shnp" + 7 digits + "h").
const LINK_PREFIX: &str = "shnp";

/// Why a network could not be built.
#[derive(Debug)]
pub enum LabError {
    /// This machine cannot create network namespaces at all (not root, no `ip`, no
    /// namespace support): the only reason a test may skip.
    CannotCreateNamespaces(String),
    /// Namespaces work but a later step failed: a real failure.
    Failed(String),
}

/// One node's namespace.
#[derive(Clone, Debug)]
pub struct NodeNet {
    /// The namespace's name (for `ip netns exec`).
    pub netns: String,
    /// Its address on the bridge.
    pub addr: Ipv4Addr,
}

/// The namespaces, the bridge and the test's address on it. Dropping it deletes them all,
/// also when the test panics.
pub struct Lab {
    prefix: String,
    hub: String,
    host_link: String,
    /// The test's own address on the bridge: every node reaches it, whatever is cut.
    pub host_addr: Ipv4Addr,
    /// The nodes' namespaces, in order.
    pub nodes: Vec<NodeNet>,
    /// Routes currently cut: (from node, to node).
    cut: Vec<(usize, usize)>,
}

/// Runs `ip ARGS`, returning its stdout or an error with its stderr.
fn ip(args: &[&str]) -> Result<String, String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run `ip {}`: {e}", args.join(" ")))?;
    if !out.status.success() {
        return Err(format!(
            "`ip {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Whether process `pid` still runs (a name's owner; a dead owner's names are leftovers).
fn process_alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// The process id in a name `{prefix}{pid}...`, if it has that shape.
fn owner_pid(name: &str, prefix: &str) -> Option<u32> {
    let rest = name.strip_prefix(prefix)?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Deletes namespaces and links of earlier runs whose process is gone (a run killed before
/// its guard could clean up), and ends the node processes such a run left in its namespaces:
/// nothing stops them otherwise, and they would keep its namespaces alive.
fn remove_leftovers(netns_prefix: &str, link_prefix: &str) {
    if let Ok(list) = ip(&["netns", "list"]) {
        for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
            if owner_pid(name, netns_prefix).is_some_and(|pid| !process_alive(pid)) {
                if let Ok(pids) = ip(&["netns", "pids", name]) {
                    for pid in pids.split_whitespace() {
                        let _ = Command::new("kill").args(["-KILL", pid]).status();
                    }
                }
                let _ = ip(&["netns", "del", name]);
            }
        }
    }
    if let Ok(dirs) = std::fs::read_dir(ETC_NETNS) {
        for dir in dirs.flatten() {
            let name = dir.file_name().to_string_lossy().into_owned();
            if owner_pid(&name, NETNS_PREFIX).is_some_and(|pid| !process_alive(pid)) {
                let _ = std::fs::remove_dir_all(dir.path());
            }
        }
        // Gone if nothing else uses it (removing a directory that is not empty fails).
        let _ = std::fs::remove_dir(ETC_NETNS);
    }
    if let Ok(links) = ip(&["-o", "link", "show"]) {
        for line in links.lines() {
            // "7: shnp123h@if2: <...>": the name is the second field, before any '@'.
            let Some(name) = line.split_whitespace().nth(1) else {
                continue;
            };
            let name = name.trim_end_matches(':');
            let name = name.split('@').next().unwrap_or(name);
            if owner_pid(name, link_prefix).is_some_and(|pid| !process_alive(pid)) {
                let _ = ip(&["link", "del", name]);
            }
        }
    }
}

/// A /24 of 10.213.0.0/16 that no route of this machine uses yet, starting from one derived
/// from `seed` so that concurrent runs start apart.
fn free_subnet(seed: u32) -> Result<u8, LabError> {
    let routes = ip(&["-4", "route", "show", "table", "all"]).map_err(LabError::Failed)?;
    let addrs = ip(&["-4", "-o", "addr", "show"]).map_err(LabError::Failed)?;
    (0..=255u32)
        .map(|k| ((seed + k) % 256) as u8)
        .find(|x| {
            let net = format!("10.213.{x}.");
            !routes.contains(&net) && !addrs.contains(&net)
        })
        .ok_or_else(|| LabError::Failed("no free /24 left in 10.213.0.0/16".to_string()))
}

impl Lab {
    /// Builds `n` node namespaces on one bridge, with this process's address on it.
    pub fn create(n: usize) -> Result<Lab, LabError> {
        Lab::create_named(NETNS_PREFIX, LINK_PREFIX, n)
    }

    /// As [`create`](Self::create), with names of the test's own: namespaces start with
    /// `netns_prefix`, the test's link with `link_prefix` (at most 7 bytes), each followed by
    /// the process id; leftovers are looked for under these prefixes only.
    pub fn create_named(netns_prefix: &str, link_prefix: &str, n: usize) -> Result<Lab, LabError> {
        assert!((1..=200).contains(&n), "1 to 200 nodes");
        assert!(
            link_prefix.len() <= 7,
            "interface names are at most 15 bytes"
        );
        remove_leftovers(netns_prefix, link_prefix);
        let pid = std::process::id();
        let prefix = format!("{netns_prefix}{pid}");
        let hub = format!("{prefix}-hub");
        // The first namespace decides whether this machine can do it at all.
        ip(&["netns", "add", &hub]).map_err(LabError::CannotCreateNamespaces)?;
        let mut lab = Lab {
            prefix: prefix.clone(),
            hub: hub.clone(),
            host_link: format!("{link_prefix}{pid}h"),
            host_addr: Ipv4Addr::UNSPECIFIED,
            nodes: Vec::new(),
            cut: Vec::new(),
        };
        // From here on `lab` owns what exists, so an error or a panic drops it all.
        // Seeded by the names too, so that two tests' labs start their search apart.
        let seed = netns_prefix
            .bytes()
            .fold(pid, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
        let x = free_subnet(seed)?;
        lab.host_addr = Ipv4Addr::new(10, 213, x, 1);
        let host_cidr = format!("{}/24", lab.host_addr);
        let steps: Vec<Vec<String>> = vec![
            vec!["-n", &hub, "link", "set", "lo", "up"],
            vec!["-n", &hub, "link", "add", "br0", "type", "bridge"],
            vec!["-n", &hub, "link", "set", "br0", "up"],
            vec![
                "link",
                "add",
                &lab.host_link,
                "type",
                "veth",
                "peer",
                "name",
                "up0",
                "netns",
                &hub,
            ],
            vec!["addr", "add", &host_cidr, "dev", &lab.host_link],
            vec!["link", "set", &lab.host_link, "up"],
            vec!["-n", &hub, "link", "set", "up0", "master", "br0", "up"],
        ]
        .into_iter()
        .map(|v| v.into_iter().map(String::from).collect())
        .collect();
        run_all(&steps)?;
        for i in 0..n {
            let netns = format!("{prefix}-n{i}");
            ip(&["netns", "add", &netns]).map_err(LabError::Failed)?;
            let addr = Ipv4Addr::new(10, 213, x, 11 + i as u8);
            lab.nodes.push(NodeNet {
                netns: netns.clone(),
                addr,
            });
            let hub_end = format!("n{i}");
            let cidr = format!("{addr}/24");
            let steps: Vec<Vec<String>> = vec![
                vec![
                    "-n", &hub, "link", "add", &hub_end, "type", "veth", "peer", "name", "eth0",
                    "netns", &netns,
                ],
                vec!["-n", &hub, "link", "set", &hub_end, "master", "br0", "up"],
                vec!["-n", &netns, "link", "set", "lo", "up"],
                vec!["-n", &netns, "addr", "add", &cidr, "dev", "eth0"],
                vec!["-n", &netns, "link", "set", "eth0", "up"],
            ]
            .into_iter()
            .map(|v| v.into_iter().map(String::from).collect())
            .collect();
            run_all(&steps)?;
        }
        Ok(lab)
    }

    /// Cuts every link between a node of `a` and a node of `b`, both ways: each node gets a
    /// blackhole route to each address on the other side (its packets there are dropped,
    /// connections fail). The test's address and the links within a side stay up.
    pub fn partition(&mut self, a: &[usize], b: &[usize]) -> Result<(), String> {
        for &i in a {
            for &j in b {
                for (from, to) in [(i, j), (j, i)] {
                    if self.cut.contains(&(from, to)) {
                        continue;
                    }
                    let dest = format!("{}/32", self.nodes[to].addr);
                    ip(&[
                        "-n",
                        &self.nodes[from].netns,
                        "route",
                        "add",
                        "blackhole",
                        &dest,
                    ])?;
                    self.cut.push((from, to));
                }
            }
        }
        Ok(())
    }

    /// Restores every link cut by [`partition`](Self::partition).
    pub fn heal(&mut self) -> Result<(), String> {
        while let Some((from, to)) = self.cut.pop() {
            let dest = format!("{}/32", self.nodes[to].addr);
            ip(&[
                "-n",
                &self.nodes[from].netns,
                "route",
                "del",
                "blackhole",
                &dest,
            ])?;
        }
        Ok(())
    }

    /// The prefix of every name this network uses.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Gives every node's namespace the hosts file `hosts` (the lines of an `/etc/hosts`):
    /// processes started there with `ip netns exec` resolve names through it instead of the
    /// machine's. Removed with the lab.
    pub fn write_hosts(&self, hosts: &str) -> Result<(), String> {
        for node in &self.nodes {
            let dir = std::path::Path::new(ETC_NETNS).join(&node.netns);
            std::fs::create_dir_all(&dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            let file = dir.join("hosts");
            std::fs::write(&file, hosts)
                .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
        }
        Ok(())
    }
}

fn run_all(steps: &[Vec<String>]) -> Result<(), LabError> {
    for step in steps {
        let args: Vec<&str> = step.iter().map(String::as_str).collect();
        ip(&args).map_err(LabError::Failed)?;
    }
    Ok(())
}

impl Drop for Lab {
    fn drop(&mut self) {
        // Deleting a namespace deletes its end of every veth pair, and with it the other end;
        // the hub takes the bridge and the test's link with it.
        for node in &self.nodes {
            if let Err(e) = ip(&["netns", "del", &node.netns]) {
                eprintln!("netns cleanup: {e}");
            }
        }
        if let Err(e) = ip(&["netns", "del", &self.hub]) {
            eprintln!("netns cleanup: {e}");
        }
        // Normally gone with the hub; a failed setup may have left it alone.
        let _ = ip(&["link", "del", &self.host_link]);
        for node in &self.nodes {
            let dir = std::path::Path::new(ETC_NETNS).join(&node.netns);
            match std::fs::remove_dir_all(&dir) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    eprintln!("netns cleanup: {}: {e}", dir.display());
                }
                _ => {}
            }
        }
        // Gone if nothing else uses it (removing a directory that is not empty fails).
        let _ = std::fs::remove_dir(ETC_NETNS);
    }
}

#[cfg(test)]
mod tests {
    use super::owner_pid;

    #[test]
    fn names_say_whose_they_are() {
        assert_eq!(owner_pid("shardik-np4242-n3", "shardik-np"), Some(4242));
        assert_eq!(owner_pid("shnp17h", "shnp"), Some(17));
        assert_eq!(owner_pid("shardik-npx-n3", "shardik-np"), None);
        assert_eq!(owner_pid("other", "shardik-np"), None);
    }
}
