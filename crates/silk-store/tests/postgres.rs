//! The store conformance suite (`silk_store::conformance`) on PostgreSQL, at the server named
//! by `SILK_TEST_POSTGRES` (e.g. `postgres://postgres@127.0.0.1:5432/test`). Each test gets
//! its own schema `silk_t_<random>`, created on first open and dropped after the check (pass
//! or fail); the store connects with `options=-c search_path=<schema>`, so its tables land
//! there. Without the variable, every test prints `skipped: SILK_TEST_POSTGRES is not set`
//! and passes.

use async_trait::async_trait;
use silk_store::conformance::StoreFactory;
use silk_store::testing::PgTestSchema;
use silk_store::{MetaStore, StoreError};
use sqlx::Connection;
use std::sync::Arc;
use tokio::sync::OnceCell;

struct Pg {
    schema: PgTestSchema,
    created: OnceCell<()>,
}

impl Pg {
    fn new() -> Option<Self> {
        Some(Self {
            schema: PgTestSchema::from_env()?,
            created: OnceCell::new(),
        })
    }
}

#[async_trait]
impl StoreFactory for Pg {
    async fn open(&self) -> Arc<dyn MetaStore> {
        self.created
            .get_or_init(|| async {
                self.schema.create().await.expect("create the test schema");
            })
            .await;
        silk_store::open(&self.schema.url)
            .await
            .expect("open postgres store")
    }

    async fn cleanup(&self) {
        if self.created.initialized() {
            self.schema.drop_schema().await;
        }
    }
}

silk_store::store_conformance_tests!(Pg::new());

/// The store's tables are in the test schema (the search path), not in `public`.
#[tokio::test]
async fn tables_live_in_the_search_path_schema() {
    let Some(pg) = Pg::new() else { return };
    let store = pg.open().await;
    assert_eq!(store.backend(), "postgres");
    let mut conn = sqlx::PgConnection::connect(&pg.schema.base)
        .await
        .expect("connect");
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables WHERE table_schema = $1 \
         ORDER BY table_name",
    )
    .bind(&pg.schema.schema)
    .fetch_all(&mut conn)
    .await
    .expect("list tables");
    assert_eq!(
        tables,
        [
            "agents",
            "alert_rules",
            "alerts",
            "allocations",
            "artifact_chunks",
            "deliveries",
            "items",
            "jobs",
            "leases",
            "log_lines",
            "projects",
            "quota_usage",
            "router_failures",
            "run_requests",
            "runs",
            "seq_counters",
            "settings",
            "silk_migrations",
            "tenants",
            "tokens",
            "versions"
        ]
    );
    // The log search's trigram index (the server here has pg_trgm), with the schema's
    // tables.
    let indexes: Vec<String> = sqlx::query_scalar(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = $1 \
         AND indexname = 'log_lines_message_trgm'",
    )
    .bind(&pg.schema.schema)
    .fetch_all(&mut conn)
    .await
    .expect("list indexes");
    assert!(
        indexes.len() == 1 && indexes[0].contains("gin_trgm_ops"),
        "{indexes:?}"
    );
    store.close().await;
    pg.cleanup().await;
}

/// A refused login is a Connect error that names the server but not the password.
#[tokio::test]
async fn refused_login_hides_the_password() {
    let Some(base) = PgTestSchema::from_env().map(|s| s.base) else {
        return;
    };
    let mut url = url::Url::parse(&base).expect("SILK_TEST_POSTGRES is a URL");
    url.set_username("silk_no_such_user").expect("set user");
    url.set_password(Some("s3cret")).expect("set password");
    match silk_store::open(url.as_str()).await {
        Ok(_) => panic!("a nonexistent user logged in"),
        Err(e) => {
            let text = e.to_string();
            assert!(matches!(e, StoreError::Connect { .. }), "{e:?}");
            assert!(!text.contains("s3cret"), "{text}");
            assert!(!format!("{e:?}").contains("s3cret"), "{e:?}");
            assert!(text.contains("silk_no_such_user:***@"), "{text}");
        }
    }
}
