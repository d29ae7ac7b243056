//! Adding a knowledge base from folders and files, and syncing it when it is added again: files
//! are walked (hidden files and what `.gitignore` leaves out are skipped, links are not followed,
//! each file is opened beneath a handle on its root so that no link swapped in can lead out),
//! hashed, and only new or changed ones are read into chunks; sources no longer found are removed.
//! Binary, oversized and unreadable files are skipped and reported, never indexed silently.
//!
//! Reading and chunking run on a blocking thread while the store writes the previous batch.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use computer_runtime::beneath::Opener;
use serde::Serialize;
use sha2::{Digest, Sha256};
use tool_core::embed::{EmbedError, Embedder};
use tool_core::knowledge::{KnowledgeBase, KnowledgeStore, NewBase, NewSource};
use tool_core::storage::StorageError;

use crate::chunk::{Kind, chunk};

/// Limits of an add.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddLimits {
    /// Files larger than this are skipped.
    pub max_file_bytes: u64,
    /// At most this many files are indexed; the rest are skipped.
    pub max_files: usize,
}

impl Default for AddLimits {
    fn default() -> Self {
        Self { max_file_bytes: 10 * 1024 * 1024, max_files: 100_000 }
    }
}

/// A file left out, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// Its path.
    pub path: String,
    /// Why.
    pub reason: String,
}

/// What an add did.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AddReport {
    /// The base as it now stands.
    pub base: KnowledgeBase,
    /// Sources new to the base.
    pub added: usize,
    /// Sources whose content changed.
    pub changed: usize,
    /// Sources found unchanged (by content hash).
    pub unchanged: usize,
    /// Sources no longer found, removed.
    pub removed: usize,
    /// Chunks written.
    pub chunks: usize,
    /// Files left out.
    pub skipped: Vec<Skipped>,
    /// How long it took, in milliseconds.
    pub elapsed_ms: u64,
}

/// Why an add failed.
#[derive(Debug, thiserror::Error)]
pub enum AddError {
    /// A name the base cannot have.
    #[error("a knowledge base's name is 1 to 64 letters, digits, `-`, `_` or `.`, not `{0}`")]
    BadName(String),
    /// Nothing to add from.
    #[error("no folder or file to add from")]
    NoRoots,
    /// A root that is not there.
    #[error("`{0}` is not a folder or file that can be read")]
    NoSuchPath(String),
    /// A root outside the folders the add may read.
    #[error("`{0}` is outside the folders knowledge bases may be added from")]
    Outside(String),
    /// The store failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The embeddings endpoint failed: what was stored before stays, and adding again resumes.
    #[error("{0}; the files read so far are stored, and adding again goes on from there")]
    Embedding(#[from] EmbedError),
}

/// Whether `name` can name a base.
pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && !name.starts_with('.')
}

/// The folders an add may read (a server tenant's), and files in them it must not.
#[derive(Debug, Clone, Copy)]
pub struct Within<'a> {
    /// Every root must lie inside one of these (as it resolves).
    pub folders: &'a [PathBuf],
    /// Never read (the server's own files, the operator's denied paths).
    pub protected: &'a [PathBuf],
}

/// Sources written per store step: a step holds at most this many bytes of text, or files.
const BATCH_BYTES: usize = 4 * 1024 * 1024;
const BATCH_FILES: usize = 500;

