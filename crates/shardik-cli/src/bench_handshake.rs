//! The cost of a new transport connection (`bench sharding remote --only handshake`): fresh
//! connections opened one after the other against a running node's cluster port, each timed
//! from the TCP connect to our handshake's accepted reply: TCP's handshake, with TLS the TLS
//! 1.3 handshake (both certificates verified: the client checks the node's chain, cluster URI
//! and host; the node checks ours), and shardik's handshake frame and its answer. This is the
//! work a node does to dial a peer (`shardik-transport`'s `dial.rs`), through the same
//! [`TlsContext`] and frames; each connection is then closed (with a `close_notify` on TLS),
//! outside its timed part.
//!
//! Besides the latency, the CPU time both processes spent over the whole run (the sum over
//! their threads of `/proc/<pid>/task/<tid>/schedstat`, in nanoseconds; both sides of every
//! handshake, closing included, and whatever else the two nodes did meanwhile, which is
//! little: heartbeats and gossip) is divided by the connections: what a connection costs when
//! the machine is busy, not only how long it takes on an idle one.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::BytesMut;
use serde_json::json;
use shardik_core::membership::{Address, UniqueAddress};
use shardik_runtime::tls::TlsContext;
use shardik_wire::{Frame, FrameCodec, Handshake, HandshakeReply, LocalIdentity};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::bench_support::Latencies;

/// The longest one connection may take before the run fails.
const CONNECTION_LIMIT: Duration = Duration::from_secs(10);

/// Fresh connections, one after the other.
pub(crate) struct HandshakeCost {
    /// Connections opened (each accepted by the node).
    pub(crate) connections: u64,
    /// From the first connect to the last close.
    pub(crate) elapsed: Duration,
    /// Per connection: from the TCP connect to our handshake's accepted reply.
    pub(crate) latencies: Latencies,
    /// CPU time of this (dialling) process over the run.
    pub(crate) client_cpu: Duration,
    /// CPU time of the node's process over the run.
    pub(crate) server_cpu: Duration,
}

impl HandshakeCost {
    /// Connections per second, one at a time, closing included.
    pub(crate) fn per_second(&self) -> f64 {
        self.connections as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// CPU microseconds per connection of the dialling and of the accepting process.
    pub(crate) fn cpu_us_per_connection(&self) -> (f64, f64) {
        let per = |d: Duration| d.as_secs_f64() * 1e6 / self.connections.max(1) as f64;
        (per(self.client_cpu), per(self.server_cpu))
    }

    /// The figures as a JSON object.
    pub(crate) fn summary(&self) -> serde_json::Value {
        let (client, server) = self.cpu_us_per_connection();
        json!({
            "connections": self.connections,
            "elapsed_s": self.elapsed.as_secs_f64(),
            "connections_per_s": self.per_second(),
            "latency": self.latencies.summary(),
            "client_cpu_us_per_connection": client,
            "server_cpu_us_per_connection": server,
        })
    }
}

/// Opens `connections` connections to the node at `to` (process `server_pid`), one after the
/// other, over TLS with `tls` or plain TCP without, each completing our handshake as a
/// non-member of `cluster`; see the module documentation.
pub(crate) async fn open_connections(
    to: &Address,
    server_pid: u32,
    tls: Option<&TlsContext>,
    cluster: &str,
    connections: u64,
) -> anyhow::Result<HandshakeCost> {
    if connections == 0 {
        bail!("--connections must be positive");
    }
    // A made-up incarnation: the node accepts the handshake of a non-member (joiners need
    // that) and nothing is ever sent to this address. Its host must be the one our
    // certificate names.
    let me = LocalIdentity {
        cluster_name: cluster.to_string(),
        address: UniqueAddress::new(Address::new(to.host.clone(), 1), 1),
    };
    let mut hello = BytesMut::new();
    FrameCodec::default().encode(
        &Frame::Handshake(Handshake::new(&me, Some(to.clone()))),
        &mut hello,
    )?;
    let (client_before, server_before) = (process_cpu("self")?, process_cpu(server_pid)?);
    let mut latencies = Latencies::new();
    let started = Instant::now();
    for i in 0..connections {
        let opened = tokio::time::timeout(CONNECTION_LIMIT, async {
            let t = Instant::now();
            let tcp = TcpStream::connect((&*to.host, to.port)).await?;
            tcp.set_nodelay(true)?;
            match tls {
                None => {
                    let mut stream = tcp;
                    our_handshake(&mut stream, &hello).await?;
                    latencies.record(t.elapsed().as_nanos() as u64);
                    stream.shutdown().await?;
                }
                Some(tls) => {
                    let (mut stream, _node_cert) = tls.connect(tcp, &to.host).await?;
                    our_handshake(&mut stream, &hello).await?;
                    latencies.record(t.elapsed().as_nanos() as u64);
                    stream.shutdown().await?;
                }
            }
            anyhow::Ok(())
        })
        .await;
        match opened {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e.context(format!("connection {} of {connections}", i + 1))),
            Err(_) => bail!(
                "connection {} of {connections} not open within {CONNECTION_LIMIT:?}",
                i + 1
            ),
        }
    }
    let elapsed = started.elapsed();
    Ok(HandshakeCost {
        connections,
        elapsed,
        latencies,
        client_cpu: process_cpu("self")?.saturating_sub(client_before),
        server_cpu: process_cpu(server_pid)?.saturating_sub(server_before),
    })
}

