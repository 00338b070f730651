//! One probe: `GET /bootstrap/seed-nodes` of a contact point's management API, over HTTP, or
//! HTTPS when this node's own management port serves TLS (trusting its CA file, as Akka uses
//! its own scheme for every contact point).
//!
//! Bounded: the whole probe (resolving a host without address, connecting, the TLS
//! handshake, the answer) within `probe-timeout`, the answer's body at most
//! `max-response-size` bytes, the JSON parsed only after both.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::header::{CONTENT_LENGTH, HOST, USER_AGENT};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
#[cfg(feature = "tls")]
use rustls::pki_types::ServerName;
use shardik_core::membership::Address;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
#[cfg(feature = "tls")]
use tokio_rustls::TlsConnector;

use super::contact_point::ContactPoint;
use crate::management_json::SeedNodes;

/// The route probed.
pub const SEED_NODES_PATH: &str = "/bootstrap/seed-nodes";

/// What a contact point answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeAnswer {
    /// Its own cluster address (`selfNode`).
    pub self_node: Address,
    /// The cluster addresses of the seed nodes it listed.
    pub seed_nodes: BTreeSet<Address>,
}

/// Why a probe failed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The host has no address and could not be resolved.
    #[error("cannot resolve {host}: {cause}")]
    Unresolved {
        /// The host.
        host: String,
        /// Why.
        cause: String,
    },
    /// No TCP connection.
    #[error("cannot connect to {addr}: {cause}")]
    Connect {
        /// Where.
        addr: SocketAddr,
        /// Why.
        cause: std::io::Error,
    },
    /// The TLS handshake failed (with `management.http.tls.enabled`).
    #[error("TLS handshake failed: {0}")]
    Tls(String),
    /// The HTTP exchange failed.
    #[error("HTTP request failed: {0}")]
    Http(String),
    /// An answer other than 200.
    #[error("answered {0} (is it a shardik node of this version?)")]
    Status(StatusCode),
    /// The answer was larger than `max-response-size`.
    #[error("answer larger than {0} bytes (contact-point.max-response-size)")]
    TooLarge(usize),
    /// The answer was not the seed nodes JSON.
    #[error("malformed answer: {0}")]
    Malformed(String),
    /// No whole answer within `probe-timeout`.
    #[error("no answer within {0:?} (contact-point.probe-timeout)")]
    Timeout(Duration),
}

impl ProbeError {
    /// The metric label of this failure.
    pub fn reason(&self) -> &'static str {
        match self {
            ProbeError::Unresolved { .. } => "unresolved",
            ProbeError::Connect { .. } => "connect-failed",
            ProbeError::Tls(_) => "tls-failed",
            ProbeError::Http(_) => "http-failed",
            ProbeError::Status(_) => "bad-status",
            ProbeError::TooLarge(_) => "too-large",
            ProbeError::Malformed(_) => "malformed",
            ProbeError::Timeout(_) => "timeout",
        }
    }
}

/// How a prober speaks HTTPS: a client configuration trusting the cluster's CA.
#[cfg(feature = "tls")]
pub type HttpsClient = std::sync::Arc<rustls::ClientConfig>;

/// No HTTPS in a build without the `tls` feature: no value of this type exists (bootstrap
/// refuses `management.http.tls.enabled` at start).
#[cfg(not(feature = "tls"))]
#[derive(Clone)]
pub enum HttpsClient {}

#[cfg(feature = "tls")]
type Connector = TlsConnector;
#[cfg(not(feature = "tls"))]
type Connector = HttpsClient;

#[cfg(feature = "tls")]
fn connector(client: HttpsClient) -> Connector {
    TlsConnector::from(client)
}

#[cfg(not(feature = "tls"))]
fn connector(client: HttpsClient) -> Connector {
    match client {}
}

/// Probes contact points.
#[derive(Clone)]
pub struct Prober {
    tls: Option<Connector>,
    timeout: Duration,
    max_response_size: usize,
}

impl std::fmt::Debug for Prober {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prober")
            .field("https", &self.tls.is_some())
            .field("timeout", &self.timeout)
            .field("max_response_size", &self.max_response_size)
            .finish()
    }
}

impl Prober {
    /// A prober over HTTPS with `tls` (a client configuration trusting the cluster's CA), or
    /// plain HTTP without.
    pub fn new(tls: Option<HttpsClient>, timeout: Duration, max_response_size: usize) -> Self {
        Prober {
            tls: tls.map(connector),
            timeout,
            max_response_size,
        }
    }

    /// Asks `cp` for its seed nodes.
    pub async fn probe(&self, cp: &ContactPoint) -> Result<ProbeAnswer, ProbeError> {
        tokio::time::timeout(self.timeout, self.exchange(cp))
            .await
            .unwrap_or(Err(ProbeError::Timeout(self.timeout)))
    }

    async fn exchange(&self, cp: &ContactPoint) -> Result<ProbeAnswer, ProbeError> {
        let addr = socket_addr(cp).await?;
        let tcp = TcpStream::connect(addr)
            .await
            .map_err(|cause| ProbeError::Connect { addr, cause })?;
        let _ = tcp.set_nodelay(true);
        let body = match &self.tls {
            None => self.get(tcp, cp).await?,
            Some(tls) => self.get_over_tls(tls, tcp, cp).await?,
        };
        parse(&body)
    }

