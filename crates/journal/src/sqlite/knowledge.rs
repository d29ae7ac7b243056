//! Knowledge bases on SQLite: writes as writer operations, reads on the read pool.

use futures::future::BoxFuture;
use sqlx::{QueryBuilder, Sqlite};
use tool_core::knowledge::{
    Chunk, KnowledgeBase, KnowledgeStore, NewBase, NewSource, SourceState, StoredChunk,
};
use tool_core::storage::StorageError;

use super::{Op, Outcome, SqliteJournal};
use crate::knowledge::{BaseRow, ChunkRow, chunk_text, new_base_id};
use crate::records::{backend, sqlx_backend, text};

const PUT_BASE: &str = "INSERT INTO kb_bases (tenant, id, person, name, roots, embedding_model, created_at, updated_at) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?7, ?6, ?6) \
     ON CONFLICT (tenant, person, name) DO UPDATE SET roots = excluded.roots, \
     embedding_model = excluded.embedding_model, updated_at = excluded.updated_at";
const BASE_EXISTS: &str = "SELECT count(*) FROM kb_bases WHERE tenant = ?1 AND id = ?2";
const REMOVE_CHUNKS: &str = "DELETE FROM kb_chunks WHERE tenant = ?1 AND base = ?2";
const REMOVE_SOURCES: &str = "DELETE FROM kb_sources WHERE tenant = ?1 AND base = ?2";
const REMOVE_BASE: &str = "DELETE FROM kb_bases WHERE tenant = ?1 AND id = ?2";
const REMOVE_SOURCE_CHUNKS: &str = "DELETE FROM kb_chunks WHERE tenant = ?1 AND base = ?2 AND path = ?3";
const REMOVE_SOURCE: &str = "DELETE FROM kb_sources WHERE tenant = ?1 AND base = ?2 AND path = ?3";
const INSERT_SOURCE: &str = "INSERT INTO kb_sources (tenant, base, path, hash, kind, bytes, chunks, updated_at) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";
const INSERT_CHUNK: &str = "INSERT INTO kb_chunks (tenant, base, path, ordinal, heading, first_line, last_line, text, \
     embedding) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)";
const TOUCH_BASE: &str = touch_base!("?1", "?2", "?3");

const BASE_BY_NAME: &str = concat!(
    "SELECT ",
    base_columns!(),
    " FROM kb_bases b WHERE b.tenant = ?1 AND b.person = ?2 AND b.name = ?3"
);
const LIST_BASES: &str = concat!(
    "SELECT ",
    base_columns!(),
    " FROM kb_bases b WHERE b.tenant = ?1 AND (?2 IS NULL OR b.person = ?2 OR b.person = '') \
     ORDER BY b.name, b.person"
);
const SOURCE_HASHES: &str = "SELECT path, hash FROM kb_sources WHERE tenant = ?1 AND base = ?2 ORDER BY path";
const READ_CHUNKS: &str = concat!(
    "SELECT ",
    chunk_columns!(),
    " FROM kb_chunks WHERE tenant = ?1 AND base = ?2 AND path = ?3 AND last_line >= ?4 AND first_line <= ?5 \
     ORDER BY ordinal"
);
const BASE_CHUNKS: &str = concat!(
    "SELECT ",
    chunk_columns!(),
    ", embedding FROM kb_chunks WHERE tenant = ?1 AND base = ?2 ORDER BY id"
);

