//! `@path` in a prompt: completion of the folder's files while typing, and the file attached to
//! the message when it is sent (its text after the person's words, as codex and Claude Code do).

use std::path::Path;

/// Files listed for completion at most.
pub const LIST_LIMIT: usize = 20_000;
/// Bytes of one attached file at most (the rest is left out, and the message says so).
pub const FILE_LIMIT: usize = 64 * 1024;
/// Bytes of all files attached to one message at most.
pub const TOTAL_LIMIT: usize = 256 * 1024;

/// Folders never listed: version control, dependencies and build output.
const SKIPPED: &[&str] = &[".git", "node_modules", "target", ".venv", "venv", "__pycache__", "dist", "build"];

/// The folder's files as paths relative to it, `/`-separated, sorted; hidden folders and
/// [`SKIPPED`] ones left out; at most [`LIST_LIMIT`].
pub fn list_files(folder: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![folder.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let Ok(kind) = entry.file_type() else { continue };
            if kind.is_dir() {
                if !name.starts_with('.') && !SKIPPED.contains(&name.as_ref()) {
                    stack.push(entry.path());
                }
            } else if kind.is_file()
                && let Ok(relative) = entry.path().strip_prefix(folder)
            {
                out.push(relative.to_string_lossy().replace('\\', "/"));
                if out.len() >= LIST_LIMIT {
                    out.sort();
                    return out;
                }
            }
        }
    }
    out.sort();
    out
}

/// The files of `files` that match what follows `@`, best first: a file name starting with it,
/// then a path containing it (case-insensitively), shorter paths first; at most `limit`.
pub fn complete(files: &[String], typed: &str, limit: usize) -> Vec<String> {
    let typed = typed.to_lowercase();
    let mut scored: Vec<(u8, usize, &String)> = files
        .iter()
        .filter_map(|path| {
            let lower = path.to_lowercase();
            let name = lower.rsplit('/').next().unwrap_or(&lower);
            let rank = if lower.starts_with(&typed) {
                0
            } else if name.starts_with(&typed) {
                1
            } else if lower.contains(&typed) {
                2
            } else {
                return None;
            };
            Some((rank, path.len(), path))
        })
        .collect();
    scored.sort();
    scored.into_iter().take(limit).map(|(_, _, path)| path.clone()).collect()
}

/// What sending a message attached.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attached {
    /// The message as the model gets it: the person's words, then each file.
    pub text: String,
    /// Each file attached, with the bytes sent.
    pub files: Vec<(String, usize)>,
    /// What was named but not attached, and why.
    pub skipped: Vec<String>,
}

/// Attaches every `@path` of `message` that names a text file inside `folder`. Each is opened
/// once beneath a handle on the folder (the runtime's `Opener`, nothing outside it), so a link
/// cannot lead the read elsewhere.
pub fn expand(folder: &Path, message: &str) -> Attached {
    let opener = computer_runtime::beneath::Opener::new(&tool_core::FileBoundary {
        roots: vec![tool_core::FileRoot::read_only(folder)],
        outside: tool_core::OutsideFiles::Refuse,
        ..tool_core::FileBoundary::default()
    });
    let mut out = Attached { text: message.to_owned(), ..Attached::default() };
    let mut total = 0;
    let mut seen: Vec<String> = Vec::new();
    for word in message.split_whitespace() {
        let Some(named) = word.strip_prefix('@') else { continue };
        let named = named.trim_end_matches([',', '.', ';', ':', ')', '?', '!']);
        if named.is_empty() || seen.iter().any(|s| s == named) {
            continue;
        }
        seen.push(named.to_owned());
        let path = computer_runtime::scope::lexical(&folder.join(named));
        let bytes = match opener.read_prefix(&path, TOTAL_LIMIT + 1) {
            Ok(bytes) => bytes,
            // A word that only looks like a path (`@team`) is left as it is.
            Err(computer_runtime::ComputerError::NotFound { .. }) => continue,
            Err(_) if !path.starts_with(folder) || std::fs::symlink_metadata(&path).is_ok() => {
                out.skipped.push(format!("@{named}: not a file inside this folder"));
                continue;
            }
            Err(_) => continue,
        };
        let Ok(text) = String::from_utf8(bytes) else {
            out.skipped.push(format!("@{named}: not text"));
            continue;
        };
        let room = FILE_LIMIT.min(TOTAL_LIMIT.saturating_sub(total));
        if room == 0 {
            out.skipped
                .push(format!("@{named}: past the {} KiB of files one message carries", TOTAL_LIMIT / 1024));
            continue;
        }
        let mut end = text.len().min(room);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let cut = if end < text.len() {
            format!("\n[… the rest ({} bytes shown) was left out; read the file for it]", end)
        } else {
            String::new()
        };
        out.text.push_str(&format!("\n\n<file path=\"{named}\">\n{}{cut}\n</file>", &text[..end]));
        total += end;
        out.files.push((named.to_owned(), end));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_listed_completed_and_attached_from_inside_the_folder_only() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("src/ui")).unwrap();
        std::fs::create_dir_all(root.join("target/debug")).unwrap();
        std::fs::write(root.join("src/lib.rs"), "pub fn answer() -> u8 { 42 }\n").unwrap();
        std::fs::write(root.join("src/ui/view.rs"), "// view\n").unwrap();
        std::fs::write(root.join("target/debug/out.rs"), "skipped").unwrap();
        std::fs::write(root.join("README.md"), "# hello\n").unwrap();
        let files = list_files(&root);
        assert_eq!(files, ["README.md", "src/lib.rs", "src/ui/view.rs"]);
        assert_eq!(complete(&files, "lib", 8), ["src/lib.rs"]);
        assert_eq!(complete(&files, "src/", 8), ["src/lib.rs", "src/ui/view.rs"]);
        assert_eq!(complete(&files, "V", 8), ["src/ui/view.rs"]);

        let outside = root.parent().unwrap().join("outside-secret.txt");
        std::fs::write(&outside, "secret").ok();
        let attached = expand(&root, "explain @src/lib.rs, and @../outside-secret.txt please");
        assert_eq!(attached.files, vec![("src/lib.rs".to_owned(), 29)]);
        assert!(attached.text.starts_with("explain @src/lib.rs, and @../outside-secret.txt please\n\n<file path=\"src/lib.rs\">\npub fn answer()"));
        assert!(!attached.text.contains("secret\n"), "{}", attached.text);
        assert_eq!(attached.skipped, ["@../outside-secret.txt: not a file inside this folder"]);
        // A link inside that leads out is not followed out.
        std::os::unix::fs::symlink(&outside, root.join("peek.txt")).unwrap();
        let linked = expand(&root, "see @peek.txt");
        assert!(linked.files.is_empty() && !linked.text.contains("secret"), "{linked:?}");
        assert_eq!(linked.skipped, ["@peek.txt: not a file inside this folder"]);
        std::fs::remove_file(outside).ok();
    }
}