/// Makes (or syncs) the base `base` from its roots, which must be absolute paths of folders or
/// files, and with [`Within`] bounds, inside one of their folders (as the roots resolve; none
/// resolving admits nothing): every file is then opened beneath a handle on that folder and
/// checked against the protected paths, so nothing swapped in after the check (a folder replaced
/// by a link) can lead a read out of it. Without bounds (a person's own machine), each root is its
/// own boundary. Re-adding a base replaces its roots and syncs its sources with what they hold now. With
/// an embedder, each chunk (heading trail and text) gets a vector; a base whose vectors came from
/// another model (or that had none) is read again whole.
///
/// # Errors
///
/// [`AddError`] for a bad name, a missing root, a failing store or embeddings endpoint; files
/// that cannot be indexed are reported in [`AddReport::skipped`] instead.
pub async fn add_base(
    store: &dyn KnowledgeStore,
    base: NewBase,
    within: Option<Within<'_>>,
    limits: AddLimits,
    embedder: Option<&dyn Embedder>,
) -> Result<AddReport, AddError> {
    let started = Instant::now();
    if !valid_name(&base.name) {
        return Err(AddError::BadName(base.name));
    }
    if base.roots.is_empty() {
        return Err(AddError::NoRoots);
    }
    // The allowed folders, resolved; with bounds given, none resolving admits nothing.
    let folders: Option<Vec<PathBuf>> = within.map(|within| {
        within.folders.iter().filter_map(|folder| std::fs::canonicalize(folder).ok()).collect()
    });
    let bounded = folders.as_ref().map(|folders| {
        Opener::new(&tool_core::sandbox::FileBoundary {
            roots: folders.iter().map(tool_core::FileRoot::read_only).collect(),
            outside: tool_core::sandbox::OutsideFiles::Refuse,
            protected: within.map(|within| within.protected.to_vec()).unwrap_or_default(),
            ..tool_core::sandbox::FileBoundary::default()
        })
    });
    // Each root, resolved, and what its files are opened beneath.
    let mut roots = Vec::new();
    let mut openers = Vec::new();
    for root in &base.roots {
        let path = Path::new(root);
        if !path.is_absolute() {
            return Err(AddError::NoSuchPath(root.clone()));
        }
        let canonical = std::fs::canonicalize(path).map_err(|_| AddError::NoSuchPath(root.clone()))?;
        let opener = match (&folders, &bounded) {
            (Some(folders), Some(opener)) => {
                if !folders.iter().any(|folder| canonical.starts_with(folder)) {
                    return Err(AddError::Outside(root.clone()));
                }
                opener.clone()
            }
            _ if canonical.is_dir() => Opener::rooted(&canonical),
            _ => Opener::rooted(canonical.parent().unwrap_or(&canonical)),
        };
        roots.push(canonical);
        openers.push(opener);
    }
    let (files, mut skipped) = {
        let roots = roots.clone();
        tokio::task::spawn_blocking(move || walk(&roots, limits))
            .await
            .map_err(|error| StorageError::Backend(format!("the walk stopped: {error}")))?
    };
    let model = embedder.map(|embedder| embedder.model().to_owned());
    let previous = store
        .list_bases(&base.tenant, base.person.as_deref())
        .await?
        .into_iter()
        .find(|known| known.name == base.name && known.person == base.person);
    // Vectors of another model (or none) cannot be compared with this one's: read all again.
    let reread =
        previous.as_ref().is_some_and(|previous| previous.sources > 0 && previous.embedding_model != model);
    // The base names its new model only once every source has its vector: an add that stops
    // half way is read whole again next time.
    let stored = NewBase {
        roots: roots.iter().map(|root| root.to_string_lossy().into_owned()).collect(),
        embedding_model: if reread {
            previous.and_then(|previous| previous.embedding_model)
        } else {
            model.clone()
        },
        ..base
    };
    let made = store.put_base(stored.clone()).await?;
    let known: HashMap<String, String> =
        store.source_hashes(&made.tenant, &made.id).await?.into_iter().map(|s| (s.path, s.hash)).collect();
    let unchanged_if: HashMap<String, String> = if reread { HashMap::new() } else { known.clone() };
    let found: HashSet<String> = files.iter().map(|(path, _)| path.to_string_lossy().into_owned()).collect();
    let removed: Vec<String> = known.keys().filter(|path| !found.contains(*path)).cloned().collect();

    // Read, hash and chunk on a blocking thread, a batch ahead of the store.
    let (batches, mut arriving) = tokio::sync::mpsc::channel::<Batch>(2);
    let reader =
        tokio::task::spawn_blocking(move || read_batches(files, &openers, &unchanged_if, limits, &batches));
    let mut report = AddReport {
        base: made.clone(),
        added: 0,
        changed: 0,
        unchanged: 0,
        removed: removed.len(),
        chunks: 0,
        skipped: Vec::new(),
        elapsed_ms: 0,
    };
    let mut pending_removal = Some(removed);
    while let Some(mut batch) = arriving.recv().await {
        if let Some(embedder) = embedder {
            embed(embedder, &mut batch.sources).await?;
        }
        report.unchanged += batch.unchanged;
        skipped.extend(batch.skipped);
        for source in &batch.sources {
            report.chunks += source.chunks.len();
            if known.contains_key(&source.path) {
                report.changed += 1;
            } else {
                report.added += 1;
            }
        }
        let remove = pending_removal.take().unwrap_or_default();
        if !batch.sources.is_empty() || !remove.is_empty() {
            store.apply_sources(&made.tenant, &made.id, batch.sources, remove).await?;
        }
    }
    reader.await.map_err(|error| StorageError::Backend(format!("reading stopped: {error}")))?;
    let remove = pending_removal.take().unwrap_or_default();
    // An unchanged base is still marked synchronised.
    store.apply_sources(&made.tenant, &made.id, Vec::new(), remove).await?;
    if reread {
        store.put_base(NewBase { embedding_model: model, ..stored }).await?;
    }
    report.base = store
        .list_bases(&made.tenant, None)
        .await?
        .into_iter()
        .find(|base| base.id == made.id)
        .ok_or_else(|| StorageError::NotFound(made.name.clone()))?;
    skipped.sort_by(|a, b| a.path.cmp(&b.path));
    report.skipped = skipped;
    report.elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    Ok(report)
}

