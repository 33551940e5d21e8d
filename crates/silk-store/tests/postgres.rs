//! The store conformance suite (`silk_store::conformance`) on PostgreSQL, at the server named
//! by `SILK_TEST_POSTGRES` (e.g. `postgres://postgres@127.0.0.1:5432/test`). Each test gets
//! its own schema `silk_t_<random>`, created on first open and dropped after the check (pass
//! or fail); the store connects with `options=-c search_path=<schema>`, so its tables land
//! there. Without the variable, every test prints `skipped: SILK_TEST_POSTGRES is not set`
//! and passes.

use async_trait::async_trait;
use silk_store::conformance::StoreFactory;
use silk_store::{MetaStore, StoreError};
use sqlx::Connection;
use std::sync::Arc;
use tokio::sync::OnceCell;

const VAR: &str = "SILK_TEST_POSTGRES";

/// The server URL, or `None` (after saying so) when the variable is not set.
fn server() -> Option<String> {
    match std::env::var(VAR) {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ => {
            println!("skipped: {VAR} is not set");
            None
        }
    }
}

/// Runs `sql` on the server, outside any test schema.
async fn admin(base: &str, sql: &str) -> Result<(), sqlx::Error> {
    let mut conn = sqlx::PgConnection::connect(base).await?;
    sqlx::Executor::execute(&mut conn, sqlx::raw_sql(sql)).await?;
    conn.close().await
}

struct Pg {
    base: String,
    schema: String,
    url: String,
    created: OnceCell<()>,
}

impl Pg {
    fn new() -> Option<Self> {
        let base = server()?;
        let schema = format!("silk_t_{:016x}", rand::random::<u64>());
        let mut url = url::Url::parse(&base).expect("SILK_TEST_POSTGRES is a URL");
        url.query_pairs_mut()
            .append_pair("options", &format!("-c search_path={schema}"));
        Some(Self {
            base,
            schema,
            url: url.to_string(),
            created: OnceCell::new(),
        })
    }
}

#[async_trait]
impl StoreFactory for Pg {
    async fn open(&self) -> Arc<dyn MetaStore> {
        self.created
            .get_or_init(|| async {
                admin(&self.base, &format!("CREATE SCHEMA {}", self.schema))
                    .await
                    .expect("create the test schema");
            })
            .await;
        silk_store::open(&self.url)
            .await
            .expect("open postgres store")
    }

    async fn cleanup(&self) {
        if self.created.initialized()
            && let Err(e) = admin(
                &self.base,
                &format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema),
            )
            .await
        {
            eprintln!("cleanup: cannot drop schema {}: {e}", self.schema);
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
    let mut conn = sqlx::PgConnection::connect(&pg.base)
        .await
        .expect("connect");
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables WHERE table_schema = $1 \
         ORDER BY table_name",
    )
    .bind(&pg.schema)
    .fetch_all(&mut conn)
    .await
    .expect("list tables");
    assert_eq!(
        tables,
        [
            "agents",
            "allocations",
            "items",
            "jobs",
            "log_lines",
            "runs",
            "seq_counters",
            "silk_migrations",
            "tokens"
        ]
    );
    store.close().await;
    pg.cleanup().await;
}

/// A refused login is a Connect error that names the server but not the password.
#[tokio::test]
async fn refused_login_hides_the_password() {
    let Some(base) = server() else { return };
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