/// Runs a knowledge-base operation of the writer.
pub(super) fn run(conn: &rusqlite::Connection, op: &Op) -> rusqlite::Result<Outcome> {
    let run = |sql: &str, values: &[&dyn rusqlite::ToSql]| conn.prepare_cached(sql)?.execute(values);
    Ok(match op {
        Op::PutBase { values: [tenant, id, person, name, roots], model, now } => {
            run(PUT_BASE, &[tenant, id, person, name, roots, now, model])?;
            Outcome::Done
        }
        Op::RemoveBase { tenant, id } => {
            run(REMOVE_CHUNKS, &[tenant, id])?;
            run(REMOVE_SOURCES, &[tenant, id])?;
            Outcome::Moved(run(REMOVE_BASE, &[tenant, id])? == 1)
        }
        Op::ApplySources { tenant, base, put, remove, now } => {
            let exists: i64 =
                conn.prepare_cached(BASE_EXISTS)?.query_row([tenant, base], |row| row.get(0))?;
            if exists == 0 {
                return Ok(Outcome::Moved(false));
            }
            for path in remove.iter().chain(put.iter().map(|source| &source.path)) {
                run(REMOVE_SOURCE_CHUNKS, &[tenant, base, path])?;
                run(REMOVE_SOURCE, &[tenant, base, path])?;
            }
            let mut insert = conn.prepare_cached(INSERT_CHUNK)?;
            for source in put {
                let path = text(&source.path);
                let bytes: i64 = source.chunks.iter().map(|chunk| chunk.text.len() as i64).sum();
                let count = source.chunks.len() as i64;
                run(
                    INSERT_SOURCE,
                    &[tenant, base, &path, &text(&source.hash), &text(&source.kind), &bytes, &count, now],
                )?;
                for (index, chunk) in source.chunks.iter().enumerate() {
                    let (heading, body) = chunk_text(chunk);
                    let vector = source.embeddings.get(index).map(|v| tool_core::embed::to_bytes(v));
                    insert.execute(rusqlite::params![
                        tenant,
                        base,
                        path,
                        i64::from(chunk.ordinal),
                        heading,
                        i64::from(chunk.first_line),
                        i64::from(chunk.last_line),
                        body,
                        vector
                    ])?;
                }
            }
            run(TOUCH_BASE, &[tenant, base, now])?;
            Outcome::Moved(true)
        }
        _ => Outcome::Done,
    })
}

impl KnowledgeStore for SqliteJournal {
    fn put_base(&self, base: NewBase) -> BoxFuture<'_, Result<KnowledgeBase, StorageError>> {
        Box::pin(async move {
            let tenant = text(&base.tenant);
            let person = base.person.as_deref().map(text).unwrap_or_default();
            let name = text(&base.name);
            let roots = serde_json::to_string(&base.roots.iter().map(|root| text(root)).collect::<Vec<_>>())
                .map_err(|error| StorageError::Backend(error.to_string()))?;
            let values = [tenant.clone(), new_base_id()?, person.clone(), name.clone(), roots];
            let model = base.embedding_model.as_deref().map(text);
            self.write_done(Op::PutBase { values, model, now: crate::rows::now_ms() })
                .await
                .map_err(backend)?;
            let row: Option<BaseRow> = sqlx::query_as(BASE_BY_NAME)
                .bind(&tenant)
                .bind(&person)
                .bind(&name)
                .fetch_optional(&self.reads)
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
                .fetch_all(&self.reads)
                .await
                .map_err(sqlx_backend)?;
            Ok(rows.into_iter().map(BaseRow::into_base).collect())
        })
    }

    fn remove_base<'a>(&'a self, tenant: &'a str, id: &'a str) -> BoxFuture<'a, Result<bool, StorageError>> {
        Box::pin(async move {
            self.write_moved(Op::RemoveBase { tenant: text(tenant), id: text(id) }).await.map_err(backend)
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
                .fetch_all(&self.reads)
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
            let op = Op::ApplySources {
                tenant: text(tenant),
                base: text(base),
                put,
                remove: remove.iter().map(|path| text(path)).collect(),
                now: crate::rows::now_ms(),
            };
            if self.write_moved(op).await.map_err(backend)? {
                Ok(())
            } else {
                Err(StorageError::NotFound(base.to_owned()))
            }
        })
    }

    knowledge_reads!(Sqlite, reads, "+tenant", "+base");
}
