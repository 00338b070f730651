//! Loading: the built-in reference, the user's file and the `SHARDIK_*` environment
//! variables, layered with figment in that order, then extracted and validated.

use std::path::Path;

use figment::providers::{Format, Toml};
use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider};

use crate::error::{ConfigError, REFERENCE_ORIGIN, convert_error, describe_origin};
use crate::settings::Settings;
use crate::sharding::check_passivation_names;

/// The built-in configuration: every key with its default and a comment saying what it does.
pub const REFERENCE_TOML: &str = include_str!("reference.toml");

/// The prefix of environment variables that override configuration keys.
pub const ENV_PREFIX: &str = "SHARDIK_";

impl Settings {
    /// Loads the configuration: built-in reference, then `user_file` (if given), then the
    /// `SHARDIK_*` variables of this process's environment.
    pub fn load(user_file: Option<&Path>) -> Result<Settings, ConfigError> {
        // `vars()` would panic on a non-UTF-8 variable anywhere in the environment; such a
        // variable cannot be one of ours, so skip it instead.
        let env: Vec<(String, String)> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        Self::load_with_env(user_file, &env)
    }

    /// As [`load`](Self::load), but with the environment given explicitly, so tests do not
    /// depend on (or race over) the process environment.
    pub fn load_with_env(
        user_file: Option<&Path>,
        env: &[(String, String)],
    ) -> Result<Settings, ConfigError> {
        let mut figment = reference_figment();
        if let Some(path) = user_file {
            // figment treats a missing file as empty; an explicitly named file that is not
            // there is almost certainly a mistake, so say so.
            std::fs::metadata(path).map_err(|source| ConfigError::ReadFile {
                path: path.to_owned(),
                source,
            })?;
            figment = figment.merge(Toml::file_exact(path));
        }
        for provider in env_providers(env) {
            figment = figment.merge(provider);
        }
        finish(&figment)
    }

    /// The reference configuration overlaid with `toml` (no file, no environment).
    pub fn from_toml_str(toml: &str) -> Result<Settings, ConfigError> {
        Self::from_toml_layers(&[toml])
    }

    /// The reference configuration overlaid with each of `layers` in turn, a later one
    /// winning (no file, no environment): how the simulator adds a scenario's keys on top of
    /// its own fast timers.
    pub fn from_toml_layers(layers: &[&str]) -> Result<Settings, ConfigError> {
        let mut figment = reference_figment();
        for (i, toml) in layers.iter().enumerate() {
            let name = if layers.len() == 1 {
                "the configuration string".to_string()
            } else {
                format!("configuration string {}", i + 1)
            };
            figment = figment.merge(Named {
                inner: Toml::string(toml),
                metadata: Metadata::named(name),
            });
        }
        finish(&figment)
    }

    /// The built-in defaults.
    pub fn reference() -> Settings {
        Self::from_toml_str("").expect("the built-in reference.toml is valid (tested)")
    }

    /// These settings with membership timers short enough for a test whose nodes run in one
    /// process or on one machine: a lone first seed forms its cluster after 0.3 s
    /// (`cluster.seed-node-timeout`), gossip and the leader's actions run every 100 ms
    /// (`cluster.gossip-interval`, `cluster.leader-actions-interval`) and the first of them
    /// 50 ms after start (`cluster.periodic-tasks-initial-delay`). A cluster of nodes up in
    /// a second instead of several. Not for nodes on a network: the failure detector keeps
    /// its defaults, but gossip ten times as often costs ten times the traffic.
    pub fn with_test_timings(mut self) -> Settings {
        self.cluster.seed_node_timeout = std::time::Duration::from_millis(300);
        self.cluster.periodic_tasks_initial_delay = std::time::Duration::from_millis(50);
        self.cluster.gossip_interval = std::time::Duration::from_millis(100);
        self.cluster.leader_actions_interval = std::time::Duration::from_millis(100);
        self
    }
}

/// The environment variable that sets `key` (a dotted kebab-case path), e.g.
/// `cluster.failure-detector.threshold` → `SHARDIK_CLUSTER__FAILURE_DETECTOR__THRESHOLD`.
pub fn key_to_env_var(key: &str) -> String {
    let path: Vec<String> = key
        .split('.')
        .map(|level| level.replace('-', "_").to_uppercase())
        .collect();
    format!("{ENV_PREFIX}{}", path.join("__"))
}

