//! The runtime: documents as records of the storage service.

use std::sync::Arc;

use computer_runtime::edit::{EditSpec, apply_edits};
use computer_runtime::scope::project_of;
use futures::future::BoxFuture;
use serde_json::{Value, json};
use tool_core::storage::{
    NewRecord, Owner, ProjectScope, Record, RecordPatch, RecordQuery, RecordStore, StorageError,
};
use tool_core::{CallContext, ErrorKind, MissingService, Services, ToolOutput, ToolRuntime, parse_arguments};

use crate::{
    COLLECTION, CreateArgs, DocumentsApi, EditArgs, ListArgs, MAX_BYTES, MAX_DOCUMENTS, MAX_NAME, ReadArgs,
    Scope, parse_lines, place,
};

/// The most bytes of a document one read returns; past it the reader is told which lines to
/// ask for next.
const READ_BUDGET: usize = 40_000;

/// Runs documents calls on a record store.
#[derive(Debug, Clone)]
pub struct DocumentsRuntime {
    store: Arc<dyn RecordStore>,
}

/// Builds the runtime from the front end's record store.
///
/// # Errors
///
/// [`MissingService`] when the front end has no record store.
pub fn runtime(services: &Services) -> Result<Arc<dyn ToolRuntime>, MissingService> {
    Ok(Arc::new(DocumentsRuntime { store: services.require::<Arc<dyn RecordStore>>()?.clone() }))
}

fn invalid(message: impl Into<String>) -> ToolOutput {
    ToolOutput::error(ErrorKind::InvalidArguments, message)
}

fn failed(error: StorageError) -> ToolOutput {
    match error {
        StorageError::Full { limit } => ToolOutput::error(
            ErrorKind::Conflict,
            format!("{limit} documents are kept already, the most allowed; edit an existing one instead"),
        ),
        StorageError::NotFound(id) => ToolOutput::error(ErrorKind::NotFound, format!("no document `{id}`")),
        StorageError::Backend(message) => {
            ToolOutput::error(ErrorKind::Execution, format!("document storage failed: {message}"))
        }
    }
}

fn view(record: &Record) -> Value {
    json!({
        "id": record.id,
        "name": record.title,
        "scope": record.tag,
        "bytes": record.body.len(),
        "lines": record.body.lines().count(),
        "updated_at": record.updated_at,
    })
}

/// Every document a session sees — its own and its project's — newest first (what the tool
/// lists, and what the server serves).
///
/// # Errors
///
/// The store's.
pub async fn visible_documents(
    store: &dyn RecordStore,
    owner: &Owner,
    session_id: &str,
    project: Option<&str>,
) -> Result<Vec<Record>, StorageError> {
    let mut records = Vec::new();
    for scope in [Scope::Session, Scope::Project] {
        let Some(place) = place(scope, session_id, project) else { continue };
        let query = RecordQuery {
            collection: COLLECTION.into(),
            owner: owner.clone(),
            project: ProjectScope::With(place),
            tag: None,
            text: None,
            limit: 1_000,
        };
        let hits = store.find_records(query).await?;
        records.extend(hits.into_iter().map(|hit| hit.record).filter(|r| r.project.is_some()));
    }
    records.sort_by_key(|r| std::cmp::Reverse(r.updated_at));
    Ok(records)
}

impl DocumentsRuntime {
    /// A runtime over `store`.
    pub fn new(store: Arc<dyn RecordStore>) -> Self {
        Self { store }
    }

    /// Every document the session sees, newest first.
    async fn visible(&self, context: &CallContext) -> Result<Vec<Record>, ToolOutput> {
        let project = context.working_directory.as_deref().map(project_of);
        visible_documents(
            self.store.as_ref(),
            &Owner::of_call(context),
            &context.session_id,
            project.as_deref(),
        )
        .await
        .map_err(failed)
    }

    /// The document a name (or id) names, this session's before its project's.
    async fn find(&self, name: &str, context: &CallContext) -> Result<Record, ToolOutput> {
        let name = name.trim();
        let visible = self.visible(context).await?;
        let session = format!("session:{}", context.session_id);
        let mut matches: Vec<&Record> = visible.iter().filter(|r| r.title == name || r.id == name).collect();
        matches.sort_by_key(|r| r.project.as_deref() != Some(session.as_str()));
        match matches.first() {
            Some(record) => Ok((*record).clone()),
            None => {
                let names: Vec<&str> = visible.iter().map(|r| r.title.as_str()).take(20).collect();
                Err(ToolOutput::error(
                    ErrorKind::NotFound,
                    if names.is_empty() {
                        format!("no document `{name}`; there are none yet (createDocument makes one)")
                    } else {
                        format!("no document `{name}`; there are: {}", names.join(", "))
                    },
                ))
            }
        }
    }

    async fn create(&self, args: CreateArgs, context: &CallContext) -> Result<ToolOutput, ToolOutput> {
        let name = args.name.trim();
        if name.is_empty() || name.chars().count() > MAX_NAME {
            return Err(invalid(format!("`name` must be 1 to {MAX_NAME} characters")));
        }
        if args.content.len() > MAX_BYTES {
            return Err(invalid(format!(
                "the content is {} bytes, more than {MAX_BYTES}; split it into several documents",
                args.content.len()
            )));
        }
        let scope = args.scope.unwrap_or(Scope::Session);
        let project = context.working_directory.as_deref().map(project_of);
        let Some(at) = place(scope, &context.session_id, project.as_deref()) else {
            return Err(invalid("this session has no project (no working directory); use scope `session`"));
        };
        if self
            .visible(context)
            .await?
            .iter()
            .any(|r| r.title == name && r.project.as_deref() == Some(at.as_str()))
        {
            return Err(ToolOutput::error(
                ErrorKind::Conflict,
                format!(
                    "a document `{name}` exists already in this {}; edit it, or pick another name",
                    scope.as_str()
                ),
            ));
        }
        let record = NewRecord {
            collection: COLLECTION.into(),
            owner: Owner::of_call(context),
            project: Some(at),
            tag: scope.as_str().into(),
            title: name.to_owned(),
            body: args.content,
            metadata: json!({"session_id": context.session_id}),
        };
        let stored = self.store.insert_record(record, MAX_DOCUMENTS).await.map_err(failed)?;
        Ok(ToolOutput::ok(format!(
            "Created `{}` ({} lines, {} bytes, {} scope).",
            stored.title,
            stored.body.lines().count(),
            stored.body.len(),
            stored.tag
        ))
        .with_state(json!({"document": view(&stored), "content": stored.body})))
    }

