//! Configuration loading: defaults, layering (reference → file → environment) and the error
//! messages an operator sees for each kind of mistake.

use std::io::Write;
use std::time::Duration;

use shardik_core::membership::sbr::Strategy;
use shardik_core::membership::{Address, MembershipConfig};
use shardik_runtime::config::{
    ActiveStrategy, ConfigError, DownAllWhenUnstable, DowningProvider, REFERENCE_TOML, Settings,
    env_var_to_key, key_to_env_var,
};
use shardik_runtime::logging::LogFormat;

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn err_of(toml: &str) -> (ConfigError, String) {
    let e = Settings::from_toml_str(toml).expect_err("configuration should be refused");
    let text = e.to_string();
    (e, text)
}

#[test]
fn reference_defaults_equal_the_core_defaults() {
    let s = Settings::reference();
    assert_eq!(s.membership_config(), MembershipConfig::default());
}

#[test]
fn reference_defaults_of_the_edges() {
    let s = Settings::reference();
    assert_eq!(s.cluster.name, "shardik");
    assert!(s.cluster.seed_nodes.is_empty());
    assert!(s.cluster.role.is_empty());
    assert_eq!(
        s.cluster.downing_provider,
        DowningProvider::SplitBrainResolver
    );
    let sbr = &s.cluster.split_brain_resolver;
    assert_eq!(sbr.active_strategy, ActiveStrategy::KeepMajority);
    assert_eq!(sbr.stable_after, Duration::from_secs(20));
    assert_eq!(sbr.down_all_when_unstable, DownAllWhenUnstable::On);
    assert!(sbr.keep_oldest.down_if_alone);
    assert_eq!(s.transport.maximum_frame_size, 256 * 1024);
    assert_eq!(s.transport.connect_timeout, Duration::from_secs(5));
    assert_eq!(
        s.transport.reconnect_backoff_min,
        Duration::from_millis(100)
    );
    assert_eq!(s.transport.reconnect_backoff_max, Duration::from_secs(5));
    assert_eq!(s.management.http.hostname, "127.0.0.1");
    assert_eq!(s.management.http.port, 8558);
    // Akka Management's default: the state-changing routes are refused.
    assert!(s.management.http.route_providers_read_only);
    assert_eq!(s.management.http.auth_token_file, "");
    assert_eq!(s.management.http.auth_token_path(), None);
    assert_eq!(
        s.management.http.header_read_timeout,
        Duration::from_secs(10)
    );
    assert_eq!(s.management.http.max_connections, 256);
    assert_eq!(s.management.http.max_request_body_size, 64 * 1024);
    assert!(!s.management.http.tls.enabled);
    assert_eq!(s.management.http.tls.cert_file, "");
    assert_eq!(s.management.http.tls.key_file, "");
    assert_eq!(s.management.http.tls.ca_cert_file, "");
    assert!(s.management.http.listens_on_loopback());
    assert_eq!(s.management.http.bind_address(), "127.0.0.1:8558");
    assert_eq!(s.logging.format, LogFormat::Text);
    assert_eq!(s.logging.level, "info");
    // Shorter than Akka's `akka.coordination.lease` defaults (120 s, 12 s, 5 s): a crashed
    // node's leased shards wait out the time-to-live (issue 24).
    let lease = s.coordination.lease;
    assert_eq!(lease.heartbeat_timeout, Duration::from_secs(6));
    assert_eq!(lease.heartbeat_interval, Duration::from_secs(2));
    assert_eq!(lease.lease_operation_timeout, Duration::from_millis(1500));
}

#[test]
fn reference_toml_documents_every_key_with_a_comment() {
    // Every `key = value` line is preceded by a comment line (or another documented key of a
    // group, such as the backoff pair), so an operator can read the file as documentation.
    let lines: Vec<&str> = REFERENCE_TOML.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') || t.starts_with('[') {
            continue;
        }
        let prev = lines[i - 1].trim();
        assert!(
            prev.starts_with('#') || (!prev.is_empty() && !prev.starts_with('[')),
            "key line {} has no comment: {line}",
            i + 1
        );
    }
}

