//! [`impl_project_store!`]: the [`crate::ProjectStore`] implementation, written once for both
//! sqlx drivers like [`crate::sql`]'s `impl_meta_store!`, whose helpers (`execute`,
//! `fetch_opt`, `fetch_list`, `fetch_count`, `Cols`, `DbRow`, `Query`) it uses: invoke it
//! after that macro, in the same module. Names it needs beyond those are written with full
//! paths, so that it imports nothing the other macro imported already.

/// Implements [`crate::ProjectStore`] for `$store` (see the module doc). `$c` is the
/// collation suffix of text `ORDER BY`s.
macro_rules! impl_project_store {
    (store = $store:ty, db = $db:ty, c = $c:literal, update = $update:literal) => {
        const DOC_COLS: &str = "name, doc, created_ms, updated_ms";
        const VERSION_COLS: &str = "project, version, build_id, state, created_ms, artifact, doc";

        /// A table of named documents ([`$crate::projects::DocRow`]): `projects`,
        /// `alert_rules`.
        #[derive(Clone, Copy)]
        struct DocTable {
            /// Its SQL name.
            table: &'static str,
            /// What one of its rows is called in errors.
            what: &'static str,
        }

        const PROJECTS: DocTable = DocTable {
            table: "projects",
            what: "project",
        };

        fn doc_from_row(row: &DbRow, t: DocTable) -> Result<$crate::projects::DocRow, StoreError> {
            let name: String = Cols::new(row, t.what, "?").get("name")?;
            let c = Cols::new(row, t.what, &name);
            Ok($crate::projects::DocRow {
                doc: c.json("doc")?,
                created_ms: c.u64("created_ms")?,
                updated_ms: c.u64("updated_ms")?,
                name,
            })
        }

        fn project_from_row(row: &DbRow) -> Result<$crate::projects::DocRow, StoreError> {
            doc_from_row(row, PROJECTS)
        }

        /// Adds a named document; [`StoreError::Conflict`] if `t` has one with its name.
        async fn create_doc(
            pool: &sqlx::Pool<$db>,
            t: DocTable,
            d: &$crate::projects::DocRow,
            op: &'static str,
        ) -> Result<(), StoreError> {
            let w = |col: &str| format!("{} {:?} {col}", t.what, d.name);
            let doc = $crate::sql::json_text(&d.doc, || w("doc"))?;
            let sql = format!("INSERT INTO {} ({DOC_COLS}) VALUES ($1, $2, $3, $4)", t.table);
            let res = sqlx::query(&sql)
                .bind(&d.name)
                .bind(&doc)
                .bind($crate::sql::to_db(d.created_ms, || w("created_ms"))?)
                .bind($crate::sql::to_db(d.updated_ms, || w("updated_ms"))?)
                .execute(pool)
                .await;
            match res {
                Ok(_) => Ok(()),
                Err(e) if $crate::sql::is_unique_violation(&e) => Err(StoreError::Conflict {
                    what: format!("{} {:?}", t.what, d.name),
                }),
                Err(e) => Err(StoreError::query(op, e)),
            }
        }

        /// Replaces a named document; [`StoreError::NotFound`] if `t` has none with its name.
        async fn update_doc(
            pool: &sqlx::Pool<$db>,
            t: DocTable,
            d: &$crate::projects::DocRow,
            op: &'static str,
        ) -> Result<(), StoreError> {
            let w = |col: &str| format!("{} {:?} {col}", t.what, d.name);
            let doc = $crate::sql::json_text(&d.doc, || w("doc"))?;
            let sql = format!(
                "UPDATE {} SET doc = $2, created_ms = $3, updated_ms = $4 WHERE name = $1",
                t.table
            );
            let query = sqlx::query(&sql)
                .bind(&d.name)
                .bind(&doc)
                .bind($crate::sql::to_db(d.created_ms, || w("created_ms"))?)
                .bind($crate::sql::to_db(d.updated_ms, || w("updated_ms"))?);
            if execute(pool, query, op).await? == 0 {
                return Err(StoreError::NotFound {
                    what: format!("{} {:?}", t.what, d.name),
                });
            }
            Ok(())
        }

        fn version_from_row(row: &DbRow) -> Result<$crate::projects::VersionRow, StoreError> {
            let build_id: String = Cols::new(row, "version", "?").get("build_id")?;
            let c = Cols::new(row, "version", &build_id);
            Ok($crate::projects::VersionRow {
                project: c.get("project")?,
                version: c.get("version")?,
                state: c.get("state")?,
                created_ms: c.u64("created_ms")?,
                artifact: c.get("artifact")?,
                doc: c.json("doc")?,
                build_id,
            })
        }

        /// A version's columns converted for binding.
        struct VersionBinds {
            created_ms: i64,
            doc: String,
        }

        impl VersionBinds {
            fn new(v: &$crate::projects::VersionRow) -> Result<Self, StoreError> {
                let w = |col: &str| format!("version {}/{} {col}", v.project, v.version);
                Ok(Self {
                    created_ms: $crate::sql::to_db(v.created_ms, || w("created_ms"))?,
                    doc: $crate::sql::json_text(&v.doc, || w("doc"))?,
                })
            }

            /// Binds `$1` to `$7`: the columns in [`VERSION_COLS`] order.
            fn bind<'q>(
                &'q self,
                v: &'q $crate::projects::VersionRow,
                query: Query<'q>,
            ) -> Query<'q> {
                query
                    .bind(&v.project)
                    .bind(&v.version)
                    .bind(&v.build_id)
                    .bind(&v.state)
                    .bind(self.created_ms)
                    .bind(v.artifact.as_deref())
                    .bind(&self.doc)
            }
        }

        /// Inserts or replaces a version, under a lease if `held`; rows written.
        async fn upsert_version(
            pool: &sqlx::Pool<$db>,
            v: &$crate::projects::VersionRow,
            held: Option<(&str, &str)>,
        ) -> Result<u64, StoreError> {
            let b = VersionBinds::new(v)?;
            let (source, op) = match held {
                None => ("VALUES ($1, $2, $3, $4, $5, $6, $7)", "put_version"),
                Some(_) => (
                    "SELECT $1, $2, $3, $4, $5, $6, $7 WHERE EXISTS \
                     (SELECT 1 FROM leases WHERE name = $8 AND holder = $9)",
                    "put_version_held",
                ),
            };
            let sql = format!(
                "INSERT INTO versions ({VERSION_COLS}) {source} \
                 ON CONFLICT (project, version) DO UPDATE SET build_id = excluded.build_id, \
                 state = excluded.state, created_ms = excluded.created_ms, \
                 artifact = excluded.artifact, doc = excluded.doc"
            );
            let mut query = b.bind(v, sqlx::query(&sql));
            if let Some((lease, holder)) = held {
                query = query.bind(lease).bind(holder);
            }
            match query.execute(pool).await {
                Ok(done) => Ok(done.rows_affected()),
                Err(e) if $crate::sql::is_unique_violation(&e) => Err(StoreError::Conflict {
                    what: format!("build id {:?}", v.build_id),
                }),
                Err(e) => Err(StoreError::query(op, e)),
            }
        }

        #[async_trait::async_trait]
        impl $crate::projects::ProjectStore for $store {
            async fn create_project(
                &self,
                p: &$crate::projects::ProjectRow,
            ) -> Result<(), StoreError> {
                let _clock = $crate::held::hold_clock();
                create_doc(&self.pool, PROJECTS, p, "create_project").await
            }

            async fn update_project(
                &self,
                p: &$crate::projects::ProjectRow,
            ) -> Result<(), StoreError> {
                let _clock = $crate::held::hold_clock();
                update_doc(&self.pool, PROJECTS, p, "update_project").await
            }

            async fn get_project(
                &self,
                name: &str,
            ) -> Result<Option<$crate::projects::ProjectRow>, StoreError> {
                let _clock = $crate::held::hold_clock();
                let sql = format!("SELECT {DOC_COLS} FROM projects WHERE name = $1");
                fetch_opt(&self.pool, sqlx::query(&sql).bind(name), "get_project", project_from_row)
                    .await
            }

            async fn list_projects(
                &self,
            ) -> Result<Vec<$crate::projects::ProjectRow>, StoreError> {
                let _clock = $crate::held::hold_clock();
                let sql = format!("SELECT {DOC_COLS} FROM projects ORDER BY name{}", $c);
                fetch_list(&self.pool, sqlx::query(&sql), "list_projects", project_from_row).await
            }

            async fn delete_project(&self, name: &str) -> Result<bool, StoreError> {
                let _clock = $crate::held::hold_clock();
                const OP: &str = "delete_project";
                let mut tx = self.begin_write().await.map_err(|e| StoreError::query(OP, e))?;
                let logs = sqlx::query(
                    "DELETE FROM log_lines WHERE run_id IN \
                     (SELECT 'build:' || build_id FROM versions WHERE project = $1)",
                )
                .bind(name);
                execute(&mut *tx, logs, OP).await?;
                for sql in [
                    "DELETE FROM versions WHERE project = $1",
                    "DELETE FROM deliveries WHERE project = $1",
                ] {
                    execute(&mut *tx, sqlx::query(sql).bind(name), OP).await?;
                }
                let deleted = execute(
                    &mut *tx,
                    sqlx::query("DELETE FROM projects WHERE name = $1").bind(name),
                    OP,
                )
                .await?;
                tx.commit().await.map_err(|e| StoreError::query(OP, e))?;
                Ok(deleted > 0)
            }

            async fn insert_version(
                &self,
                v: &$crate::projects::VersionRow,
            ) -> Result<bool, StoreError> {
                let _clock = $crate::held::hold_clock();
                let b = VersionBinds::new(v)?;
                let sql = format!(
                    "INSERT INTO versions ({VERSION_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7) \
                     ON CONFLICT (project, version) DO NOTHING"
                );
                match b.bind(v, sqlx::query(&sql)).execute(&self.pool).await {
                    Ok(done) => Ok(done.rows_affected() > 0),
                    Err(e) if $crate::sql::is_unique_violation(&e) => Err(StoreError::Conflict {
                        what: format!("build id {:?}", v.build_id),
                    }),
                    Err(e) => Err(StoreError::query("insert_version", e)),
                }
            }

            async fn put_version(
                &self,
                v: &$crate::projects::VersionRow,
            ) -> Result<(), StoreError> {
                let _clock = $crate::held::hold_clock();
                upsert_version(&self.pool, v, None).await.map(|_| ())
            }

            async fn put_version_held(
                &self,
                v: &$crate::projects::VersionRow,
                lease: &str,
                holder: &str,
            ) -> Result<bool, StoreError> {
                let _clock = $crate::held::hold_clock();
                Ok(upsert_version(&self.pool, v, Some((lease, holder))).await? > 0)
            }

            async fn get_version(
                &self,
                project: &str,
                version: &str,
            ) -> Result<Option<$crate::projects::VersionRow>, StoreError> {
                let _clock = $crate::held::hold_clock();
                let sql = format!(
                    "SELECT {VERSION_COLS} FROM versions WHERE project = $1 AND version = $2"
                );
                let query = sqlx::query(&sql).bind(project).bind(version);
                fetch_opt(&self.pool, query, "get_version", version_from_row).await
            }

            async fn get_version_by_build(
                &self,
                build_id: &str,
            ) -> Result<Option<$crate::projects::VersionRow>, StoreError> {
                let _clock = $crate::held::hold_clock();
                let sql = format!("SELECT {VERSION_COLS} FROM versions WHERE build_id = $1");
                let query = sqlx::query(&sql).bind(build_id);
                fetch_opt(&self.pool, query, "get_version_by_build", version_from_row).await
            }

            async fn list_versions(
                &self,
                project: &str,
            ) -> Result<Vec<$crate::projects::VersionRow>, StoreError> {
                let _clock = $crate::held::hold_clock();
                let sql = format!(
                    "SELECT {VERSION_COLS} FROM versions WHERE project = $1 \
                     ORDER BY created_ms DESC, version{} DESC",
                    $c
                );
                let query = sqlx::query(&sql).bind(project);
                fetch_list(&self.pool, query, "list_versions", version_from_row).await
            }

            async fn list_versions_in_state(
                &self,
                state: &str,
            ) -> Result<Vec<$crate::projects::VersionRow>, StoreError> {
                let _clock = $crate::held::hold_clock();
                let sql = format!(
                    "SELECT {VERSION_COLS} FROM versions WHERE state = $1 \
                     ORDER BY created_ms, project{c}, version{c}",
                    c = $c
                );
                let query = sqlx::query(&sql).bind(state);
                fetch_list(&self.pool, query, "list_versions_in_state", version_from_row).await
            }

            async fn delete_version(&self, project: &str, version: &str) -> Result<bool, StoreError> {
                let _clock = $crate::held::hold_clock();
                const OP: &str = "delete_version";
                let mut tx = self.begin_write().await.map_err(|e| StoreError::query(OP, e))?;
                let logs = sqlx::query(
                    "DELETE FROM log_lines WHERE run_id IN \
                     (SELECT 'build:' || build_id FROM versions WHERE project = $1 AND version = $2)",
                )
                .bind(project)
                .bind(version);
                execute(&mut *tx, logs, OP).await?;
                let gone = sqlx::query("DELETE FROM versions WHERE project = $1 AND version = $2")
                    .bind(project)
                    .bind(version);
                let deleted = execute(&mut *tx, gone, OP).await?;
                tx.commit().await.map_err(|e| StoreError::query(OP, e))?;
                Ok(deleted > 0)
            }

            async fn record_delivery(
                &self,
                project: &str,
                delivery: &str,
                received_ms: u64,
            ) -> Result<bool, StoreError> {
                let _clock = $crate::held::hold_clock();
                let ms = $crate::sql::to_db(received_ms, || format!("delivery {delivery:?} received_ms"))?;
                let query = sqlx::query(
                    "INSERT INTO deliveries (project, delivery, received_ms) VALUES ($1, $2, $3) \
                     ON CONFLICT (project, delivery) DO NOTHING",
                )
                .bind(project)
                .bind(delivery)
                .bind(ms);
                Ok(execute(&self.pool, query, "record_delivery").await? > 0)
            }

            async fn delete_deliveries_before(&self, ts_ms: u64) -> Result<u64, StoreError> {
                let _clock = $crate::held::hold_clock();
                let ms = $crate::sql::to_db(ts_ms, || "deliveries cutoff".to_owned())?;
                let query = sqlx::query("DELETE FROM deliveries WHERE received_ms < $1").bind(ms);
                execute(&self.pool, query, "delete_deliveries_before").await
            }

            async fn put_artifact_chunk(
                &self,
                sha256: &str,
                seq: u32,
                data: &[u8],
            ) -> Result<(), StoreError> {
                let _clock = $crate::held::hold_clock();
                use base64::Engine as _;
                if data.len() > $crate::projects::ARTIFACT_CHUNK {
                    return Err(StoreError::bad(
                        format!("artifact {sha256:?} chunk {seq}"),
                        format!(
                            "{} bytes is above {}",
                            data.len(),
                            $crate::projects::ARTIFACT_CHUNK
                        ),
                    ));
                }
                let text = base64::engine::general_purpose::STANDARD.encode(data);
                let query = sqlx::query(
                    "INSERT INTO artifact_chunks (sha256, seq, data) VALUES ($1, $2, $3) \
                     ON CONFLICT (sha256, seq) DO UPDATE SET data = excluded.data",
                )
                .bind(sha256)
                .bind(i64::from(seq))
                .bind(&text);
                execute(&self.pool, query, "put_artifact_chunk").await.map(|_| ())
            }

            async fn get_artifact_chunk(
                &self,
                sha256: &str,
                seq: u32,
            ) -> Result<Option<Vec<u8>>, StoreError> {
                let _clock = $crate::held::hold_clock();
                use base64::Engine as _;
                let text: Option<String> = sqlx::query_scalar(
                    "SELECT data FROM artifact_chunks WHERE sha256 = $1 AND seq = $2",
                )
                .bind(sha256)
                .bind(i64::from(seq))
                .fetch_optional(&self.pool)
                .await
                .map_err(|e| StoreError::query("get_artifact_chunk", e))?;
                text.map(|t| {
                    base64::engine::general_purpose::STANDARD.decode(t).map_err(|e| {
                        StoreError::bad(format!("artifact {sha256:?} chunk {seq}"), e.to_string())
                    })
                })
                .transpose()
            }

            async fn count_artifact_chunks(&self, sha256: &str) -> Result<u64, StoreError> {
                let _clock = $crate::held::hold_clock();
                let query = sqlx::query_scalar("SELECT COUNT(*) FROM artifact_chunks WHERE sha256 = $1")
                    .bind(sha256);
                fetch_count(&self.pool, query, "count_artifact_chunks", || {
                    format!("artifact {sha256:?} chunks")
                })
                .await
            }

            async fn delete_artifact(&self, sha256: &str) -> Result<u64, StoreError> {
                let _clock = $crate::held::hold_clock();
                let query = sqlx::query("DELETE FROM artifact_chunks WHERE sha256 = $1").bind(sha256);
                execute(&self.pool, query, "delete_artifact").await
            }

            async fn artifact_in_use(&self, sha256: &str) -> Result<bool, StoreError> {
                let _clock = $crate::held::hold_clock();
                let query = sqlx::query_scalar("SELECT COUNT(*) FROM versions WHERE artifact = $1")
                    .bind(sha256);
                let n = fetch_count(&self.pool, query, "artifact_in_use", || {
                    format!("versions of artifact {sha256:?}")
                })
                .await?;
                Ok(n > 0)
            }

            async fn get_setting(&self, name: &str) -> Result<Option<String>, StoreError> {
                let _clock = $crate::held::hold_clock();
                sqlx::query_scalar("SELECT value FROM settings WHERE name = $1")
                    .bind(name)
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(|e| StoreError::query("get_setting", e))
            }

            async fn put_setting_if_absent(
                &self,
                name: &str,
                value: &str,
            ) -> Result<String, StoreError> {
                let _clock = $crate::held::hold_clock();
                const OP: &str = "put_setting_if_absent";
                let insert = sqlx::query(
                    "INSERT INTO settings (name, value) VALUES ($1, $2) \
                     ON CONFLICT (name) DO NOTHING",
                )
                .bind(name)
                .bind(value);
                execute(&self.pool, insert, OP).await?;
                sqlx::query_scalar("SELECT value FROM settings WHERE name = $1")
                    .bind(name)
                    .fetch_one(&self.pool)
                    .await
                    .map_err(|e| StoreError::query(OP, e))
            }
        }

        const TENANTS: DocTable = DocTable {
            table: "tenants",
            what: "tenant",
        };

        fn tenant_from_row(row: &DbRow) -> Result<$crate::projects::DocRow, StoreError> {
            doc_from_row(row, TENANTS)
        }

        fn usage_from_row(row: &DbRow) -> Result<$crate::tenants::UsageRow, StoreError> {
            let scope: String = Cols::new(row, "quota_usage", "?").get("scope")?;
            let c = Cols::new(row, "quota_usage", &scope);
            Ok($crate::tenants::UsageRow {
                key: $crate::tenants::UsageKey {
                    period: c.get("period")?,
                    scope: scope.clone(),
                },
                pages: c.u64("pages")?,
                bytes: c.u64("bytes")?,
                reserved: c.u64("reserved")?,
                overshoot: c.u64("overshoot")?,
                updated_ms: c.u64("updated_ms")?,
            })
        }

        #[async_trait::async_trait]
        impl $crate::tenants::TenantStore for $store {
            async fn create_tenant(
                &self,
                tenant: &$crate::tenants::TenantRow,
            ) -> Result<(), StoreError> {
                let _clock = $crate::held::hold_clock();
                create_doc(&self.pool, TENANTS, tenant, "create_tenant").await
            }

            async fn update_tenant(
                &self,
                tenant: &$crate::tenants::TenantRow,
            ) -> Result<(), StoreError> {
                let _clock = $crate::held::hold_clock();
                update_doc(&self.pool, TENANTS, tenant, "update_tenant").await
            }

            async fn get_tenant(
                &self,
                name: &str,
            ) -> Result<Option<$crate::tenants::TenantRow>, StoreError> {
                let _clock = $crate::held::hold_clock();
                let sql = format!("SELECT {DOC_COLS} FROM tenants WHERE name = $1");
                let query = sqlx::query(&sql).bind(name);
                fetch_opt(&self.pool, query, "get_tenant", tenant_from_row).await
            }

            async fn list_tenants(&self) -> Result<Vec<$crate::tenants::TenantRow>, StoreError> {
                let _clock = $crate::held::hold_clock();
                let sql = format!("SELECT {DOC_COLS} FROM tenants ORDER BY name{}", $c);
                fetch_list(&self.pool, sqlx::query(&sql), "list_tenants", tenant_from_row).await
            }

            async fn delete_tenant(&self, name: &str) -> Result<bool, StoreError> {
                let _clock = $crate::held::hold_clock();
                const OP: &str = "delete_tenant";
                let mut tx = self.begin_write().await.map_err(|e| StoreError::query(OP, e))?;
                // Locked first (PostgreSQL; SQLite has one writer): a job, run or token being
                // written for the tenant holds it `FOR KEY SHARE` (`tenant_exists`), so it is
                // either counted below or not written at all.
                let lock = format!("SELECT name FROM tenants WHERE name = $1{}", $update);
                sqlx::query(&lock)
                    .bind(name)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(|e| StoreError::query(OP, e))?;
                for table in ["jobs", "runs", "tokens"] {
                    let sql = format!("SELECT COUNT(*) FROM {table} WHERE tenant = $1");
                    let count: i64 = sqlx::query_scalar(&sql)
                        .bind(name)
                        .fetch_one(&mut *tx)
                        .await
                        .map_err(|e| StoreError::query(OP, e))?;
                    if count > 0 {
                        return Err(StoreError::Conflict {
                            what: format!("tenant {name:?} still has {count} {table}"),
                        });
                    }
                }
                let query = sqlx::query("DELETE FROM tenants WHERE name = $1").bind(name);
                let deleted = execute(&mut *tx, query, OP).await?;
                tx.commit().await.map_err(|e| StoreError::query(OP, e))?;
                Ok(deleted > 0)
            }

            async fn reserve_quota(
                &self,
                claims: &[$crate::tenants::QuotaClaim],
                want: u64,
                now_ms: u64,
            ) -> Result<u64, StoreError> {
                let _clock = $crate::held::hold_clock();
                const OP: &str = "reserve_quota";
                let now = $crate::sql::to_db(now_ms, || "reserve_quota now_ms".to_owned())?;
                let mut sorted: Vec<&$crate::tenants::QuotaClaim> = claims.iter().collect();
                sorted.sort_by(|a, b| a.key.cmp(&b.key));
                let mut tx = self.begin_write().await.map_err(|e| StoreError::query(OP, e))?;
                let mut grant = want;
                for claim in &sorted {
                    // Makes the row or, on PostgreSQL, locks it (an update takes the row lock;
                    // SQLite's BEGIN IMMEDIATE serializes the whole transaction).
                    let upsert = sqlx::query(
                        "INSERT INTO quota_usage (scope, period, updated_ms) VALUES ($1, $2, $3) \
                         ON CONFLICT (scope, period) DO UPDATE SET updated_ms = excluded.updated_ms",
                    )
                    .bind(&claim.key.scope)
                    .bind(&claim.key.period)
                    .bind(now);
                    execute(&mut *tx, upsert, OP).await?;
                    let row = sqlx::query(
                        "SELECT pages, bytes, reserved FROM quota_usage \
                         WHERE scope = $1 AND period = $2",
                    )
                    .bind(&claim.key.scope)
                    .bind(&claim.key.period)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(|e| StoreError::query(OP, e))?;
                    let c = Cols::new(&row, "quota_usage", &claim.key.scope);
                    let (pages, bytes, reserved) =
                        (c.u64("pages")?, c.u64("bytes")?, c.u64("reserved")?);
                    if claim.max_bytes.is_some_and(|max| bytes >= max) {
                        grant = 0;
                    }
                    if let Some(max) = claim.max_pages {
                        grant = grant.min(max.saturating_sub(pages.saturating_add(reserved)));
                    }
                }
                if grant > 0 {
                    let n = $crate::sql::to_db(grant, || "reserve_quota want".to_owned())?;
                    for claim in &sorted {
                        let update = sqlx::query(
                            "UPDATE quota_usage SET reserved = reserved + $3 \
                             WHERE scope = $1 AND period = $2",
                        )
                        .bind(&claim.key.scope)
                        .bind(&claim.key.period)
                        .bind(n);
                        execute(&mut *tx, update, OP).await?;
                    }
                }
                tx.commit().await.map_err(|e| StoreError::query(OP, e))?;
                Ok(grant)
            }

            async fn add_usage(
                &self,
                keys: &[$crate::tenants::UsageKey],
                delta: &$crate::tenants::UsageDelta,
                now_ms: u64,
            ) -> Result<(), StoreError> {
                let _clock = $crate::held::hold_clock();
                const OP: &str = "add_usage";
                let w = |what: &'static str| move || format!("add_usage {what}");
                let now = $crate::sql::to_db(now_ms, w("now_ms"))?;
                let pages = $crate::sql::to_db(delta.pages, w("pages"))?;
                let bytes = $crate::sql::to_db(delta.bytes, w("bytes"))?;
                let unreserve = $crate::sql::to_db(delta.unreserve, w("unreserve"))?;
                let overshoot = $crate::sql::to_db(delta.overshoot, w("overshoot"))?;
                let mut sorted: Vec<&$crate::tenants::UsageKey> = keys.iter().collect();
                sorted.sort();
                let mut tx = self.begin_write().await.map_err(|e| StoreError::query(OP, e))?;
                for key in sorted {
                    let upsert = sqlx::query(
                        "INSERT INTO quota_usage (scope, period, pages, bytes, overshoot, updated_ms) \
                         VALUES ($1, $2, $3, $4, $5, $6) \
                         ON CONFLICT (scope, period) DO UPDATE SET \
                         pages = quota_usage.pages + excluded.pages, \
                         bytes = quota_usage.bytes + excluded.bytes, \
                         overshoot = quota_usage.overshoot + excluded.overshoot, \
                         reserved = CASE WHEN quota_usage.reserved > $7 \
                                    THEN quota_usage.reserved - $7 ELSE 0 END, \
                         updated_ms = excluded.updated_ms",
                    )
                    .bind(&key.scope)
                    .bind(&key.period)
                    .bind(pages)
                    .bind(bytes)
                    .bind(overshoot)
                    .bind(now)
                    .bind(unreserve);
                    execute(&mut *tx, upsert, OP).await?;
                }
                tx.commit().await.map_err(|e| StoreError::query(OP, e))?;
                Ok(())
            }

            async fn get_usage(
                &self,
                key: &$crate::tenants::UsageKey,
            ) -> Result<Option<$crate::tenants::UsageRow>, StoreError> {
                let _clock = $crate::held::hold_clock();
                let query = sqlx::query(
                    "SELECT scope, period, pages, bytes, reserved, overshoot, updated_ms \
                     FROM quota_usage WHERE scope = $1 AND period = $2",
                )
                .bind(&key.scope)
                .bind(&key.period);
                fetch_opt(&self.pool, query, "get_usage", usage_from_row).await
            }
        }
    };
}

pub(crate) use impl_project_store;
