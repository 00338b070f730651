//! Node processes of the demo counters on loopback, as the demo and `bench failover` start
//! them, and what their counter route answers when it refuses.

use std::process::{Command, Stdio};

use anyhow::Context;

/// `shardik node --demo-counters` on `127.0.0.1:port` (management on `mgmt`), joining through
/// `seeds`, with its counters in `store`; it logs JSON at INFO to a piped stderr, which the
/// caller reads. The caller adds its environment and spawns it.
pub(crate) fn command(port: u16, mgmt: u16, seeds: &[u16], store: &str) -> anyhow::Result<Command> {
    let exe = std::env::current_exe().context("cannot find the shardik executable")?;
    let mut cmd = Command::new(exe);
    cmd.arg("node")
        .arg("--demo-counters")
        .arg("--store")
        .arg(store)
        .arg("--bind")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--management")
        .arg(format!("127.0.0.1:{mgmt}"));
    for s in seeds {
        cmd.arg("--seed").arg(format!("127.0.0.1:{s}"));
    }
    cmd.env("SHARDIK_LOGGING__FORMAT", "json")
        .env("SHARDIK_LOGGING__LEVEL", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    Ok(cmd)
}

/// Why the counter route did not answer 200: the `message` of its JSON error body, or else the
/// status.
pub(crate) fn refusal(status: u16, body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| format!("HTTP {status}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_says_the_routes_message_or_else_its_status() {
        assert_eq!(refusal(409, r#"{"message":"buffer full"}"#), "buffer full");
        assert_eq!(refusal(502, "<html>bad gateway</html>"), "HTTP 502");
    }
}
