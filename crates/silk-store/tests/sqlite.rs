//! The store conformance suite (`silk_store::conformance`) on SQLite: each test has its own
//! temporary directory, and the database file is created by the first open in a
//! subdirectory that does not exist yet.

use async_trait::async_trait;
use silk_store::MetaStore;
use silk_store::conformance::StoreFactory;
use std::path::PathBuf;
use std::sync::Arc;

struct Sqlite {
    _root: tempfile::TempDir,
    path: PathBuf,
}

impl Sqlite {
    fn new() -> Option<Self> {
        let root = tempfile::tempdir().expect("temp dir");
        let path = root.path().join("data").join("meta.db");
        Some(Self { _root: root, path })
    }
}

#[async_trait]
impl StoreFactory for Sqlite {
    async fn open(&self) -> Arc<dyn MetaStore> {
        silk_store::open_sqlite(&self.path)
            .await
            .expect("open sqlite store")
    }
}

silk_store::store_conformance_tests!(Sqlite::new());

/// `open` takes `sqlite://PATH` and `sqlite:PATH` and they name the same file.
#[tokio::test]
async fn open_by_url_forms() {
    let root = tempfile::tempdir().expect("temp dir");
    let path = root.path().join("meta.db");
    let url = format!("sqlite://{}", path.display());
    let a = silk_store::open(&url).await.expect("open sqlite://");
    assert_eq!(a.backend(), "sqlite");
    a.put_agent(&silk_store::AgentRow {
        id: "a1".to_owned(),
        register: serde_json::json!({}),
        sent_ms: 1,
        updated_ms: 2,
        drained: false,
    })
    .await
    .expect("put_agent");
    a.close().await;
    let b = silk_store::open(&format!("sqlite:{}", path.display()))
        .await
        .expect("open sqlite:");
    assert_eq!(b.list_agents().await.expect("list").len(), 1);
    assert!(path.exists());
}

/// The file is in WAL mode, so readers do not block the writer.
#[tokio::test]
async fn file_is_in_wal_mode() {
    let root = tempfile::tempdir().expect("temp dir");
    let path = root.path().join("meta.db");
    let store = silk_store::open_sqlite(&path).await.expect("open");
    store.ping().await.expect("ping");
    let mut wal = path.clone().into_os_string();
    wal.push("-wal");
    assert!(
        PathBuf::from(wal).exists(),
        "a -wal file next to the database"
    );
}
