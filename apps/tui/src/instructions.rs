//! Project instructions: `AGENTS.md` files the agent reads in its system prompt, as codex and
//! Claude Code do. The person's own (`AGENTS.md` beside `config.toml`) always; the folder's and
//! those of the folders above it up to the repository root (the nearest folder holding `.git`)
//! only when the folder is trusted ([`crate::trust`]). In each folder `AGENTS.md` is read, or
//! `CLAUDE.md` where there is none. Outer files come first, so nearer (more specific) ones are
//! read last.

use std::io::Read as _;
use std::path::{Path, PathBuf};

/// Bytes of instructions put in the system prompt at most (codex's default too); the rest is
/// left out and the card says so.
pub const BUDGET: usize = 32 * 1024;

/// The instructions found for a folder, as they go to the model.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Instructions {
    /// Each file read, with the bytes it gave.
    pub sources: Vec<(PathBuf, usize)>,
    /// Project files found but not read: the folder is not trusted.
    pub untrusted: Vec<PathBuf>,
    /// Bytes left out past [`BUDGET`].
    pub cut: usize,
    /// The section of the system prompt (empty without sources).
    pub prompt: String,
}

/// The person's own instructions file, when it exists.
pub fn global_file() -> Option<PathBuf> {
    agent::config::default_path().map(|p| p.with_file_name("AGENTS.md")).filter(|p| p.is_file())
}

/// The project's instruction files of `folder`, outermost first: in `folder` and each folder
/// above it up to the repository root (only `folder` outside a repository), `AGENTS.md` or else
/// `CLAUDE.md`.
pub fn project_files(folder: &Path) -> Vec<PathBuf> {
    let root = folder.ancestors().find(|dir| dir.join(".git").exists()).unwrap_or(folder);
    let mut files: Vec<PathBuf> = folder
        .ancestors()
        .take_while(|dir| dir.starts_with(root))
        .filter_map(|dir| ["AGENTS.md", "CLAUDE.md"].iter().map(|name| dir.join(name)).find(|p| p.is_file()))
        .collect();
    files.reverse();
    files
}

/// The instructions for `folder`: the person's own, and the project's when the folder is trusted
/// (asked of `journal`; without one, or when it cannot answer, it is not).
pub async fn for_folder(journal: Option<&dyn journal::Journal>, folder: &Path) -> Instructions {
    let files = project_files(folder);
    let trusted = match journal {
        Some(journal) if !files.is_empty() => {
            crate::trust::trusted_by(journal, folder).await.ok().flatten().is_some()
        }
        _ => false,
    };
    Instructions::load(global_file().as_deref(), &files, trusted)
}

impl Instructions {
    /// Reads `global` and, when `trusted`, the project's `files` (else lists them as untrusted),
    /// within [`BUDGET`].
    pub fn load(global: Option<&Path>, files: &[PathBuf], trusted: bool) -> Self {
        let mut out = Self::default();
        let readable =
            global.into_iter().map(Path::to_path_buf).chain(files.iter().filter(|_| trusted).cloned());
        let mut body = String::new();
        for path in readable {
            let Some((text, whole)) = read_at_most(&path, BUDGET + 1) else { continue };
            // A file read only in part ends at its last whole line.
            let partial = text.len() < whole;
            let text = if partial { text.rfind('\n').map_or("", |end| &text[..end]) } else { &text };
            let text = text.trim();
            if text.is_empty() {
                continue;
            }
            let room = BUDGET.saturating_sub(body.len());
            let kept = cut_at(text, room);
            if partial || kept.len() < text.len() {
                out.cut += whole.saturating_sub(kept.len());
            }
            if kept.is_empty() {
                continue;
            }
            body.push_str(&format!("## {}\n\n{kept}\n\n", path.display()));
            out.sources.push((path, kept.len()));
        }
        if !trusted {
            out.untrusted = files.to_vec();
        }
        if !body.is_empty() {
            out.prompt = format!(
                "# Instructions from AGENTS.md files\n\nThe person's and this project's instructions. Follow \
                 them; where they disagree, the later (nearer the working directory) one wins, and the \
                 person's requests in the conversation win over all of them.\n\n{}",
                body.trim_end()
            );
        }
        out
    }

    /// What the card shown once says.
    pub fn describe(&self) -> Vec<(String, bool)> {
        let mut lines = Vec::new();
        if !self.sources.is_empty() {
            let files: Vec<String> =
                self.sources.iter().map(|(p, n)| format!("{} ({})", p.display(), bytes(*n))).collect();
            lines.push((format!("instructions in use: {}", files.join(", ")), false));
        }
        if self.cut > 0 {
            lines.push((
                format!(
                    "{} of instructions past the {} budget were left out",
                    bytes(self.cut),
                    bytes(BUDGET)
                ),
                true,
            ));
        }
        if !self.untrusted.is_empty() {
            let files: Vec<String> = self.untrusted.iter().map(|p| p.display().to_string()).collect();
            lines.push((
                format!(
                    "not used: {} — this folder is not trusted. /trust uses its instructions from now on \
                     (remembered; F3, then r, revokes it)",
                    files.join(", ")
                ),
                true,
            ));
        }
        lines
    }
}