    /// One GET over TLS on `tcp`, the contact point's certificate checked against its host.
    #[cfg(feature = "tls")]
    async fn get_over_tls(
        &self,
        tls: &Connector,
        tcp: TcpStream,
        cp: &ContactPoint,
    ) -> Result<Bytes, ProbeError> {
        let name = ServerName::try_from(cp.host.clone())
            .map_err(|e| ProbeError::Tls(format!("{}: {e}", cp.host)))?;
        let stream = tls
            .connect(name, tcp)
            .await
            .map_err(|e| ProbeError::Tls(e.to_string()))?;
        self.get(stream, cp).await
    }

    /// Never called: no [`HttpsClient`] exists in a build without the `tls` feature.
    #[cfg(not(feature = "tls"))]
    async fn get_over_tls(
        &self,
        tls: &Connector,
        _tcp: TcpStream,
        _cp: &ContactPoint,
    ) -> Result<Bytes, ProbeError> {
        match *tls {}
    }

    /// One GET over `io`, the answer's body bounded.
    async fn get<S>(&self, io: S, cp: &ContactPoint) -> Result<Bytes, ProbeError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
            .await
            .map_err(|e| ProbeError::Http(e.to_string()))?;
        let request = Request::get(SEED_NODES_PATH)
            .header(HOST, cp.authority())
            .header(USER_AGENT, "shardik-bootstrap")
            .body(Empty::<Bytes>::new())
            .map_err(|e| ProbeError::Http(e.to_string()))?;
        let max = self.max_response_size;
        let exchange = async move {
            let response = sender
                .send_request(request)
                .await
                .map_err(|e| ProbeError::Http(e.to_string()))?;
            if response.status() != StatusCode::OK {
                return Err(ProbeError::Status(response.status()));
            }
            let announced = response
                .headers()
                .get(CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
            if announced.is_some_and(|n| n > max) {
                return Err(ProbeError::TooLarge(max));
            }
            Limited::new(response.into_body(), max)
                .collect()
                .await
                .map(|collected| collected.to_bytes())
                .map_err(|e| {
                    if e.is::<http_body_util::LengthLimitError>() {
                        ProbeError::TooLarge(max)
                    } else {
                        ProbeError::Http(e.to_string())
                    }
                })
        };
        // The connection is driven here, beside the exchange, not in a task of its own: the
        // caller's timeout then ends both, and no socket outlives the probe.
        tokio::pin!(conn, exchange);
        tokio::select! {
            result = &mut exchange => result,
            ended = &mut conn => match ended {
                Err(e) => Err(ProbeError::Http(e.to_string())),
                // Closed after a whole answer: the body is already in the exchange's hands.
                Ok(()) => exchange.await,
            },
        }
    }
}

/// Where to connect: the resolved address, or the host looked up by the system resolver.
async fn socket_addr(cp: &ContactPoint) -> Result<SocketAddr, ProbeError> {
    if let Some(ip) = cp.address.or_else(|| cp.host_ip()) {
        return Ok(SocketAddr::new(ip, cp.port));
    }
    let unresolved = |cause: String| ProbeError::Unresolved {
        host: cp.host.clone(),
        cause,
    };
    tokio::net::lookup_host((cp.host.as_str(), cp.port))
        .await
        .map_err(|e| unresolved(e.to_string()))?
        .next()
        .ok_or_else(|| unresolved("no address".to_string()))
}

/// The answer's JSON, every address checked.
fn parse(body: &[u8]) -> Result<ProbeAnswer, ProbeError> {
    let answer: SeedNodes =
        serde_json::from_slice(body).map_err(|e| ProbeError::Malformed(e.to_string()))?;
    let address = |raw: &str| {
        raw.parse::<Address>()
            .map_err(|e| ProbeError::Malformed(format!("address [{raw}]: {e}")))
    };
    Ok(ProbeAnswer {
        self_node: address(&answer.self_node)?,
        seed_nodes: answer
            .seed_nodes
            .iter()
            .map(|m| address(&m.node))
            .collect::<Result<_, _>>()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_parse_and_bad_addresses_are_refused() {
        let ok = br#"{"selfNode":"10.0.0.1:2552","seedNodes":[
            {"node":"10.0.0.2:2552","nodeUid":"7","status":"Up","roles":[]}]}"#;
        let answer = parse(ok).expect("parses");
        assert_eq!(answer.self_node, Address::new("10.0.0.1", 2552));
        assert_eq!(
            answer.seed_nodes,
            BTreeSet::from([Address::new("10.0.0.2", 2552)])
        );
        let bad = br#"{"selfNode":"10.0.0.1:2552","seedNodes":[
            {"node":"no-port","nodeUid":"7","status":"Up","roles":[]}]}"#;
        assert!(matches!(parse(bad), Err(ProbeError::Malformed(_))));
        assert!(matches!(parse(b"<html>"), Err(ProbeError::Malformed(_))));
    }
}
