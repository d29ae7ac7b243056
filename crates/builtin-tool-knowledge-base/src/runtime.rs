//! The runtime: searches and reads of the bases the call's person sees (their own and their
//! tenant's shared ones), through the knowledge store.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use serde_json::{Value, json};
use tool_core::embed::{Embedder, fuse};
use tool_core::knowledge::{KnowledgeBase, KnowledgeStore, StoredChunk};
use tool_core::render::xml_escape as escape;
use tool_core::storage::{Owner, StorageError};
use tool_core::{CallContext, ErrorKind, MissingService, Services, ToolOutput, ToolRuntime, parse_arguments};

use crate::index::{Entry, Index};
use crate::{
    DEFAULT_HITS, KnowledgeBaseApi, ListArgs, MAX_HITS, MAX_READ_LINES, ReadArgs, SearchArgs, parse_range,
};

/// The most characters of a passage a hit shows.
const PASSAGE_CHARS: usize = 900;

/// The most bytes one read returns.
const READ_BYTES: usize = 48 * 1024;

/// Hits of one source a search keeps, so that one long page does not fill the list.
const PER_SOURCE: usize = 2;

/// Indexes kept in memory: at most this many, and this many bytes together (the least recently
/// used go first; an index of 50 MB of text takes about 80 MB).
const CACHED_INDEXES: usize = 16;
const CACHED_BYTES: usize = 512 * 1024 * 1024;

/// A base's index at one version of the base.
#[derive(Debug)]
struct Cached {
    version: i64,
    index: Arc<Index>,
    used: u64,
    bytes: usize,
}

/// The cached indexes by (tenant, base id), and a use counter.
type Indexes = (u64, HashMap<(String, String), Cached>);

/// Runs knowledge-base calls on a knowledge store.
#[derive(Debug, Clone)]
pub struct KnowledgeBaseRuntime {
    store: Arc<dyn KnowledgeStore>,
    /// Indexes by (tenant, base id), with the clock their uses are stamped with.
    indexes: Arc<Mutex<Indexes>>,
    /// Searches by meaning too, in bases whose vectors come from its model.
    embedder: Option<Arc<dyn Embedder>>,
}

/// Candidates each way (words, meaning) before fusion.
const POOL: usize = 50;

/// Reciprocal rank fusion's constant.
const RRF_K: f64 = 60.0;

/// A chunk a search found.
#[derive(Debug)]
struct Hit {
    base: usize,
    stored: StoredChunk,
    score: f32,
}

/// Builds the runtime from the front end's knowledge store.
///
/// # Errors
///
/// [`MissingService`] when the front end has no knowledge store.
pub fn runtime(services: &Services) -> Result<Arc<dyn ToolRuntime>, MissingService> {
    let store = services.require::<Arc<dyn KnowledgeStore>>()?.clone();
    let embedder = services.get::<Arc<dyn Embedder>>().cloned();
    Ok(Arc::new(KnowledgeBaseRuntime::new(store).with_embedder(embedder)))
}

fn invalid(message: impl Into<String>) -> ToolOutput {
    ToolOutput::error(ErrorKind::InvalidArguments, message)
}

fn failed(error: StorageError) -> ToolOutput {
    ToolOutput::error(ErrorKind::Execution, format!("the knowledge base could not be read: {error}"))
}

/// Text as an XML element's body: only what would open a tag or an entity is escaped.
fn body(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;")
}

/// A passage: the chunk's text, its blank runs squeezed, cut at [`PASSAGE_CHARS`].
fn passage(text: &str) -> String {
    let mut out = String::new();
    let mut blank = false;
    for line in text.lines() {
        let line = line.trim_end();
        if line.trim().is_empty() {
            blank = true;
            continue;
        }
        if blank && !out.is_empty() {
            out.push('\n');
        }
        blank = false;
        out.push_str(line);
        out.push('\n');
    }
    let trimmed = out.trim_end();
    match trimmed.char_indices().nth(PASSAGE_CHARS) {
        Some((cut, _)) => format!("{} …", &trimmed[..cut]),
        None => trimmed.to_owned(),
    }
}

fn base_view(base: &KnowledgeBase) -> Value {
    json!({
        "name": base.name,
        "shared": base.person.is_none(),
        "sources": base.sources,
        "chunks": base.chunks,
        "bytes": base.bytes,
        "updatedAt": base.updated_at,
    })
}

