//! Commands known to only read inside the working directory: `ls`, `cat src/lib.rs`,
//! `git status`, `git diff | head -50`. In manual mode they run without asking, as they would in
//! Codex and Claude Code; the table in `README.md` ("Known read-only commands") lists them.
//!
//! The answer is yes only when the whole command line parses and every part of it is understood:
//! simple commands (no subshells, groups, loops, functions or `(( ))`), no variable assignments,
//! no expansions of any kind (`$…`, `` ` ``, `~`, globs), no redirection but `2>/dev/null`-style
//! discards and `2>&1`, and each command one of a short list (`ls`, `cat`, `head`, `tail`, `wc`, `grep`, `pwd`,
//! `git status|diff|log|show`, each with its conditions below) with its path arguments resolving
//! (links followed) inside the working directory. Anything else, including a flag this module
//! does not know to be harmless where it matters (`tail -f`, `grep -f`, `git diff --output`), is
//! "not known": the command asks as any other does. Like the audit, this reads the command only;
//! the sandbox still contains what runs. Paths are judged when the call is decided: a link
//! swapped in before the command starts (by a background command the person let run) is the
//! sandbox's to contain, as for any command.

use std::path::{Component, Path, PathBuf};

use super::{Body, Command, Quoting, RedirectKind, Script, Word, parse_script};

/// Whether `command` is known to only read inside `working_directory` (see the module docs).
/// Without a working directory nothing is known.
pub fn known_read_only(command: &str, working_directory: Option<&Path>) -> bool {
    let Some(folder) = working_directory.and_then(|dir| std::fs::canonicalize(dir).ok()) else {
        return false;
    };
    let (script, error) = parse_script(command, 0);
    if error.is_some() || script.pipelines.is_empty() {
        return false;
    }
    script_reads_only(&script, &folder)
}

fn script_reads_only(script: &Script, folder: &Path) -> bool {
    script.pipelines.iter().all(|pipeline| {
        !pipeline.background && pipeline.commands.iter().all(|c| command_reads_only(c, folder))
    })
}

fn command_reads_only(command: &Command, folder: &Path) -> bool {
    let Body::Simple { assignments, words } = &command.body else { return false };
    if !assignments.is_empty() || !command.redirects.iter().all(harmless_redirect) {
        return false;
    }
    let mut texts = Vec::with_capacity(words.len());
    for word in words {
        if !plain(word) {
            return false;
        }
        texts.push(word.text());
    }
    let Some((name, arguments)) = texts.split_first() else { return false };
    let arguments: Vec<&str> = arguments.iter().map(String::as_str).collect();
    let plain_reader = |long: &[&str], short: &str| {
        !flags(&arguments).any(|f| refused(f, long, short)) && paths_inside(operands(&arguments), folder)
    };
    match name.as_str() {
        "pwd" => arguments.is_empty(),
        "ls" => plain_reader(&["--dereference", "--dereference-command-line"], "L"),
        "cat" | "head" => plain_reader(&[], ""),
        "tail" => plain_reader(&["--follow", "--retry"], "fF"),
        "wc" => plain_reader(&["--files0-from"], ""),
        "grep" => grep_reads_only(&arguments, folder),
        "git" => git_reads_only(&arguments, folder),
        _ => false,
    }
}

/// Whether `flag` is one of the `long` options or holds one of the `short` letters. A long option
/// counts by any prefix too (`--fi=x` is `--file=x`: GNU tools and git take an unambiguous
/// abbreviation), and by its name before `=`.
fn refused(flag: &str, long: &[&str], short: &str) -> bool {
    match flag.strip_prefix("--") {
        Some(rest) => {
            let name = rest.split('=').next().unwrap_or_default();
            !name.is_empty() && long.iter().any(|option| option[2..].starts_with(name))
        }
        None => flag.chars().skip(1).any(|c| short.contains(c)),
    }
}