fn bytes(n: usize) -> String {
    if n >= 1024 { format!("{:.1} KiB", n as f64 / 1024.0) } else { format!("{n} B") }
}

/// The first `limit` bytes of a file as text (invalid UTF-8 replaced), and the file's whole
/// length; `None` when unreadable.
fn read_at_most(path: &Path, limit: usize) -> Option<(String, usize)> {
    let file = std::fs::File::open(path).ok()?;
    let whole = usize::try_from(file.metadata().ok()?.len()).unwrap_or(usize::MAX);
    let mut bytes = Vec::new();
    file.take(limit as u64).read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    Some((text, whole.max(bytes.len())))
}

/// `text` cut to at most `room` bytes, at a line end where there is one.
fn cut_at(text: &str, room: usize) -> &str {
    if text.len() <= room {
        return text;
    }
    let mut end = room;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    match text[..end].rfind('\n') {
        Some(line) if line > 0 => &text[..line],
        _ => &text[..end],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_from_the_repository_root_down_agents_before_claude() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let (repo, deep) = (root.join("repo"), root.join("repo/crates/a"));
        std::fs::create_dir_all(repo.join(".git")).unwrap();
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::write(root.join("AGENTS.md"), "outside the repository").unwrap();
        std::fs::write(repo.join("AGENTS.md"), "root rules").unwrap();
        std::fs::write(repo.join("CLAUDE.md"), "ignored: AGENTS.md is here").unwrap();
        std::fs::write(deep.join("CLAUDE.md"), "crate rules").unwrap();
        let files = project_files(&deep);
        assert_eq!(files, vec![repo.join("AGENTS.md"), deep.join("CLAUDE.md")]);
        assert_eq!(Instructions::load(None, &files, true).cut, 0, "small files are read whole");

        let trusted = Instructions::load(None, &files, true);
        let root_at = trusted.prompt.find("root rules").unwrap();
        assert!(trusted.prompt.find("crate rules").unwrap() > root_at, "nearer comes later");
        assert!(!trusted.prompt.contains("outside the repository") && !trusted.prompt.contains("ignored"));
        let untrusted = Instructions::load(None, &files, false);
        assert_eq!((untrusted.prompt.as_str(), untrusted.untrusted.len()), ("", 2));
        assert!(untrusted.describe()[0].0.contains("/trust"));
    }

    /// Trust is remembered in the journal, covers the folders below, and only then are a
    /// project's instructions read.
    #[tokio::test]
    async fn a_projects_instructions_are_read_once_its_folder_is_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let (project, sub) = (root.join("project"), root.join("project/sub"));
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(project.join("AGENTS.md"), "Run `make check` before saying done.").unwrap();
        let journal =
            journal::open(&format!("sqlite://{}", root.join("journal.db").display())).await.unwrap();
        let before = for_folder(Some(journal.as_ref()), &project).await;
        assert_eq!((before.prompt.as_str(), before.untrusted.len()), ("", 1), "not trusted yet");
        crate::trust::trust(journal.as_ref(), &project).await.unwrap();
        let after = for_folder(Some(journal.as_ref()), &project).await;
        assert!(after.prompt.contains("Run `make check` before saying done."), "{}", after.prompt);
        assert_eq!(crate::trust::trusted_by(journal.as_ref(), &sub).await.unwrap(), Some(project.clone()));
        assert_eq!(crate::trust::trusted_by(journal.as_ref(), &root).await.unwrap(), None, "not above it");
        // The decision is listed (and revoked) with the folder's "always" answers.
        let listed =
            journal.remembered(crate::setup::TENANT, Some(&project.display().to_string())).await.unwrap();
        let decision = listed.iter().find(|d| d.tool == crate::trust::TOOL).expect("listed");
        journal.revoke(crate::setup::TENANT, &decision.id).await.unwrap();
        assert_eq!(for_folder(Some(journal.as_ref()), &project).await.prompt, "", "revoked");
    }

    #[test]
    fn the_budget_cuts_at_a_line_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("AGENTS.md");
        std::fs::write(&big, "- keep tests green\n".repeat(3000)).unwrap();
        let loaded = Instructions::load(None, std::slice::from_ref(&big), true);
        assert!(loaded.sources[0].1 <= BUDGET && loaded.cut > 0, "{:?} cut {}", loaded.sources, loaded.cut);
        assert!(loaded.prompt.trim_end().ends_with("- keep tests green"), "cut at a line end");
        assert!(loaded.describe().iter().any(|(text, warning)| *warning && text.contains("left out")));
    }
}
