//! Finding files by name or glob, and searching their contents, on ripgrep's own crates.
//!
//! Walks respect `.gitignore`, `.ignore` and git's excludes even outside a git repository, skip
//! hidden entries and well-known junk folders unless asked, and never descend into symlinked
//! folders. These functions block; the runtime runs them off the async threads.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use globset::{GlobBuilder, GlobMatcher};
use grep_regex::RegexMatcherBuilder;
use grep_searcher::sinks::UTF8;
use grep_searcher::{BinaryDetection, SearcherBuilder};
use ignore::{WalkBuilder, WalkState};
use rustix::fs::{FileType, OFlags};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::beneath::{Opener, open_entry, reopen};
use crate::error::ComputerError;

/// Folders that are almost never what a search is for: dependency caches and build output that
/// a project may not list in its ignore files.
pub const JUNK_DIRS: &[&str] = &[
    "node_modules",
    "__pycache__",
    ".git",
    ".hg",
    ".svn",
    ".venv",
    ".tox",
    ".mypy_cache",
    ".pytest_cache",
    ".next",
    ".gradle",
    ".idea",
];

/// Options shared by every walk.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WalkOptions {
    /// Include hidden files and folders.
    #[serde(default)]
    pub include_hidden: bool,
    /// Include files that ignore files exclude, and junk folders.
    #[serde(default)]
    pub include_ignored: bool,
    /// Stops the walk when it fires (the call was cancelled or ran out of time), so a walk of a
    /// huge tree gives its thread back instead of running on for nobody.
    #[serde(skip)]
    pub stop: Stop,
}

/// A cancellation a walk checks at every entry; the default never fires.
#[derive(Debug, Clone, Default)]
pub struct Stop(Option<CancellationToken>);

impl Stop {
    /// Stops when `token` fires.
    pub fn on(token: CancellationToken) -> Self {
        Self(Some(token))
    }

    /// Whether the walk should stop.
    pub fn fired(&self) -> bool {
        self.0.as_ref().is_some_and(CancellationToken::is_cancelled)
    }
}

/// Every stop is alike: options compare by what they ask for, not by who may cancel them.
impl PartialEq for Stop {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Stop {}

fn walker(root: &Path, options: &WalkOptions) -> WalkBuilder {
    let mut builder = WalkBuilder::new(root);
    builder
        .hidden(!options.include_hidden)
        .ignore(!options.include_ignored)
        .git_ignore(!options.include_ignored)
        .git_global(!options.include_ignored)
        .git_exclude(!options.include_ignored)
        .parents(!options.include_ignored)
        .require_git(false)
        .follow_links(false);
    let skip_junk = !options.include_ignored;
    let stop = options.stop.clone();
    // Once the stop fires every entry is pruned, so the walk ends at once.
    builder.filter_entry(move |entry| {
        if stop.fired() {
            return false;
        }
        let junk = skip_junk
            && entry.file_type().is_some_and(|t| t.is_dir())
            && entry.depth() > 0
            && JUNK_DIRS.iter().any(|junk| entry.file_name() == *junk);
        !junk
    });
    builder
}

/// Opens the folder to walk beneath the session's folders; everything the walk reports is
/// checked again beneath this handle.
fn open_dir(opener: &Opener, root: &Path) -> Result<Walked, ComputerError> {
    let fd = opener.open(root, OFlags::PATH)?;
    let stat = rustix::fs::fstat(&fd).map_err(|e| ComputerError::io(root, e.into()))?;
    if FileType::from_raw_mode(stat.st_mode) == FileType::Directory {
        let exposed = opener.exposed_beneath(&fd);
        Ok(Walked { fd, exposed })
    } else {
        Err(ComputerError::NotDirectory { path: root.to_path_buf() })
    }
}

/// Whether an entry the walker found by path is still beneath the folder walked, reached without
/// following a link, and not protected: a folder swapped for a link during the walk makes the
/// walker list another place, and what it found there is dropped here.
fn still_beneath(opener: &Opener, base: &Walked, root: &Path, path: &Path) -> bool {
    let Ok(relative) = path.strip_prefix(root) else { return false };
    match open_entry(&base.fd, relative, OFlags::PATH) {
        Ok(fd) => !base.exposed || opener.guard(&fd, None, path).is_ok(),
        Err(_) => false,
    }
}

/// The folder (or file) a walk searches, and whether a protected path lies beneath it, so that
/// each entry must be checked.
struct Walked {
    fd: OwnedFd,
    exposed: bool,
}

/// A glob search.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GlobRequest {
    /// The pattern, relative to `root` (`**/*.rs`), or absolute.
    pub pattern: String,
    /// The folder to search.
    pub root: PathBuf,
    /// Walk options.
    #[serde(default)]
    pub walk: WalkOptions,
    /// At most this many results.
    pub limit: usize,
}

