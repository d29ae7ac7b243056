//! Knowledge bases on Postgres.

use futures::future::BoxFuture;
use sqlx::{Postgres, QueryBuilder};
use tool_core::knowledge::{
    Chunk, KnowledgeBase, KnowledgeStore, NewBase, NewSource, SourceState, StoredChunk,
};
use tool_core::storage::StorageError;

use super::PostgresJournal;
use crate::knowledge::{BaseRow, ChunkRow, chunk_text, new_base_id};
use crate::records::{sqlx_backend, text};

const PUT_BASE: &str = "INSERT INTO kb_bases (tenant, id, person, name, roots, embedding_model, created_at, updated_at) \
     VALUES ($1, $2, $3, $4, $5, $7, $6, $6) \
     ON CONFLICT (tenant, person, name) DO UPDATE SET roots = excluded.roots, \
     embedding_model = excluded.embedding_model, updated_at = excluded.updated_at";
const LOCK_BASE: &str = "SELECT id FROM kb_bases WHERE tenant = $1 AND id = $2 FOR UPDATE";
const REMOVE_CHUNKS: &str = "DELETE FROM kb_chunks WHERE tenant = $1 AND base = $2";
const REMOVE_SOURCES: &str = "DELETE FROM kb_sources WHERE tenant = $1 AND base = $2";
const REMOVE_BASE: &str = "DELETE FROM kb_bases WHERE tenant = $1 AND id = $2";
const REMOVE_SOURCE_CHUNKS: &str = "DELETE FROM kb_chunks WHERE tenant = $1 AND base = $2 AND path = ANY($3)";
const REMOVE_SOURCE: &str = "DELETE FROM kb_sources WHERE tenant = $1 AND base = $2 AND path = ANY($3)";
const TOUCH_BASE: &str = touch_base!("$1", "$2", "$3");

const BASE_BY_NAME: &str = concat!(
    "SELECT ",
    base_columns!(),
    " FROM kb_bases b WHERE b.tenant = $1 AND b.person = $2 AND b.name = $3"
);
const LIST_BASES: &str = concat!(
    "SELECT ",
    base_columns!(),
    " FROM kb_bases b WHERE b.tenant = $1 AND ($2::text IS NULL OR b.person = $2 OR b.person = '') \
     ORDER BY b.name, b.person"
);
const SOURCE_HASHES: &str = "SELECT path, hash FROM kb_sources WHERE tenant = $1 AND base = $2 ORDER BY path";
const READ_CHUNKS: &str = concat!(
    "SELECT ",
    chunk_columns!(),
    " FROM kb_chunks WHERE tenant = $1 AND base = $2 AND path = $3 AND last_line >= $4 AND first_line <= $5 \
     ORDER BY ordinal"
);
const BASE_CHUNKS: &str = concat!(
    "SELECT ",
    chunk_columns!(),
    ", embedding FROM kb_chunks WHERE tenant = $1 AND base = $2 ORDER BY id"
);

/// Chunks per insert statement (8 parameters each, under Postgres's 65 535).
const CHUNKS_PER_INSERT: usize = 1_000;

