//! A tiny blocking HTTP/1.1 client for the management API of local nodes (demo, benchmarks).

use std::io::{Read, Write};
use std::time::Duration;

/// One request to `127.0.0.1:port`; the status code and body, or `None` if the connection
/// failed or the answer was not HTTP.
pub fn request(port: u16, method: &str, path: &str) -> Option<(u16, String)> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.set_nodelay(true).ok()?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

/// A GET answered with 200: its body.
pub fn get_ok(port: u16, path: &str) -> Option<String> {
    match request(port, "GET", path)? {
        (200, body) => Some(body),
        _ => None,
    }
}