#[test]
fn file_overrides_reference() {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    writeln!(
        file,
        r#"
[cluster]
name = "orders"
seed-nodes = ["10.0.0.1:2552", "10.0.0.2:2552"]
roles = ["backend", "api"]
gossip-interval = "250ms"
allow-weakly-up-members = "off"

[cluster.role.backend]
min-nr-of-members = 2

[cluster.failure-detector]
threshold = 12.0
acceptable-heartbeat-pause = "5s"

[cluster.split-brain-resolver]
active-strategy = "static-quorum"
down-all-when-unstable = "off"

[cluster.split-brain-resolver.static-quorum]
quorum-size = 3
role = "backend"

[transport]
maximum-frame-size = "1MiB"

[management.http]
port = 19999
route-providers-read-only = "off"
auth-token-file = "/etc/shardik/token"
header-read-timeout = "3s"
max-connections = 32
max-request-body-size = "8KiB"

[management.http.tls]
cert-file = "/etc/shardik/mgmt.pem"

[logging]
format = "json"
"#
    )
    .unwrap();
    let s = Settings::load_with_env(Some(file.path()), &[]).unwrap();
    assert_eq!(s.cluster.name, "orders");
    assert_eq!(
        s.cluster.seed_nodes,
        vec![
            Address::new("10.0.0.1", 2552),
            Address::new("10.0.0.2", 2552)
        ]
    );
    assert_eq!(s.transport.maximum_frame_size, 1 << 20);
    assert_eq!(s.management.http.port, 19999);
    assert!(!s.management.http.route_providers_read_only);
    assert_eq!(
        s.management.http.auth_token_path(),
        Some("/etc/shardik/token")
    );
    assert_eq!(
        s.management.http.header_read_timeout,
        Duration::from_secs(3)
    );
    assert_eq!(s.management.http.max_connections, 32);
    assert_eq!(s.management.http.max_request_body_size, 8 * 1024);
    assert_eq!(s.management.http.tls.cert_file, "/etc/shardik/mgmt.pem");
    assert_eq!(s.logging.format, LogFormat::Json);

    let m = s.membership_config();
    assert_eq!(m.cluster_name, "orders");
    assert_eq!(
        m.roles.iter().map(String::as_str).collect::<Vec<_>>(),
        ["api", "backend"]
    );
    assert_eq!(m.gossip_interval, Duration::from_millis(250));
    assert_eq!(m.allow_weakly_up_members, None);
    assert_eq!(m.role_min_nr_of_members.get("backend"), Some(&2));
    assert_eq!(m.failure_detector.phi.threshold, 12.0);
    assert_eq!(
        m.failure_detector.phi.acceptable_heartbeat_pause,
        Duration::from_secs(5)
    );
    // Untouched keys keep their defaults.
    assert_eq!(m.gossip_time_to_live, Duration::from_secs(2));
    let sbr = m.downing.expect("downing stays on");
    assert_eq!(
        sbr.strategy,
        Strategy::StaticQuorum {
            quorum_size: 3,
            role: Some("backend".to_string())
        }
    );
    assert_eq!(sbr.down_all_when_unstable, None);
}

#[test]
fn downing_off_means_manual_downing() {
    let s = Settings::from_toml_str("[cluster]\ndowning-provider = \"off\"").unwrap();
    assert_eq!(s.membership_config().downing, None);
}

