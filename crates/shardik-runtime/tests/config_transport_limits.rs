//! `transport.*` keys that bound the cluster port: their defaults, their environment
//! overrides, and the errors for values that would leave members without room.

use std::time::Duration;

use shardik_runtime::config::Settings;

#[test]
fn defaults_of_the_connection_limits() {
    let t = Settings::reference().transport;
    assert_eq!(t.frame_read_timeout, Duration::from_secs(10));
    assert_eq!(t.maximum_inbound_connections, 4096);
    assert_eq!(t.maximum_unauthenticated_connections, 64);
    assert_eq!(t.maximum_non_member_connections, 64);
    let config = shardik_runtime::node::transport_config(&t);
    assert_eq!(config.frame_read_timeout, Duration::from_secs(10));
    assert_eq!(config.maximum_inbound_connections, 4096);
    assert_eq!(config.maximum_unauthenticated_connections, 64);
    assert_eq!(config.maximum_non_member_connections, 64);
}

#[test]
fn the_limits_are_read_from_a_file_and_the_environment() {
    let s = Settings::from_toml_str(
        "[transport]\nmaximum-inbound-connections = 500\nframe-read-timeout = \"2s\"",
    )
    .expect("valid");
    assert_eq!(s.transport.maximum_inbound_connections, 500);
    assert_eq!(s.transport.frame_read_timeout, Duration::from_secs(2));
    let env = [(
        "SHARDIK_TRANSPORT__MAXIMUM_NON_MEMBER_CONNECTIONS".to_string(),
        "8".to_string(),
    )];
    let s = Settings::load_with_env(None, &env).expect("valid");
    assert_eq!(s.transport.maximum_non_member_connections, 8);
}

#[test]
fn values_that_leave_members_without_room_are_refused_naming_the_key() {
    for (toml, key_value, allowed) in [
        (
            "[transport]\nmaximum-unauthenticated-connections = 0",
            "`transport.maximum-unauthenticated-connections` = `0`",
            "greater than zero",
        ),
        (
            "[transport]\nmaximum-non-member-connections = 0",
            "`transport.maximum-non-member-connections` = `0`",
            "greater than zero",
        ),
        (
            "[transport]\nmaximum-inbound-connections = 128",
            "`transport.maximum-inbound-connections` = `128`",
            "greater than `transport.maximum-unauthenticated-connections` + \
             `transport.maximum-non-member-connections` (128)",
        ),
        (
            "[transport]\nframe-read-timeout = \"0s\"",
            "`transport.frame-read-timeout` = `0s`",
            "greater than zero",
        ),
        (
            "[transport]\nidle-timeout = \"5s\"\nframe-read-timeout = \"6s\"",
            "`transport.frame-read-timeout` = `6s`",
            "no longer than `transport.idle-timeout` (5s)",
        ),
    ] {
        let text = Settings::from_toml_str(toml)
            .expect_err("refused")
            .to_string();
        assert!(text.contains(key_value), "{toml}: {text}");
        assert!(text.contains(allowed), "{toml}: {text}");
    }
}
