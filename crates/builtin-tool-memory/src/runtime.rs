//! The runtime: memories through the storage service, scoped by the call's context.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::{Value, json};
use tool_core::embed::{Embedder, cosine, fuse};
use tool_core::storage::{
    NewRecord, Owner, ProjectScope, Record, RecordPatch, RecordQuery, RecordStore, StorageError,
};
use tool_core::{CallContext, ErrorKind, MissingService, Services, ToolOutput, ToolRuntime, parse_arguments};

use crate::{
    AddArgs, COLLECTION, Category, DEFAULT_LIMIT, MAX_CONTENT, MAX_TITLE, MemoryApi, RemoveArgs, Scope,
    SearchArgs, UpdateArgs, project_of,
};

/// What the operator sets for memories.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemorySettings {
    /// How many memories one person keeps.
    pub max_per_person: u64,
}

impl Default for MemorySettings {
    fn default() -> Self {
        Self { max_per_person: DEFAULT_LIMIT }
    }
}

/// Runs memory calls on a record store.
#[derive(Debug, Clone)]
pub struct MemoryRuntime {
    store: Arc<dyn RecordStore>,
    settings: MemorySettings,
    /// Searches by meaning too, when an embeddings endpoint is configured.
    embedder: Option<Arc<dyn Embedder>>,
}

/// Reciprocal rank fusion's constant.
const RRF_K: f64 = 60.0;

/// How long a search or a write waits for a vector before going on by words alone (well inside
/// the APIs' timeouts).
const EMBED_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// Builds the runtime from the front end's record store (and [`MemorySettings`], if given).
///
/// # Errors
///
/// [`MissingService`] when the front end has no record store.
pub fn runtime(services: &Services) -> Result<Arc<dyn ToolRuntime>, MissingService> {
    let store = services.require::<Arc<dyn RecordStore>>()?.clone();
    let settings = services.get::<MemorySettings>().copied().unwrap_or_default();
    let embedder = services.get::<Arc<dyn Embedder>>().cloned();
    Ok(Arc::new(MemoryRuntime::new(store, settings).with_embedder(embedder)))
}

fn invalid(message: impl Into<String>) -> ToolOutput {
    ToolOutput::error(ErrorKind::InvalidArguments, message)
}

fn failed(error: StorageError) -> ToolOutput {
    match error {
        StorageError::Full { limit } => ToolOutput::error(
            ErrorKind::Conflict,
            format!(
                "{limit} memories are kept already, the most allowed: remove or merge outdated ones \
                 (searchMemory, then removeMemory or updateMemory) before adding"
            ),
        ),
        StorageError::NotFound(id) => ToolOutput::error(
            ErrorKind::NotFound,
            format!("no memory `{id}` of this person; searchMemory lists the ids"),
        ),
        StorageError::Backend(message) => {
            ToolOutput::error(ErrorKind::Execution, format!("memory storage failed: {message}"))
        }
    }
}

fn check_text(field: &str, value: &str, max: usize) -> Result<String, ToolOutput> {
    let value = value.trim();
    if value.is_empty() {
        return Err(invalid(format!("`{field}` is empty")));
    }
    let chars = value.chars().count();
    if chars > max {
        return Err(invalid(format!(
            "`{field}` has {chars} characters, more than {max}; keep memories short"
        )));
    }
    if looks_secret(value) {
        return Err(invalid(format!(
            "`{field}` looks like it holds a secret (a key, token or password); memories must never keep secrets"
        )));
    }
    Ok(value.to_owned())
}