impl KnowledgeBaseRuntime {
    /// A runtime over `store`.
    pub fn new(store: Arc<dyn KnowledgeStore>) -> Self {
        Self { store, indexes: Arc::default(), embedder: None }
    }

    /// Searches by meaning too (hybrid, by reciprocal rank fusion) in bases whose vectors come
    /// from `embedder`'s model.
    #[must_use]
    pub fn with_embedder(mut self, embedder: Option<Arc<dyn Embedder>>) -> Self {
        self.embedder = embedder;
        self
    }

    /// The index of a base at its current version: cached, or built from the store.
    async fn index(&self, base: &KnowledgeBase) -> Result<Arc<Index>, ToolOutput> {
        let key = (base.tenant.clone(), base.id.clone());
        {
            let mut guard = self.indexes.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let (clock, cache) = &mut *guard;
            *clock += 1;
            if let Some(cached) = cache.get_mut(&key)
                && cached.version == base.version
            {
                cached.used = *clock;
                return Ok(cached.index.clone());
            }
        }
        let chunks = self.store.base_chunks(&base.tenant, &base.id).await.map_err(failed)?;
        let index = tokio::task::spawn_blocking(move || {
            Index::build(chunks.iter().map(|stored| Entry {
                id: stored.id,
                path: &stored.path,
                heading: &stored.chunk.heading,
                text: &stored.chunk.text,
                embedding: stored.embedding.as_deref(),
            }))
        })
        .await
        .map_err(|_| ToolOutput::error(ErrorKind::Internal, "indexing the knowledge base failed"))?;
        let index = Arc::new(index);
        let mut guard = self.indexes.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (clock, cache) = &mut *guard;
        let bytes = index.memory_bytes();
        cache.remove(&key);
        // Room for this one: the least recently used go (a search holding one keeps its `Arc`).
        while !cache.is_empty()
            && (cache.len() >= CACHED_INDEXES
                || cache.values().map(|cached| cached.bytes).sum::<usize>() + bytes > CACHED_BYTES)
        {
            let Some(oldest) = cache.iter().min_by_key(|(_, cached)| cached.used).map(|(key, _)| key.clone())
            else {
                break;
            };
            cache.remove(&oldest);
        }
        cache.insert(key, Cached { version: base.version, index: index.clone(), used: *clock, bytes });
        Ok(index)
    }

    /// The bases the call's person sees; with `name`, only that one (their own before a shared
    /// one of the same name).
    async fn bases(&self, owner: &Owner, name: Option<&str>) -> Result<Vec<KnowledgeBase>, ToolOutput> {
        let all = self.store.list_bases(&owner.tenant, Some(&owner.person)).await.map_err(failed)?;
        if all.is_empty() {
            return Err(ToolOutput::error(
                ErrorKind::NotFound,
                "no knowledge base has been added for you yet: a person adds one with `toolhost kb add NAME \
                 FOLDER` (or the server's /v1/knowledge-bases); answer without it",
            ));
        }
        let Some(name) = name.map(str::trim).filter(|name| !name.is_empty()) else { return Ok(all) };
        let mut named: Vec<KnowledgeBase> = all.iter().filter(|base| base.name == name).cloned().collect();
        named.sort_by_key(|base| base.person.is_none());
        named.truncate(1);
        if named.is_empty() {
            let names: Vec<&str> = all.iter().map(|base| base.name.as_str()).collect();
            return Err(ToolOutput::error(
                ErrorKind::NotFound,
                format!("no knowledge base `{name}`; the bases are: {}", names.join(", ")),
            ));
        }
        Ok(named)
    }