/// A word with nothing the shell would expand: no `$`, backquote or substitution, no unquoted
/// `~` at its start, no unquoted glob character.
fn plain(word: &Word) -> bool {
    if !word.subs.is_empty() {
        return false;
    }
    let expands = word.chars.iter().enumerate().any(|(i, (c, quoting))| match quoting {
        Quoting::Literal => false,
        Quoting::Double => matches!(c, '$' | '`'),
        Quoting::Bare => matches!(c, '$' | '`' | '*' | '?' | '[' | '{') || (i == 0 && *c == '~'),
    });
    !expands && !word.text().is_empty()
}

/// `2>/dev/null`, `>/dev/null` and `2>&1`: nothing written anywhere.
fn harmless_redirect(redirect: &super::Redirect) -> bool {
    let target = redirect.target.text();
    match redirect.kind {
        RedirectKind::Write => target == "/dev/null",
        RedirectKind::Duplicate => {
            !target.is_empty() && target.chars().all(|c| c.is_ascii_digit() || c == '-')
        }
        RedirectKind::Read | RedirectKind::HereDoc | RedirectKind::HereString => false,
    }
}

fn flags<'a>(arguments: &'a [&'a str]) -> impl Iterator<Item = &'a str> + 'a {
    arguments.iter().copied().take_while(|a| *a != "--").filter(|a| a.starts_with('-') && *a != "-")
}

/// The arguments that are not flags (everything after `--`).
fn operands<'a>(arguments: &'a [&'a str]) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut after_dashes = false;
    for argument in arguments {
        if after_dashes {
            out.push(*argument);
        } else if *argument == "--" {
            after_dashes = true;
        } else if !argument.starts_with('-') || *argument == "-" {
            out.push(*argument);
        }
    }
    out
}

/// Every path resolves inside `folder`: links followed where the path exists, `..` resolved
/// lexically where it does not. `-` (standard input) reads nothing on disk.
fn paths_inside(paths: Vec<&str>, folder: &Path) -> bool {
    paths.into_iter().all(|path| path == "-" || inside(path, folder))
}

fn inside(path: &str, folder: &Path) -> bool {
    let joined = folder.join(path);
    if let Ok(real) = std::fs::canonicalize(&joined) {
        return real.starts_with(folder);
    }
    let mut normal = PathBuf::new();
    for component in joined.components() {
        match component {
            Component::ParentDir => {
                if !normal.pop() {
                    return false;
                }
            }
            Component::CurDir => {}
            other => normal.push(other),
        }
    }
    // A missing path under a link that leads out is still outside: check its nearest ancestor
    // that exists.
    let existing = normal.ancestors().find_map(|a| std::fs::canonicalize(a).ok());
    normal.starts_with(folder) && existing.is_some_and(|real| real.starts_with(folder))
}

fn grep_reads_only(arguments: &[&str], folder: &Path) -> bool {
    // A pattern given by option (or read from a file) would make the first operand a file.
    let long = ["--file", "--regexp", "--dereference-recursive", "--exclude-from"];
    if flags(arguments).any(|f| refused(f, &long, "efR")) {
        return false;
    }
    // The first operand is the pattern; the rest are paths (none: standard input, or the
    // working directory with -r).
    let operands = operands(arguments);
    paths_inside(operands.into_iter().skip(1).collect(), folder)
}

