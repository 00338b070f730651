//! One store and this node's journal writer over it ([`Persistence`]), and opening the store
//! the configuration names. Both kinds of durable entity take their store from here.

use std::sync::Arc;

use shardik_persistence::{AtomicWrite, Fence, MarkChange, PersistenceId, Store, StoreError};

use crate::sharding::EntityFailure;

use super::journal::JournalWriter;

/// One store and this node's journal writer over it; clones share both.
#[derive(Clone)]
pub struct Persistence {
    store: Arc<dyn Store>,
    journal: JournalWriter,
}

impl std::fmt::Debug for Persistence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Persistence").finish_non_exhaustive()
    }
}

impl Persistence {
    /// Persistence on `store`. Starts the journal writer on the current tokio runtime.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Persistence {
            journal: JournalWriter::spawn(Arc::clone(&store)),
            store,
        }
    }

    /// Opens the store `url` names (`sqlite:PATH`, `postgres://…`, `memory:`; see
    /// [`shardik_persistence::open_store`]) and starts the journal writer over it. A store that
    /// cannot be reached, parsed or read is an error naming the cause.
    pub async fn open(url: &str) -> Result<Self, StoreError> {
        Ok(Self::new(shardik_persistence::open_store(url).await?))
    }

    /// Opens the store the configuration names (`persistence.store`, or the embedded
    /// default `sqlite:{data-dir}/shardik.db`, creating `data-dir` when missing) and starts the
    /// journal writer over it. See [`open_configured_store`].
    pub async fn from_settings(settings: &shardik_config::Settings) -> Result<Self, StoreError> {
        Ok(Self::new(open_configured_store(settings).await?))
    }

    /// The store underneath (for queries such as events by tag).
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub(crate) fn journal(&self) -> &JournalWriter {
        &self.journal
    }
}

/// The delivery marks `persistence_id` has in `store`, as a failure of the entity when the
/// store keeps none (a store of one's own that does not implement them) or cannot be read.
pub(crate) async fn delivery_marks(
    store: &Arc<dyn Store>,
    persistence_id: &str,
) -> Result<Vec<shardik_persistence::DeliveryMark>, EntityFailure> {
    if !store.keeps_delivery_data() {
        return Err(EntityFailure(format!(
            "{persistence_id}: reliable delivery needs a store that keeps delivery marks; \
             the store at {} does not",
            store.location()
        )));
    }
    store
        .delivery_marks(persistence_id)
        .await
        .map_err(|e| EntityFailure(format!("{persistence_id}: delivery marks not read: {e}")))
}

/// A write of nothing but `marks` for `persistence_id` (a reliably delivered command that
/// persisted nothing), through the node's journal writer.
pub(crate) async fn write_marks(
    persistence: &Persistence,
    persistence_id: PersistenceId,
    marks: Vec<MarkChange>,
    fence: Option<Fence>,
) -> Result<(), EntityFailure> {
    let mut write = AtomicWrite::new(persistence_id, Vec::new()).with_marks(marks);
    write.fence = fence;
    persistence
        .journal()
        .write(write)
        .await
        .map_err(|e| EntityFailure(format!("delivery mark write failed: {e}")))?
        .map_err(|refused| EntityFailure(format!("delivery mark write refused: {refused}")))
}

/// Opens the store `persistence.store` names. When it names none, the embedded default
/// `sqlite:{data-dir}/shardik.db` is opened, and `data-dir` is created first if missing: it
/// is the one directory the configuration says shardik may create. Any other SQLite path must
/// be in a directory that exists, so that a typo is an error rather than a new empty store.
pub async fn open_configured_store(
    settings: &shardik_config::Settings,
) -> Result<Arc<dyn Store>, StoreError> {
    let persistence = &settings.persistence;
    if persistence.store.is_empty() {
        let dir = &persistence.data_dir;
        std::fs::create_dir_all(dir).map_err(|e| {
            StoreError::Unavailable(format!(
                "cannot create the data directory {dir} (persistence.data-dir): {e}"
            ))
        })?;
    }
    shardik_persistence::open_store(&persistence.store_url()).await
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use super::*;

    fn settings_with(store: &str, data_dir: &std::path::Path) -> shardik_config::Settings {
        let mut settings = shardik_config::Settings::load_with_env(None, &[]).unwrap();
        settings.persistence.store = store.to_string();
        settings.persistence.data_dir = data_dir.display().to_string();
        settings
    }

    #[tokio::test]
    async fn the_configured_data_directory_is_created_for_the_default_store() {
        let temp = tempfile::tempdir().unwrap();
        let data_dir = temp.path().join("data").join("node-1");
        let persistence = Persistence::from_settings(&settings_with("", &data_dir))
            .await
            .unwrap();
        assert!(data_dir.join("shardik.db").is_file());
        persistence.store().close().await.unwrap();
    }

    #[tokio::test]
    async fn a_store_path_elsewhere_must_be_in_an_existing_directory() {
        let temp = tempfile::tempdir().unwrap();
        let typo = temp.path().join("dta").join("bank.db");
        let settings = settings_with(&format!("sqlite:{}", typo.display()), temp.path());
        let refused = Persistence::from_settings(&settings).await.unwrap_err();
        assert!(
            matches!(&refused, StoreError::Unavailable(why) if why.contains("does not exist")),
            "{refused}"
        );
        assert!(!temp.path().join("dta").exists());
    }
}
