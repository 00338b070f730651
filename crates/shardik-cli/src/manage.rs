//! `shardik members`, `join`, `leave`, `down`, `prepare-for-full-shutdown`: a running node's
//! management API from the
//! command line (what Akka's `akka-cluster` script did over JMX), over plain HTTP on loopback
//! or HTTPS with the cluster's CA.
//!
//! The state-changing commands need `management.http.route-providers-read-only = false` on the
//! node and, beyond loopback or with TLS on its management port, a credential: a client
//! certificate from the cluster's CA (`--management-cert`/`--management-key`) or the bearer
//! token (`--management-token-file`). Each option can also come from the environment
//! (`SHARDIK_MANAGEMENT`, `SHARDIK_MANAGEMENT_CA`, …), so a shell can be set up once.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Args;
use reqwest::Method;
use serde_json::Value;
use shardik_core::membership::Address;

use crate::mgmt_client::{Endpoint, EndpointSpec};

/// Where the node's management API is and how to reach it (shared by the commands).
#[derive(Args, Debug)]
pub struct ManagementArgs {
    /// The node's management API: HOST:PORT (HTTPS when --management-ca is given, else
    /// HTTP), or http://HOST:PORT or https://HOST:PORT.
    #[arg(
        long = "management",
        env = "SHARDIK_MANAGEMENT",
        default_value = "127.0.0.1:8558",
        value_name = "ADDRESS"
    )]
    management: String,
    /// The CA certificate(s) the node's management certificate must chain to (PEM; with
    /// `shardik certs`, DIR/ca.pem). Turns on HTTPS.
    #[arg(long, env = "SHARDIK_MANAGEMENT_CA", value_name = "FILE")]
    management_ca: Option<PathBuf>,
    /// A client certificate from the cluster's CA to present (PEM; a node's, or one issued
    /// for an operator by `shardik certs`): with `management.http.tls.enabled` on the node, it
    /// authorises join, leave and down.
    #[arg(
        long,
        env = "SHARDIK_MANAGEMENT_CERT",
        value_name = "FILE",
        requires = "management_key"
    )]
    management_cert: Option<PathBuf>,
    /// The private key of --management-cert (PEM).
    #[arg(
        long,
        env = "SHARDIK_MANAGEMENT_KEY",
        value_name = "FILE",
        requires = "management_cert"
    )]
    management_key: Option<PathBuf>,
    /// A file holding the node's bearer token (`management.http.auth-token-file`).
    #[arg(long, env = "SHARDIK_MANAGEMENT_TOKEN_FILE", value_name = "FILE")]
    management_token_file: Option<PathBuf>,
}

impl ManagementArgs {
    fn endpoint(&self) -> anyhow::Result<Endpoint> {
        Endpoint::new(&EndpointSpec {
            address: self.management.clone(),
            ca: self.management_ca.clone(),
            cert: self.management_cert.clone(),
            key: self.management_key.clone(),
            token_file: self.management_token_file.clone(),
        })
    }
}

/// Arguments of `shardik members`.
#[derive(Args, Debug)]
pub struct MembersArgs {
    #[command(flatten)]
    management: ManagementArgs,
    /// Print the answer as the node gave it (Akka Management's JSON) instead of a table.
    #[arg(long)]
    json: bool,
}

/// Arguments of `shardik join`, `leave` and `down`.
#[derive(Args, Debug)]
pub struct MemberArgs {
    /// The member's cluster address, HOST:PORT (as `shardik members` lists it). For `join`,
    /// the address of a member to join through (the node's own starts a new cluster).
    #[arg(value_name = "ADDRESS")]
    address: Address,
    #[command(flatten)]
    management: ManagementArgs,
}

/// Arguments of `shardik prepare-for-full-shutdown`.
#[derive(Args, Debug)]
pub struct ClusterArgs {
    #[command(flatten)]
    management: ManagementArgs,
}

/// `shardik prepare-for-full-shutdown`: the whole cluster prepares for a full shutdown (`PUT
/// /cluster`, `operation=PrepareForFullClusterShutdown`). Then wait until `shardik members`
/// shows every member ReadyForShutdown, and stop the nodes.
pub fn prepare_for_full_shutdown(args: ClusterArgs) -> anyhow::Result<ExitCode> {
    let endpoint = args.management.endpoint()?;
    let body = answer(
        &endpoint,
        Method::PUT,
        "/cluster",
        &[("operation", "PrepareForFullClusterShutdown")],
    )?;
    println!("{}", message_of(&body));
    Ok(ExitCode::SUCCESS)
}

