//! Records (`tool_core::storage::RecordStore`) on SQLite: writes as writer operations, reads on
//! the read pool.

use super::{GET_RECORD, LIST_RECORDS, Op, RECORD_VECTORS, SEARCH_RECORDS, SqliteJournal};

impl tool_core::storage::RecordStore for SqliteJournal {
    fn insert_record(
        &self,
        record: tool_core::storage::NewRecord,
        limit: u64,
    ) -> futures::future::BoxFuture<'_, Result<tool_core::storage::Record, tool_core::storage::StorageError>>
    {
        Box::pin(async move {
            use crate::records::text;
            let id = crate::records::new_id()?;
            let now = crate::rows::now_ms();
            let values = [
                Some(text(&record.owner.tenant)),
                Some(id.clone()),
                Some(text(&record.collection)),
                Some(text(&record.owner.person)),
                record.project.as_deref().map(text),
                Some(text(&record.tag)),
                Some(text(&record.title)),
                Some(text(&record.body)),
                Some(crate::rows::json_text(&record.metadata)),
            ];
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            let stored = self
                .write_moved(Op::InsertRecord { record: values, now, limit })
                .await
                .map_err(crate::records::backend)?;
            if !stored {
                return Err(tool_core::storage::StorageError::Full { limit: limit as u64 });
            }
            let owner = tool_core::storage::Owner {
                tenant: text(&record.owner.tenant),
                person: text(&record.owner.person),
            };
            self.get_record(&owner, &text(&record.collection), &id)
                .await?
                .ok_or_else(|| tool_core::storage::StorageError::Backend("the stored record is gone".into()))
        })
    }

    fn update_record<'a>(
        &'a self,
        owner: &'a tool_core::storage::Owner,
        collection: &'a str,
        id: &'a str,
        patch: tool_core::storage::RecordPatch,
    ) -> futures::future::BoxFuture<'a, Result<tool_core::storage::Record, tool_core::storage::StorageError>>
    {
        Box::pin(async move {
            use crate::records::text;
            let key = [text(&owner.tenant), text(&owner.person), text(collection), text(id)];
            let patch = [
                patch.tag.as_deref().map(text),
                patch.title.as_deref().map(text),
                patch.body.as_deref().map(text),
                patch.metadata.map(|m| crate::rows::json_text(&m)),
            ];
            let now = crate::rows::now_ms();
            let moved = self
                .write_moved(Op::UpdateRecord { key, patch, now })
                .await
                .map_err(crate::records::backend)?;
            if !moved {
                return Err(tool_core::storage::StorageError::NotFound(id.to_owned()));
            }
            self.get_record(owner, collection, id)
                .await?
                .ok_or_else(|| tool_core::storage::StorageError::NotFound(id.to_owned()))
        })
    }

    fn remove_record<'a>(
        &'a self,
        owner: &'a tool_core::storage::Owner,
        collection: &'a str,
        id: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<bool, tool_core::storage::StorageError>> {
        Box::pin(async move {
            use crate::records::text;
            let key = [text(&owner.tenant), text(&owner.person), text(collection), text(id)];
            self.write_moved(Op::RemoveRecord { key }).await.map_err(crate::records::backend)
        })
    }

    fn find_records(
        &self,
        query: tool_core::storage::RecordQuery,
    ) -> futures::future::BoxFuture<
        '_,
        Result<Vec<tool_core::storage::RecordHit>, tool_core::storage::StorageError>,
    > {
        Box::pin(async move {
            let words = query.text.as_deref().map(tool_core::storage::query_words).unwrap_or_default();
            let sql = if query.text.is_some() { SEARCH_RECORDS } else { LIST_RECORDS };
            if query.text.is_some() && words.is_empty() {
                return Ok(Vec::new());
            }
            let matching = words.iter().map(|w| format!("\"{w}\"")).collect::<Vec<_>>().join(" OR ");
            let mut statement =
                bind_record_filter!(sqlx::query_as::<_, crate::records::ScoredRow>(sql), query)
                    .bind(i64::from(query.limit));
            if query.text.is_some() {
                statement = statement.bind(matching);
            }
            let rows = statement.fetch_all(&self.reads).await.map_err(crate::records::sqlx_backend)?;
            Ok(rows.into_iter().map(crate::records::ScoredRow::into_hit).collect())
        })
    }

    fn set_record_vector<'a>(
        &'a self,
        owner: &'a tool_core::storage::Owner,
        collection: &'a str,
        id: &'a str,
        vector: Option<(&'a str, Vec<f32>)>,
    ) -> futures::future::BoxFuture<'a, Result<(), tool_core::storage::StorageError>> {
        Box::pin(async move {
            use crate::records::text;
            let (model, bytes) = match vector {
                Some((model, vector)) => (Some(text(model)), Some(tool_core::embed::to_bytes(&vector))),
                None => (None, None),
            };
            let key = [text(&owner.tenant), text(&owner.person), text(collection), text(id)];
            self.write_moved(Op::SetRecordVector { key, model, bytes })
                .await
                .map_err(crate::records::backend)?;
            Ok(())
        })
    }

    record_reads!(reads);
}