    async fn search(&self, args: SearchArgs, context: &CallContext) -> Result<ToolOutput, ToolOutput> {
        let query = args.query.trim();
        if query.is_empty() {
            return Err(invalid("the query is empty: say what to look for"));
        }
        if query.chars().count() > 1_000 {
            return Err(invalid("the query is longer than 1 000 characters; use the key words"));
        }
        let limit = args.limit.unwrap_or(DEFAULT_HITS).clamp(1, MAX_HITS);
        let owner = Owner::of_call(context);
        let bases = self.bases(&owner, args.base.as_deref()).await?;
        let mut ranked = Vec::new();
        let mut stems = Vec::new();
        // The question's vector, made once when a base can use it.
        let mut meaning: Option<Result<Vec<f32>, String>> = None;
        let mut hybrid = false;
        for (number, base) in bases.iter().enumerate() {
            let index = self.index(base).await?;
            stems = index.query_stems(query);
            if stems.is_empty() {
                return Err(invalid("the query has no words to look for (only punctuation)"));
            }
            let by_words = index.search(&stems, POOL.max(limit as usize * 4));
            let embedder = self.embedder.as_ref().filter(|embedder| {
                index.has_vectors() && base.embedding_model.as_deref() == Some(embedder.model())
            });
            let by_words: Vec<i64> = by_words.into_iter().map(|(id, _)| id).collect();
            // Every base's list as reciprocal-rank scores, by words alone or fused with meaning, so
            // that lists of several bases (hybrid or not) compare on one scale.
            let Some(embedder) = embedder else {
                ranked.extend(fused(&[by_words], number));
                continue;
            };
            if meaning.is_none() {
                let asked = [query.to_owned()];
                // Well inside the API's timeout, so a slow endpoint leaves time to answer by words.
                let wait = std::time::Duration::from_secs(3);
                meaning = Some(match tokio::time::timeout(wait, embedder.embed(&asked)).await {
                    Ok(Ok(mut vectors)) => vectors.pop().ok_or_else(|| "no vector came back".to_owned()),
                    Ok(Err(error)) => Err(error.to_string()),
                    Err(_) => Err("the embeddings endpoint did not answer in time".to_owned()),
                });
            }
            let Some(Ok(vector)) = &meaning else {
                ranked.extend(fused(&[by_words], number));
                continue;
            };
            hybrid = true;
            let by_meaning = index.nearest(vector, POOL).into_iter().map(|(id, _)| id).collect();
            ranked.extend(fused(&[by_words, by_meaning], number));
        }
        ranked.sort_by(|a, b| b.2.total_cmp(&a.2));
        ranked.truncate(limit as usize * 4);
        let mut found = Vec::new();
        for (number, base) in bases.iter().enumerate() {
            let ids: Vec<i64> =
                ranked.iter().filter(|(n, _, _)| *n == number).map(|(_, id, _)| *id).collect();
            if ids.is_empty() {
                continue;
            }
            let mut rows: HashMap<i64, StoredChunk> = self
                .store
                .chunks_by_id(&base.tenant, &base.id, &ids)
                .await
                .map_err(failed)?
                .into_iter()
                .map(|stored| (stored.id, stored))
                .collect();
            for (n, id, score) in &ranked {
                if *n == number
                    && let Some(stored) = rows.remove(id)
                {
                    found.push(Hit { base: number, stored, score: *score });
                }
            }
        }
        found.sort_by(|a, b| b.score.total_cmp(&a.score));
        let hits = diversify(found, limit as usize);
        let name_of = |number: usize| bases[number].name.as_str();
        let mode = if hybrid { "words and meaning" } else { "words" };
        let mut content = format!(
            "<knowledgeResults query=\"{}\" count=\"{}\" by=\"{mode}\">\n",
            escape(query),
            hits.len()
        );
        let mut views = Vec::new();
        for (index, hit) in hits.iter().enumerate() {
            let (path, chunk) = (&hit.stored.path, &hit.stored.chunk);
            let lines = format!("{}-{}", chunk.first_line, chunk.last_line);
            let text = passage(&chunk.text);
            let _ = writeln!(
                content,
                "<hit index=\"{}\" base=\"{}\" source=\"{}\" heading=\"{}\" lines=\"{lines}\" score=\"{:.2}\">\n{}\n</hit>",
                index + 1,
                escape(name_of(hit.base)),
                escape(path),
                escape(&chunk.heading),
                hit.score,
                body(&text),
            );
            views.push(json!({
                "base": name_of(hit.base),
                "source": path,
                "heading": chunk.heading,
                "lines": lines,
                "firstLine": chunk.first_line,
                "lastLine": chunk.last_line,
                "score": hit.score,
                "text": text,
            }));
        }
        content.push_str("</knowledgeResults>");
        if hits.is_empty() {
            let _ = write!(
                content,
                "\nNothing matched {}. Try other words (a synonym, the option or error text), or another base.",
                stems.join(" ")
            );
        }
        if let Some(Err(error)) = &meaning {
            let _ = write!(content, "\nSearched by words only: {error}.");
        }
        Ok(ToolOutput::ok(content)
            .with_state(json!({"query": query, "terms": stems, "by": mode, "hits": views})))
    }