/// Whether text looks like it carries a credential: a private key, a well-known token prefix, or
/// a `password=`/`token:` assignment.
fn looks_secret(text: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "sk-",
        "ghp_",
        "gho_",
        "ghs_",
        "ghu_",
        "github_pat_",
        "xoxb-",
        "xoxp-",
        "AKIA",
        "AIza",
        "glpat-",
        "eyJ",
    ];
    if text.contains("-----BEGIN") && text.contains("PRIVATE KEY") {
        return true;
    }
    // A value that looks made to be secret: long, or with a digit or a symbol in it.
    let credential = |value: &str| {
        value.len() >= 16 || (value.len() >= 8 && value.chars().any(|c| !c.is_ascii_alphabetic()))
    };
    // ASCII lowercasing keeps every byte offset, so the offsets below index `text` too.
    let lower = text.to_ascii_lowercase();
    for word in ["password", "passwd", "api_key", "apikey", "secret", "token"] {
        for (at, _) in lower.match_indices(word) {
            let rest = text[at + word.len()..].trim_start();
            let Some(value) = rest.strip_prefix(['=', ':']) else { continue };
            if value.split_whitespace().next().is_some_and(credential) {
                return true;
            }
        }
    }
    text.split(|c: char| c.is_whitespace() || c == '"' || c == '\'')
        .any(|word| PREFIXES.iter().any(|prefix| word.starts_with(prefix) && word.len() >= prefix.len() + 16))
}

fn line(record: &Record) -> String {
    let scope = if record.project.is_some() { " (this project)" } else { "" };
    format!("- [{}] {} · {}{scope}: {}", record.id, record.tag, record.title, record.body)
}

fn view(record: &Record) -> Value {
    json!({
        "id": record.id,
        "category": record.tag,
        "title": record.title,
        "content": record.body,
        "project": record.project,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
    })
}

impl MemoryRuntime {
    /// A runtime over `store`.
    pub fn new(store: Arc<dyn RecordStore>, settings: MemorySettings) -> Self {
        Self { store, settings, embedder: None }
    }

    /// Searches by meaning too (hybrid, by reciprocal rank fusion), with `embedder`'s vectors.
    #[must_use]
    pub fn with_embedder(mut self, embedder: Option<Arc<dyn Embedder>>) -> Self {
        self.embedder = embedder;
        self
    }

    /// Gives a memory its vector; a failure is said, never fatal (the memory is kept and found
    /// by its words).
    async fn embed(&self, owner: &Owner, record: &Record) -> Option<String> {
        let embedder = self.embedder.as_ref()?;
        let text = [format!("{}\n{}", record.title, record.body)];
        let vector =
            match tokio::time::timeout(EMBED_WAIT, embedder.embed(&text)).await {
                Ok(Ok(mut vectors)) => vectors.pop(),
                Ok(Err(error)) => return Some(format!(" (kept, but found by its words only: {error})")),
                Err(_) => return Some(
                    " (kept, but found by its words only: the embeddings endpoint did not answer in time)"
                        .into(),
                ),
            };
        let vector = vector.map(|vector| (embedder.model(), vector));
        match self.store.set_record_vector(owner, COLLECTION, &record.id, vector).await {
            Ok(()) => None,
            Err(error) => Some(format!(" (kept, but its vector was not: {error})")),
        }
    }

    async fn add(&self, args: AddArgs, context: &CallContext) -> Result<ToolOutput, ToolOutput> {
        let title = check_text("title", &args.title, MAX_TITLE)?;
        let content = check_text("content", &args.content, MAX_CONTENT)?;
        let project = match args.scope.unwrap_or(Scope::Person) {
            Scope::Person => None,
            Scope::Project => match &context.working_directory {
                Some(dir) => Some(project_of(dir)),
                None => {
                    return Err(invalid(
                        "this session has no project (no working directory); use scope `person`",
                    ));
                }
            },
        };
        let record = NewRecord {
            collection: COLLECTION.into(),
            owner: Owner::of_call(context),
            project,
            tag: args.category.as_str().into(),
            title,
            body: content,
            metadata: json!({"session_id": context.session_id, "call_id": context.call_id}),
        };
        let stored = self.store.insert_record(record, self.settings.max_per_person).await.map_err(failed)?;
        let note = self.embed(&stored.owner, &stored).await.unwrap_or_default();
        Ok(ToolOutput::ok(format!("Remembered [{}] {}: {}{note}", stored.id, stored.title, stored.body))
            .with_state(json!({"memory": view(&stored)})))
    }

