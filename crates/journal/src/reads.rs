//! The reads both backends run the same way: the same statements (each backend's SQL constants of
//! the same names, in its placeholder style), the same rows, the same conversions; only the
//! database type and the pool they run on differ. Written once here as macros each backend expands in its own
//! module, where the SQL constants and the pool are: the writes are what differ (SQLite's writer
//! thread, Postgres' pool).

/// The journal's reads as inherent methods (`Journal`'s async-trait methods delegate to them).
macro_rules! journal_reads {
    ($db:ty, $pool:ident) => {
        /// One attempt.
        pub(crate) async fn read_attempt(
            &self,
            tenant: &str,
            key: &str,
        ) -> Result<Option<Attempt>, JournalError> {
            let row: Option<AttemptRow> = sqlx::query_as(GET_ATTEMPT)
                .bind(clean(tenant))
                .bind(clean(key))
                .fetch_optional(&self.$pool)
                .await?;
            row.map(Attempt::try_from).transpose()
        }

        /// Attempts of a tenant by a filter, newest first.
        pub(crate) async fn read_attempts(
            &self,
            tenant: &str,
            filter: &AttemptFilter,
        ) -> Result<Vec<Attempt>, JournalError> {
            let mut builder = sqlx::QueryBuilder::<$db>::new("SELECT ");
            builder
                .push(ATTEMPT_COLUMNS)
                .push(" FROM tool_call_attempts WHERE tenant = ")
                .push_bind(clean(tenant));
            if let Some(session) = &filter.session_id {
                builder.push(" AND session_id = ").push_bind(clean(session));
            }
            if let Some(status) = filter.status {
                builder.push(" AND status = ").push_bind(status.as_str());
            }
            if let Some(tool) = &filter.tool {
                builder.push(" AND tool = ").push_bind(clean(tool));
            }
            if let Some(decision) = &filter.decision {
                builder.push(" AND decision = ").push_bind(clean(decision));
            }
            if let Some(agent) = &filter.agent_id {
                builder.push(" AND agent_id = ").push_bind(clean(agent));
            }
            if let Some(since) = filter.since {
                builder.push(" AND attempted_at >= ").push_bind(since);
            }
            if let Some(until) = filter.until {
                builder.push(" AND attempted_at < ").push_bind(until);
            }
            // Keyset paging: the page after a row (its time and key), so a page costs the same at
            // the millionth row as at the first. The plain bound on the time is what lets the
            // index start at the cursor (neither database seeks into an OR; without it SQLite
            // scanned from the newest row, 37 ms half-way down a million).
            if let Some((at, key)) = &filter.after {
                builder
                    .push(" AND attempted_at <= ")
                    .push_bind(*at)
                    .push(" AND (attempted_at < ")
                    .push_bind(*at)
                    .push(" OR (attempted_at = ")
                    .push_bind(*at)
                    .push(" AND key < ")
                    .push_bind(clean(key))
                    .push("))");
            }
            // Ties (one millisecond) by key: the order the page cursor continues.
            builder.push(" ORDER BY attempted_at DESC, key DESC LIMIT ").push_bind(query_limit(filter.limit));
            let rows: Vec<AttemptRow> = builder.build_query_as().fetch_all(&self.$pool).await?;
            rows.into_iter().map(Attempt::try_from).collect()
        }

        /// One approval.
        pub(crate) async fn read_approval(
            &self,
            tenant: &str,
            id: &str,
        ) -> Result<Option<PendingApproval>, JournalError> {
            let row: Option<ApprovalRow> = sqlx::query_as(GET_APPROVAL)
                .bind(clean(tenant))
                .bind(clean(id))
                .fetch_optional(&self.$pool)
                .await?;
            row.map(PendingApproval::try_from).transpose()
        }

        /// Approvals still pending, oldest first.
        pub(crate) async fn read_pending_approvals(
            &self,
            tenant: &str,
            session_id: Option<&str>,
        ) -> Result<Vec<PendingApproval>, JournalError> {
            let rows: Vec<ApprovalRow> = sqlx::query_as(PENDING_APPROVALS)
                .bind(clean(tenant))
                .bind(session_id.map(clean))
                .fetch_all(&self.$pool)
                .await?;
            rows.into_iter().map(PendingApproval::try_from).collect()
        }

        /// Approvals decided (or expired), the latest first.
        pub(crate) async fn read_decided_approvals(
            &self,
            tenant: &str,
            limit: u32,
        ) -> Result<Vec<PendingApproval>, JournalError> {
            let mut builder = sqlx::QueryBuilder::<$db>::new(
                "SELECT id, tenant, session_id, attempt_key, call_id, tool, api, CAST(arguments AS TEXT) AS arguments, \
                 reason, status, CAST(decision AS TEXT) AS decision, decided_by, created_at, decided_at \
                 FROM pending_approvals WHERE tenant = ",
            );
            builder
                .push_bind(clean(tenant))
                .push(" AND decided_at IS NOT NULL ORDER BY decided_at DESC, id DESC LIMIT ")
                .push_bind(query_limit(Some(limit)));
            let rows: Vec<ApprovalRow> = builder.build_query_as().fetch_all(&self.$pool).await?;
            rows.into_iter().map(PendingApproval::try_from).collect()
        }

        /// Remembered decisions, oldest first.
        pub(crate) async fn read_remembered(
            &self,
            tenant: &str,
            project: Option<&str>,
        ) -> Result<Vec<RememberedDecision>, JournalError> {
            let rows: Vec<RememberedRow> = sqlx::query_as(REMEMBERED)
                .bind(clean(tenant))
                .bind(project.map(clean))
                .fetch_all(&self.$pool)
                .await?;
            Ok(rows.into_iter().map(RememberedDecision::from).collect())
        }

        /// A tenant's sessions, newest first.
        pub(crate) async fn read_sessions(
            &self,
            tenant: &str,
            filter: &SessionFilter,
        ) -> Result<Vec<SessionRecord>, JournalError> {
            let mut builder = sqlx::QueryBuilder::<$db>::new(SESSION_SELECT);
            builder.push(" WHERE tenant = ").push_bind(clean(tenant));
            if let Some(status) = &filter.status {
                builder.push(" AND status = ").push_bind(clean(status));
            }
            if let Some((at, id)) = &filter.after {
                builder
                    .push(" AND (created_at < ")
                    .push_bind(*at)
                    .push(" OR (created_at = ")
                    .push_bind(*at)
                    .push(" AND id < ")
                    .push_bind(clean(id))
                    .push("))");
            }
            builder.push(" ORDER BY created_at DESC, id DESC LIMIT ").push_bind(query_limit(filter.limit));
            let rows: Vec<SessionRow> = builder.build_query_as().fetch_all(&self.$pool).await?;
            rows.into_iter().map(SessionRecord::try_from).collect()
        }

        /// The registered instances.
        pub(crate) async fn read_instances(&self) -> Result<Vec<crate::InstanceRecord>, JournalError> {
            let rows: Vec<crate::rows::InstanceRecordRow> = sqlx::query_as(
                "SELECT id, host, pid, started_at, heartbeat_at, version, address, in_flight FROM journal_instances \
                 ORDER BY started_at",
            )
            .fetch_all(&self.$pool)
            .await?;
            Ok(rows.into_iter().map(Into::into).collect())
        }

        /// An unexpired console session.
        pub(crate) async fn read_console_session(
            &self,
            digest: &str,
            now: i64,
        ) -> Result<Option<crate::ConsoleSession>, JournalError> {
            let mut builder = sqlx::QueryBuilder::<$db>::new(
                "SELECT digest, tenant, principal, role, csrf, created_at, expires_at FROM console_sessions WHERE digest = ",
            );
            builder.push_bind(clean(digest)).push(" AND expires_at > ").push_bind(now);
            let row: Option<crate::rows::ConsoleSessionRow> =
                builder.build_query_as().fetch_optional(&self.$pool).await?;
            Ok(row.map(Into::into))
        }

        /// One session.
        pub(crate) async fn read_session(
            &self,
            tenant: &str,
            id: &str,
        ) -> Result<Option<SessionRecord>, JournalError> {
            let row: Option<SessionRow> = sqlx::query_as(GET_SESSION)
                .bind(clean(tenant))
                .bind(clean(id))
                .fetch_optional(&self.$pool)
                .await?;
            row.map(SessionRecord::try_from).transpose()
        }
    };
}