/// `shardik members`: the membership as the node sees it.
pub fn members(args: MembersArgs) -> anyhow::Result<ExitCode> {
    let endpoint = args.management.endpoint()?;
    let body = answer(&endpoint, Method::GET, "/cluster/members", &[])?;
    if args.json {
        println!("{body}");
        return Ok(ExitCode::SUCCESS);
    }
    let v: Value = serde_json::from_str(&body)
        .with_context(|| format!("{} did not answer JSON: {body}", endpoint.url("")))?;
    print!("{}", members_table(&v));
    Ok(ExitCode::SUCCESS)
}

/// `shardik join ADDRESS`: the node joins the cluster through ADDRESS.
pub fn join(args: MemberArgs) -> anyhow::Result<ExitCode> {
    let endpoint = args.management.endpoint()?;
    let address = args.address.to_string();
    let body = answer(
        &endpoint,
        Method::POST,
        "/cluster/members",
        &[("address", &address)],
    )?;
    println!("{}", message_of(&body));
    Ok(ExitCode::SUCCESS)
}

/// `shardik leave ADDRESS`: the member leaves gracefully (its shards are handed off first).
pub fn leave(args: MemberArgs) -> anyhow::Result<ExitCode> {
    change(args, "Leave")
}

/// `shardik down ADDRESS`: the member is marked Down and removed.
pub fn down(args: MemberArgs) -> anyhow::Result<ExitCode> {
    change(args, "Down")
}

fn change(args: MemberArgs, operation: &str) -> anyhow::Result<ExitCode> {
    let endpoint = args.management.endpoint()?;
    let path = format!("/cluster/members/{}", args.address);
    let body = answer(&endpoint, Method::PUT, &path, &[("operation", operation)])?;
    println!("{}", message_of(&body));
    Ok(ExitCode::SUCCESS)
}

/// The body of a 2xx answer, or an error with the status and the node's message.
fn answer(
    endpoint: &Endpoint,
    method: Method,
    path: &str,
    form: &[(&str, &str)],
) -> anyhow::Result<String> {
    let url = endpoint.url(path);
    let (status, body) = endpoint.send(method.clone(), path, form)?;
    if (200..300).contains(&status) {
        return Ok(body);
    }
    bail!("{method} {url} answered {status}: {}", message_of(&body))
}

/// The `message` of a JSON answer (every answer of ours but the listings has one), or the
/// body as it is.
fn message_of(body: &str) -> String {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| body.trim().to_string())
}

/// `GET /cluster/members` as a table: one line per member, then the leader and the
/// unreachable members.
fn members_table(v: &Value) -> String {
    let text = |v: &Value| v.as_str().unwrap_or("-").to_string();
    let rows: Vec<[String; 4]> = v["members"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            let roles: Vec<String> = m["roles"]
                .as_array()
                .into_iter()
                .flatten()
                .map(text)
                .collect();
            [
                text(&m["node"]),
                text(&m["status"]),
                if roles.is_empty() {
                    "-".to_string()
                } else {
                    roles.join(",")
                },
                text(&m["nodeUid"]),
            ]
        })
        .collect();
    let header = ["NODE", "STATUS", "ROLES", "UID"].map(str::to_string);
    let mut widths = header.clone().map(|h| h.len());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out.push_str(&format!("leader: {}\n", text(&v["leader"])));
    let unreachable: Vec<String> = v["unreachable"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|u| text(&u["node"]))
        .collect();
    if !unreachable.is_empty() {
        out.push_str(&format!("unreachable: {}\n", unreachable.join(", ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_print_as_a_table_with_the_leader_and_the_unreachable() {
        let v = serde_json::json!({
            "selfNode": "127.0.0.1:2551",
            "members": [
                {"node": "127.0.0.1:2551", "nodeUid": "11", "status": "Up", "roles": []},
                {"node": "10.0.0.22:2552", "nodeUid": "2222", "status": "Leaving",
                 "roles": ["api", "backend"]},
            ],
            "unreachable": [{"node": "10.0.0.22:2552", "observedBy": ["127.0.0.1:2551"]}],
            "leader": "127.0.0.1:2551",
            "oldest": "127.0.0.1:2551",
            "oldestPerRole": {},
        });
        assert_eq!(
            members_table(&v),
            "NODE            STATUS   ROLES        UID\n\
             127.0.0.1:2551  Up       -            11\n\
             10.0.0.22:2552  Leaving  api,backend  2222\n\
             leader: 127.0.0.1:2551\n\
             unreachable: 10.0.0.22:2552\n"
        );
    }

    #[test]
    fn messages_come_from_json_or_the_body_as_it_is() {
        assert_eq!(
            message_of(r#"{"message":"Leaving 1.2.3.4:5"}"#),
            "Leaving 1.2.3.4:5"
        );
        assert_eq!(message_of("  not json \n"), "not json");
    }
}