#[test]
fn strategies_map_onto_the_core() {
    let cases = [
        (
            "keep-oldest",
            "[cluster.split-brain-resolver.keep-oldest]\ndown-if-alone = false\nrole = \"r\"",
            Strategy::KeepOldest {
                down_if_alone: false,
                role: Some("r".into()),
            },
        ),
        ("down-all", "", Strategy::DownAll),
        (
            "lease-majority",
            "[cluster.split-brain-resolver.lease-majority]\nlease-implementation = \"store\"",
            Strategy::LeaseMajority {
                role: None,
                acquire_lease_delay_for_minority: Duration::from_secs(2),
                release_after: Duration::from_secs(40),
                lease_operation_timeout: Duration::from_millis(1500),
                lease_ttl: Duration::from_secs(6),
                lease_renew_interval: Duration::from_secs(2),
            },
        ),
        (
            "keep-majority",
            "[cluster.split-brain-resolver.keep-majority]\nrole = \"x\"",
            Strategy::KeepMajority {
                role: Some("x".into()),
            },
        ),
    ];
    for (name, extra, expected) in cases {
        let toml = format!(
            "[cluster.split-brain-resolver]\nactive-strategy = \"{name}\"\nstable-after = \"8s\"\n{extra}"
        );
        let m = Settings::from_toml_str(&toml).unwrap().membership_config();
        let sbr = m.downing.unwrap();
        assert_eq!(sbr.strategy, expected, "{name}");
        assert_eq!(sbr.stable_after, Duration::from_secs(8));
        // "on" = max(4s, 3/4 · stable-after) = 6s.
        assert_eq!(sbr.down_all_when_unstable, Some(Duration::from_secs(6)));
    }
}

#[test]
fn switches_and_duration_or_switch_values() {
    let s = Settings::from_toml_str(
        "[cluster]\nallow-weakly-up-members = \"on\"\n[cluster.split-brain-resolver]\ndown-all-when-unstable = \"30s\"",
    )
    .unwrap();
    assert_eq!(
        s.cluster.allow_weakly_up_members,
        Some(Duration::from_secs(7))
    );
    assert_eq!(
        s.cluster.split_brain_resolver.down_all_when_unstable,
        DownAllWhenUnstable::After(Duration::from_secs(30))
    );
}

#[test]
fn env_overrides_file_and_reference() {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    writeln!(
        file,
        "[cluster.failure-detector]\nthreshold = 10.0\n[cluster]\nname = \"file\""
    )
    .unwrap();
    let vars = env(&[
        ("SHARDIK_CLUSTER__FAILURE_DETECTOR__THRESHOLD", "12"),
        ("SHARDIK_CLUSTER__SEED_NODES", "a:1,b:2"),
        ("SHARDIK_CLUSTER__ROLES", "[x, y]"),
        ("SHARDIK_CLUSTER__APP_VERSION", "2"),
        ("SHARDIK_CLUSTER__ROLE__BACKEND__MIN_NR_OF_MEMBERS", "3"),
        ("SHARDIK_MANAGEMENT__HTTP__PORT", "9000"),
        (
            "SHARDIK_MANAGEMENT__HTTP__ROUTE_PROVIDERS_READ_ONLY",
            "false",
        ),
        ("SHARDIK_MANAGEMENT__HTTP__MAX_CONNECTIONS", "1000"),
        ("SHARDIK_TRANSPORT__CONNECT_TIMEOUT", "2s"),
        ("SHARDIK_COORDINATION__LEASE__HEARTBEAT_TIMEOUT", "30s"),
        ("SHARDIK_COORDINATION__LEASE__HEARTBEAT_INTERVAL", "3s"),
        // Not configuration: no `__`, or another prefix.
        ("SHARDIK_HOME", "/somewhere"),
        ("PATH", "/usr/bin"),
    ]);
    let s = Settings::load_with_env(Some(file.path()), &vars).unwrap();
    assert_eq!(s.cluster.failure_detector.threshold, 12.0);
    assert_eq!(s.cluster.name, "file");
    assert_eq!(
        s.cluster.seed_nodes,
        vec![Address::new("a", 1), Address::new("b", 2)]
    );
    assert_eq!(
        s.cluster
            .roles
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        ["x", "y"]
    );
    assert_eq!(s.cluster.app_version, "2");
    assert_eq!(s.cluster.role["backend"].min_nr_of_members, 3);
    assert_eq!(s.management.http.port, 9000);
    assert!(!s.management.http.route_providers_read_only);
    assert_eq!(s.management.http.max_connections, 1000);
    assert_eq!(s.transport.connect_timeout, Duration::from_secs(2));
    assert_eq!(
        s.coordination.lease.heartbeat_timeout,
        Duration::from_secs(30)
    );
    assert_eq!(
        s.coordination.lease.heartbeat_interval,
        Duration::from_secs(3)
    );
}

