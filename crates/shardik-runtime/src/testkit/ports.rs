//! Loopback ports for tests, demos and benchmarks that must know a node's address before the
//! node starts (a seed list, a peer process's command line).

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::sync::Mutex;

/// The lowest port [`free_port`] hands out.
const FIRST_PORT: u16 = 15_000;

/// Where the search goes on, and the ports already handed out by this process.
static STATE: Mutex<Option<(u16, BTreeSet<u16>)>> = Mutex::new(None);

/// A port nobody listens on at 127.0.0.1 right now, below the kernel's ephemeral range, and
/// never returned before by this process.
///
/// Not port 0's pick: the kernel takes the source port of every outbound connection from the
/// ephemeral range, so a port from there, released until a node binds it, can meanwhile become
/// the source port of any connection on the machine (another node's, a command's), and the
/// node then fails to bind. CI saw exactly that, a node's bind failing with "address in use"
/// on a port picked a moment before. Below that range the kernel never picks a port by
/// itself. Each process starts its search at an offset of its own, so concurrent processes
/// rarely try the same ports, and a port is handed out only if binding it works now.
///
/// When the node can learn its own address instead, bind `127.0.0.1:0` (as
/// [`TestCluster`](super::TestCluster) does): that cannot race at all.
pub fn free_port() -> std::io::Result<u16> {
    let mut state = STATE.lock().unwrap_or_else(|e| e.into_inner());
    let end = ephemeral_range_start().max(FIRST_PORT + 1_000);
    let span = u32::from(end - FIRST_PORT);
    let (next, handed_out) = state.get_or_insert_with(|| {
        // The process id spreads concurrent processes over the range.
        let offset = std::process::id().wrapping_mul(7_919) % span;
        (FIRST_PORT + offset as u16, BTreeSet::new())
    });
    for _ in 0..span {
        let port = *next;
        *next = if port + 1 >= end {
            FIRST_PORT
        } else {
            port + 1
        };
        if !handed_out.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            handed_out.insert(port);
            return Ok(port);
        }
    }
    Err(std::io::Error::other(format!(
        "no free loopback port in {FIRST_PORT}..{end}"
    )))
}

/// The first port of the kernel's ephemeral range (`net.ipv4.ip_local_port_range`), 32768
/// (Linux's default) if it cannot be read.
fn ephemeral_range_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_below_the_ephemeral_range_and_never_repeat() {
        let start = ephemeral_range_start();
        let ports: Vec<u16> = (0..200).map(|_| free_port().unwrap()).collect();
        let distinct: BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len());
        assert!(
            ports
                .iter()
                .all(|&p| p >= FIRST_PORT && p < start.max(FIRST_PORT + 1_000))
        );
    }
}