    async fn search(&self, args: SearchArgs, context: &CallContext) -> Result<ToolOutput, ToolOutput> {
        let limit = args.limit.unwrap_or(10).clamp(1, 50);
        let text = args.query.as_deref().map(str::trim).filter(|q| !q.is_empty()).map(str::to_owned);
        if let Some(text) = &text
            && text.chars().count() > 500
        {
            return Err(invalid("the query is longer than 500 characters; use a few key words"));
        }
        let project = match &context.working_directory {
            Some(dir) => ProjectScope::With(project_of(dir)),
            None => ProjectScope::None,
        };
        let query = RecordQuery {
            collection: COLLECTION.into(),
            owner: Owner::of_call(context),
            project,
            tag: args.category.map(|c| c.as_str().to_owned()),
            text: text.clone(),
            limit,
        };
        let mut hits = self.store.find_records(query.clone()).await.map_err(failed)?;
        let mut note = String::new();
        if let (Some(embedder), Some(text)) = (&self.embedder, &text) {
            match self.by_meaning_too(embedder.as_ref(), &query, text, &hits).await {
                Ok(fused) => hits = fused,
                Err(error) => note = format!("\n(Searched by words only: {error}.)"),
            }
        }
        let mut content = match (&text, hits.is_empty()) {
            (Some(q), true) => format!("No memory matches \"{q}\"."),
            (None, true) => "Nothing is remembered yet.".to_owned(),
            (Some(q), false) => format!("{} memories match \"{q}\" (best first):", hits.len()),
            (None, false) => format!("The {} most recent memories:", hits.len()),
        };
        for hit in &hits {
            content.push('\n');
            content.push_str(&line(&hit.record));
        }
        content.push_str(&note);
        let memories: Vec<Value> = hits.iter().map(|hit| view(&hit.record)).collect();
        Ok(ToolOutput::ok(content).with_state(json!({"query": text, "memories": memories})))
    }

    /// `hits` (by words) fused with the person's memories nearest in meaning; by words alone when
    /// the endpoint fails.
    async fn by_meaning_too(
        &self,
        embedder: &dyn Embedder,
        query: &RecordQuery,
        text: &str,
        hits: &[tool_core::storage::RecordHit],
    ) -> Result<Vec<tool_core::storage::RecordHit>, String> {
        let asked = [text.to_owned()];
        let asked = match tokio::time::timeout(EMBED_WAIT, embedder.embed(&asked)).await {
            Ok(Ok(mut vectors)) => vectors.pop().ok_or("the endpoint returned no vector")?,
            Ok(Err(error)) => return Err(error.to_string()),
            Err(_) => return Err("the embeddings endpoint did not answer in time".into()),
        };
        let vectors = self.store.record_vectors(query, embedder.model()).await.map_err(|e| e.to_string())?;
        let mut near: Vec<(String, f32)> =
            vectors.into_iter().map(|(id, vector)| (id, cosine(&vector, &asked))).collect();
        near.sort_by(|a, b| b.1.total_cmp(&a.1));
        near.truncate(query.limit as usize * 3);
        let lists = [
            hits.iter().map(|hit| hit.record.id.clone()).collect(),
            near.into_iter().map(|(id, _)| id).collect(),
        ];
        let mut by_id: std::collections::HashMap<String, tool_core::storage::RecordHit> =
            hits.iter().map(|hit| (hit.record.id.clone(), hit.clone())).collect();
        let mut fused = Vec::new();
        for (id, score) in fuse(&lists, RRF_K).into_iter().take(query.limit as usize) {
            let record = match by_id.remove(&id) {
                Some(hit) => Some(hit.record),
                None => self.store.get_record(&query.owner, COLLECTION, &id).await.ok().flatten(),
            };
            if let Some(record) = record {
                fused.push(tool_core::storage::RecordHit { record, score });
            }
        }
        Ok(fused)
    }

