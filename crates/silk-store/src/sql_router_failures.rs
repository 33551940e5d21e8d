//! [`impl_router_failure_store!`]: the [`crate::RouterFailureStore`] implementation, written
//! once for both sqlx drivers like [`crate::sql`]'s `impl_meta_store!`. Invoke it after that
//! macro, in the same module: it uses its helpers (`execute`, `fetch_list`, `fetch_count`,
//! `Cols`, `DbRow`).

/// Implements [`crate::RouterFailureStore`] for `$store` (see the module doc). `$c` is the
/// collation suffix of text `ORDER BY`s and comparisons.
macro_rules! impl_router_failure_store {
    (store = $store:ty, db = $db:ty, c = $c:literal) => {
        const ROUTER_FAILURE_COLS: &str =
            "id, time_ms, project, inbound, outbound, reason, why, task, raw, replayed_ms";

        fn router_failure_from_row(
            row: &DbRow,
        ) -> Result<$crate::router_failures::RouterFailureRow, StoreError> {
            let id: String = Cols::new(row, "router failure", "?").get("id")?;
            let c = Cols::new(row, "router failure", &id);
            let task: Option<String> = c.get("task")?;
            let raw: Option<String> = c.get("raw")?;
            Ok($crate::router_failures::RouterFailureRow {
                time_ms: c.u64("time_ms")?,
                project: c.get("project")?,
                inbound: c.get("inbound")?,
                outbound: c.get("outbound")?,
                reason: c.get("reason")?,
                why: c.get("why")?,
                task: task
                    .map(|t| $crate::sql::parse_json(&t, || format!("router failure {id:?} task")))
                    .transpose()?,
                raw: raw
                    .map(|r| {
                        $crate::sql::parse_json(&r, || format!("router failure {id:?} raw"))
                            .and_then(|v| match v {
                                serde_json::Value::String(s) => Ok(s),
                                _ => Err(StoreError::bad(
                                    format!("router failure {id:?} raw"),
                                    "not a JSON string".to_owned(),
                                )),
                            })
                    })
                    .transpose()?,
                replayed_ms: c.opt_u64("replayed_ms")?,
                id,
            })
        }

        /// Adds the `WHERE` of a failure filter.
        fn push_router_failure_filter(
            qb: &mut sqlx::QueryBuilder<'_, $db>,
            filter: &$crate::router_failures::RouterFailureFilter,
        ) -> Result<(), StoreError> {
            let w = |col: &str| format!("router failure filter {col}");
            qb.push(" WHERE 1 = 1");
            if let Some(ids) = &filter.ids {
                if ids.is_empty() {
                    qb.push(" AND 1 = 0");
                } else {
                    qb.push(" AND id IN (");
                    let mut list = qb.separated(", ");
                    for id in ids {
                        list.push_bind(id.clone());
                    }
                    qb.push(")");
                }
            }
            for (col, value) in [
                ("project", &filter.project),
                ("inbound", &filter.inbound),
                ("outbound", &filter.outbound),
                ("reason", &filter.reason),
            ] {
                if let Some(value) = value {
                    qb.push(format!(" AND {col} = ")).push_bind(value.clone());
                }
            }
            if let Some(since) = filter.since_ms {
                qb.push(" AND time_ms >= ")
                    .push_bind($crate::sql::to_db(since, || w("since_ms"))?);
            }
            if let Some(until) = filter.until_ms {
                qb.push(" AND time_ms < ")
                    .push_bind($crate::sql::to_db(until, || w("until_ms"))?);
            }
            match filter.replayed {
                Some(true) => {
                    qb.push(" AND replayed_ms IS NOT NULL");
                }
                Some(false) => {
                    qb.push(" AND replayed_ms IS NULL");
                }
                None => {}
            }
            if let Some((time, id)) = filter.before.as_ref().filter(|_| !filter.oldest_first) {
                let time = $crate::sql::to_db(*time, || w("before"))?;
                qb.push(" AND (time_ms < ")
                    .push_bind(time)
                    .push(" OR (time_ms = ")
                    .push_bind(time)
                    .push(format!(" AND id{} < ", $c))
                    .push_bind(id.clone())
                    .push("))");
            }
            Ok(())
        }

        #[async_trait::async_trait]
        impl $crate::router_failures::RouterFailureStore for $store {
            async fn insert_router_failures(
                &self,
                rows: &[$crate::router_failures::RouterFailureRow],
            ) -> Result<u64, StoreError> {
                let _clock = $crate::held::hold_clock();
                const OP: &str = "insert_router_failures";
                if rows.is_empty() {
                    return Ok(0);
                }
                let mut binds = Vec::with_capacity(rows.len());
                for r in rows {
                    let w = |col: &str| format!("router failure {:?} {col}", r.id);
                    binds.push((
                        $crate::sql::to_db(r.time_ms, || w("time_ms"))?,
                        r.task
                            .as_ref()
                            .map(|t| $crate::sql::json_text(t, || w("task")))
                            .transpose()?,
                        $crate::sql::opt_to_db(r.replayed_ms, || w("replayed_ms"))?,
                        r.raw
                            .as_ref()
                            .map(|t| {
                                $crate::sql::json_text(&serde_json::Value::from(t.as_str()), || {
                                    w("raw")
                                })
                            })
                            .transpose()?,
                    ));
                }
                let mut tx = self
                    .begin_write()
                    .await
                    .map_err(|e| StoreError::query(OP, e))?;
                let sql = format!(
                    "INSERT INTO router_failures ({ROUTER_FAILURE_COLS}) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT (id) DO NOTHING"
                );
                let mut added = 0;
                // PostgreSQL's text has no NUL: names and `why` keep U+FFFD in its place; the
                // task and the raw message are stored as JSON text, which escapes it.
                let text = |t: &str| t.replace('\0', "\u{FFFD}");
                let opt_text = |t: &Option<String>| t.as_deref().map(text);
                for (r, (time_ms, task, replayed_ms, raw)) in rows.iter().zip(binds) {
                    let query = sqlx::query(&sql)
                        .bind(text(&r.id))
                        .bind(time_ms)
                        .bind(text(&r.project))
                        .bind(opt_text(&r.inbound))
                        .bind(opt_text(&r.outbound))
                        .bind(text(&r.reason))
                        .bind(text(&r.why))
                        .bind(task)
                        .bind(raw)
                        .bind(replayed_ms);
                    added += execute(&mut *tx, query, OP).await?;
                }
                tx.commit().await.map_err(|e| StoreError::query(OP, e))?;
                Ok(added)
            }

            async fn list_router_failures(
                &self,
                filter: &$crate::router_failures::RouterFailureFilter,
            ) -> Result<Vec<$crate::router_failures::RouterFailureRow>, StoreError> {
                let _clock = $crate::held::hold_clock();
                let mut qb = sqlx::QueryBuilder::<$db>::new(format!(
                    "SELECT {ROUTER_FAILURE_COLS} FROM router_failures"
                ));
                push_router_failure_filter(&mut qb, filter)?;
                if filter.oldest_first {
                    qb.push(format!(" ORDER BY time_ms, id{}", $c));
                } else {
                    qb.push(format!(" ORDER BY time_ms DESC, id{} DESC", $c));
                }
                if let Some(limit) = filter.limit {
                    qb.push(" LIMIT ").push_bind(i64::from(limit));
                }
                fetch_list(
                    &self.pool,
                    qb.build(),
                    "list_router_failures",
                    router_failure_from_row,
                )
                .await
            }

            async fn count_router_failures(
                &self,
                filter: &$crate::router_failures::RouterFailureFilter,
            ) -> Result<u64, StoreError> {
                let _clock = $crate::held::hold_clock();
                let mut qb =
                    sqlx::QueryBuilder::<$db>::new("SELECT COUNT(*) FROM router_failures");
                push_router_failure_filter(&mut qb, filter)?;
                fetch_count(
                    &self.pool,
                    qb.build_query_scalar(),
                    "count_router_failures",
                    || "router_failures".to_owned(),
                )
                .await
            }

            async fn mark_router_failures_replayed(
                &self,
                ids: &[String],
                at_ms: u64,
            ) -> Result<u64, StoreError> {
                let _clock = $crate::held::hold_clock();
                if ids.is_empty() {
                    return Ok(0);
                }
                let at = $crate::sql::to_db(at_ms, || "router failure replayed_ms".to_owned())?;
                let mut qb = sqlx::QueryBuilder::<$db>::new(
                    "UPDATE router_failures SET replayed_ms = ",
                );
                qb.push_bind(at).push(" WHERE id IN (");
                let mut list = qb.separated(", ");
                for id in ids {
                    list.push_bind(id.clone());
                }
                qb.push(")");
                execute(&self.pool, qb.build(), "mark_router_failures_replayed").await
            }

            async fn delete_router_failures_before(
                &self,
                before_ms: u64,
            ) -> Result<u64, StoreError> {
                let _clock = $crate::held::hold_clock();
                let before = $crate::sql::to_db(before_ms, || {
                    "delete_router_failures_before before_ms".to_owned()
                })?;
                let query =
                    sqlx::query("DELETE FROM router_failures WHERE time_ms < $1").bind(before);
                execute(&self.pool, query, "delete_router_failures_before").await
            }
        }
    };
}

pub(crate) use impl_router_failure_store;