#[test]
fn env_rule_round_trips() {
    for key in [
        "cluster.failure-detector.threshold",
        "cluster.split-brain-resolver.static-quorum.quorum-size",
        "management.http.route-providers-read-only",
    ] {
        assert_eq!(env_var_to_key(&key_to_env_var(key)).as_deref(), Some(key));
    }
}

#[test]
fn unknown_key_is_named_with_a_suggestion() {
    let (e, text) = err_of("[cluster]\ngosip-interval = \"1s\"");
    assert!(matches!(e, ConfigError::UnknownKey { .. }), "{e:?}");
    assert!(
        text.contains("unknown key `cluster.gosip-interval`"),
        "{text}"
    );
    assert!(
        text.contains("(did you mean `cluster.gossip-interval`?)"),
        "{text}"
    );
}

#[test]
fn unknown_nested_and_top_level_keys() {
    let (_, text) = err_of("[cluster.failure-detector]\ntreshold = 9.0");
    assert!(
        text.contains("`cluster.failure-detector.treshold`")
            && text.contains("`cluster.failure-detector.threshold`"),
        "{text}"
    );
    let (_, text) = err_of("[clustr]\nname = \"x\"");
    assert!(text.contains("unknown key `clustr`"), "{text}");
    assert!(text.contains("did you mean `cluster`"), "{text}");
    let (_, text) = err_of("[cluster.role.backend]\nmin-members = 2");
    assert!(
        text.contains("unknown key `cluster.role.backend.min-members`"),
        "{text}"
    );
}

#[test]
fn unknown_key_from_the_environment_names_the_variable() {
    let e = Settings::load_with_env(None, &env(&[("SHARDIK_CLUSTER__GOSIP_INTERVAL", "1s")]))
        .unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("unknown key `cluster.gosip-interval`"),
        "{text}"
    );
    assert!(text.contains("SHARDIK_CLUSTER__GOSIP_INTERVAL"), "{text}");
}

#[test]
fn bad_duration_names_key_value_and_form() {
    let (e, text) = err_of("[cluster]\ngossip-interval = \"fast\"");
    assert!(matches!(e, ConfigError::InvalidValue { .. }), "{e:?}");
    assert!(
        text.starts_with(
            "`cluster.gossip-interval` = `fast`: expected a duration like `1s` or `250ms`"
        ),
        "{text}"
    );
    // A bare number has no unit.
    let (_, text) = err_of("[transport]\nconnect-timeout = 5");
    assert!(
        text.contains("`transport.connect-timeout` = `5`: expected a duration"),
        "{text}"
    );
}

#[test]
fn bad_duration_from_the_environment_names_the_variable() {
    let e = Settings::load_with_env(
        None,
        &env(&[(
            "SHARDIK_CLUSTER__FAILURE_DETECTOR__HEARTBEAT_INTERVAL",
            "soon",
        )]),
    )
    .unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("`cluster.failure-detector.heartbeat-interval` = `soon`"),
        "{text}"
    );
    assert!(
        text.contains("SHARDIK_CLUSTER__FAILURE_DETECTOR__HEARTBEAT_INTERVAL"),
        "{text}"
    );
}

