//! `persistence.*`: where durable entities keep their journals, snapshots, states and
//! remembered entities.

use std::path::PathBuf;

use serde::Deserialize;

use crate::error::ConfigError;
use crate::validate::invalid;
use crate::values::de_string;

/// `persistence.*`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct PersistenceSettings {
    /// `store`: the store's URL (`sqlite:PATH`, `postgres://…`, `memory:`); empty means
    /// `sqlite:{data-dir}/shardik.db`.
    #[serde(deserialize_with = "de_string")]
    pub store: String,
    /// `data-dir`: the directory of the embedded store's default file.
    #[serde(deserialize_with = "de_string")]
    pub data_dir: String,
}

impl PersistenceSettings {
    /// The store URL in force: `store`, or the embedded default under `data-dir`.
    pub fn store_url(&self) -> String {
        if self.store.is_empty() {
            let file = PathBuf::from(&self.data_dir).join("shardik.db");
            format!("sqlite:{}", file.display())
        } else {
            self.store.clone()
        }
    }

    /// The checks of `persistence.*` (the URL itself is checked when the store opens, which
    /// names the cause).
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.store.is_empty() && self.data_dir.is_empty() {
            return Err(invalid(
                "persistence.data-dir",
                "",
                "a directory for the embedded store, or set persistence.store",
            ));
        }
        Ok(())
    }
}