/// Gives each chunk of the sources its vector: the embedding of its heading trail and text.
async fn embed(embedder: &dyn Embedder, sources: &mut [NewSource]) -> Result<(), EmbedError> {
    let texts: Vec<String> = sources
        .iter()
        .flat_map(|source| source.chunks.iter().map(|chunk| format!("{}\n{}", chunk.heading, chunk.text)))
        .collect();
    if texts.is_empty() {
        return Ok(());
    }
    let mut vectors = embedder.embed(&texts).await?.into_iter();
    for source in sources {
        source.embeddings = vectors.by_ref().take(source.chunks.len()).collect();
    }
    Ok(())
}

/// The files under the roots (each once, in order), and those left out.
fn walk(roots: &[PathBuf], limits: AddLimits) -> (Vec<(PathBuf, usize)>, Vec<Skipped>) {
    let mut files = Vec::new();
    let mut skipped = Vec::new();
    let mut seen = HashSet::new();
    for (number, root) in roots.iter().enumerate() {
        let walker = ignore::WalkBuilder::new(root)
            .hidden(true)
            .git_ignore(true)
            .git_global(false)
            .require_git(false)
            .follow_links(false)
            .sort_by_file_path(|a, b| a.cmp(b))
            .build();
        for entry in walker {
            let Ok(entry) = entry else { continue };
            let Some(kind) = entry.file_type() else { continue };
            let path = entry.path().to_path_buf();
            if kind.is_symlink() {
                skipped.push(Skipped { path: lossy(&path), reason: "a link (not followed)".into() });
                continue;
            }
            if !kind.is_file() || !seen.insert(path.clone()) {
                continue;
            }
            let size = entry.metadata().map(|m| m.len()).unwrap_or(0);
            if size > limits.max_file_bytes {
                skipped.push(Skipped {
                    path: lossy(&path),
                    reason: format!("larger than {}", computer_runtime::format::size(limits.max_file_bytes)),
                });
                continue;
            }
            if files.len() >= limits.max_files {
                skipped
                    .push(Skipped { path: lossy(&path), reason: format!("past {} files", limits.max_files) });
                continue;
            }
            files.push((path, number));
        }
    }
    (files, skipped)
}