#[test]
fn out_of_range_values_are_refused_with_the_allowed_range() {
    let cases = [
        (
            "[cluster.failure-detector]\nthreshold = 0.0",
            "`cluster.failure-detector.threshold` = `0`",
            "greater than zero",
        ),
        (
            "[cluster.failure-detector]\nthreshold = -1.5",
            "`cluster.failure-detector.threshold` = `-1.5`",
            "greater than zero",
        ),
        (
            "[cluster]\ngossip-different-view-probability = 1.5",
            "`cluster.gossip-different-view-probability` = `1.5`",
            "between 0 and 1",
        ),
        (
            "[cluster.failure-detector]\nmax-sample-size = 0",
            "`cluster.failure-detector.max-sample-size` = `0`",
            "greater than zero",
        ),
        (
            "[transport]\noutbound-user-queue-size = 0",
            "`transport.outbound-user-queue-size` = `0`",
            "greater than zero",
        ),
        (
            "[transport]\nmaximum-frame-size = 10",
            "`transport.maximum-frame-size` = `10`",
            "at least 1KiB",
        ),
        (
            "[transport]\nmaximum-frame-size = \"lots\"",
            "`transport.maximum-frame-size` = `lots`",
            "256KiB",
        ),
        (
            "[cluster]\ngossip-interval = \"0s\"",
            "`cluster.gossip-interval` = `0s`",
            "greater than zero",
        ),
        (
            "[transport]\nreconnect-backoff-min = \"10s\"\nreconnect-backoff-max = \"1s\"",
            "`transport.reconnect-backoff-max` = `1s`",
            "no shorter than `transport.reconnect-backoff-min`",
        ),
        (
            "[cluster.split-brain-resolver]\nactive-strategy = \"static-quorum\"",
            "`cluster.split-brain-resolver.static-quorum.quorum-size` = `0`",
            "at least 1",
        ),
        (
            "[cluster]\nseed-nodes = [\"nohost\"]",
            "`cluster.seed-nodes` = `nohost`",
            "host:port",
        ),
        (
            "[cluster]\nname = \"bad name!\"",
            "`cluster.name` = `bad name!`",
            "ASCII letters",
        ),
        (
            "[cluster]\nallow-weakly-up-members = \"sometimes\"",
            "`cluster.allow-weakly-up-members` = `sometimes`",
            "\"off\"",
        ),
        (
            "[management.http]\nport = 70000",
            "`management.http.port` = `70000`",
            "a whole number from 0 to 65535",
        ),
        (
            "[cluster]\nmin-nr-of-members = 0",
            "`cluster.min-nr-of-members` = `0`",
            "greater than zero",
        ),
        (
            "[runtime]\nworker-threads = 40000",
            "`runtime.worker-threads` = `40000`",
            "0 (one per core) or a count up to 1024",
        ),
        (
            "[management.http]\nroute-providers-read-only = \"maybe\"",
            "`management.http.route-providers-read-only` = `maybe`",
            "\"on\"/\"off\"",
        ),
        (
            "[management.http]\nheader-read-timeout = \"0s\"",
            "`management.http.header-read-timeout` = `0s`",
            "greater than zero",
        ),
        (
            "[management.http]\nmax-connections = 0",
            "`management.http.max-connections` = `0`",
            "greater than zero",
        ),
        (
            "[management.http]\nmax-request-body-size = 100",
            "`management.http.max-request-body-size` = `100`",
            "at least 1KiB",
        ),
        (
            "[logging]\nlevel = \"info,[[[\"",
            "`logging.level`",
            "tracing filter",
        ),
        (
            "[coordination.lease]\nlease-operation-timeout = \"0s\"",
            "`coordination.lease.lease-operation-timeout` = `0s`",
            "greater than zero",
        ),
        (
            "[coordination.lease]\nheartbeat-interval = \"2m\"",
            "`coordination.lease.heartbeat-interval` = `2m`",
            "less than heartbeat-timeout (6s)",
        ),
        (
            "[coordination.lease]\nheartbeat-timeout = \"4s\"",
            "`coordination.lease.heartbeat-timeout` = `4s`",
            "more than heartbeat-interval + 2 × lease-operation-timeout (5s)",
        ),
    ];
    for (toml, head, allowed) in cases {
        let (e, text) = err_of(toml);
        assert!(
            matches!(e, ConfigError::InvalidValue { .. }),
            "{toml}: {e:?}"
        );
        assert!(text.starts_with(head), "{toml}: {text}");
        assert!(text.contains(allowed), "{toml}: {text}");
    }
}

