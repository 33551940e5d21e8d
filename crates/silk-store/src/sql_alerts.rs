//! [`impl_alert_store!`]: the [`crate::AlertStore`] implementation, written once for both
//! sqlx drivers like [`crate::sql`]'s `impl_meta_store!`. Invoke it after that macro and
//! `impl_project_store!`, in the same module: it uses their helpers (`execute`,
//! `fetch_opt`, `fetch_list`, `fetch_count`, `Cols`, `DbRow`, the named-document helpers,
//! `run_from_row`).

/// Implements [`crate::AlertStore`] for `$store` (see the module doc). `$c` is the
/// collation suffix of text `ORDER BY`s.
macro_rules! impl_alert_store {
    (store = $store:ty, db = $db:ty, c = $c:literal) => {
        const ALERT_RULES: DocTable = DocTable {
            table: "alert_rules",
            what: "alert rule",
        };

        fn alert_rule_from_row(row: &DbRow) -> Result<$crate::projects::DocRow, StoreError> {
            doc_from_row(row, ALERT_RULES)
        }

        const ALERT_COLS: &str = "id, rule, state, created_ms, due_ms, counted, doc";

        fn alert_from_row(row: &DbRow) -> Result<$crate::alerts::AlertRow, StoreError> {
            let id: String = Cols::new(row, "alert", "?").get("id")?;
            let c = Cols::new(row, "alert", &id);
            Ok($crate::alerts::AlertRow {
                rule: c.get("rule")?,
                state: c.get("state")?,
                created_ms: c.u64("created_ms")?,
                due_ms: c.u64("due_ms")?,
                counted: c.bool("counted")?,
                doc: c.json("doc")?,
                id,
            })
        }

        /// An alert's columns converted for binding.
        struct AlertBinds {
            created_ms: i64,
            due_ms: i64,
            doc: String,
        }

        impl AlertBinds {
            fn new(a: &$crate::alerts::AlertRow) -> Result<Self, StoreError> {
                let w = |col: &str| format!("alert {:?} {col}", a.id);
                Ok(Self {
                    created_ms: $crate::sql::to_db(a.created_ms, || w("created_ms"))?,
                    due_ms: $crate::sql::to_db(a.due_ms, || w("due_ms"))?,
                    doc: $crate::sql::json_text(&a.doc, || w("doc"))?,
                })
            }
        }

        /// Adds the `WHERE` of an alert filter.
        fn push_alert_filter(
            qb: &mut sqlx::QueryBuilder<'_, $db>,
            filter: &$crate::alerts::AlertFilter,
        ) -> Result<(), StoreError> {
            qb.push(" WHERE 1 = 1");
            if let Some(rule) = &filter.rule {
                qb.push(" AND rule = ").push_bind(rule.clone());
            }
            if let Some(state) = &filter.state {
                qb.push(" AND state = ").push_bind(state.clone());
            }
            if let Some(since) = filter.since_ms {
                let since = $crate::sql::to_db(since, || "alert filter since_ms".to_owned())?;
                qb.push(" AND created_ms >= ").push_bind(since);
            }
            if let Some(counted) = filter.counted {
                qb.push(" AND counted = ").push_bind(i64::from(counted));
            }
            Ok(())
        }

        #[async_trait::async_trait]
        impl $crate::alerts::AlertStore for $store {
            async fn create_alert_rule(
                &self,
                rule: &$crate::alerts::AlertRuleRow,
            ) -> Result<(), StoreError> {
                let _clock = $crate::held::hold_clock();
                create_doc(&self.pool, ALERT_RULES, rule, "create_alert_rule").await
            }

            async fn update_alert_rule(
                &self,
                rule: &$crate::alerts::AlertRuleRow,
            ) -> Result<(), StoreError> {
                let _clock = $crate::held::hold_clock();
                update_doc(&self.pool, ALERT_RULES, rule, "update_alert_rule").await
            }

            async fn get_alert_rule(
                &self,
                name: &str,
            ) -> Result<Option<$crate::alerts::AlertRuleRow>, StoreError> {
                let _clock = $crate::held::hold_clock();
                let sql = format!("SELECT {DOC_COLS} FROM alert_rules WHERE name = $1");
                let query = sqlx::query(&sql).bind(name);
                fetch_opt(&self.pool, query, "get_alert_rule", alert_rule_from_row).await
            }

            async fn list_alert_rules(
                &self,
            ) -> Result<Vec<$crate::alerts::AlertRuleRow>, StoreError> {
                let _clock = $crate::held::hold_clock();
                let sql = format!("SELECT {DOC_COLS} FROM alert_rules ORDER BY name{}", $c);
                fetch_list(
                    &self.pool,
                    sqlx::query(&sql),
                    "list_alert_rules",
                    alert_rule_from_row,
                )
                .await
            }

            async fn delete_alert_rule(&self, name: &str) -> Result<bool, StoreError> {
                let _clock = $crate::held::hold_clock();
                let query = sqlx::query("DELETE FROM alert_rules WHERE name = $1").bind(name);
                Ok(execute(&self.pool, query, "delete_alert_rule").await? > 0)
            }

            async fn insert_alerts(
                &self,
                alerts: &[$crate::alerts::AlertRow],
            ) -> Result<u64, StoreError> {
                let _clock = $crate::held::hold_clock();
                const OP: &str = "insert_alerts";
                if alerts.is_empty() {
                    return Ok(0);
                }
                let binds = alerts
                    .iter()
                    .map(AlertBinds::new)
                    .collect::<Result<Vec<_>, _>>()?;
                let mut tx = self
                    .begin_write()
                    .await
                    .map_err(|e| StoreError::query(OP, e))?;
                let sql = format!(
                    "INSERT INTO alerts ({ALERT_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7) \
                     ON CONFLICT (id) DO NOTHING"
                );
                let mut added = 0;
                for (a, b) in alerts.iter().zip(&binds) {
                    let query = sqlx::query(&sql)
                        .bind(&a.id)
                        .bind(&a.rule)
                        .bind(&a.state)
                        .bind(b.created_ms)
                        .bind(b.due_ms)
                        .bind(i64::from(a.counted))
                        .bind(&b.doc);
                    added += execute(&mut *tx, query, OP).await?;
                }
                tx.commit().await.map_err(|e| StoreError::query(OP, e))?;
                Ok(added)
            }

            async fn claim_alert(
                &self,
                id: &str,
                due_ms: u64,
                until_ms: u64,
            ) -> Result<bool, StoreError> {
                let _clock = $crate::held::hold_clock();
                let w = |col: &str| format!("alert {id:?} {col}");
                let query = sqlx::query(
                    "UPDATE alerts SET due_ms = $3 WHERE id = $1 AND state = $4 AND due_ms = $2",
                )
                .bind(id)
                .bind($crate::sql::to_db(due_ms, || w("due_ms"))?)
                .bind($crate::sql::to_db(until_ms, || w("until_ms"))?)
                .bind($crate::alerts::ALERT_PENDING);
                Ok(execute(&self.pool, query, "claim_alert").await? > 0)
            }

            async fn settle_alert(
                &self,
                a: &$crate::alerts::AlertRow,
                claimed_ms: u64,
            ) -> Result<bool, StoreError> {
                let _clock = $crate::held::hold_clock();
                let b = AlertBinds::new(a)?;
                let claimed = $crate::sql::to_db(claimed_ms, || format!("alert {:?} claim", a.id))?;
                let query = sqlx::query(
                    "UPDATE alerts SET state = $2, due_ms = $3, doc = $4 \
                     WHERE id = $1 AND state = $5 AND due_ms = $6",
                )
                .bind(&a.id)
                .bind(&a.state)
                .bind(b.due_ms)
                .bind(&b.doc)
                .bind($crate::alerts::ALERT_PENDING)
                .bind(claimed);
                Ok(execute(&self.pool, query, "settle_alert").await? > 0)
            }

            async fn get_alert(
                &self,
                id: &str,
            ) -> Result<Option<$crate::alerts::AlertRow>, StoreError> {
                let _clock = $crate::held::hold_clock();
                let sql = format!("SELECT {ALERT_COLS} FROM alerts WHERE id = $1");
                fetch_opt(
                    &self.pool,
                    sqlx::query(&sql).bind(id),
                    "get_alert",
                    alert_from_row,
                )
                .await
            }

            async fn due_alerts(
                &self,
                now_ms: u64,
                limit: u32,
            ) -> Result<Vec<$crate::alerts::AlertRow>, StoreError> {
                let _clock = $crate::held::hold_clock();
                let now = $crate::sql::to_db(now_ms, || "due_alerts now_ms".to_owned())?;
                let sql = format!(
                    "SELECT {ALERT_COLS} FROM alerts WHERE state = $1 AND due_ms <= $2 \
                     ORDER BY due_ms, id{} LIMIT $3",
                    $c
                );
                let query = sqlx::query(&sql)
                    .bind($crate::alerts::ALERT_PENDING)
                    .bind(now)
                    .bind(i64::from(limit));
                fetch_list(&self.pool, query, "due_alerts", alert_from_row).await
            }

            async fn next_alert_due(&self) -> Result<Option<u64>, StoreError> {
                let _clock = $crate::held::hold_clock();
                let next: Option<i64> =
                    sqlx::query_scalar("SELECT MIN(due_ms) FROM alerts WHERE state = $1")
                        .bind($crate::alerts::ALERT_PENDING)
                        .fetch_one(&self.pool)
                        .await
                        .map_err(|e| StoreError::query("next_alert_due", e))?;
                $crate::sql::opt_from_db(next, || "alerts MIN(due_ms)".to_owned())
            }

            async fn list_alerts(
                &self,
                filter: &$crate::alerts::AlertFilter,
            ) -> Result<Vec<$crate::alerts::AlertRow>, StoreError> {
                let _clock = $crate::held::hold_clock();
                let mut qb =
                    sqlx::QueryBuilder::<$db>::new(format!("SELECT {ALERT_COLS} FROM alerts"));
                push_alert_filter(&mut qb, filter)?;
                qb.push(format!(" ORDER BY created_ms DESC, id{} DESC", $c));
                if let Some(limit) = filter.limit {
                    qb.push(" LIMIT ").push_bind(i64::from(limit));
                }
                fetch_list(&self.pool, qb.build(), "list_alerts", alert_from_row).await
            }

            async fn count_alerts(
                &self,
                filter: &$crate::alerts::AlertFilter,
            ) -> Result<u64, StoreError> {
                let _clock = $crate::held::hold_clock();
                let mut qb = sqlx::QueryBuilder::<$db>::new("SELECT COUNT(*) FROM alerts");
                push_alert_filter(&mut qb, filter)?;
                fetch_count(&self.pool, qb.build_query_scalar(), "count_alerts", || {
                    "alerts".to_owned()
                })
                .await
            }

            async fn delete_alerts_before(&self, before_ms: u64) -> Result<u64, StoreError> {
                let _clock = $crate::held::hold_clock();
                let before =
                    $crate::sql::to_db(before_ms, || "delete_alerts_before before_ms".to_owned())?;
                let query = sqlx::query("DELETE FROM alerts WHERE state <> $1 AND due_ms < $2")
                    .bind($crate::alerts::ALERT_PENDING)
                    .bind(before);
                execute(&self.pool, query, "delete_alerts_before").await
            }

            async fn unnoticed_runs(&self, limit: u32) -> Result<Vec<RunRow>, StoreError> {
                let _clock = $crate::held::hold_clock();
                let sql = format!(
                    "SELECT {RUN_COLS} FROM runs WHERE noticed = 0 AND finished_ms IS NOT NULL \
                     ORDER BY finished_ms, id{} LIMIT $1",
                    $c
                );
                let query = sqlx::query(&sql).bind(i64::from(limit));
                fetch_list(&self.pool, query, "unnoticed_runs", run_from_row).await
            }

            async fn mark_run_noticed(&self, id: &str) -> Result<bool, StoreError> {
                let _clock = $crate::held::hold_clock();
                let query =
                    sqlx::query("UPDATE runs SET noticed = 1 WHERE id = $1 AND noticed = 0")
                        .bind(id);
                Ok(execute(&self.pool, query, "mark_run_noticed").await? > 0)
            }
        }
    };
}

pub(crate) use impl_alert_store;