    async fn read(&self, args: ReadArgs, context: &CallContext) -> Result<ToolOutput, ToolOutput> {
        let record = self.find(&args.name, context).await?;
        let lines: Vec<&str> = record.body.lines().collect();
        let (start, end) = match args.lines.as_deref() {
            Some(selector) => parse_lines(selector).map_err(invalid)?,
            None => (0, None),
        };
        if start >= lines.len().max(1) && !(start == 0 && lines.is_empty()) {
            return Err(invalid(format!(
                "`{}` has {} lines; line {} is past its end",
                record.title,
                lines.len(),
                start + 1
            )));
        }
        let end = end.unwrap_or(lines.len()).min(lines.len());
        let mut text = String::new();
        let mut last = start;
        for (n, line) in lines[start..end].iter().enumerate() {
            if text.len() + line.len() > READ_BUDGET {
                if n == 0 {
                    // One line longer than a read: its head, and where the document goes on.
                    let cut = (0..=READ_BUDGET).rev().find(|&at| line.is_char_boundary(at)).unwrap_or(0);
                    text.push_str(&line[..cut]);
                    text.push_str(&format!("\n[line {} is cut at {READ_BUDGET} bytes]\n", start + 1));
                    last = start + 1;
                }
                break;
            }
            text.push_str(line);
            text.push('\n');
            last = start + n + 1;
        }
        let mut content =
            format!("`{}` lines {}-{} of {}:\n{text}", record.title, start + 1, last, lines.len());
        if last < end {
            content
                .push_str(&format!("[… cut to keep this short; read on with lines \"{}-{end}\"]", last + 1));
        }
        Ok(ToolOutput::ok(content).with_state(json!({"document": view(&record), "content": text})))
    }

    async fn edit(&self, args: EditArgs, context: &CallContext) -> Result<ToolOutput, ToolOutput> {
        let record = self.find(&args.name, context).await?;
        let edits: Vec<EditSpec> = args
            .edits
            .into_iter()
            .map(|e| EditSpec {
                old_text: e.old_text,
                new_text: e.new_text,
                replace_all: e.replace_all.unwrap_or(false),
            })
            .collect();
        let outcome =
            apply_edits(&record.body, &record.title, &edits).map_err(|error| invalid(error.to_string()))?;
        if outcome.new_content.len() > MAX_BYTES {
            return Err(invalid(format!("the edited document would be more than {MAX_BYTES} bytes")));
        }
        let patch = RecordPatch { body: Some(outcome.new_content), ..RecordPatch::default() };
        let updated =
            self.store.update_record(&record.owner, COLLECTION, &record.id, patch).await.map_err(failed)?;
        let fuzzy = if outcome.fuzzy { " (matched after normalising quotes or spaces)" } else { "" };
        Ok(ToolOutput::ok(format!(
            "Edited `{}`: {} replacement(s), +{} -{} lines{fuzzy}.\n{}",
            updated.title, outcome.replacements, outcome.lines_added, outcome.lines_removed, outcome.diff
        ))
        .with_state(json!({"document": view(&updated), "diff": outcome.diff})))
    }

    async fn list(&self, _args: ListArgs, context: &CallContext) -> Result<ToolOutput, ToolOutput> {
        let visible = self.visible(context).await?;
        let mut content = if visible.is_empty() {
            "No documents yet.".to_owned()
        } else {
            format!("{} document(s), newest first:", visible.len())
        };
        for record in &visible {
            content.push_str(&format!(
                "\n- {} ({} scope, {} lines, {} bytes)",
                record.title,
                record.tag,
                record.body.lines().count(),
                record.body.len()
            ));
        }
        let documents: Vec<Value> = visible.iter().map(view).collect();
        Ok(ToolOutput::ok(content).with_state(json!({"documents": documents})))
    }
}

impl ToolRuntime for DocumentsRuntime {
    fn execute<'a>(
        &'a self,
        api: &'a str,
        arguments: Value,
        context: &'a CallContext,
    ) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let Ok(which) = api.parse::<DocumentsApi>() else {
                return ToolOutput::error(ErrorKind::UnknownTool, format!("documents has no api `{api}`"));
            };
            let result = match which {
                DocumentsApi::Create => match parse_arguments(api, arguments) {
                    Ok(args) => self.create(args, context).await,
                    Err(output) => Err(output),
                },
                DocumentsApi::Read => match parse_arguments(api, arguments) {
                    Ok(args) => self.read(args, context).await,
                    Err(output) => Err(output),
                },
                DocumentsApi::Edit => match parse_arguments(api, arguments) {
                    Ok(args) => self.edit(args, context).await,
                    Err(output) => Err(output),
                },
                DocumentsApi::List => match parse_arguments(api, arguments) {
                    Ok(args) => self.list(args, context).await,
                    Err(output) => Err(output),
                },
            };
            result.unwrap_or_else(|output| output)
        })
    }
}