/// Sends our handshake frame (`hello`, encoded) and waits for the node to accept it.
async fn our_handshake<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    hello: &[u8],
) -> anyhow::Result<()> {
    stream.write_all(hello).await?;
    stream.flush().await?;
    let codec = FrameCodec::default();
    let mut buf = BytesMut::with_capacity(256);
    loop {
        if let Some(frame) = codec.decode(&mut buf)? {
            return match frame {
                Frame::HandshakeAck(HandshakeReply::Accepted(_)) => Ok(()),
                Frame::HandshakeAck(HandshakeReply::Refused(r)) => {
                    bail!("the node refused our handshake: {}", r.reason)
                }
                other => bail!(
                    "unexpected {:?} frame instead of a handshake reply",
                    other.kind()
                ),
            };
        }
        if stream.read_buf(&mut buf).await? == 0 {
            bail!("the node closed the connection during our handshake");
        }
    }
}

/// CPU time of process `pid` (`self` for this one): the sum over its threads of the time
/// they ran (`/proc/<pid>/task/<tid>/schedstat`, first field, nanoseconds). Threads that ended
/// are not counted; the benchmark's processes keep theirs (runtime workers) for their life.
fn process_cpu(pid: impl std::fmt::Display) -> anyhow::Result<Duration> {
    let tasks = format!("/proc/{pid}/task");
    let mut total = 0u64;
    for task in std::fs::read_dir(&tasks).with_context(|| format!("cannot list {tasks}"))? {
        let path = task?.path().join("schedstat");
        // A thread that ended since the listing has nothing left to count.
        let Ok(stat) = std::fs::read_to_string(&path) else {
            continue;
        };
        total += run_ns(&stat).with_context(|| format!("no run time in {}", path.display()))?;
    }
    Ok(Duration::from_nanos(total))
}

/// The time on CPU in a `schedstat` line (`run-ns wait-ns timeslices`).
fn run_ns(schedstat: &str) -> Option<u64> {
    schedstat.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_time_is_the_first_schedstat_field() {
        assert_eq!(run_ns("287552128 898835668 547\n"), Some(287_552_128));
        assert_eq!(run_ns(""), None);
    }

    /// CPU this thread burns shows in this process's total (at most a scheduler tick late).
    #[test]
    fn this_process_cpu_time_grows_with_work() {
        let thread_cpu = || {
            let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
            Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
        };
        let before = process_cpu("self").unwrap();
        let burn_until = thread_cpu() + Duration::from_millis(40);
        let mut x = 0u64;
        while thread_cpu() < burn_until {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let spent = process_cpu("self").unwrap().saturating_sub(before);
        assert!(spent >= Duration::from_millis(25), "{spent:?}");
    }
}