/// Paths found by a glob or name search.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FoundState {
    /// The folder searched.
    pub root: PathBuf,
    /// Matching paths, sorted.
    pub paths: Vec<PathBuf>,
    /// Whether the limit cut the list.
    pub truncated: bool,
}

/// Finds files matching a glob. `*` does not cross `/`; `**` does.
///
/// # Errors
///
/// A bad pattern, or a root that is not a directory.
pub fn glob(opener: &Opener, request: &GlobRequest) -> Result<FoundState, ComputerError> {
    let (root, pattern) = split_absolute_glob(&request.root, &request.pattern);
    let matcher = compile_glob(&pattern)?;
    let base = open_dir(opener, &root)?;
    let found = walk_collect(opener, &base, &root, &request.walk, request.limit, |relative, _| {
        matcher.is_match(relative)
    })?;
    Ok(FoundState { root, paths: found.0, truncated: found.1 })
}

/// An absolute pattern searches from its longest literal prefix.
fn split_absolute_glob(root: &Path, pattern: &str) -> (PathBuf, String) {
    if !pattern.starts_with('/') {
        return (root.to_path_buf(), pattern.to_owned());
    }
    let mut base = PathBuf::from("/");
    let mut rest = Vec::new();
    let mut literal = true;
    for part in pattern.split('/').filter(|p| !p.is_empty()) {
        if literal && !part.contains(['*', '?', '[', '{']) {
            base.push(part);
        } else {
            literal = false;
            rest.push(part);
        }
    }
    if rest.is_empty() {
        // A fully literal path: search its folder for that name.
        let name = base.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        base.pop();
        return (base, name);
    }
    (base, rest.join("/"))
}

fn compile_glob(pattern: &str) -> Result<GlobMatcher, ComputerError> {
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map(|glob| glob.compile_matcher())
        .map_err(|e| ComputerError::InvalidPattern {
            pattern: pattern.to_owned(),
            message: e.kind().to_string(),
        })
}

/// A search by file name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NameSearchRequest {
    /// Text the name must contain (case-insensitive), or a glob on the name when it has `*`/`?`.
    pub query: String,
    /// The folder to search.
    pub root: PathBuf,
    /// Walk options.
    #[serde(default)]
    pub walk: WalkOptions,
    /// At most this many results.
    pub limit: usize,
}

/// Finds files and folders whose name matches.
///
/// # Errors
///
/// A bad glob, or a root that is not a directory.
pub fn search_names(opener: &Opener, request: &NameSearchRequest) -> Result<FoundState, ComputerError> {
    let query = request.query.to_lowercase();
    let glob = if query.contains(['*', '?', '[']) { Some(compile_glob(&query)?) } else { None };
    let base = open_dir(opener, &request.root)?;
    let (paths, truncated) =
        walk_collect(opener, &base, &request.root, &request.walk, request.limit, |relative, name| {
            let name = name.to_lowercase();
            match &glob {
                Some(glob) => glob.is_match(&name),
                None => {
                    name.contains(&query)
                        || (query.contains('/') && relative.to_string_lossy().to_lowercase().contains(&query))
                }
            }
        })?;
    Ok(FoundState { root: request.root.clone(), paths, truncated })
}

type Found = (Vec<PathBuf>, bool);