#[test]
fn lease_majority_needs_its_lease_implementation() {
    let strategy = "[cluster.split-brain-resolver]\nactive-strategy = \"lease-majority\"\n\
                    [cluster.split-brain-resolver.lease-majority]\n";
    let (e, text) = err_of(strategy);
    assert!(matches!(e, ConfigError::InvalidValue { .. }), "{e:?}");
    assert!(
        text.contains("cluster.split-brain-resolver.lease-majority.lease-implementation"),
        "{text}"
    );
    assert!(text.contains("\"store\""), "the fix is named: {text}");
    let (_, text) = err_of(&format!("{strategy}lease-implementation = \"kubernetes\""));
    assert!(text.contains("\"kubernetes\""), "{text}");
    assert!(text.contains("no other implementation"), "{text}");
    let (_, text) = err_of(&format!(
        "{strategy}lease-implementation = \"store\"\nrelease-after = \"0s\""
    ));
    assert!(
        text.contains("cluster.split-brain-resolver.lease-majority.release-after"),
        "{text}"
    );
    // Not checked for the other strategies: the section is simply unused then.
    let s = Settings::reference();
    assert!(!s.sbr_needs_lease());
}

#[test]
fn lease_majority_settings_reach_the_resolver_and_name_the_lease() {
    let toml = "[cluster]\nname = \"orders\"\n\
                [cluster.split-brain-resolver]\nactive-strategy = \"lease-majority\"\n\
                [cluster.split-brain-resolver.lease-majority]\nlease-implementation = \"store\"\n\
                role = \"backend\"\nacquire-lease-delay-for-minority = \"3s\"\nrelease-after = \"1m\"\n\
                [coordination.lease]\nlease-operation-timeout = \"2s\"\n\
                heartbeat-timeout = \"30s\"\nheartbeat-interval = \"3s\"";
    let s = Settings::from_toml_str(toml).unwrap();
    assert!(s.sbr_needs_lease());
    assert_eq!(s.sbr_lease_name(), "orders-shardik-sbr");
    assert_eq!(
        s.membership_config().downing.unwrap().strategy,
        Strategy::LeaseMajority {
            role: Some("backend".into()),
            acquire_lease_delay_for_minority: Duration::from_secs(3),
            release_after: Duration::from_secs(60),
            lease_operation_timeout: Duration::from_secs(2),
            lease_ttl: Duration::from_secs(30),
            lease_renew_interval: Duration::from_secs(3),
        }
    );
    let s = Settings::load_with_env(
        None,
        &env(&[
            (
                "SHARDIK_CLUSTER__SPLIT_BRAIN_RESOLVER__ACTIVE_STRATEGY",
                "lease-majority",
            ),
            (
                "SHARDIK_CLUSTER__SPLIT_BRAIN_RESOLVER__LEASE_MAJORITY__LEASE_IMPLEMENTATION",
                "store",
            ),
            (
                "SHARDIK_CLUSTER__SPLIT_BRAIN_RESOLVER__LEASE_MAJORITY__LEASE_NAME",
                "my-sbr",
            ),
        ]),
    )
    .unwrap();
    assert_eq!(s.sbr_lease_name(), "my-sbr");
    let off = Settings::load_with_env(
        None,
        &env(&[
            (
                "SHARDIK_CLUSTER__SPLIT_BRAIN_RESOLVER__ACTIVE_STRATEGY",
                "lease-majority",
            ),
            (
                "SHARDIK_CLUSTER__SPLIT_BRAIN_RESOLVER__LEASE_MAJORITY__LEASE_IMPLEMENTATION",
                "store",
            ),
            ("SHARDIK_CLUSTER__DOWNING_PROVIDER", "off"),
        ]),
    )
    .unwrap();
    assert!(!off.sbr_needs_lease(), "no resolver, no lease");
}

