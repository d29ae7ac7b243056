//! The storage service tools that keep data receive (memory today; documents, knowledge bases and
//! checkpoints after it): records in named collections, each owned by a tenant and a person and
//! optionally tied to a project, searchable by full text.
//!
//! Tools never see a database: the apps put an `Arc<dyn RecordStore>` in the [`crate::Services`]
//! they build runtimes from, implemented on the journal's database (SQLite by default, Postgres
//! across instances), so a tool works the same on both.

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Who a record belongs to: a tenant's person, and optionally one project of theirs.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Owner {
    /// The tenant.
    pub tenant: String,
    /// The person (a server key's name; the local user in the terminal app).
    pub person: String,
}

impl Owner {
    /// Whom a call acts for: its session's tenant (`local` without one) and its user (the key's
    /// name on a server with keys, the local user in the terminal app; `local` without one).
    pub fn of_call(context: &crate::CallContext) -> Self {
        Self {
            tenant: context.sandbox.tenant.clone().unwrap_or_else(|| "local".into()),
            person: context.user_id.clone().filter(|user| !user.is_empty()).unwrap_or_else(|| "local".into()),
        }
    }
}

/// A record to store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewRecord {
    /// The collection (`memory`, `documents`, …): each tool keeps to its own.
    pub collection: String,
    /// Its owner.
    pub owner: Owner,
    /// The project it belongs to; `None` for all of the person's projects.
    pub project: Option<String>,
    /// A short label the collection gives it (a memory's category).
    pub tag: String,
    /// A short title.
    pub title: String,
    /// The text.
    pub body: String,
    /// Anything else the tool keeps, as JSON.
    pub metadata: Value,
}

/// A stored record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Its id, unique within its tenant.
    pub id: String,
    /// Its collection.
    pub collection: String,
    /// Its owner.
    pub owner: Owner,
    /// Its project, if tied to one.
    pub project: Option<String>,
    /// Its tag.
    pub tag: String,
    /// Its title.
    pub title: String,
    /// Its text.
    pub body: String,
    /// The tool's own fields.
    pub metadata: Value,
    /// When it was made, in milliseconds since the epoch.
    pub created_at: i64,
    /// When it last changed.
    pub updated_at: i64,
}

/// Changes to a record; fields left `None` stay.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RecordPatch {
    /// A new tag.
    pub tag: Option<String>,
    /// A new title.
    pub title: Option<String>,
    /// A new text.
    pub body: Option<String>,
    /// New metadata (replaces the old).
    pub metadata: Option<Value>,
}

/// Which of a person's projects a query covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProjectScope {
    /// Every record, whatever its project.
    Any,
    /// Records tied to no project, and those of this one.
    With(String),
    /// Only records tied to no project.
    None,
}

/// A query over one person's records of one collection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordQuery {
    /// The collection.
    pub collection: String,
    /// Whose records.
    pub owner: Owner,
    /// Which projects.
    pub project: ProjectScope,
    /// Only this tag.
    pub tag: Option<String>,
    /// Words to find (full text, best first); `None` lists the newest first.
    pub text: Option<String>,
    /// The most records to return.
    pub limit: u32,
}

/// A record a query found, with its relevance (higher is better; 0 when listing).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordHit {
    /// The record.
    pub record: Record,
    /// Its relevance.
    pub score: f64,
}

/// Why a storage operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StorageError {
    /// The owner holds as many records of the collection as allowed.
    #[error("the limit of {limit} records is reached")]
    Full {
        /// The limit.
        limit: u64,
    },
    /// No such record for this owner.
    #[error("no record `{0}`")]
    NotFound(String),
    /// The database failed.
    #[error("storage failed: {0}")]
    Backend(String),
}

/// A record's id and its vector.
pub type RecordVector = (String, Vec<f32>);

/// Records in collections, per owner, with full-text search.
pub trait RecordStore: Send + Sync + std::fmt::Debug {
    /// Stores a record under a fresh id, unless its owner already holds `limit` records of its
    /// collection (counted and inserted as one step).
    fn insert_record(&self, record: NewRecord, limit: u64) -> BoxFuture<'_, Result<Record, StorageError>>;

    /// Changes a record of `owner`'s.
    fn update_record<'a>(
        &'a self,
        owner: &'a Owner,
        collection: &'a str,
        id: &'a str,
        patch: RecordPatch,
    ) -> BoxFuture<'a, Result<Record, StorageError>>;

    /// Removes a record of `owner`'s; whether there was one.
    fn remove_record<'a>(
        &'a self,
        owner: &'a Owner,
        collection: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, Result<bool, StorageError>>;

    /// One record of `owner`'s.
    fn get_record<'a>(
        &'a self,
        owner: &'a Owner,
        collection: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Record>, StorageError>>;

    /// Records matching a query.
    fn find_records(&self, query: RecordQuery) -> BoxFuture<'_, Result<Vec<RecordHit>, StorageError>>;

    /// Sets (or clears) a record's vector: the embedding of its text by `model`.
    fn set_record_vector<'a>(
        &'a self,
        owner: &'a Owner,
        collection: &'a str,
        id: &'a str,
        vector: Option<(&'a str, Vec<f32>)>,
    ) -> BoxFuture<'a, Result<(), StorageError>>;

    /// The vectors by `model` of the records a query covers (its text and limit aside): record
    /// id and vector, for a search by meaning over one person's records.
    fn record_vectors<'a>(
        &'a self,
        query: &'a RecordQuery,
        model: &'a str,
    ) -> BoxFuture<'a, Result<Vec<RecordVector>, StorageError>>;
}

/// The words of a free-text query, as both full-text engines take them: letters, digits and `_`
/// runs, lowercased, at most 32 (the rest of the text is punctuation to them).
pub fn query_words(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|word| !word.is_empty())
        .map(str::to_lowercase)
        .take(32)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_words_drop_the_syntax_of_every_engine() {
        assert_eq!(
            query_words("prefers \"tabs\" OR spaces* -- NEAR(x)"),
            ["prefers", "tabs", "or", "spaces", "near", "x"]
        );
        assert!(query_words("*** !!").is_empty());
        assert_eq!(query_words(&"a ".repeat(100)).len(), 32);
    }
}