/// A knowledge store's reads of chunks, as `KnowledgeStore` methods. `$scope` is how the
/// by-id query names its tenant and base columns (SQLite writes `+tenant` to keep its planner off
/// the source index, which would scan the base).
macro_rules! knowledge_reads {
    ($db:ty, $pool:ident, $tenant:literal, $base:literal) => {
        fn base_chunks<'a>(
            &'a self,
            tenant: &'a str,
            base: &'a str,
        ) -> BoxFuture<'a, Result<Vec<StoredChunk>, StorageError>> {
            Box::pin(async move {
                let rows: Vec<ChunkRow> = sqlx::query_as(BASE_CHUNKS)
                    .bind(text(tenant))
                    .bind(text(base))
                    .fetch_all(&self.$pool)
                    .await
                    .map_err(sqlx_backend)?;
                Ok(rows.into_iter().map(ChunkRow::into_stored).collect())
            })
        }

        fn chunks_by_id<'a>(
            &'a self,
            tenant: &'a str,
            base: &'a str,
            ids: &'a [i64],
        ) -> BoxFuture<'a, Result<Vec<StoredChunk>, StorageError>> {
            Box::pin(async move {
                if ids.is_empty() {
                    return Ok(Vec::new());
                }
                let mut query = QueryBuilder::<$db>::new(concat!(
                    "SELECT ",
                    chunk_columns!(),
                    " FROM kb_chunks WHERE ",
                    $tenant,
                    " = "
                ));
                query
                    .push_bind(text(tenant))
                    .push(concat!(" AND ", $base, " = "))
                    .push_bind(text(base))
                    .push(" AND id IN (");
                let mut separated = query.separated(", ");
                for id in ids.iter().take(1_000) {
                    separated.push_bind(*id);
                }
                query.push(")");
                let rows: Vec<ChunkRow> =
                    query.build_query_as().fetch_all(&self.$pool).await.map_err(sqlx_backend)?;
                Ok(rows.into_iter().map(ChunkRow::into_stored).collect())
            })
        }

        fn read_chunks<'a>(
            &'a self,
            tenant: &'a str,
            base: &'a str,
            path: &'a str,
            first: u32,
            last: u32,
        ) -> BoxFuture<'a, Result<Vec<Chunk>, StorageError>> {
            Box::pin(async move {
                let rows: Vec<ChunkRow> = sqlx::query_as(READ_CHUNKS)
                    .bind(text(tenant))
                    .bind(text(base))
                    .bind(text(path))
                    .bind(i64::from(first))
                    .bind(i64::from(last))
                    .fetch_all(&self.$pool)
                    .await
                    .map_err(sqlx_backend)?;
                Ok(rows.into_iter().map(|row| row.into_stored().chunk).collect())
            })
        }
    };
}