fn walk_collect(
    opener: &Opener,
    base: &Walked,
    root: &Path,
    options: &WalkOptions,
    limit: usize,
    keep: impl Fn(&Path, &str) -> bool + Sync,
) -> Result<Found, ComputerError> {
    let found = Mutex::new(Vec::new());
    let count = AtomicUsize::new(0);
    let truncated = AtomicBool::new(false);
    walker(root, options).build_parallel().run(|| {
        Box::new(|entry| {
            let Ok(entry) = entry else { return WalkState::Continue };
            if entry.depth() == 0 {
                return WalkState::Continue;
            }
            let relative = entry.path().strip_prefix(root).unwrap_or(entry.path());
            let name = entry.file_name().to_string_lossy();
            if keep(relative, &name) && still_beneath(opener, base, root, entry.path()) {
                if count.fetch_add(1, Ordering::Relaxed) >= limit {
                    truncated.store(true, Ordering::Relaxed);
                    return WalkState::Quit;
                }
                found.lock().unwrap_or_else(|p| p.into_inner()).push(entry.into_path());
            }
            WalkState::Continue
        })
    });
    let mut paths = found.into_inner().unwrap_or_else(|p| p.into_inner());
    paths.sort();
    Ok((paths, truncated.load(Ordering::Relaxed)))
}

/// A content search.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrepRequest {
    /// A regular expression (Rust syntax), or a literal with `fixed_strings`.
    pub pattern: String,
    /// A file or folder to search.
    pub root: PathBuf,
    /// Only files whose path relative to `root` matches this glob (`*.rs`, `src/**`).
    #[serde(default)]
    pub glob: Option<String>,
    /// Case-insensitive matching.
    #[serde(default)]
    pub case_insensitive: bool,
    /// Treat the pattern as literal text.
    #[serde(default)]
    pub fixed_strings: bool,
    /// Walk options.
    #[serde(default)]
    pub walk: WalkOptions,
    /// At most this many matching lines in all.
    pub max_matches: usize,
    /// Characters kept of a matching line.
    pub max_line_chars: usize,
}

/// One matching line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrepMatch {
    /// The file.
    pub path: PathBuf,
    /// 1-based line number.
    pub line: u64,
    /// The line's text (cut to the limit).
    pub text: String,
}

/// The outcome of a content search.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrepState {
    /// What was searched.
    pub root: PathBuf,
    /// Matches sorted by path, then line.
    pub matches: Vec<GrepMatch>,
    /// Files with at least one match.
    pub files_matched: usize,
    /// Files searched.
    pub files_searched: usize,
    /// Whether `max_matches` cut the results.
    pub truncated: bool,
}

