//! `searchTools`: ranks the session's deferred functions by the query (BM25F over their names,
//! servers, descriptions and parameters; fused with embeddings when an endpoint is configured),
//! declares the best ones and returns their call signatures.

use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{Value, json};
use tool_core::embed::Embedder;
use tool_core::{
    CallContext, ErrorKind, FoundTool, MissingService, Services, ToolOutput, ToolRuntime, parse_arguments,
};
use tool_search::{ToolDoc, ToolIndex};

use super::{DEFAULT_LIMIT, MAX_LIMIT, SearchArgs, ToolSearchApi};

/// Sessions whose index is kept (built again on demand past this).
const CACHED_SESSIONS: usize = 64;
/// Tool texts whose vectors are kept, across sessions (the same servers, embedded once).
const CACHED_VECTORS: usize = 20_000;
/// How long the first search of a session waits for its tools' vectors.
const EMBED_TOOLS_WAIT: Duration = Duration::from_secs(10);
/// How long a search waits for its query's vector before answering by words.
const EMBED_QUERY_WAIT: Duration = Duration::from_secs(3);
/// When a session's tools could not be embedded, how long its searches go by words only before
/// the endpoint is tried again.
const RETRY_EMBEDDINGS_AFTER: Duration = Duration::from_secs(60);

/// One session's index.
struct Entry {
    session: String,
    fingerprint: u64,
    index: Arc<ToolIndex>,
    /// The functions, in the index's order.
    tools: Arc<Vec<FoundTool>>,
    /// The embeddings endpoint failed while indexing: searched by words only.
    words_only: bool,
    built: std::time::Instant,
}

/// Runs `searchTools`.
pub struct ToolSearchRuntime {
    embedder: Option<Arc<dyn Embedder>>,
    entries: Mutex<VecDeque<Entry>>,
    vectors: Mutex<HashMap<String, Arc<[f32]>>>,
}

impl std::fmt::Debug for ToolSearchRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolSearchRuntime").field("embedder", &self.embedder).finish_non_exhaustive()
    }
}

/// Builds the runtime; an [`Embedder`] among the services makes searches hybrid.
///
/// # Errors
///
/// None today: the tool needs no service (the session's tools come with each call).
pub fn runtime(services: &Services) -> Result<Arc<dyn ToolRuntime>, MissingService> {
    Ok(Arc::new(ToolSearchRuntime::new(services.get::<Arc<dyn Embedder>>().cloned())))
}

impl ToolSearchRuntime {
    /// A runtime, hybrid when `embedder` is given.
    pub fn new(embedder: Option<Arc<dyn Embedder>>) -> Self {
        Self { embedder, entries: Mutex::new(VecDeque::new()), vectors: Mutex::new(HashMap::new()) }
    }

    /// The session's index, from the cache when its deferred functions are the same.
    async fn index(
        &self,
        session: &str,
        tools: Vec<FoundTool>,
    ) -> (Arc<ToolIndex>, Arc<Vec<FoundTool>>, bool) {
        let fingerprint = {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            for tool in &tools {
                (&tool.name, &tool.tool, &tool.title, &tool.description, tool.parameters.to_string())
                    .hash(&mut hasher);
            }
            hasher.finish()
        };
        {
            let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
            // A session searched by words only because the endpoint failed tries it again later.
            let fresh = |e: &Entry| !e.words_only || e.built.elapsed() < RETRY_EMBEDDINGS_AFTER;
            if let Some(at) =
                entries.iter().position(|e| e.session == session && e.fingerprint == fingerprint && fresh(e))
                && let Some(entry) = entries.remove(at)
            {
                let found = (entry.index.clone(), entry.tools.clone(), entry.words_only);
                entries.push_front(entry);
                return found;
            }
        }
        let docs: Vec<ToolDoc> = tools
            .iter()
            .map(|tool| {
                let server = tool.tool.strip_prefix("mcp-").unwrap_or(&tool.tool);
                ToolDoc::new(server, &tool.name, &tool.description).with_schema(&tool.parameters)
            })
            .collect();
        let mut words_only = false;
        let mut index = ToolIndex::build(docs);
        if let Some(embedder) = &self.embedder {
            match self.tool_vectors(embedder.as_ref(), &index).await {
                Some(vectors) => index = index.with_vectors(vectors.into_iter().map(Some).collect()),
                None => words_only = true,
            }
        }
        let (index, tools) = (Arc::new(index), Arc::new(tools));
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.retain(|e| e.session != session);
        entries.push_front(Entry {
            session: session.to_owned(),
            fingerprint,
            index: index.clone(),
            tools: tools.clone(),
            words_only,
            built: std::time::Instant::now(),
        });
        entries.truncate(CACHED_SESSIONS);
        (index, tools, words_only)
    }

