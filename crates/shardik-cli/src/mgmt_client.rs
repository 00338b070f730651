//! A blocking HTTP client for the management API of local nodes (demo, benchmarks).
//!
//! Its callers are synchronous (they drive node processes from the main thread, outside any
//! async runtime), so this is reqwest's blocking client: one per process, kept in a `static`
//! so that requests reuse connections (the demo sends thousands).

use std::sync::OnceLock;
use std::time::Duration;

use reqwest::Method;
use reqwest::blocking::Client;

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
    let method = Method::from_bytes(method.as_bytes()).ok()?;
    let response = client()?
        .request(method, format!("http://127.0.0.1:{port}{path}"))
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
