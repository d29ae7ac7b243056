//! Knowledge bases (`tool_core::knowledge`) on the journal's database: what both backends share.

use tool_core::knowledge::{Chunk, KnowledgeBase, StoredChunk};
use tool_core::storage::StorageError;

use crate::rows::clean;

/// A base as its row and its sources' sums read.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct BaseRow {
    pub(crate) tenant: String,
    pub(crate) id: String,
    pub(crate) person: String,
    pub(crate) name: String,
    pub(crate) roots: String,
    pub(crate) sources: i64,
    pub(crate) chunks: i64,
    pub(crate) bytes: i64,
    pub(crate) created_at: i64,
    pub(crate) updated_at: i64,
    pub(crate) version: i64,
    pub(crate) embedding_model: Option<String>,
}

impl BaseRow {
    pub(crate) fn into_base(self) -> KnowledgeBase {
        KnowledgeBase {
            id: self.id,
            tenant: self.tenant,
            person: Some(self.person).filter(|person| !person.is_empty()),
            name: self.name,
            roots: serde_json::from_str(&self.roots).unwrap_or_default(),
            sources: u64::try_from(self.sources).unwrap_or(0),
            chunks: u64::try_from(self.chunks).unwrap_or(0),
            bytes: u64::try_from(self.bytes).unwrap_or(0),
            created_at: self.created_at,
            updated_at: self.updated_at,
            version: self.version,
            embedding_model: self.embedding_model,
        }
    }
}

/// The columns a base query selects (`b` is the bases table).
macro_rules! base_columns {
    () => {
        "b.tenant, b.id, b.person, b.name, b.roots, b.created_at, b.updated_at, b.version, b.sources, \
         b.chunks, b.bytes, b.embedding_model"
    };
}

/// A base's sums, refreshed with its version when its sources change (parameters: tenant, base,
/// now).
macro_rules! touch_base {
    ($tenant:literal, $base:literal, $now:literal) => {
        concat!(
            "UPDATE kb_bases SET updated_at = ",
            $now,
            ", version = version + 1, ",
            "sources = (SELECT count(*) FROM kb_sources s WHERE s.tenant = ",
            $tenant,
            " AND s.base = ",
            $base,
            "), ",
            "chunks = (SELECT COALESCE(SUM(s.chunks), 0) FROM kb_sources s WHERE s.tenant = ",
            $tenant,
            " AND s.base = ",
            $base,
            "), ",
            "bytes = (SELECT COALESCE(SUM(s.bytes), 0) FROM kb_sources s WHERE s.tenant = ",
            $tenant,
            " AND s.base = ",
            $base,
            ") ",
            "WHERE tenant = ",
            $tenant,
            " AND id = ",
            $base
        )
    };
}

/// The columns a chunk query selects.
macro_rules! chunk_columns {
    () => {
        "id, path, ordinal, heading, first_line, last_line, text"
    };
}

/// A chunk as a row holds it, with its id and the path it belongs to.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ChunkRow {
    pub(crate) id: i64,
    pub(crate) path: String,
    pub(crate) ordinal: i64,
    pub(crate) heading: String,
    pub(crate) first_line: i64,
    pub(crate) last_line: i64,
    pub(crate) text: String,
    /// Read only where a query selects it.
    #[sqlx(default)]
    pub(crate) embedding: Option<Vec<u8>>,
}

impl ChunkRow {
    pub(crate) fn into_stored(self) -> StoredChunk {
        let number = |value: i64| u32::try_from(value).unwrap_or(0);
        StoredChunk {
            id: self.id,
            path: self.path,
            chunk: Chunk {
                ordinal: number(self.ordinal),
                heading: self.heading,
                first_line: number(self.first_line),
                last_line: number(self.last_line),
                text: self.text,
            },
            embedding: self.embedding.as_deref().map(tool_core::embed::from_bytes),
        }
    }
}

/// A fresh base id: `kb` and 96 random bits in hex.
pub(crate) fn new_base_id() -> Result<String, StorageError> {
    let mut bytes = [0u8; 12];
    getrandom::fill(&mut bytes).map_err(|error| StorageError::Backend(format!("no random id: {error}")))?;
    Ok(format!("kb{}", bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()))
}

/// A chunk's text columns, cleaned as every journal row.
pub(crate) fn chunk_text(chunk: &Chunk) -> (String, String) {
    (clean(&chunk.heading), clean(&chunk.text))
}