    /// One vector per tool of `index`, embedding only texts not seen before; `None` when the
    /// endpoint fails or is too slow.
    async fn tool_vectors(&self, embedder: &dyn Embedder, index: &ToolIndex) -> Option<Vec<Vec<f32>>> {
        let texts: Vec<String> = (0..index.len()).map(|n| ToolIndex::embedding_text(index.doc(n))).collect();
        let missing: Vec<String> = {
            let known = self.vectors.lock().unwrap_or_else(|p| p.into_inner());
            let mut missing: Vec<String> =
                texts.iter().filter(|t| !known.contains_key(*t)).cloned().collect();
            missing.dedup();
            missing
        };
        // What is known now, plus what is embedded below, in a map of this search's own: another
        // session clearing the shared one meanwhile takes nothing from it.
        let mut vectors: HashMap<String, Arc<[f32]>> = {
            let known = self.vectors.lock().unwrap_or_else(|p| p.into_inner());
            texts.iter().filter_map(|t| Some((t.clone(), known.get(t)?.clone()))).collect()
        };
        if !missing.is_empty() {
            let embedded =
                tokio::time::timeout(EMBED_TOOLS_WAIT, embedder.embed(&missing)).await.ok()?.ok()?;
            if embedded.len() != missing.len() {
                return None;
            }
            let mut known = self.vectors.lock().unwrap_or_else(|p| p.into_inner());
            if known.len() + missing.len() > CACHED_VECTORS {
                known.clear();
            }
            for (text, vector) in missing.into_iter().zip(embedded) {
                let vector: Arc<[f32]> = vector.into();
                known.insert(text.clone(), vector.clone());
                vectors.insert(text, vector);
            }
        }
        texts.iter().map(|t| vectors.get(t).map(|v| v.to_vec())).collect()
    }

    async fn search(&self, args: SearchArgs, context: &CallContext) -> ToolOutput {
        let query = args.query.trim();
        if query.is_empty() {
            return ToolOutput::error(
                ErrorKind::InvalidArguments,
                "the query is empty: describe the action you need",
            );
        }
        let limit = args.limit.unwrap_or(DEFAULT_LIMIT);
        if !(1..=MAX_LIMIT).contains(&limit) {
            return ToolOutput::error(
                ErrorKind::InvalidArguments,
                format!("limit must be between 1 and {MAX_LIMIT}, not {limit}"),
            );
        }
        let Some(finder) = &context.finder else {
            return ToolOutput::error(
                ErrorKind::NotFound,
                "every tool of this session is already declared: there is nothing to search; call them directly",
            );
        };
        let tools = finder.deferred();
        if tools.is_empty() {
            return ToolOutput::error(ErrorKind::NotFound, "this session has no deferred tools to search");
        }
        let (index, tools, mut words_only) = self.index(&context.session_id, tools).await;
        let query_vector = match &self.embedder {
            Some(embedder) if !words_only => {
                let texts = [query.to_owned()];
                match tokio::time::timeout(EMBED_QUERY_WAIT, embedder.embed(&texts)).await {
                    Ok(Ok(mut vectors)) if vectors.len() == 1 => vectors.pop(),
                    _ => {
                        words_only = true;
                        None
                    }
                }
            }
            _ => None,
        };
        let hits = index.search_hybrid(query, query_vector.as_deref(), limit);
        if hits.is_empty() {
            let mut servers: Vec<&str> =
                tools.iter().map(|t| t.tool.strip_prefix("mcp-").unwrap_or(&t.tool)).collect();
            servers.dedup();
            return ToolOutput::ok(format!(
                "No deferred tool matches \"{query}\". Try other words for the action; the deferred tools come from: {}.",
                servers.join(", ")
            ))
            .with_state(json!({"query": query, "tools": [], "activated": []}));
        }
        let found: Vec<&FoundTool> = hits.iter().map(|(n, _)| &tools[*n]).collect();
        let names: Vec<String> = found.iter().map(|t| t.name.clone()).collect();
        let activated = finder.activate(&names);
        let mut text = format!("<tools query=\"{}\">\n", escape(query));
        for tool in &found {
            let server = tool.tool.strip_prefix("mcp-").unwrap_or(&tool.tool);
            text.push_str(&format!(
                "<tool name=\"{}\" server=\"{}\">\n{}\n{}\n</tool>\n",
                escape(&tool.name),
                escape(server),
                escape(&signature(&tool.name, &tool.parameters)),
                escape(tool.description.trim()),
            ));
        }
        text.push_str("</tools>\n");
        text.push_str(if activated.is_empty() {
            "These tools were already declared: call them by name."
        } else {
            "These tools are declared to you from your next turn on: call them by name with the parameters shown."
        });
        if words_only && self.embedder.is_some() {
            text.push_str("\n(Searched by words only: the embeddings endpoint did not answer.)");
        }
        let state = json!({
            "query": query,
            "tools": found.iter().map(|t| json!({"name": t.name, "tool": t.tool})).collect::<Vec<_>>(),
            "activated": activated,
        });
        ToolOutput::ok(text).with_state(state)
    }
}

