//! Records (`tool_core::storage`) on the journal's database: what both backends share.

use serde_json::Value;
use tool_core::storage::{Owner, ProjectScope, Record, StorageError};

use crate::JournalError;
use crate::rows::clean;

/// The columns every record query selects (`r` is the records table), as [`RecordRow`] reads
/// them; metadata as text on both backends.
macro_rules! record_columns {
    () => {
        "r.tenant, r.id, r.collection, r.person, r.project, r.tag, r.title, r.body, \
         CAST(r.metadata AS TEXT) AS metadata, r.created_at, r.updated_at"
    };
}

/// Binds a record query's filter (`?1`-`?6`, `$1`-`$6` in the record queries: tenant,
/// collection, person, project mode, project, tag) to a statement.
macro_rules! bind_record_filter {
    ($statement:expr, $query:expr) => {{
        let (mode, project) = $crate::records::project_params(&$query.project);
        $statement
            .bind($crate::records::text(&$query.owner.tenant))
            .bind($crate::records::text(&$query.collection))
            .bind($crate::records::text(&$query.owner.person))
            .bind(mode)
            .bind(project)
            .bind($query.tag.as_deref().map($crate::records::text))
    }};
}

/// A record as a row holds it.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct RecordRow {
    pub(crate) tenant: String,
    pub(crate) id: String,
    pub(crate) collection: String,
    pub(crate) person: String,
    pub(crate) project: Option<String>,
    pub(crate) tag: String,
    pub(crate) title: String,
    pub(crate) body: String,
    pub(crate) metadata: String,
    pub(crate) created_at: i64,
    pub(crate) updated_at: i64,
}

impl RecordRow {
    pub(crate) fn into_record(self) -> Record {
        Record {
            id: self.id,
            collection: self.collection,
            owner: Owner { tenant: self.tenant, person: self.person },
            project: self.project,
            tag: self.tag,
            title: self.title,
            body: self.body,
            metadata: serde_json::from_str(&self.metadata).unwrap_or(Value::Null),
            created_at: self.created_at,
            updated_at: self.updated_at,
        }
    }
}

/// A record with its relevance.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ScoredRow {
    #[sqlx(flatten)]
    pub(crate) row: RecordRow,
    pub(crate) score: f64,
}

impl ScoredRow {
    pub(crate) fn into_hit(self) -> tool_core::storage::RecordHit {
        tool_core::storage::RecordHit { record: self.row.into_record(), score: self.score }
    }
}

/// A fresh record id: `rec_` and 96 random bits.
pub(crate) fn new_id() -> Result<String, StorageError> {
    let mut bytes = [0u8; 12];
    getrandom::fill(&mut bytes).map_err(|error| StorageError::Backend(format!("no random id: {error}")))?;
    Ok(format!("rec_{}", bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()))
}

/// The project filter as two parameters: the mode (`any`, `with`, `none`) and the project.
pub(crate) fn project_params(scope: &ProjectScope) -> (&'static str, Option<String>) {
    match scope {
        ProjectScope::Any => ("any", None),
        ProjectScope::With(project) => ("with", Some(clean(project))),
        ProjectScope::None => ("none", None),
    }
}

/// Text stored without NUL and control characters, as every journal row.
pub(crate) fn text(value: &str) -> String {
    clean(value)
}

pub(crate) fn backend(error: JournalError) -> StorageError {
    StorageError::Backend(error.to_string())
}

pub(crate) fn sqlx_backend(error: sqlx::Error) -> StorageError {
    StorageError::Backend(JournalError::from(error).to_string())
}
