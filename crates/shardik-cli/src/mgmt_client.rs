//! A blocking HTTP client for the management API: of local nodes over plain HTTP on loopback
//! (demo, benchmarks: [`request`], [`get_ok`]), and of any node, over HTTPS with the cluster's
//! CA and optionally a client certificate or a bearer token ([`Endpoint`], for
//! `shardik members|join|leave|down`).
//!
//! Its callers are synchronous (they drive node processes from the main thread, outside any
//! async runtime), so this is reqwest's blocking client: for local nodes one per process, kept
//! in a `static` so that requests reuse connections (the demo sends thousands).

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context, bail};
use reqwest::Method;
use reqwest::blocking::Client;
use shardik_runtime::tls::{PemFile, https_client_config};

/// Longest wait for a whole answer; a node that takes longer counts as not answering.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The process's client, or `None` if it could not be built (then every request fails).
fn client() -> Option<&'static Client> {
    static CLIENT: OnceLock<Option<Client>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            Client::builder()
                // The nodes listen on loopback: a proxy from the environment must not be used.
                .no_proxy()
                .timeout(TIMEOUT)
                .connect_timeout(TIMEOUT)
                .build()
                .ok()
        })
        .as_ref()
}

/// One request to `127.0.0.1:port`; the status code and body, or `None` if the method is not
/// a valid HTTP method, the connection failed, or no complete answer came within 10 s.
pub fn request(port: u16, method: &str, path: &str) -> Option<(u16, String)> {
    request_within(port, method, path, TIMEOUT)
}

/// [`request`], giving up after `limit` instead of 10 s.
pub fn request_within(
    port: u16,
    method: &str,
    path: &str,
    limit: Duration,
) -> Option<(u16, String)> {
    let method = Method::from_bytes(method.as_bytes()).ok()?;
    let response = client()?
        .request(method, format!("http://127.0.0.1:{port}{path}"))
        .timeout(limit)
        .send()
        .ok()?;
    let status = response.status().as_u16();
    let body = response.text().ok()?;
    Some((status, body))
}

/// A GET answered with 200: its body.
pub fn get_ok(port: u16, path: &str) -> Option<String> {
    match request(port, "GET", path)? {
        (200, body) => Some(body),
        _ => None,
    }
}

/// How to reach one node's management API: its address and, for HTTPS, the files to trust
/// it and to prove who we are.
#[derive(Clone, Debug, Default)]
pub struct EndpointSpec {
    /// `HOST:PORT`, or a URL `http://HOST:PORT` / `https://HOST:PORT`.
    pub address: String,
    /// The CA the node's certificate must chain to; implies HTTPS.
    pub ca: Option<PathBuf>,
    /// A client certificate (chain) to present, with `key`.
    pub cert: Option<PathBuf>,
    /// The private key of `cert`.
    pub key: Option<PathBuf>,
    /// A file holding the bearer token to send.
    pub token_file: Option<PathBuf>,
}

/// A node's management API, ready for requests (see [`EndpointSpec`]).
pub struct Endpoint {
    base: String,
    client: Client,
    token: Option<String>,
}