#[test]
fn unknown_strategy_lists_the_allowed_ones() {
    let (e, text) = err_of("[cluster.split-brain-resolver]\nactive-strategy = \"keep-biggest\"");
    assert!(matches!(e, ConfigError::InvalidValue { .. }), "{e:?}");
    assert!(
        text.contains("`cluster.split-brain-resolver.active-strategy` = `keep-biggest`"),
        "{text}"
    );
    for allowed in [
        "keep-majority",
        "static-quorum",
        "keep-oldest",
        "down-all",
        "lease-majority",
    ] {
        assert!(text.contains(&format!("`{allowed}`")), "{text}");
    }
    let (_, text) = err_of("[logging]\nformat = \"xml\"");
    assert!(
        text.contains("`logging.format` = `xml`: expected one of `text`, `json`"),
        "{text}"
    );
}

#[test]
fn validation_errors_name_where_the_value_was_set() {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    writeln!(file, "[cluster]\ngossip-different-view-probability = 2.0").unwrap();
    let text = Settings::load_with_env(Some(file.path()), &[])
        .unwrap_err()
        .to_string();
    let name = file.path().file_name().unwrap().to_str().unwrap();
    assert!(text.contains(name), "{text}");

    let text = Settings::load_with_env(
        None,
        &env(&[("SHARDIK_CLUSTER__FAILURE_DETECTOR__THRESHOLD", "0")]),
    )
    .unwrap_err()
    .to_string();
    assert!(
        text.contains("environment variable `SHARDIK_CLUSTER__FAILURE_DETECTOR__THRESHOLD`"),
        "{text}"
    );
}

#[test]
fn missing_file_and_bad_toml_are_reported() {
    let e = Settings::load_with_env(Some(std::path::Path::new("/no/such/shardik.toml")), &[])
        .unwrap_err();
    assert!(matches!(e, ConfigError::ReadFile { .. }), "{e:?}");
    assert!(e.to_string().contains("/no/such/shardik.toml"), "{e}");

    let mut file = tempfile::NamedTempFile::new().unwrap();
    writeln!(file, "[cluster\nname = ").unwrap();
    let e = Settings::load_with_env(Some(file.path()), &[]).unwrap_err();
    assert!(matches!(e, ConfigError::Syntax { .. }), "{e:?}");
    assert!(e.to_string().contains("is not valid TOML"), "{e}");
}

#[test]
fn logging_settings_drive_init_which_is_idempotent() {
    let s = Settings::from_toml_str("[logging]\nformat = \"json\"\nlevel = \"warn\"").unwrap();
    assert_eq!(s.logging.format, LogFormat::Json);
    assert_eq!("JSON".parse::<LogFormat>().unwrap(), LogFormat::Json);
    let e = "xml".parse::<LogFormat>().unwrap_err();
    assert!(e.to_string().contains("use `text` or `json`"), "{e}");
    // A second initialisation keeps the first subscriber and still succeeds.
    shardik_runtime::logging::init(s.logging.format, &s.logging.level).unwrap();
    shardik_runtime::logging::init(LogFormat::Text, "info").unwrap();
}