/// Searches file contents in parallel, skipping binary files.
///
/// # Errors
///
/// A bad regex or glob, or a root that does not exist.
pub fn grep(opener: &Opener, request: &GrepRequest) -> Result<GrepState, ComputerError> {
    // The file or folder searched, opened beneath the session's folders; every file searched is
    // opened beneath this handle, never by its path again.
    let base = opener.open(&request.root, OFlags::PATH)?;
    let exposed = opener.exposed_beneath(&base);
    let root_is_dir = rustix::fs::fstat(&base)
        .map(|stat| FileType::from_raw_mode(stat.st_mode) == FileType::Directory)
        .map_err(|e| ComputerError::io(&request.root, e.into()))?;
    let matcher = RegexMatcherBuilder::new()
        .case_insensitive(request.case_insensitive)
        .fixed_strings(request.fixed_strings)
        .line_terminator(Some(b'\n'))
        .build(&request.pattern)
        .map_err(|e| ComputerError::InvalidPattern {
            pattern: request.pattern.clone(),
            message: e.to_string(),
        })?;
    let filter = request.glob.as_deref().map(compile_glob).transpose()?;
    let filter_name = request.glob.as_deref().is_some_and(|g| !g.contains('/'));

    // One vector per matching file: its lines are already in order, so only files need sorting.
    let results: Mutex<Vec<Vec<GrepMatch>>> = Mutex::new(Vec::new());
    let total = AtomicUsize::new(0);
    let files_searched = AtomicUsize::new(0);
    let files_matched = AtomicUsize::new(0);
    let truncated = AtomicBool::new(false);
    let root = &request.root;

    walker(root, &request.walk).build_parallel().run(|| {
        let matcher = matcher.clone();
        let mut searcher =
            SearcherBuilder::new().binary_detection(BinaryDetection::quit(0)).line_number(true).build();
        let filter = filter.clone();
        let (results, total, files_searched, files_matched, truncated, base) =
            (&results, &total, &files_searched, &files_matched, &truncated, &base);
        Box::new(move |entry| {
            let Ok(entry) = entry else { return WalkState::Continue };
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                return WalkState::Continue;
            }
            if let Some(filter) = &filter {
                let relative = entry.path().strip_prefix(root).unwrap_or(entry.path());
                let subject = if filter_name { Path::new(entry.file_name()) } else { relative };
                if !filter.is_match(subject) {
                    return WalkState::Continue;
                }
            }
            files_searched.fetch_add(1, Ordering::Relaxed);
            let mut local = Vec::new();
            let mut stop = false;
            let sink = UTF8(|line, text| {
                if total.fetch_add(1, Ordering::Relaxed) >= request.max_matches {
                    stop = true;
                    return Ok(false);
                }
                local.push(GrepMatch {
                    path: entry.path().to_path_buf(),
                    line,
                    text: cut_line(text, request.max_line_chars),
                });
                Ok(true)
            });
            // The file itself beneath the folder searched (or the file searched itself), with no
            // link followed; one that vanished, was swapped or is unreadable mid-walk is skipped,
            // as ripgrep skips what it cannot read.
            let relative = entry.path().strip_prefix(root).unwrap_or(Path::new(""));
            let opened =
                if root_is_dir { open_entry(base, relative, OFlags::PATH) } else { rustix::io::dup(base) };
            let file = opened
                .ok()
                .filter(|fd| !exposed || opener.guard(fd, None, entry.path()).is_ok())
                .and_then(|fd| {
                    let stat = rustix::fs::fstat(&fd).ok()?;
                    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
                        return None;
                    }
                    reopen(&fd, OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY)
                        .ok()
                        .map(std::fs::File::from)
                });
            if let Some(file) = file {
                let _ = searcher.search_file(&matcher, &file, sink);
            }
            if !local.is_empty() {
                files_matched.fetch_add(1, Ordering::Relaxed);
                results.lock().unwrap_or_else(|p| p.into_inner()).push(local);
            }
            if stop {
                truncated.store(true, Ordering::Relaxed);
                return WalkState::Quit;
            }
            WalkState::Continue
        })
    });
    // Sorting by path, then line: the walk visits each file once and the searcher reports its
    // lines in order, so sorting the per-file groups by path gives the same order as sorting every
    // match, with far fewer (costly, component-wise) path comparisons.
    let mut groups = results.into_inner().unwrap_or_else(|p| p.into_inner());
    groups.sort_by(|a, b| (&a[0].path, a[0].line).cmp(&(&b[0].path, b[0].line)));
    let mut matches = Vec::with_capacity(groups.iter().map(Vec::len).sum());
    for group in groups {
        matches.extend(group);
    }
    Ok(GrepState {
        root: root.clone(),
        matches,
        files_matched: files_matched.into_inner(),
        files_searched: files_searched.into_inner(),
        truncated: truncated.into_inner(),
    })
}

