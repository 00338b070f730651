//! `cluster.canonical-address` and `cluster.bind-address`: who this node is and where it
//! listens (Akka's `canonical.hostname/port` and `bind.hostname/port`).
//!
//! The canonical address is the node's identity: what the other members gossip, dial and see
//! in `/cluster/members`. The bind address is where the transport listens. They differ when
//! the node listens on every interface (`0.0.0.0:2552`) but is reached as a DNS name
//! (`pod-7.svc:2552`), or sits behind NAT. Either alone serves as both, as in Akka; neither
//! given is an error at start (`NodeBuilder::bind`, `shardik node --bind` or the key).

use serde::Deserializer;
use serde::de::{self, Unexpected, Visitor};
use shardik_core::membership::Address;

use crate::error::ConfigError;
use crate::validate::invalid;

/// The key of the node's identity.
pub const CANONICAL_ADDRESS_KEY: &str = "cluster.canonical-address";
/// The key of the address the transport listens on.
pub const BIND_ADDRESS_KEY: &str = "cluster.bind-address";

/// Where a node listens and who it is, resolved from the settings (see
/// [`ClusterSettings::node_addresses`](crate::ClusterSettings::node_addresses)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeAddresses {
    /// Where the transport listens.
    pub bind: Address,
    /// The node's identity, when it is not `bind`.
    pub advertise: Option<Address>,
}

impl NodeAddresses {
    /// Where this node listens and who it is, from `cluster.bind-address` and
    /// `cluster.canonical-address`: the bind address (or the canonical one), and the canonical
    /// address when it differs. Refuses settings that give neither, or whose identity peers
    /// could not dial (see [`check_identity`]), naming the key.
    pub fn resolve(
        bind_address: Option<&Address>,
        canonical_address: Option<&Address>,
    ) -> Result<NodeAddresses, ConfigError> {
        let (bind, advertise) = match (bind_address, canonical_address) {
            (None, None) => {
                return Err(invalid(
                    BIND_ADDRESS_KEY,
                    "\"\"",
                    "HOST:PORT to listen on (or `--bind`, `NodeBuilder::bind`); \
                     `cluster.canonical-address` alone serves as both",
                ));
            }
            (Some(b), c) => (b.clone(), c.filter(|c| *c != b).cloned()),
            (None, Some(c)) => (c.clone(), None),
        };
        match &advertise {
            Some(c) => check_identity(c, CANONICAL_ADDRESS_KEY)?,
            None => check_identity(&bind, BIND_ADDRESS_KEY)?,
        }
        Ok(NodeAddresses { bind, advertise })
    }
}

/// Refuses an identity that peers cannot dial: an unspecified IP (`0.0.0.0`, `::`), or port
/// 0 in `cluster.canonical-address`. Port 0 in the bind address is let be: the OS picks the
/// port, and the node's identity is the port it bound (what an in-process test cluster
/// uses). `key` is the setting it came from; for the bind address the message says to set
/// `cluster.canonical-address` as well.
pub fn check_identity(address: &Address, key: &str) -> Result<(), ConfigError> {
    let host = address.host.trim_start_matches('[').trim_end_matches(']');
    let unspecified = host
        .parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_unspecified());
    let bind = key == BIND_ADDRESS_KEY;
    if !unspecified && (address.port != 0 || bind) {
        return Ok(());
    }
    let expected = if bind {
        "an address peers can dial, since without `cluster.canonical-address` it is also \
         this node's identity (no unspecified address such as 0.0.0.0 or ::); to listen on \
         every interface, keep it and set `cluster.canonical-address` (`--advertise`) to the \
         HOST:PORT peers dial"
    } else {
        "HOST:PORT that peers dial to reach this node (no unspecified address such as \
         0.0.0.0 or ::, no port 0)"
    };
    Err(invalid(key, address, expected))
}

/// An optional `"host:port"`: the empty string is `None`.
pub(super) fn de_optional_address<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Address>, D::Error> {
    struct V;
    impl Visitor<'_> for V {
        type Value = Option<Address>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an address written as \"host:port\", or \"\"")
        }
        fn visit_str<E: de::Error>(self, s: &str) -> Result<Option<Address>, E> {
            let s = s.trim();
            if s.is_empty() {
                return Ok(None);
            }
            s.parse::<Address>().map(Some).map_err(|_| {
                E::invalid_value(Unexpected::Str(s), &"an address written as \"host:port\"")
            })
        }
    }
    d.deserialize_str(V)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The addresses resolved from these values of `bind-address` and `canonical-address`.
    fn with(bind: Option<&str>, canonical: Option<&str>) -> Result<NodeAddresses, ConfigError> {
        let parse = |s: &str| s.parse::<Address>().unwrap();
        NodeAddresses::resolve(bind.map(parse).as_ref(), canonical.map(parse).as_ref())
    }

    #[test]
    fn bind_and_canonical_addresses_resolve_as_akka_does() {
        let a = |s: &str| s.parse::<Address>().unwrap();
        assert_eq!(
            with(Some("127.0.0.1:2552"), None).unwrap(),
            NodeAddresses {
                bind: a("127.0.0.1:2552"),
                advertise: None
            }
        );
        assert_eq!(
            with(None, Some("pod-7.svc:2552")).unwrap(),
            NodeAddresses {
                bind: a("pod-7.svc:2552"),
                advertise: None
            }
        );
        assert_eq!(
            with(Some("0.0.0.0:2552"), Some("pod-7.svc:2552")).unwrap(),
            NodeAddresses {
                bind: a("0.0.0.0:2552"),
                advertise: Some(a("pod-7.svc:2552"))
            }
        );
    }

    /// Port 0 to bind on: the OS picks the port, and the node's identity is the port bound.
    #[test]
    fn port_0_is_a_bind_address_but_not_an_advertised_one() {
        let a = |s: &str| s.parse::<Address>().unwrap();
        assert_eq!(
            with(Some("127.0.0.1:0"), None).unwrap(),
            NodeAddresses {
                bind: a("127.0.0.1:0"),
                advertise: None
            }
        );
        assert!(with(Some("127.0.0.1:0"), Some("pod-7.svc:0")).is_err());
    }

    #[test]
    fn an_identity_peers_cannot_dial_is_refused_naming_the_key() {
        for (bind, canonical, key, value) in [
            (Some("0.0.0.0:2552"), None, BIND_ADDRESS_KEY, "0.0.0.0:2552"),
            (Some("[::]:2552"), None, BIND_ADDRESS_KEY, "[::]:2552"),
            (
                Some("0.0.0.0:2552"),
                Some("0.0.0.0:2552"),
                BIND_ADDRESS_KEY,
                "0.0.0.0:2552",
            ),
            (
                Some("0.0.0.0:2552"),
                Some("pod-7.svc:0"),
                CANONICAL_ADDRESS_KEY,
                "pod-7.svc:0",
            ),
            (None, None, BIND_ADDRESS_KEY, "\"\""),
        ] {
            let err = with(bind, canonical).unwrap_err();
            let text = err.to_string();
            assert!(
                text.contains(key) && text.contains(value),
                "{bind:?} {canonical:?}: {text}"
            );
            if key == BIND_ADDRESS_KEY && bind.is_some() {
                assert!(
                    text.contains(CANONICAL_ADDRESS_KEY),
                    "says what to set: {text}"
                );
            }
        }
    }
}
