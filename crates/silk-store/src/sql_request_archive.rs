//! [`impl_request_archive_store!`]: the [`crate::RequestArchiveStore`] implementation,
//! written once for both sqlx drivers like [`crate::sql`]'s `impl_meta_store!`. Invoke it
//! after that macro, in the same module: it uses its helpers (`execute`, `execute_batch`,
//! `fetch_list`, `Cols`, `DbRow`).

/// Implements [`crate::RequestArchiveStore`] for `$store` (see the module doc). Keys are
/// lowercase hex, which every collation orders alike: no `COLLATE`, so the
/// `(run, time_ms, key)` index serves the order and the row-value cursor.
macro_rules! impl_request_archive_store {
    (store = $store:ty, db = $db:ty) => {
        const ARCHIVE_COLS: &str = "run, key, time_ms, outcome, url, status, error_code, \
                                    attempts, agent, doc, requeued_ms";

        fn archived_from_row(
            row: &DbRow,
        ) -> Result<$crate::request_archive::ArchivedRequest, StoreError> {
            let key: String = Cols::new(row, "run_requests", "?").get("key")?;
            let c = Cols::new(row, "run_requests", &key);
            let status = c
                .opt_u64("status")?
                .map(|s| {
                    u16::try_from(s).map_err(|_| {
                        StoreError::bad(c.what("status"), format!("{s} is not a status"))
                    })
                })
                .transpose()?;
            let attempts = c.u64("attempts")?;
            Ok($crate::request_archive::ArchivedRequest {
                run: c.get("run")?,
                time_ms: c.u64("time_ms")?,
                outcome: c.get("outcome")?,
                url: c.get("url")?,
                status,
                error_code: c.get("error_code")?,
                attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
                agent: c.get("agent")?,
                doc: c.json("doc")?,
                requeued_ms: c.opt_u64("requeued_ms")?,
                key,
            })
        }

        /// Adds the `WHERE` of an archive filter.
        fn push_archive_filter(
            qb: &mut sqlx::QueryBuilder<'_, $db>,
            filter: &$crate::request_archive::ArchiveFilter,
            cursor: bool,
        ) -> Result<(), StoreError> {
            // PostgreSQL's text has no NUL: a value with one matches what was stored for it.
            let text = |t: &str| t.replace('\0', "\u{FFFD}");
            qb.push(" WHERE run = ").push_bind(text(&filter.run));
            if let Some(keys) = &filter.keys {
                if keys.is_empty() {
                    qb.push(" AND 1 = 0");
                } else {
                    qb.push(" AND key IN (");
                    let mut list = qb.separated(", ");
                    for key in keys {
                        list.push_bind(text(key));
                    }
                    qb.push(")");
                }
            }
            for (col, value) in [
                ("outcome", &filter.outcome),
                ("error_code", &filter.error_code),
            ] {
                if let Some(value) = value {
                    qb.push(format!(" AND {col} = ")).push_bind(text(value));
                }
            }
            if let Some(status) = filter.status {
                qb.push(" AND status = ").push_bind(i64::from(status));
            }
            match filter.requeued {
                Some(true) => {
                    qb.push(" AND requeued_ms IS NOT NULL");
                }
                Some(false) => {
                    qb.push(" AND requeued_ms IS NULL");
                }
                None => {}
            }
            if let Some((time, key)) = filter.after.as_ref().filter(|_| cursor) {
                let time = $crate::sql::to_db(*time, || "run_requests filter after".to_owned())?;
                qb.push(" AND (time_ms, key) > (")
                    .push_bind(time)
                    .push(", ")
                    .push_bind(text(key))
                    .push(")");
            }
            Ok(())
        }

        #[async_trait::async_trait]
        impl $crate::request_archive::RequestArchiveStore for $store {
            async fn archive_requests(
                &self,
                rows: &[$crate::request_archive::ArchivedRequest],
            ) -> Result<u64, StoreError> {
                let _clock = $crate::held::hold_clock();
                const OP: &str = "archive_requests";
                // One row per key: the last one written wins (PostgreSQL refuses to
                // update a row twice in one statement).
                let mut last = std::collections::HashMap::with_capacity(rows.len());
                for (i, r) in rows.iter().enumerate() {
                    last.insert((r.run.as_str(), r.key.as_str()), i);
                }
                let text = |t: &str| t.replace('\0', "\u{FFFD}");
                let mut binds = Vec::with_capacity(last.len());
                for (i, r) in rows.iter().enumerate() {
                    if last.get(&(r.run.as_str(), r.key.as_str())) != Some(&i) {
                        continue;
                    }
                    let w = |col: &str| format!("run_requests {:?}/{:?} {col}", r.run, r.key);
                    binds.push((
                        text(&r.run),
                        text(&r.key),
                        $crate::sql::to_db(r.time_ms, || w("time_ms"))?,
                        text(&r.outcome),
                        text(&r.url),
                        r.status.map(i64::from),
                        r.error_code.as_deref().map(text),
                        i64::from(r.attempts),
                        r.agent.as_deref().map(text),
                        $crate::sql::json_text(&r.doc, || w("doc"))?,
                        $crate::sql::opt_to_db(r.requeued_ms, || w("requeued_ms"))?,
                    ));
                }
                if binds.is_empty() {
                    return Ok(0);
                }
                let mut tx = self
                    .begin_write()
                    .await
                    .map_err(|e| StoreError::query(OP, e))?;
                let mut written = 0;
                for chunk in binds.chunks($crate::sql::CHUNK) {
                    let mut qb = sqlx::QueryBuilder::<$db>::new(format!(
                        "INSERT INTO run_requests ({ARCHIVE_COLS}) "
                    ));
                    qb.push_values(chunk, |mut b, r| {
                        b.push_bind(r.0.clone())
                            .push_bind(r.1.clone())
                            .push_bind(r.2)
                            .push_bind(r.3.clone())
                            .push_bind(r.4.clone())
                            .push_bind(r.5)
                            .push_bind(r.6.clone())
                            .push_bind(r.7)
                            .push_bind(r.8.clone())
                            .push_bind(r.9.clone())
                            .push_bind(r.10);
                    });
                    qb.push(
                        " ON CONFLICT (run, key) DO UPDATE SET time_ms = excluded.time_ms, \
                         outcome = excluded.outcome, url = excluded.url, \
                         status = excluded.status, error_code = excluded.error_code, \
                         attempts = excluded.attempts, agent = excluded.agent, \
                         doc = excluded.doc",
                    );
                    written += execute_batch(&mut *tx, &mut qb, OP).await?;
                }
                tx.commit().await.map_err(|e| StoreError::query(OP, e))?;
                Ok(written)
            }

            async fn list_archived(
                &self,
                filter: &$crate::request_archive::ArchiveFilter,
            ) -> Result<Vec<$crate::request_archive::ArchivedRequest>, StoreError> {
                let _clock = $crate::held::hold_clock();
                let mut qb = sqlx::QueryBuilder::<$db>::new(format!(
                    "SELECT {ARCHIVE_COLS} FROM run_requests"
                ));
                push_archive_filter(&mut qb, filter, true)?;
                qb.push(" ORDER BY time_ms, key");
                if let Some(limit) = filter.limit {
                    qb.push(" LIMIT ").push_bind(i64::from(limit));
                }
                fetch_list(&self.pool, qb.build(), "list_archived", archived_from_row).await
            }

            async fn count_archived(
                &self,
                filter: &$crate::request_archive::ArchiveFilter,
            ) -> Result<std::collections::BTreeMap<String, u64>, StoreError> {
                let _clock = $crate::held::hold_clock();
                let mut qb = sqlx::QueryBuilder::<$db>::new(
                    "SELECT outcome, COUNT(*) AS n FROM run_requests",
                );
                push_archive_filter(&mut qb, filter, false)?;
                qb.push(" GROUP BY outcome");
                let rows = qb
                    .build()
                    .fetch_all(&self.pool)
                    .await
                    .map_err(|e| StoreError::query("count_archived", e))?;
                let mut counts = std::collections::BTreeMap::new();
                for row in &rows {
                    let outcome: String = Cols::new(row, "run_requests", "count").get("outcome")?;
                    let c = Cols::new(row, "run_requests", &outcome);
                    counts.insert(outcome.clone(), c.u64("n")?);
                }
                Ok(counts)
            }

            async fn mark_archived_requeued(
                &self,
                run: &str,
                keys: &[String],
                at_ms: u64,
            ) -> Result<u64, StoreError> {
                let _clock = $crate::held::hold_clock();
                if keys.is_empty() {
                    return Ok(0);
                }
                let at = $crate::sql::to_db(at_ms, || "run_requests requeued_ms".to_owned())?;
                let mut written = 0;
                for chunk in keys.chunks($crate::sql::CHUNK) {
                    let mut qb =
                        sqlx::QueryBuilder::<$db>::new("UPDATE run_requests SET requeued_ms = ");
                    qb.push_bind(at)
                        .push(" WHERE run = ")
                        .push_bind(run.replace('\0', "\u{FFFD}"))
                        .push(" AND key IN (");
                    let mut list = qb.separated(", ");
                    for key in chunk {
                        list.push_bind(key.clone());
                    }
                    qb.push(")");
                    written += execute(&self.pool, qb.build(), "mark_archived_requeued").await?;
                }
                Ok(written)
            }

            async fn delete_archived_before(
                &self,
                before_ms: u64,
                limit: u32,
            ) -> Result<u64, StoreError> {
                let _clock = $crate::held::hold_clock();
                let before = $crate::sql::to_db(before_ms, || {
                    "delete_archived_before before_ms".to_owned()
                })?;
                let query = sqlx::query(
                    "DELETE FROM run_requests WHERE (run, key) IN \
                     (SELECT run, key FROM run_requests WHERE time_ms < $1 LIMIT $2)",
                )
                .bind(before)
                .bind(i64::from(limit));
                execute(&self.pool, query, "delete_archived_before").await
            }
        }
    };
}

pub(crate) use impl_request_archive_store;
