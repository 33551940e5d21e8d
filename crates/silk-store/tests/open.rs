//! `silk_store::open` with URLs it must refuse: the error says what is wrong and never shows
//! a password.

use silk_store::StoreError;

async fn refused(url: &str) -> String {
    match silk_store::open(url).await {
        Ok(store) => panic!("{url}: opened a {} store", store.backend()),
        Err(e) => {
            assert!(matches!(e, StoreError::Connect { .. }), "{url}: {e:?}");
            let text = e.to_string();
            assert!(!text.contains("s3cret"), "{url}: password in {text:?}");
            assert!(
                !format!("{e:?}").contains("s3cret"),
                "{url}: password in {e:?}"
            );
            text
        }
    }
}

#[tokio::test]
async fn unsupported_scheme() {
    let text = refused("mysql://root:s3cret@db.example:3306/silk").await;
    assert!(text.contains("unsupported store URL"), "{text}");
    assert!(text.contains("root:***@db.example"), "{text}");
}

#[tokio::test]
async fn malformed_postgres_url() {
    let text = refused("postgres://silk:s3cret@db.example:notaport/silk").await;
    assert!(text.contains("cannot open the metadata store"), "{text}");
}

#[tokio::test]
async fn postgres_password_parameter_is_redacted() {
    let text = refused("postgres://db.example:notaport/silk?password=s3cret").await;
    assert!(text.contains("password=***"), "{text}");
}

#[tokio::test]
async fn bad_sqlite_urls() {
    assert!(refused("sqlite://").await.contains("no path"));
    assert!(refused("sqlite::memory:").await.contains("in-memory"));
    assert!(
        refused("sqlite://meta.db?mode=rwc")
            .await
            .contains("no parameters")
    );
    assert!(refused("").await.contains("unsupported"));
}

#[tokio::test]
async fn sqlite_path_that_cannot_be_created() {
    let root = tempfile::tempdir().expect("temp dir");
    let file = root.path().join("a-file");
    std::fs::write(&file, b"not a directory").expect("write");
    let text = refused(&format!("sqlite://{}/meta.db", file.display())).await;
    assert!(text.contains("a-file"), "{text}");
}