    async fn read(&self, args: ReadArgs, context: &CallContext) -> Result<ToolOutput, ToolOutput> {
        let source = args.source.trim();
        if source.is_empty() {
            return Err(invalid("`source` is empty: pass the `source` of a search hit"));
        }
        let (first, last) = match args.range.as_deref().map(str::trim).filter(|r| !r.is_empty()) {
            None => (1, None),
            Some(range) => parse_range(range).ok_or_else(|| {
                invalid(format!("`{range}` is not a line range: write `N-M`, `N-` or `N` (lines from 1)"))
            })?,
        };
        let last = last.unwrap_or(u32::MAX).min(first.saturating_add(MAX_READ_LINES - 1));
        let owner = Owner::of_call(context);
        let bases = self.bases(&owner, args.base.as_deref()).await?;
        let mut found = None;
        for base in &bases {
            let chunks =
                self.store.read_chunks(&owner.tenant, &base.id, source, first, last).await.map_err(failed)?;
            if !chunks.is_empty() {
                found = Some((base, chunks));
                break;
            }
        }
        let Some((base, chunks)) = found else {
            // The source exists but the range is past its end, or there is no such source.
            for base in &bases {
                let any = self
                    .store
                    .read_chunks(&owner.tenant, &base.id, source, 1, u32::MAX)
                    .await
                    .map_err(failed)?;
                if let Some(end) = any.last() {
                    return Err(invalid(format!(
                        "`{source}` has {} lines; line {first} is past its end",
                        end.last_line
                    )));
                }
            }
            return Err(ToolOutput::error(
                ErrorKind::NotFound,
                format!(
                    "no source `{source}` in your knowledge bases: pass the `source` of a searchKnowledgeBase hit"
                ),
            ));
        };
        let mut text = String::new();
        let mut shown_last = first;
        let mut cut = false;
        'chunks: for chunk in &chunks {
            for (offset, line) in chunk.text.split_inclusive('\n').enumerate() {
                let number = chunk.first_line + offset as u32;
                if number < first {
                    continue;
                }
                if number > last {
                    break 'chunks;
                }
                if text.len() + line.len() > READ_BYTES {
                    cut = true;
                    if text.is_empty() {
                        // One line longer than a read: its beginning, said to be cut, rather
                        // than nothing.
                        let line = line.trim_end_matches('\n');
                        let end = (0..=READ_BYTES.min(line.len()))
                            .rev()
                            .find(|i| line.is_char_boundary(*i))
                            .unwrap_or(0);
                        let _ = writeln!(
                            text,
                            "{number:>6}\t{} … [the line goes on past {} KiB]",
                            &line[..end],
                            READ_BYTES / 1024
                        );
                        shown_last = number;
                    }
                    break 'chunks;
                }
                let _ = write!(text, "{number:>6}\t{}", line.trim_end_matches('\n'));
                text.push('\n');
                shown_last = number;
            }
        }
        let heading = chunks.iter().find(|c| c.last_line >= first).map_or("", |c| c.heading.as_str());
        let mut content = format!(
            "<source base=\"{}\" path=\"{}\" lines=\"{first}-{shown_last}\"",
            escape(&base.name),
            escape(source)
        );
        if !heading.is_empty() {
            let _ = write!(content, " heading=\"{}\"", escape(heading));
        }
        content.push_str(">\n");
        content.push_str(&body(&text));
        content.push_str("</source>");
        if cut || chunks.last().is_some_and(|chunk| chunk.last_line > shown_last) {
            let _ = write!(content, "\nMore follows: read from line {} on.", shown_last + 1);
        }
        Ok(ToolOutput::ok(content).with_state(json!({
            "base": base.name,
            "source": source,
            "firstLine": first,
            "lastLine": shown_last,
            "heading": heading,
        })))
    }

    async fn list(&self, _args: ListArgs, context: &CallContext) -> Result<ToolOutput, ToolOutput> {
        let owner = Owner::of_call(context);
        let bases = self.bases(&owner, None).await?;
        let mut content = String::from("Knowledge bases:\n");
        for base in &bases {
            let _ = writeln!(
                content,
                "- {}{}: {} sources, {} passages",
                base.name,
                if base.person.is_none() { " (shared)" } else { "" },
                base.sources,
                base.chunks
            );
        }
        let views: Vec<Value> = bases.iter().map(base_view).collect();
        Ok(ToolOutput::ok(content.trim_end()).with_state(json!({"bases": views})))
    }
}

