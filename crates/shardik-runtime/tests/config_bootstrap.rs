//! `discovery.*` and `management.cluster.bootstrap.*`: Akka's defaults, overrides from a file
//! and the environment, when bootstrap runs, and the errors that stop a node whose bootstrap
//! could not work.

use std::time::Duration;

use shardik_runtime::config::{DiscoveryMethod, Settings};

#[test]
fn defaults_are_akkas() {
    let s = Settings::reference();
    assert_eq!(s.discovery.method, DiscoveryMethod::Off);
    assert!(s.discovery.dns.nameservers.is_empty());
    let b = &s.management.cluster.bootstrap;
    assert!(b.new_cluster_enabled);
    let d = &b.contact_point_discovery;
    assert_eq!(d.required_contact_point_nr, 2);
    assert_eq!(d.stable_margin, Duration::from_secs(5));
    assert_eq!(d.interval, Duration::from_secs(1));
    assert_eq!(d.resolve_timeout, Duration::from_secs(3));
    assert_eq!(d.exponential_backoff_max, Duration::from_secs(15));
    assert!(d.contact_with_all_contact_points);
    assert_eq!(d.protocol, "tcp");
    let c = &b.contact_point;
    assert_eq!(c.probing_failure_timeout, Duration::from_secs(3));
    assert_eq!(c.probe_interval, Duration::from_secs(1));
    // No fallback port configured: the management port.
    assert_eq!(s.bootstrap_fallback_port(), 8558);
    assert!(!s.bootstrap_enabled(), "no discovery method, no bootstrap");
}

#[test]
fn dns_bootstrap_from_the_environment() {
    let env: Vec<(String, String)> = [
        ("SHARDIK_DISCOVERY__METHOD", "dns"),
        ("SHARDIK_DISCOVERY__DNS__NAMESERVERS", "10.0.0.53:53,[fd00::53]:5353"),
        (
            "SHARDIK_MANAGEMENT__CLUSTER__BOOTSTRAP__CONTACT_POINT_DISCOVERY__SERVICE_NAME",
            "_management._tcp.shop.svc",
        ),
        (
            "SHARDIK_MANAGEMENT__CLUSTER__BOOTSTRAP__CONTACT_POINT_DISCOVERY__REQUIRED_CONTACT_POINT_NR",
            "5",
        ),
        (
            "SHARDIK_MANAGEMENT__CLUSTER__BOOTSTRAP__CONTACT_POINT_DISCOVERY__STABLE_MARGIN",
            "2s",
        ),
        ("SHARDIK_MANAGEMENT__CLUSTER__BOOTSTRAP__NEW_CLUSTER_ENABLED", "off"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let s = Settings::load_with_env(None, &env).expect("valid");
    assert_eq!(s.discovery.method, DiscoveryMethod::Dns);
    assert_eq!(
        s.discovery.dns.nameserver_addrs(),
        vec![
            "10.0.0.53:53".parse().unwrap(),
            "[fd00::53]:5353".parse().unwrap()
        ]
    );
    let b = &s.management.cluster.bootstrap;
    assert!(!b.new_cluster_enabled);
    assert_eq!(b.contact_point_discovery.required_contact_point_nr, 5);
    assert_eq!(
        b.contact_point_discovery.stable_margin,
        Duration::from_secs(2)
    );
    assert!(s.bootstrap_enabled());
    // Configured seed nodes win over discovery.
    let mut with_seeds = s.clone();
    with_seeds.cluster.seed_nodes = vec!["10.0.0.1:2552".parse().unwrap()];
    assert!(!with_seeds.bootstrap_enabled());
}

#[test]
fn config_discovery_lists_endpoints_as_akka_does() {
    let s = Settings::from_toml_str(
        r#"
        [discovery]
        method = "config"
        [discovery.config.services.shop]
        endpoints = [{ host = "10.0.0.1", port = 9000 }, { host = "node-2.shop" }]
        [management.cluster.bootstrap.contact-point-discovery]
        service-name = "shop"
        [management.cluster.bootstrap.contact-point]
        fallback-port = 9001
        "#,
    )
    .expect("valid");
    let endpoints = &s.discovery.config.services["shop"].endpoints;
    assert_eq!(endpoints.len(), 2);
    assert_eq!(endpoints[0].port, Some(9000));
    assert_eq!(endpoints[1].port, None);
    assert_eq!(s.bootstrap_fallback_port(), 9001);
}

#[test]
fn settings_bootstrap_cannot_work_with_are_refused_naming_the_key() {
    for (toml, key_value) in [
        (
            "[discovery]\nmethod = \"dns\"",
            "`management.cluster.bootstrap.contact-point-discovery.service-name` = ``",
        ),
        (
            "[discovery]\nmethod = \"config\"\n\
             [management.cluster.bootstrap.contact-point-discovery]\nservice-name = \"shop\"",
            "`management.cluster.bootstrap.contact-point-discovery.service-name` = `shop`",
        ),
        (
            "[discovery.dns]\nnameservers = [\"dns.example:53\"]",
            "`discovery.dns.nameservers` = `dns.example:53`",
        ),
        (
            "[management.cluster.bootstrap.contact-point-discovery]\n\
             required-contact-point-nr = 0",
            "`management.cluster.bootstrap.contact-point-discovery.required-contact-point-nr` = `0`",
        ),
        (
            "[management.cluster.bootstrap.contact-point-discovery]\n\
             required-contact-point-nr = 10\nmax-contact-points = 5",
            "`management.cluster.bootstrap.contact-point-discovery.max-contact-points` = `5`",
        ),
        (
            "[management.cluster.bootstrap.contact-point]\nprobing-failure-timeout = \"1s\"",
            "`management.cluster.bootstrap.contact-point.probing-failure-timeout` = `1s`",
        ),
        (
            "[management.cluster.bootstrap.contact-point]\nprobe-timeout = \"0s\"",
            "`management.cluster.bootstrap.contact-point.probe-timeout` = `0s`",
        ),
    ] {
        let e = Settings::from_toml_str(toml).expect_err(toml).to_string();
        assert!(e.contains(key_value), "{toml}: {e}");
    }
    let e = Settings::from_toml_str("[discovery]\nmethod = \"kubernetes-api\"")
        .expect_err("unknown method")
        .to_string();
    assert!(e.contains("discovery.method"), "{e}");
    assert!(e.contains("kubernetes-api"), "{e}");
}