impl KnowledgeStore for PostgresJournal {
    fn put_base(&self, base: NewBase) -> BoxFuture<'_, Result<KnowledgeBase, StorageError>> {
        Box::pin(async move {
            let tenant = text(&base.tenant);
            let person = base.person.as_deref().map(text).unwrap_or_default();
            let name = text(&base.name);
            let roots = serde_json::to_string(&base.roots.iter().map(|root| text(root)).collect::<Vec<_>>())
                .map_err(|error| StorageError::Backend(error.to_string()))?;
            sqlx::query(PUT_BASE)
                .bind(&tenant)
                .bind(new_base_id()?)
                .bind(&person)
                .bind(&name)
                .bind(roots)
                .bind(crate::rows::now_ms())
                .bind(base.embedding_model.as_deref().map(text))
                .execute(&self.pool)
                .await
                .map_err(sqlx_backend)?;
            let row: Option<BaseRow> = sqlx::query_as(BASE_BY_NAME)
                .bind(&tenant)
                .bind(&person)
                .bind(&name)
                .fetch_optional(&self.pool)
                .await
                .map_err(sqlx_backend)?;
            row.map(BaseRow::into_base).ok_or_else(|| StorageError::Backend("the stored base is gone".into()))
        })
    }

    fn list_bases<'a>(
        &'a self,
        tenant: &'a str,
        person: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<KnowledgeBase>, StorageError>> {
        Box::pin(async move {
            let rows: Vec<BaseRow> = sqlx::query_as(LIST_BASES)
                .bind(text(tenant))
                .bind(person.map(text))
                .fetch_all(&self.pool)
                .await
                .map_err(sqlx_backend)?;
            Ok(rows.into_iter().map(BaseRow::into_base).collect())
        })
    }

    fn remove_base<'a>(&'a self, tenant: &'a str, id: &'a str) -> BoxFuture<'a, Result<bool, StorageError>> {
        Box::pin(async move {
            let (tenant, id) = (text(tenant), text(id));
            let mut tx = self.pool.begin().await.map_err(sqlx_backend)?;
            for sql in [LOCK_BASE, REMOVE_CHUNKS, REMOVE_SOURCES] {
                sqlx::query(sql).bind(&tenant).bind(&id).execute(&mut *tx).await.map_err(sqlx_backend)?;
            }
            let done = sqlx::query(REMOVE_BASE)
                .bind(&tenant)
                .bind(&id)
                .execute(&mut *tx)
                .await
                .map_err(sqlx_backend)?;
            tx.commit().await.map_err(sqlx_backend)?;
            Ok(done.rows_affected() == 1)
        })
    }

    fn source_hashes<'a>(
        &'a self,
        tenant: &'a str,
        base: &'a str,
    ) -> BoxFuture<'a, Result<Vec<SourceState>, StorageError>> {
        Box::pin(async move {
            let rows: Vec<(String, String)> = sqlx::query_as(SOURCE_HASHES)
                .bind(text(tenant))
                .bind(text(base))
                .fetch_all(&self.pool)
                .await
                .map_err(sqlx_backend)?;
            Ok(rows.into_iter().map(|(path, hash)| SourceState { path, hash }).collect())
        })
    }

    fn apply_sources<'a>(
        &'a self,
        tenant: &'a str,
        base: &'a str,
        put: Vec<NewSource>,
        remove: Vec<String>,
    ) -> BoxFuture<'a, Result<(), StorageError>> {
        Box::pin(async move {
            let (tenant, base) = (text(tenant), text(base));
            let now = crate::rows::now_ms();
            let mut tx = self.pool.begin().await.map_err(sqlx_backend)?;
            // The base's row, locked: a removal waits for this step, or this step finds it gone.
            let found = sqlx::query(LOCK_BASE)
                .bind(&tenant)
                .bind(&base)
                .fetch_optional(&mut *tx)
                .await
                .map_err(sqlx_backend)?;
            if found.is_none() {
                return Err(StorageError::NotFound(base));
            }
            let paths: Vec<String> = remove
                .iter()
                .map(|path| text(path))
                .chain(put.iter().map(|source| text(&source.path)))
                .collect();
            for sql in [REMOVE_SOURCE_CHUNKS, REMOVE_SOURCE] {
                sqlx::query(sql)
                    .bind(&tenant)
                    .bind(&base)
                    .bind(&paths)
                    .execute(&mut *tx)
                    .await
                    .map_err(sqlx_backend)?;
            }
            if !put.is_empty() {
                let mut sources = QueryBuilder::<Postgres>::new(
                    "INSERT INTO kb_sources (tenant, base, path, hash, kind, bytes, chunks, updated_at) ",
                );
                sources.push_values(&put, |mut row, source| {
                    let bytes: i64 = source.chunks.iter().map(|chunk| chunk.text.len() as i64).sum();
                    row.push_bind(&tenant)
                        .push_bind(&base)
                        .push_bind(text(&source.path))
                        .push_bind(text(&source.hash))
                        .push_bind(text(&source.kind))
                        .push_bind(bytes)
                        .push_bind(source.chunks.len() as i64)
                        .push_bind(now);
                });
                sources.build().execute(&mut *tx).await.map_err(sqlx_backend)?;
            }
            let chunks: Vec<(String, &Chunk, Option<Vec<u8>>)> = put
                .iter()
                .flat_map(|source| {
                    source.chunks.iter().enumerate().map(|(index, chunk)| {
                        let vector = source.embeddings.get(index).map(|v| tool_core::embed::to_bytes(v));
                        (text(&source.path), chunk, vector)
                    })
                })
                .collect();
            for group in chunks.chunks(CHUNKS_PER_INSERT) {
                let mut insert = QueryBuilder::<Postgres>::new(
                    "INSERT INTO kb_chunks (tenant, base, path, ordinal, heading, first_line, last_line, text, embedding) ",
                );
                insert.push_values(group, |mut row, (path, chunk, vector)| {
                    let (heading, body) = chunk_text(chunk);
                    row.push_bind(&tenant)
                        .push_bind(&base)
                        .push_bind(path)
                        .push_bind(i64::from(chunk.ordinal))
                        .push_bind(heading)
                        .push_bind(i64::from(chunk.first_line))
                        .push_bind(i64::from(chunk.last_line))
                        .push_bind(body)
                        .push_bind(vector);
                });
                insert.build().execute(&mut *tx).await.map_err(sqlx_backend)?;
            }
            sqlx::query(TOUCH_BASE)
                .bind(&tenant)
                .bind(&base)
                .bind(now)
                .execute(&mut *tx)
                .await
                .map_err(sqlx_backend)?;
            tx.commit().await.map_err(sqlx_backend)
        })
    }

    knowledge_reads!(Postgres, pool, "tenant", "base");
}