fn lossy(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// One step's worth of read sources.
struct Batch {
    sources: Vec<NewSource>,
    unchanged: usize,
    skipped: Vec<Skipped>,
}

fn read_batches(
    files: Vec<(PathBuf, usize)>,
    openers: &[Opener],
    known: &HashMap<String, String>,
    limits: AddLimits,
    out: &tokio::sync::mpsc::Sender<Batch>,
) {
    let mut batch = Batch { sources: Vec::new(), unchanged: 0, skipped: Vec::new() };
    let mut bytes = 0;
    // Each root's files are opened beneath a handle on its folder (`openat2`, `RESOLVE_BENEATH`):
    // a folder swapped for a link after the check or the walk cannot lead the read out of it, and
    // protected files are refused by what the kernel says was opened.
    for (path, root) in files {
        let name = lossy(&path);
        match read_source(&openers[root], &path, &name, known.get(&name), limits) {
            Outcome::Unchanged => batch.unchanged += 1,
            Outcome::Skipped(reason) => batch.skipped.push(Skipped { path: name, reason }),
            Outcome::Source(source) => {
                bytes += source.chunks.iter().map(|chunk| chunk.text.len()).sum::<usize>();
                batch.sources.push(source);
            }
        }
        if bytes >= BATCH_BYTES || batch.sources.len() >= BATCH_FILES {
            let full = std::mem::replace(
                &mut batch,
                Batch { sources: Vec::new(), unchanged: 0, skipped: Vec::new() },
            );
            bytes = 0;
            if out.blocking_send(full).is_err() {
                return;
            }
        }
    }
    let _ = out.blocking_send(batch);
}

enum Outcome {
    Unchanged,
    Skipped(String),
    Source(NewSource),
}

/// Extensions of files that are never text.
const BINARY: &[&str] = &[
    "png", "jpg", "jpeg", "gif", "webp", "bmp", "ico", "tif", "tiff", "zip", "gz", "tgz", "bz2", "xz", "zst",
    "7z", "rar", "tar", "jar", "war", "exe", "dll", "so", "dylib", "a", "o", "obj", "class", "pyc", "wasm",
    "bin", "dat", "db", "sqlite", "woff", "woff2", "ttf", "otf", "eot", "mp3", "mp4", "m4a", "wav", "ogg",
    "flac", "avi", "mov", "mkv", "webm", "iso", "dmg", "psd", "xls", "xlsx", "doc", "docx", "ppt", "pptx",
];

/// Extensions of source code.
const CODE: &[&str] = &[
    "rs",
    "py",
    "js",
    "mjs",
    "cjs",
    "ts",
    "tsx",
    "jsx",
    "go",
    "java",
    "kt",
    "kts",
    "scala",
    "c",
    "h",
    "cc",
    "cpp",
    "cxx",
    "hpp",
    "hh",
    "cs",
    "fs",
    "rb",
    "php",
    "swift",
    "m",
    "mm",
    "lua",
    "pl",
    "pm",
    "r",
    "jl",
    "sh",
    "bash",
    "zsh",
    "fish",
    "ps1",
    "sql",
    "toml",
    "yaml",
    "yml",
    "json",
    "jsonc",
    "xml",
    "ini",
    "cfg",
    "conf",
    "proto",
    "graphql",
    "gql",
    "css",
    "scss",
    "less",
    "vue",
    "svelte",
    "ex",
    "exs",
    "erl",
    "hrl",
    "hs",
    "ml",
    "mli",
    "clj",
    "cljs",
    "dart",
    "zig",
    "nim",
    "tf",
    "hcl",
    "gradle",
    "cmake",
    "mk",
    "dockerfile",
];

/// How a file is read: its kind's name and how its text is cut.
fn classify(path: &Path) -> Option<(&'static str, Option<Kind>)> {
    let extension =
        path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).unwrap_or_default();
    Some(match extension.as_str() {
        "md" | "markdown" | "mdx" | "mkd" | "mdown" => ("markdown", Some(Kind::Markdown)),
        "html" | "htm" | "xhtml" => ("html", None),
        "pdf" => ("pdf", None),
        "txt" | "text" | "rst" | "adoc" | "asciidoc" | "org" | "tex" | "csv" | "tsv" | "log" => {
            ("text", Some(Kind::Text))
        }
        e if CODE.contains(&e) => ("code", Some(Kind::Code)),
        e if BINARY.contains(&e) => return None,
        _ => ("text", Some(Kind::Text)),
    })
}

