//! A TCP relay in the test process: accepts connections on one address and joins each to a
//! new connection to a target. Nodes in network namespaces (`netns.rs`) cannot reach the
//! test's loopback, where `scripts/with-postgres` runs PostgreSQL; they reach the relay on the
//! test's bridge address instead, and the server's configuration stays as it is.
//!
//! The relay runs on a thread and runtime of its own, so that nothing the test does (blocking
//! waits for child processes, a busy runtime) delays the nodes' store traffic.

use std::net::SocketAddr;
use std::thread::JoinHandle;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

/// A running relay. Dropping it closes the listener and every relayed connection.
pub struct Relay {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Relay {
    /// Listens on `listen` (port 0: any free port) and relays to `target`.
    pub fn start(listen: SocketAddr, target: SocketAddr) -> std::io::Result<Relay> {
        // Bound here, so that the caller learns the address (and any error) at once; the
        // caller may be inside a runtime, where another runtime cannot be entered.
        let listener = std::net::TcpListener::bind(listen)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("relay".to_string())
            .spawn(move || {
                runtime.block_on(async move {
                    let listener = match TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => {
                            eprintln!("relay: cannot listen: {e}");
                            return;
                        }
                    };
                    tokio::select! {
                        _ = stopped => {}
                        _ = accept_loop(listener, target) => {}
                    }
                });
                // Dropping the runtime here ends every connection task with it.
            })?;
        Ok(Relay {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

async fn accept_loop(listener: TcpListener, target: SocketAddr) {
    loop {
        let (mut inbound, _) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Out of descriptors and the like: wait a little rather than spin.
                eprintln!("relay: accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        tokio::spawn(async move {
            let mut outbound = match TcpStream::connect(target).await {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("relay: cannot connect to {target}: {e}");
                    return;
                }
            };
            let _ = inbound.set_nodelay(true);
            let _ = outbound.set_nodelay(true);
            // Ends when either side closes or fails; dropping both closes the other.
            let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
        });
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Relay;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Tries `bind` on ports from `free_port` until one is not in use. `free_port` only knows
    /// that a port was free when it looked: something else on the machine can take it before
    /// the caller binds (seen once in CI), and a test must not fail for that.
    fn on_a_free_port<T>(mut bind: impl FnMut(u16) -> std::io::Result<T>) -> T {
        let mut last = None;
        for _ in 0..20 {
            match bind(super::super::free_port()) {
                Ok(bound) => return bound,
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => last = Some(e),
                Err(e) => panic!("cannot bind a loopback port: {e}"),
            }
        }
        panic!("20 free ports in a row were taken before they could be bound: {last:?}");
    }

    #[tokio::test]
    async fn bytes_go_both_ways_and_dropping_it_closes_the_connections() {
        // Ports from `free_port`, never port 0: a port the OS picks for this test could be one
        // `free_port` just handed to a node that the test binary's other tests are starting.
        let server = on_a_free_port(|port| {
            let listener = std::net::TcpListener::bind(("127.0.0.1", port))?;
            listener.set_nonblocking(true)?;
            tokio::net::TcpListener::from_std(listener)
        });
        let target = server.local_addr().unwrap();
        let relay = on_a_free_port(|port| Relay::start(([127, 0, 0, 1], port).into(), target));
        let mut client = tokio::net::TcpStream::connect(relay.addr()).await.unwrap();
        let (mut served, _) = server.accept().await.unwrap();
        client.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        served.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"ping");
        served.write_all(b"pong").await.unwrap();
        client.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"pong");
        drop(relay);
        // The relayed connection is closed: the client reads the end of the stream.
        let n = client.read(&mut buf).await.unwrap_or(0);
        assert_eq!(n, 0);
    }
}