/// The key an environment variable sets, or `None` if the variable is not a configuration
/// override.
///
/// The rule: strip `SHARDIK_`, split at `__` into levels, lower-case each level and turn the
/// `_` inside it into `-`. Every key is at least two levels deep, so only variables whose
/// name contains `__` are overrides; others (say `SHARDIK_HOME`) are left to whoever uses them.
pub fn env_var_to_key(var: &str) -> Option<String> {
    let rest = var.strip_prefix(ENV_PREFIX)?;
    if !rest.contains("__") {
        return None;
    }
    let levels: Vec<String> = rest
        .split("__")
        .map(|level| level.to_lowercase().replace('_', "-"))
        .collect();
    if levels.iter().any(|l| l.is_empty()) {
        return None;
    }
    Some(levels.join("."))
}

fn reference_figment() -> Figment {
    Figment::from(Named {
        inner: Toml::string(REFERENCE_TOML),
        metadata: Metadata::named(REFERENCE_ORIGIN),
    })
}

/// A provider with a better name in error messages than figment's generic one.
struct Named<P> {
    inner: P,
    metadata: Metadata,
}

impl<P: Provider> Provider for Named<P> {
    fn metadata(&self) -> Metadata {
        self.metadata.clone()
    }
    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        self.inner.data()
    }
}

/// One environment variable as a provider, so errors can name the exact variable.
///
/// figment's own `Env` provider reads only the process environment, which tests would then
/// have to change under a global lock (and which `std::env::set_var` makes `unsafe` in this
/// edition); and its error origin names the key, not the variable. So the variables are
/// handed in, and figment does the rest: its `Value` parsing types the value as `Env` would,
/// and its `nest` builds the table for the dotted key.
struct EnvVar {
    var: String,
    key: String,
    value: String,
}

fn env_providers(env: &[(String, String)]) -> Vec<EnvVar> {
    let mut vars: Vec<EnvVar> = env
        .iter()
        .filter_map(|(var, value)| {
            env_var_to_key(var).map(|key| EnvVar {
                var: var.clone(),
                key,
                value: value.clone(),
            })
        })
        .collect();
    // Process environments have no order; sort so that two variables naming the same key
    // (only possible by case) resolve the same way every time.
    vars.sort_by(|a, b| a.var.cmp(&b.var));
    vars
}

impl Provider for EnvVar {
    fn metadata(&self) -> Metadata {
        Metadata::named(format!("environment variable `{}`", self.var))
    }
    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        // Numbers, booleans and `[a, b]` arrays are typed, anything else is a string.
        let value: Value = self
            .value
            .parse()
            .expect("parsing into a Value is infallible");
        // `env_var_to_key` never yields an empty level, so the key nests into a table.
        let dict = figment::util::nest(&self.key, value)
            .into_dict()
            .ok_or_else(|| figment::Error::from(format!("empty key from `{}`", self.var)))?;
        Ok(Profile::Default.collect(dict))
    }
}

/// Checks what serde cannot, extracts the settings, validates them, and names the origin of a
/// refused value.
fn finish(figment: &Figment) -> Result<Settings, ConfigError> {
    check_passivation_names(figment)?;
    let settings: Settings = figment.extract().map_err(|e| convert_error(figment, e))?;
    settings.validate().map_err(|mut e| {
        if let ConfigError::InvalidValue { key, origin, .. }
        | ConfigError::Refused { key, origin, .. } = &mut e
        {
            *origin = figment.find_metadata(key).map(describe_origin);
        }
        e
    })?;
    Ok(settings)
}

#[cfg(test)]
mod tests {
    use super::{env_var_to_key, key_to_env_var};

    #[test]
    fn env_var_names_map_to_keys_and_back() {
        assert_eq!(
            env_var_to_key("SHARDIK_CLUSTER__FAILURE_DETECTOR__THRESHOLD").as_deref(),
            Some("cluster.failure-detector.threshold")
        );
        assert_eq!(env_var_to_key("SHARDIK_HOME"), None);
        assert_eq!(env_var_to_key("OTHER__X"), None);
        assert_eq!(
            key_to_env_var("management.http.route-providers-read-only"),
            "SHARDIK_MANAGEMENT__HTTP__ROUTE_PROVIDERS_READ_ONLY"
        );
    }
}