fn cut_line(text: &str, max_chars: usize) -> String {
    let text = text.trim_end_matches(['\n', '\r']);
    match text.char_indices().nth(max_chars) {
        Some((at, _)) => format!("{}… [cut]", &text[..at]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for (path, text) in [
            ("src/main.rs", "fn main() {\n    println!(\"Hello\");\n}\n"),
            ("src/lib.rs", "pub fn hello() -> &'static str { \"hello\" }\n"),
            ("docs/guide.md", "Say hello to the guide.\n"),
            (".hidden/secret.rs", "hello hidden\n"),
            ("node_modules/pkg/index.js", "hello junk\n"),
            ("ignored/out.rs", "hello ignored\n"),
            (".gitignore", "ignored/\n"),
        ] {
            let path = root.join(path);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, text).unwrap();
        }
        fs::write(root.join("src/blob.bin"), b"hello\0binary").unwrap();
        dir
    }

    fn rel(root: &Path, paths: &[PathBuf]) -> Vec<String> {
        paths.iter().map(|p| p.strip_prefix(root).unwrap().to_string_lossy().into_owned()).collect()
    }

    #[test]
    fn glob_respects_ignores_hidden_and_junk() {
        let dir = tree();
        let root = dir.path();
        let opener = Opener::rooted(root);
        let run = |pattern: &str, walk: WalkOptions| {
            let state =
                glob(&opener, &GlobRequest { pattern: pattern.into(), root: root.into(), walk, limit: 100 })
                    .unwrap();
            rel(root, &state.paths)
        };
        assert_eq!(run("**/*.rs", WalkOptions::default()), ["src/lib.rs", "src/main.rs"]);
        assert_eq!(run("*.rs", WalkOptions::default()), Vec::<String>::new(), "`*` does not cross folders");
        assert_eq!(
            run(
                "**/*.rs",
                WalkOptions { include_hidden: true, include_ignored: false, ..WalkOptions::default() }
            ),
            [".hidden/secret.rs", "src/lib.rs", "src/main.rs"]
        );
        assert_eq!(
            run(
                "**/*.{rs,js}",
                WalkOptions { include_hidden: false, include_ignored: true, ..WalkOptions::default() }
            ),
            ["ignored/out.rs", "node_modules/pkg/index.js", "src/lib.rs", "src/main.rs"]
        );
        let absolute = format!("{}/src/*.rs", root.display());
        assert_eq!(
            run(&absolute, WalkOptions::default()),
            ["src/lib.rs", "src/main.rs"],
            "absolute patterns search from their own base"
        );
        let state = glob(
            &opener,
            &GlobRequest {
                pattern: absolute,
                root: "/nonexistent".into(),
                walk: WalkOptions::default(),
                limit: 100,
            },
        )
        .unwrap();
        assert_eq!(state.paths.len(), 2);
        let capped = glob(
            &opener,
            &GlobRequest {
                pattern: "**/*".into(),
                root: root.into(),
                walk: WalkOptions::default(),
                limit: 2,
            },
        )
        .unwrap();
        assert_eq!((capped.paths.len(), capped.truncated), (2, true));
        assert!(matches!(
            glob(
                &opener,
                &GlobRequest {
                    pattern: "a[".into(),
                    root: root.into(),
                    walk: WalkOptions::default(),
                    limit: 1
                }
            ),
            Err(ComputerError::InvalidPattern { .. })
        ));
    }

    #[test]
    fn name_search() {
        let dir = tree();
        let root = dir.path();
        let opener = Opener::rooted(root);
        let run = |query: &str| {
            let state = search_names(
                &opener,
                &NameSearchRequest {
                    query: query.into(),
                    root: root.into(),
                    walk: WalkOptions::default(),
                    limit: 100,
                },
            )
            .unwrap();
            rel(root, &state.paths)
        };
        assert_eq!(run("MAIN"), ["src/main.rs"]);
        assert_eq!(run("*.md"), ["docs/guide.md"]);
        assert_eq!(run("src"), ["src"]);
    }

    #[test]
    fn grep_finds_text_skips_binary_junk_and_caps() {
        let dir = tree();
        let root = dir.path();
        let opener = Opener::rooted(root);
        let request = GrepRequest {
            pattern: "hello".into(),
            root: root.into(),
            glob: None,
            case_insensitive: true,
            fixed_strings: false,
            walk: WalkOptions::default(),
            max_matches: 100,
            max_line_chars: 200,
        };
        let state = grep(&opener, &request).unwrap();
        let found: Vec<(String, u64)> = state
            .matches
            .iter()
            .map(|m| (rel(root, std::slice::from_ref(&m.path))[0].clone(), m.line))
            .collect();
        assert_eq!(found, [("docs/guide.md".into(), 1), ("src/lib.rs".into(), 1), ("src/main.rs".into(), 2)]);
        assert_eq!(state.matches[2].text, "    println!(\"Hello\");");

        let only_rs = grep(
            &opener,
            &GrepRequest { glob: Some("*.rs".into()), case_insensitive: false, ..request.clone() },
        )
        .unwrap();
        assert_eq!(only_rs.matches.len(), 1);
        let capped = grep(&opener, &GrepRequest { max_matches: 1, ..request.clone() }).unwrap();
        assert_eq!((capped.matches.len(), capped.truncated), (1, true));
        let cut = grep(
            &opener,
            &GrepRequest { max_line_chars: 5, glob: Some("main.rs".into()), ..request.clone() },
        )
        .unwrap();
        assert_eq!(cut.matches[0].text, "    p… [cut]");
        let literal = grep(
            &opener,
            &GrepRequest { pattern: "println!(".into(), fixed_strings: true, ..request.clone() },
        )
        .unwrap();
        assert_eq!(literal.matches.len(), 1);
        assert!(matches!(
            grep(&opener, &GrepRequest { pattern: "(".into(), ..request }),
            Err(ComputerError::InvalidPattern { .. })
        ));
    }
}