impl Endpoint {
    /// Checks `spec` and reads its files (now, so that a wrong path is reported before any
    /// request).
    pub fn new(spec: &EndpointSpec) -> anyhow::Result<Endpoint> {
        let (scheme, host_port) = match spec.address.split_once("://") {
            Some((scheme, rest)) => (Some(scheme.to_ascii_lowercase()), rest),
            None => (None, spec.address.as_str()),
        };
        let host_port = host_port.trim_end_matches('/');
        if host_port.is_empty() || host_port.contains('/') {
            bail!(
                "--management `{}`: expected HOST:PORT, or https://HOST:PORT",
                spec.address
            );
        }
        let https = match scheme.as_deref() {
            Some("https") => true,
            Some("http") => false,
            Some(other) => bail!("--management `{}`: unknown scheme `{other}`", spec.address),
            None => spec.ca.is_some(),
        };
        let mut builder = Client::builder()
            .no_proxy()
            .timeout(TIMEOUT)
            .connect_timeout(TIMEOUT);
        match (&spec.ca, https) {
            (Some(ca), true) => {
                let identity = match (&spec.cert, &spec.key) {
                    (Some(cert), Some(key)) => Some((
                        PemFile::new("--management-cert", cert),
                        PemFile::new("--management-key", key),
                    )),
                    (None, None) => None,
                    _ => bail!("--management-cert and --management-key go together"),
                };
                let config = https_client_config(
                    &PemFile::new("--management-ca", ca),
                    identity.as_ref().map(|(c, k)| (c, k)),
                )?;
                builder = builder.use_preconfigured_tls(config);
            }
            (None, true) => bail!(
                "--management `{}` is https: give --management-ca FILE, the CA that signed the \
                 node's certificate (with `shardik certs`, DIR/ca.pem)",
                spec.address
            ),
            (_, false) if spec.ca.is_some() || spec.cert.is_some() || spec.key.is_some() => bail!(
                "--management `{}` is http: --management-ca, --management-cert and \
                 --management-key apply to https only",
                spec.address
            ),
            (_, false) => {}
        }
        let token = match &spec.token_file {
            None => None,
            Some(path) => {
                let text = std::fs::read_to_string(path).with_context(|| {
                    format!("cannot read --management-token-file `{}`", path.display())
                })?;
                let token = text.trim();
                if token.is_empty() {
                    bail!("--management-token-file `{}` is empty", path.display());
                }
                Some(token.to_string())
            }
        };
        Ok(Endpoint {
            base: format!("{}://{host_port}", if https { "https" } else { "http" }),
            client: builder.build().context("cannot set up the HTTP client")?,
            token,
        })
    }

    /// The URL of `path` at this endpoint.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// One request, with `form` as an `application/x-www-form-urlencoded` body: the status
    /// code and body, or why there was no answer.
    pub fn send(
        &self,
        method: Method,
        path: &str,
        form: &[(&str, &str)],
    ) -> anyhow::Result<(u16, String)> {
        let url = self.url(path);
        let mut request = self.client.request(method.clone(), &url);
        if !form.is_empty() {
            request = request.form(form);
        }
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let response = request
            .send()
            .map_err(|e| anyhow::anyhow!("{method} {url}: {}", error_chain(&e)))?;
        let status = response.status().as_u16();
        let body = response
            .text()
            .with_context(|| format!("{method} {url}: the answer broke off"))?;
        Ok((status, body))
    }
}