    async fn update(&self, args: UpdateArgs, context: &CallContext) -> Result<ToolOutput, ToolOutput> {
        if args.title.is_none() && args.content.is_none() && args.category.is_none() {
            return Err(invalid("nothing to change: give a new title, content or category"));
        }
        let patch = RecordPatch {
            tag: args.category.map(|c: Category| c.as_str().to_owned()),
            title: args.title.as_deref().map(|t| check_text("title", t, MAX_TITLE)).transpose()?,
            body: args.content.as_deref().map(|c| check_text("content", c, MAX_CONTENT)).transpose()?,
            metadata: None,
        };
        let owner = Owner::of_call(context);
        let reworded = args.title.is_some() || args.content.is_some();
        let updated =
            self.store.update_record(&owner, COLLECTION, args.id.trim(), patch).await.map_err(failed)?;
        let note =
            if reworded { self.embed(&owner, &updated).await.unwrap_or_default() } else { String::new() };
        Ok(ToolOutput::ok(format!("Updated [{}] {}: {}{note}", updated.id, updated.title, updated.body))
            .with_state(json!({"memory": view(&updated)})))
    }

    async fn remove(&self, args: RemoveArgs, context: &CallContext) -> Result<ToolOutput, ToolOutput> {
        let owner = Owner::of_call(context);
        let id = args.id.trim();
        let before = self.store.get_record(&owner, COLLECTION, id).await.map_err(failed)?;
        let Some(before) = before else { return Err(failed(StorageError::NotFound(id.to_owned()))) };
        if !self.store.remove_record(&owner, COLLECTION, id).await.map_err(failed)? {
            return Err(failed(StorageError::NotFound(id.to_owned())));
        }
        Ok(ToolOutput::ok(format!("Forgot [{}] {}", before.id, before.title))
            .with_state(json!({"memory": view(&before)})))
    }
}

impl ToolRuntime for MemoryRuntime {
    fn execute<'a>(
        &'a self,
        api: &'a str,
        arguments: Value,
        context: &'a CallContext,
    ) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let Ok(which) = api.parse::<MemoryApi>() else {
                return ToolOutput::error(ErrorKind::UnknownTool, format!("memory has no api `{api}`"));
            };
            let result = match which {
                MemoryApi::Add => match parse_arguments(api, arguments) {
                    Ok(args) => self.add(args, context).await,
                    Err(output) => Err(output),
                },
                MemoryApi::Search => match parse_arguments(api, arguments) {
                    Ok(args) => self.search(args, context).await,
                    Err(output) => Err(output),
                },
                MemoryApi::Update => match parse_arguments(api, arguments) {
                    Ok(args) => self.update(args, context).await,
                    Err(output) => Err(output),
                },
                MemoryApi::Remove => match parse_arguments(api, arguments) {
                    Ok(args) => self.remove(args, context).await,
                    Err(output) => Err(output),
                },
            };
            result.unwrap_or_else(|output| output)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_recognised_and_ordinary_text_is_not() {
        for secret in [
            "my password: hunter2hunter2",
            "token=abcdef123456",
            "use sk-abcdefghijklmnopqrstuvwx for the API",
            "-----BEGIN OPENSSH PRIVATE KEY----- abc",
            "ghp_0123456789abcdefghijklmnopqrstuv",
            "password: see below. password = s3cretpass",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abc",
        ] {
            assert!(looks_secret(secret), "{secret}");
        }
        for ordinary in [
            "Prefers tabs over spaces",
            "Rotates the password every month",
            "The token bucket limiter lives in limits.rs",
            "Uses sk-learn for models",
            "The refresh token: rotated daily",
            "İİİİİİİİİİ token: x",
        ] {
            assert!(!looks_secret(ordinary), "{ordinary}");
        }
    }
}
