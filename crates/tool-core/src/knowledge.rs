//! The knowledge store the knowledge-base tool receives: named bases of source files, each cut
//! into chunks that keep their source path, heading trail and line range, per tenant and person.
//! The store keeps them; the tool ranks them (its own BM25 index, built from
//! [`KnowledgeStore::base_chunks`] and rebuilt when a base's [`KnowledgeBase::version`] moves).
//!
//! A base belongs to a tenant's person, or to the whole tenant when shared (an operator's or an
//! approver's). Sources are synchronised by content hash: [`KnowledgeStore::source_hashes`] says
//! what is stored, [`KnowledgeStore::apply_sources`] replaces changed sources and drops removed
//! ones, in batches the caller sizes. The chunks of a source partition its lines, so its text can
//! be read back from the store even where the file is not on this machine.
//!
//! As with records (`crate::storage`), the apps implement the store on the journal's database.

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

use crate::storage::StorageError;

/// A knowledge base.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KnowledgeBase {
    /// Its id (`kb` and hex digits), unique in its tenant.
    pub id: String,
    /// The tenant.
    pub tenant: String,
    /// The person it belongs to; `None` when shared with the whole tenant.
    pub person: Option<String>,
    /// Its name, unique among the person's (or the tenant's shared) bases.
    pub name: String,
    /// The folders or files it was added from, as given.
    pub roots: Vec<String>,
    /// How many sources it holds.
    pub sources: u64,
    /// How many chunks.
    pub chunks: u64,
    /// The size of its sources' text, in bytes.
    pub bytes: u64,
    /// When it was made, in milliseconds since the epoch.
    pub created_at: i64,
    /// When it was last synchronised.
    pub updated_at: i64,
    /// Bumped by every change to its sources: an index built at one version is stale at another.
    pub version: i64,
    /// The embeddings model its chunks' vectors come from, when they have vectors.
    pub embedding_model: Option<String>,
}

/// A base to make (or whose roots to replace, when the owner already has one by that name).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewBase {
    /// The tenant.
    pub tenant: String,
    /// Its person; `None` to share it with the tenant.
    pub person: Option<String>,
    /// Its name.
    pub name: String,
    /// Where it is added from.
    pub roots: Vec<String>,
    /// The embeddings model its chunks' vectors come from, when they have vectors.
    pub embedding_model: Option<String>,
}

/// A source as stored: its path and content hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceState {
    /// The path it was read from.
    pub path: String,
    /// The hash of its bytes.
    pub hash: String,
}

/// A piece of a source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chunk {
    /// Its place in the source, from 0.
    pub ordinal: u32,
    /// The headings it sits under, outermost first, joined by ` > `.
    pub heading: String,
    /// Its first line, from 1.
    pub first_line: u32,
    /// Its last line.
    pub last_line: u32,
    /// Its text: the source's lines `first_line..=last_line` (as extracted), each ending in `\n`.
    pub text: String,
}

/// A source to store, replacing what the base held under its path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewSource {
    /// The path it was read from.
    pub path: String,
    /// The hash of its bytes.
    pub hash: String,
    /// Its kind (`markdown`, `text`, `html`, `code`, `pdf`).
    pub kind: String,
    /// Its chunks, in order.
    pub chunks: Vec<Chunk>,
    /// Each chunk's vector (by the base's embeddings model), or none at all.
    pub embeddings: Vec<Vec<f32>>,
}

/// A stored chunk, with its id in the store and its source's path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredChunk {
    /// Its id, unique in the store.
    pub id: i64,
    /// Its source's path.
    pub path: String,
    /// The chunk.
    pub chunk: Chunk,
    /// Its vector, when the base has them (only [`KnowledgeStore::base_chunks`] reads it).
    pub embedding: Option<Vec<f32>>,
}

/// Knowledge bases and their chunks.
pub trait KnowledgeStore: Send + Sync + std::fmt::Debug {
    /// Makes a base, or replaces the roots (and embeddings model) of the owner's base of that
    /// name.
    fn put_base(&self, base: NewBase) -> BoxFuture<'_, Result<KnowledgeBase, StorageError>>;

    /// The bases of a tenant a person sees (their own and the shared ones), or all of the
    /// tenant's with `person` `None`; by name.
    fn list_bases<'a>(
        &'a self,
        tenant: &'a str,
        person: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<KnowledgeBase>, StorageError>>;

    /// Removes a base and everything in it; whether there was one.
    fn remove_base<'a>(&'a self, tenant: &'a str, id: &'a str) -> BoxFuture<'a, Result<bool, StorageError>>;

    /// The sources a base holds.
    fn source_hashes<'a>(
        &'a self,
        tenant: &'a str,
        base: &'a str,
    ) -> BoxFuture<'a, Result<Vec<SourceState>, StorageError>>;

    /// Stores `put` (each replacing the source of its path) and drops the sources of `remove`, as
    /// one step, and marks the base synchronised.
    fn apply_sources<'a>(
        &'a self,
        tenant: &'a str,
        base: &'a str,
        put: Vec<NewSource>,
        remove: Vec<String>,
    ) -> BoxFuture<'a, Result<(), StorageError>>;

    /// Every chunk of a base, by id.
    fn base_chunks<'a>(
        &'a self,
        tenant: &'a str,
        base: &'a str,
    ) -> BoxFuture<'a, Result<Vec<StoredChunk>, StorageError>>;

    /// The chunks of a base with these ids (those that still exist), in no order.
    fn chunks_by_id<'a>(
        &'a self,
        tenant: &'a str,
        base: &'a str,
        ids: &'a [i64],
    ) -> BoxFuture<'a, Result<Vec<StoredChunk>, StorageError>>;

    /// The chunks of one source that overlap lines `first..=last`, in order.
    fn read_chunks<'a>(
        &'a self,
        tenant: &'a str,
        base: &'a str,
        path: &'a str,
        first: u32,
        last: u32,
    ) -> BoxFuture<'a, Result<Vec<Chunk>, StorageError>>;
}