/// A record store's reads by id and of vectors, as `RecordStore` methods.
macro_rules! record_reads {
    ($pool:ident) => {
        fn get_record<'a>(
            &'a self,
            owner: &'a tool_core::storage::Owner,
            collection: &'a str,
            id: &'a str,
        ) -> futures::future::BoxFuture<
            'a,
            Result<Option<tool_core::storage::Record>, tool_core::storage::StorageError>,
        > {
            Box::pin(async move {
                use crate::records::text;
                let row: Option<crate::records::RecordRow> = sqlx::query_as(GET_RECORD)
                    .bind(text(&owner.tenant))
                    .bind(text(&owner.person))
                    .bind(text(collection))
                    .bind(text(id))
                    .fetch_optional(&self.$pool)
                    .await
                    .map_err(crate::records::sqlx_backend)?;
                Ok(row.map(crate::records::RecordRow::into_record))
            })
        }

        fn record_vectors<'a>(
            &'a self,
            query: &'a tool_core::storage::RecordQuery,
            model: &'a str,
        ) -> futures::future::BoxFuture<'a, Result<Vec<(String, Vec<f32>)>, tool_core::storage::StorageError>>
        {
            Box::pin(async move {
                use crate::records::text;
                let rows: Vec<(String, Vec<u8>)> = bind_record_filter!(sqlx::query_as(RECORD_VECTORS), query)
                    .bind(text(model))
                    .fetch_all(&self.$pool)
                    .await
                    .map_err(crate::records::sqlx_backend)?;
                Ok(rows.into_iter().map(|(id, bytes)| (id, tool_core::embed::from_bytes(&bytes))).collect())
            })
        }
    };
}