/// An error and its causes on one line: reqwest's own message alone ("error sending
/// request") does not say that the TLS handshake failed, or why.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Write};
    use std::net::TcpListener;

    use super::*;

    /// Serves `answers.len()` connections on a loopback port, one answer each, and returns
    /// the port and a handle yielding the request lines it saw.
    fn serve(answers: Vec<&'static str>) -> (u16, std::thread::JoinHandle<Vec<String>>) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let port = listener.local_addr().expect("local addr").port();
        let handle = std::thread::spawn(move || {
            let mut seen = Vec::new();
            for answer in answers {
                let (stream, _) = listener.accept().expect("accept");
                let mut reader = BufReader::new(stream);
                let mut line = String::new();
                reader.read_line(&mut line).expect("request line");
                seen.push(line.trim_end().to_string());
                // Skip the headers; the client sends no body.
                loop {
                    let mut header = String::new();
                    reader.read_line(&mut header).expect("header");
                    if header == "\r\n" || header.is_empty() {
                        break;
                    }
                }
                let mut stream = reader.into_inner();
                stream.write_all(answer.as_bytes()).expect("answer");
            }
            seen
        });
        (port, handle)
    }

    #[test]
    fn status_and_body_come_back_for_any_method() {
        let (port, server) = serve(vec![
            "HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello",
            "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 4\r\nconnection: close\r\n\r\nbusy",
            "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        ]);
        assert_eq!(get_ok(port, "/ready"), Some("hello".to_string()));
        assert_eq!(
            request(port, "POST", "/demo/counter/c1/increment"),
            Some((503, "busy".to_string()))
        );
        assert_eq!(get_ok(port, "/missing"), None, "not 200");
        assert_eq!(
            server.join().expect("server"),
            vec![
                "GET /ready HTTP/1.1",
                "POST /demo/counter/c1/increment HTTP/1.1",
                "GET /missing HTTP/1.1",
            ]
        );
    }

    fn endpoint_error(spec: EndpointSpec) -> String {
        match Endpoint::new(&spec) {
            Ok(e) => panic!("accepted, as {}", e.url("")),
            Err(e) => format!("{e:#}"),
        }
    }

    #[test]
    fn endpoints_take_http_by_default_and_https_with_a_ca() {
        let plain = Endpoint::new(&EndpointSpec {
            address: "127.0.0.1:8558".into(),
            ..EndpointSpec::default()
        })
        .unwrap();
        assert_eq!(plain.url("/alive"), "http://127.0.0.1:8558/alive");
        let explicit = Endpoint::new(&EndpointSpec {
            address: "http://[::1]:8558/".into(),
            ..EndpointSpec::default()
        })
        .unwrap();
        assert_eq!(explicit.url("/alive"), "http://[::1]:8558/alive");

        let pki = tempfile::tempdir().unwrap();
        let ca = shardik_runtime::tls::certs::CertificateAuthority::generate(
            "test ca",
            shardik_runtime::tls::certs::Validity::days_from_now(1),
        )
        .unwrap();
        let ca_file = pki.path().join("ca.pem");
        std::fs::write(&ca_file, ca.cert_pem()).unwrap();
        let tls = Endpoint::new(&EndpointSpec {
            address: "node-1.example:8558".into(),
            ca: Some(ca_file.clone()),
            ..EndpointSpec::default()
        })
        .unwrap();
        assert_eq!(tls.url("/alive"), "https://node-1.example:8558/alive");

        // What cannot work is refused before any request, saying what to do.
        let text = endpoint_error(EndpointSpec {
            address: "https://node-1.example:8558".into(),
            ..EndpointSpec::default()
        });
        assert!(text.contains("--management-ca"), "{text}");
        let text = endpoint_error(EndpointSpec {
            address: "http://node-1.example:8558".into(),
            ca: Some(ca_file.clone()),
            ..EndpointSpec::default()
        });
        assert!(text.contains("https only"), "{text}");
        let text = endpoint_error(EndpointSpec {
            address: "node-1.example:8558".into(),
            ca: Some(ca_file.clone()),
            cert: Some(ca_file.clone()),
            ..EndpointSpec::default()
        });
        assert!(text.contains("go together"), "{text}");
        let text = endpoint_error(EndpointSpec {
            address: "node-1.example:8558/cluster".into(),
            ..EndpointSpec::default()
        });
        assert!(text.contains("HOST:PORT"), "{text}");
        let missing = pki.path().join("missing.pem");
        let text = endpoint_error(EndpointSpec {
            address: "node-1.example:8558".into(),
            ca: Some(missing.clone()),
            ..EndpointSpec::default()
        });
        assert!(
            text.contains("--management-ca") && text.contains("missing.pem"),
            "{text}"
        );
        let empty = pki.path().join("token");
        std::fs::write(&empty, "\n").unwrap();
        let text = endpoint_error(EndpointSpec {
            address: "127.0.0.1:8558".into(),
            token_file: Some(empty),
            ..EndpointSpec::default()
        });
        assert!(text.contains("is empty"), "{text}");
    }

    #[test]
    fn no_server_or_a_bad_method_is_none() {
        // A port that was just free: nobody listens there.
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
            l.local_addr().expect("local addr").port()
        };
        assert_eq!(request(port, "GET", "/ready"), None);
        assert_eq!(request(port, "NOT A METHOD", "/ready"), None);
    }
}