#[test]
fn management_writes_beyond_loopback_need_a_token() {
    // Refused: writes enabled on an address other hosts reach, without a token.
    for hostname in ["0.0.0.0", "10.1.2.3", "node-1.example"] {
        let (_, text) = err_of(&format!(
            "[management.http]\nhostname = \"{hostname}\"\nroute-providers-read-only = false"
        ));
        assert!(
            text.contains("`management.http.route-providers-read-only` = `false`"),
            "{text}"
        );
        assert!(text.contains("management.http.auth-token-file"), "{text}");
        assert!(text.contains(hostname), "{text}");
    }
    // Accepted: read-only anywhere, writes on loopback, writes elsewhere with a token file.
    for toml in [
        "[management.http]\nhostname = \"0.0.0.0\"",
        "[management.http]\nhostname = \"localhost\"\nroute-providers-read-only = false",
        "[management.http]\nhostname = \"::1\"\nroute-providers-read-only = false",
        "[management.http]\nhostname = \"0.0.0.0\"\nroute-providers-read-only = false\n\
         auth-token-file = \"/etc/shardik/token\"",
    ] {
        Settings::from_toml_str(toml).unwrap_or_else(|e| panic!("{toml}: {e}"));
    }
    // The environment names where the refused value came from.
    let e = Settings::load_with_env(
        None,
        &env(&[
            ("SHARDIK_MANAGEMENT__HTTP__HOSTNAME", "0.0.0.0"),
            (
                "SHARDIK_MANAGEMENT__HTTP__ROUTE_PROVIDERS_READ_ONLY",
                "false",
            ),
        ]),
    )
    .expect_err("refused");
    assert!(
        e.to_string()
            .contains("SHARDIK_MANAGEMENT__HTTP__ROUTE_PROVIDERS_READ_ONLY"),
        "{e}"
    );
}

#[test]
fn management_tls_needs_files_of_its_own_or_the_transports() {
    // On, with no file anywhere: the first missing key is named, and what it falls back to.
    let (_, text) = err_of("[management.http.tls]\nenabled = true");
    assert!(text.contains("management.http.tls.cert-file"), "{text}");
    assert!(text.contains("transport.tls.cert-file"), "{text}");
    let (_, text) = err_of(
        "[management.http.tls]\nenabled = true\ncert-file = \"/m.pem\"\nkey-file = \"/m-key.pem\"",
    );
    assert!(text.contains("management.http.tls.ca-cert-file"), "{text}");

    // The transport's files stand in for empty keys (TLS between nodes need not be on).
    let s = Settings::from_toml_str(
        "[transport.tls]\ncert-file = \"/t.pem\"\nkey-file = \"/t-key.pem\"\n\
         ca-cert-file = \"/t-ca.pem\"\n\
         [management.http.tls]\nenabled = true\nkey-file = \"/m-key.pem\"",
    )
    .unwrap();
    let (http, transport) = (&s.management.http.tls, &s.transport.tls);
    assert_eq!(
        http.cert_file_or(transport),
        ("transport.tls.cert-file", "/t.pem")
    );
    assert_eq!(
        http.key_file_or(transport),
        ("management.http.tls.key-file", "/m-key.pem")
    );
    assert_eq!(
        http.ca_cert_file_or(transport),
        ("transport.tls.ca-cert-file", "/t-ca.pem")
    );

    // With TLS on the management port, client certificates guard writes beyond loopback, so
    // no token is needed there.
    Settings::from_toml_str(
        "[transport.tls]\ncert-file = \"/t.pem\"\nkey-file = \"/t-key.pem\"\n\
         ca-cert-file = \"/t-ca.pem\"\n\
         [management.http]\nhostname = \"0.0.0.0\"\nroute-providers-read-only = false\n\
         [management.http.tls]\nenabled = true",
    )
    .unwrap();
    let (_, text) =
        err_of("[management.http]\nhostname = \"0.0.0.0\"\nroute-providers-read-only = false");
    assert!(text.contains("management.http.tls.enabled"), "{text}");
}
