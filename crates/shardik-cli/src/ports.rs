//! Free loopback ports for the demo and the benchmarks.

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::sync::Mutex;

/// Ports this process already handed out. Binding port 0 and closing it again lets the kernel
/// give the same number out twice; two nodes on one port would make a run fail at random.
static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// A port free on 127.0.0.1 right now and not returned before by this process.
pub fn free_port() -> std::io::Result<u16> {
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..1000 {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        if handed_out.insert(port) {
            return Ok(port);
        }
    }
    Err(std::io::Error::other("no fresh free port after 1000 tries"))
}