impl ToolRuntime for ToolSearchRuntime {
    fn execute<'a>(
        &'a self,
        api: &'a str,
        arguments: Value,
        context: &'a CallContext,
    ) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            match api.parse::<ToolSearchApi>() {
                Ok(ToolSearchApi::Search) => match parse_arguments::<SearchArgs>(api, arguments) {
                    Ok(args) => self.search(args, context).await,
                    Err(output) => output,
                },
                Err(_) => {
                    ToolOutput::error(ErrorKind::UnknownTool, format!("tool-search has no api `{api}`"))
                }
            }
        })
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// A function's call signature from its JSON Schema: `name(a: string, b?: integer[])`, enums as
/// their values (the first few).
pub fn signature(name: &str, schema: &Value) -> String {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let parameters: Vec<String> = schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|properties| {
            properties
                .iter()
                .map(|(param, property)| {
                    let optional = if required.contains(&param.as_str()) { "" } else { "?" };
                    format!("{param}{optional}: {}", type_of(property, 0))
                })
                .collect()
        })
        .unwrap_or_default();
    format!("{name}({})", parameters.join(", "))
}

fn type_of(schema: &Value, depth: usize) -> String {
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let mut shown: Vec<String> = values.iter().take(6).map(Value::to_string).collect();
        if values.len() > 6 {
            shown.push("…".to_owned());
        }
        return shown.join(" | ");
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(choices) = schema.get(key).and_then(Value::as_array) {
            let types: Vec<String> =
                choices.iter().map(|c| type_of(c, depth + 1)).filter(|t| t != "null").collect();
            return if types.is_empty() { "any".to_owned() } else { types.join(" | ") };
        }
    }
    let kind = match schema.get("type") {
        Some(Value::String(kind)) => kind.as_str(),
        Some(Value::Array(kinds)) => {
            kinds.iter().filter_map(Value::as_str).find(|k| *k != "null").unwrap_or("any")
        }
        _ => "any",
    };
    match kind {
        "array" if depth < 3 => {
            let item =
                schema.get("items").map_or_else(|| "any".to_owned(), |items| type_of(items, depth + 1));
            if item.contains(' ') { format!("({item})[]") } else { format!("{item}[]") }
        }
        "array" => "array".to_owned(),
        other => other.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_show_types_optional_and_enums() {
        let schema = json!({
            "type": "object",
            "properties": {
                "repo": {"type": "string"},
                "labels": {"type": "array", "items": {"type": "string"}},
                "state": {"enum": ["open", "closed"]},
                "limit": {"type": ["integer", "null"]},
                "since": {"anyOf": [{"type": "string"}, {"type": "null"}]}
            },
            "required": ["repo"]
        });
        assert_eq!(
            signature("list_issues", &schema),
            "list_issues(repo: string, labels?: string[], state?: \"open\" | \"closed\", limit?: integer, since?: string)"
        );
        assert_eq!(signature("ping", &json!({})), "ping()");
    }
}