fn read_source(
    opener: &Opener,
    path: &Path,
    name: &str,
    known: Option<&String>,
    limits: AddLimits,
) -> Outcome {
    let Some((kind, cut)) = classify(path) else {
        return Outcome::Skipped("binary (by its extension)".into());
    };
    let limit = usize::try_from(limits.max_file_bytes.saturating_add(1)).unwrap_or(usize::MAX);
    let bytes = match opener.read_prefix(path, limit) {
        Ok(bytes) => bytes,
        Err(error) => return Outcome::Skipped(format!("unreadable: {error}")),
    };
    if bytes.len() as u64 > limits.max_file_bytes {
        return Outcome::Skipped(format!(
            "larger than {}",
            computer_runtime::format::size(limits.max_file_bytes)
        ));
    }
    let hash: String = Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect();
    if known == Some(&hash) {
        return Outcome::Unchanged;
    }
    let (text, cut) = match (kind, cut) {
        ("html", _) => {
            let html = builtin_tool_web_browsing::extract::decode(&bytes, None, true);
            (builtin_tool_web_browsing::extract::extract_html(&html, None).markdown, Kind::Markdown)
        }
        ("pdf", _) => match pdf_text(&bytes) {
            Ok(text) => (text, Kind::Text),
            Err(reason) => return Outcome::Skipped(reason),
        },
        (_, Some(cut)) => {
            if looks_binary(&bytes) {
                return Outcome::Skipped("binary (not text)".into());
            }
            (String::from_utf8_lossy(&bytes).into_owned(), cut)
        }
        (_, None) => return Outcome::Skipped("binary".into()),
    };
    let text = text.replace("\r\n", "\n");
    Outcome::Source(NewSource {
        path: name.to_owned(),
        hash,
        kind: kind.to_owned(),
        chunks: chunk(&text, cut),
        embeddings: Vec::new(),
    })
}

/// Whether bytes are not text: a NUL in the first 8 KiB, or mostly invalid UTF-8.
fn looks_binary(bytes: &[u8]) -> bool {
    // The file tools' test (a NUL in the first 8 KiB), then mostly invalid UTF-8.
    if computer_runtime::files::looks_binary(bytes) {
        return true;
    }
    let head = &bytes[..bytes.len().min(8 * 1024)];
    match std::str::from_utf8(head) {
        Ok(_) => false,
        // A character cut at the end of the head is not a sign.
        Err(error) => {
            error.error_len().is_some() && {
                let bad = String::from_utf8_lossy(head)
                    .chars()
                    .filter(|c| *c == char::REPLACEMENT_CHARACTER)
                    .count();
                bad * 100 > head.len()
            }
        }
    }
}

/// The text of a PDF, by a pure-Rust extractor; a PDF it cannot read (or that breaks it) is
/// skipped with the reason.
fn pdf_text(bytes: &[u8]) -> Result<String, String> {
    // Nothing it touches outlives a panic: the bytes are only read.
    let extract = std::panic::AssertUnwindSafe(|| builtin_tool_web_browsing::extract::pdf_text(bytes));
    match std::panic::catch_unwind(extract) {
        Ok(Ok(text)) if text.trim().is_empty() => Err("a PDF with no text (scanned?)".into()),
        Ok(Ok(text)) => Ok(text),
        Ok(Err(reason)) => Err(reason),
        Err(_) => Err("a PDF the extractor could not read".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(valid_name("docs"));
        assert!(valid_name("team-docs_v2.1"));
        assert!(!valid_name(""));
        assert!(!valid_name(".hidden"));
        assert!(!valid_name("a/b"));
        assert!(!valid_name(&"x".repeat(65)));
    }

    #[test]
    fn binary_is_told_from_text() {
        assert!(looks_binary(b"ab\0cd"));
        assert!(!looks_binary("héllo wörld".as_bytes()));
        assert!(looks_binary(&[0xff, 0xfe, 0xfd, 0x80, 0x81, 0x82, 0x83, b'a']));
        assert!(classify(Path::new("a.PNG")).is_none());
        assert_eq!(classify(Path::new("README")).unwrap().0, "text");
        assert_eq!(classify(Path::new("x.rs")).unwrap().0, "code");
    }
}