/// Ranked lists of one base's chunk ids as (base, id, score) by reciprocal rank fusion (scaled
/// by 1 000 to read as a score).
fn fused(lists: &[Vec<i64>], base: usize) -> impl Iterator<Item = (usize, i64, f32)> + use<> {
    fuse(lists, RRF_K).into_iter().map(move |(id, score)| (base, id, score as f32 * 1000.0))
}

/// The best `limit` hits, at most [`PER_SOURCE`] from one source unless too few sources match.
fn diversify(found: Vec<Hit>, limit: usize) -> Vec<Hit> {
    let mut kept = Vec::new();
    let mut held = Vec::new();
    let mut per_source: HashMap<(usize, String), usize> = HashMap::new();
    for hit in found {
        let count = per_source.entry((hit.base, hit.stored.path.clone())).or_default();
        *count += 1;
        if *count <= PER_SOURCE {
            kept.push(hit);
        } else {
            held.push(hit);
        }
    }
    kept.truncate(limit);
    if kept.len() < limit {
        kept.extend(held.into_iter().take(limit - kept.len()));
        kept.sort_by(|a, b| b.score.total_cmp(&a.score));
    }
    kept
}

impl ToolRuntime for KnowledgeBaseRuntime {
    fn execute<'a>(
        &'a self,
        api: &'a str,
        arguments: Value,
        context: &'a CallContext,
    ) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let Ok(which) = api.parse::<KnowledgeBaseApi>() else {
                return ToolOutput::error(
                    ErrorKind::UnknownTool,
                    format!("knowledge-base has no api `{api}`"),
                );
            };
            let result = match which {
                KnowledgeBaseApi::Search => match parse_arguments(api, arguments) {
                    Ok(args) => self.search(args, context).await,
                    Err(output) => Err(output),
                },
                KnowledgeBaseApi::Read => match parse_arguments(api, arguments) {
                    Ok(args) => self.read(args, context).await,
                    Err(output) => Err(output),
                },
                KnowledgeBaseApi::List => match parse_arguments(api, arguments) {
                    Ok(args) => self.list(args, context).await,
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
    use tool_core::knowledge::{Chunk, NewBase, NewSource};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_index_cache_keeps_the_most_recently_used_and_follows_versions() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("j.db").display());
        let store = journal::open_stores(&url).await.unwrap().knowledge;
        let tool = KnowledgeBaseRuntime::new(store.clone());
        let context = CallContext::new("call", "session");
        let chunk = |text: &str| Chunk {
            ordinal: 0,
            heading: String::new(),
            first_line: 1,
            last_line: 1,
            text: format!("{text}\n"),
        };
        let mut first = None;
        for number in 0..=CACHED_INDEXES {
            let base = NewBase {
                tenant: "local".into(),
                person: Some("local".into()),
                name: format!("base{number}"),
                roots: vec![],
                embedding_model: None,
            };
            let base = store.put_base(base).await.unwrap();
            let source = NewSource {
                path: format!("/doc{number}.md"),
                hash: "h".into(),
                kind: "markdown".into(),
                chunks: vec![chunk(&format!("word{number}"))],
                embeddings: Vec::new(),
            };
            store.apply_sources("local", &base.id, vec![source], vec![]).await.unwrap();
            first.get_or_insert(base.id.clone());
            let query = json!({"query": format!("word{number}"), "base": format!("base{number}")});
            let found = tool.execute("searchKnowledgeBase", query, &context).await;
            assert!(found.content.contains(&format!("/doc{number}.md")), "{}", found.content);
        }
        let cached =
            |id: &str| tool.indexes.lock().unwrap().1.contains_key(&("local".to_owned(), id.to_owned()));
        assert_eq!(tool.indexes.lock().unwrap().1.len(), CACHED_INDEXES, "bounded");
        assert!(!cached(first.as_deref().unwrap()), "the least recently used went first");

        // A change to a base is seen at the next search (its version moved).
        let bases = store.list_bases("local", Some("local")).await.unwrap();
        let last = bases.iter().find(|base| base.name == format!("base{CACHED_INDEXES}")).unwrap();
        let source = NewSource {
            path: "/late.md".into(),
            hash: "h2".into(),
            kind: "markdown".into(),
            chunks: vec![chunk("latecomer")],
            embeddings: Vec::new(),
        };
        store.apply_sources("local", &last.id, vec![source], vec![]).await.unwrap();
        let query = json!({"query": "latecomer", "base": last.name});
        let found = tool.execute("searchKnowledgeBase", query, &context).await;
        assert!(found.content.contains("/late.md"), "{}", found.content);
    }
}