fn git_reads_only(arguments: &[&str], folder: &Path) -> bool {
    // The repository must be the folder's own `.git` folder: its configuration and hooks are
    // read-only to commands and ask every time through the file tools. A `.git` file pointing
    // elsewhere (whose configuration the agent may have written, `core.fsmonitor` and all), or a
    // repository above the folder (whose files lie outside it), is not.
    let own = std::fs::symlink_metadata(folder.join(".git")).is_ok_and(|meta| meta.is_dir());
    // No option before the subcommand: `-c` sets configuration (a pager, an external diff),
    // `-C`/`--git-dir`/`--work-tree` point at another repository.
    let Some((subcommand, rest)) = arguments.split_first() else { return false };
    if !own || !matches!(*subcommand, "status" | "diff" | "log" | "show") {
        return false;
    }
    let long = ["--output", "--ext-diff", "--textconv", "--no-index", "--open-files-in-pager"];
    !rest.iter().any(|a| a.starts_with('-') && refused(a, &long, "O"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("src/lib.rs"), "fn main() {}\n").unwrap();
        std::os::unix::fs::symlink("/etc", dir.path().join("out")).unwrap();
        std::fs::create_dir(dir.path().join(".git")).unwrap();
        dir
    }

    #[test]
    fn reading_inside_the_folder_is_known() {
        let dir = folder();
        for command in [
            "ls",
            "ls -la src",
            "pwd",
            "cat src/lib.rs",
            "head -n 20 src/lib.rs",
            "tail -n 5 src/lib.rs",
            "wc -l src/lib.rs",
            "grep -rn main src",
            "grep -n 'fn main' src/lib.rs",
            "git status",
            "git status --short",
            "git diff",
            "git log --oneline -5",
            "git diff | head -50",
            "git show HEAD:src/lib.rs",
            "cat src/lib.rs 2>/dev/null",
            "ls src && cat src/lib.rs",
            "cat 'src/lib.rs'",
            "cat src/new-file.rs",
        ] {
            assert!(known_read_only(command, Some(dir.path())), "{command}");
        }
    }

    #[test]
    fn anything_else_is_not_known() {
        let dir = folder();
        for command in [
            "cat /etc/hostname",
            "cat ../secret",
            "cat src/../../secret",
            "cat out/hostname",
            "cat out/missing",
            "ls -L out",
            "ls /",
            "cat ~/.ssh/id_rsa",
            "cat $HOME/.bashrc",
            "cat \"$FILE\"",
            "cat $(echo src/lib.rs)",
            "cat `echo x`",
            "cat src/*.rs",
            "cat src/lib.rs > copy.rs",
            "cat src/lib.rs >> copy.rs",
            "cat < /etc/hostname",
            "cat src/lib.rs | tee copy.rs",
            "cat src/lib.rs | sh",
            "tail -f src/lib.rs",
            "tail --follow src/lib.rs",
            "grep -f /etc/patterns src",
            "grep -e x /etc/hostname",
            "grep -R main .",
            "grep -r --exclude-from=/etc/list main .",
            "grep main /etc/hostname",
            "wc --files0-from=/etc/list",
            // GNU tools and git take an unambiguous abbreviation of a long option.
            "grep --reg=x /etc/hostname",
            "grep --fi=/etc/patterns src",
            "wc --files0=/etc/list",
            "ls --deref out",
            "tail --fo src/lib.rs",
            "git diff --out=/tmp/x",
            "git diff --ext",
            "git -c core.pager=evil log",
            "git -C /tmp status",
            "git diff --output=/tmp/x",
            "git diff --ext-diff",
            "git diff --no-index /etc/hostname src/lib.rs",
            "git log -O/etc/order",
            "git push",
            "git commit -m x",
            "git branch new",
            "FOO=1 cat src/lib.rs",
            "cat src/lib.rs &",
            "(cat src/lib.rs)",
            "{ cat src/lib.rs; }",
            "for f in a; do cat $f; done",
            "rm -rf src",
            "cat 'unterminated",
            "",
            "echo hi",
            "find . -delete",
        ] {
            assert!(!known_read_only(command, Some(dir.path())), "{command}");
        }
        assert!(!known_read_only("ls", None), "no folder, nothing known");
        // git only where the folder's own `.git` is a folder: not a `.git` file pointing at a
        // repository whose configuration could be anyone's, not a repository above the folder.
        let pointed = tempfile::tempdir().unwrap();
        std::fs::write(pointed.path().join(".git"), "gitdir: elsewhere\n").unwrap();
        let inner = dir.path().join("src");
        for (folder, why) in [(pointed.path(), "a .git file"), (inner.as_path(), "a repository above")] {
            assert!(!known_read_only("git status", Some(folder)), "{why}");
            assert!(known_read_only("ls", Some(folder)), "{why}: other commands stay known");
        }
    }
}
