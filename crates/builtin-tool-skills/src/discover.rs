//! Finding and reading skills: folders beneath a skills folder that hold a `SKILL.md` (or
//! `skill.md`) with YAML front matter, per the agentskills.io specification.
//!
//! Lenient like the clients people use: what breaks the specification but can still be loaded
//! (a name that is not the folder's, a long description, Claude Code's extra fields, front matter
//! that is not valid YAML but has `name:` and `description:` lines) loads with a warning; only
//! what cannot be used is refused (no description, a name that cannot be called, no front
//! matter, a file that is not text).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tool_core::{SkillInfo, SkillSource};

/// The most bytes of a `SKILL.md` read.
pub const MAX_SKILL_FILE: usize = 256 * 1024;
/// The most skills taken from one skills folder.
pub const MAX_SKILLS_PER_ROOT: usize = 500;
/// The specification's limits.
pub const MAX_NAME: usize = 64;
/// The specification's limit on descriptions, in characters.
pub const MAX_DESCRIPTION: usize = 1024;
/// The specification's limit on `compatibility`, in characters.
pub const MAX_COMPATIBILITY: usize = 500;

/// Fields of the specification.
const SPEC_FIELDS: &[&str] =
    &["name", "description", "license", "compatibility", "metadata", "allowed-tools"];
/// Claude Code's fields Toolhost honours (outside the specification: noted, not refused).
const HONOURED_FIELDS: &[&str] = &["disable-model-invocation", "user-invocable", "argument-hint"];
/// Fields other clients read that Toolhost does not use.
const OTHER_CLIENTS_FIELDS: &[&str] = &["model", "context", "agent", "hooks", "version", "when_to_use"];

/// A folder holding skill folders, and who vouches for what is in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillRoot {
    /// The folder (`…/.agents/skills`).
    pub dir: PathBuf,
    /// Where it counts as coming from.
    pub source: SkillSource,
    /// Its skills must really be inside it (a project's: a skill folder that is a link out of
    /// the project is not loaded). The person's own may be links, as dotfiles often are.
    pub contained: bool,
}

impl SkillRoot {
    /// A root whose skill folders may be links anywhere.
    pub fn new(dir: impl Into<PathBuf>, source: SkillSource) -> Self {
        Self { dir: dir.into(), source, contained: false }
    }

    /// A root whose skill folders must really be inside it.
    pub fn contained(dir: impl Into<PathBuf>, source: SkillSource) -> Self {
        Self { contained: true, ..Self::new(dir, source) }
    }
}

/// Something found wrong with a skill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The skill's folder (or the skills folder).
    pub path: PathBuf,
    /// What is wrong, and what to do.
    pub message: String,
    /// The skill was not loaded.
    pub refused: bool,
}

/// What a scan found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Discovery {
    /// The skills loaded, in the order of the roots (the first of a name wins).
    pub skills: Vec<SkillInfo>,
    /// Warnings and refusals.
    pub problems: Vec<Problem>,
}

impl Discovery {
    /// The set a session is given.
    pub fn set(&self) -> tool_core::SkillSet {
        tool_core::SkillSet::new(self.skills.clone())
    }
}

/// The project skills folders of `folder`: `.agents/skills` and `.claude/skills` in it and in
/// each folder above it up to the repository root (the nearest folder holding `.git`; only
/// `folder` outside a repository), nearest first.
pub fn project_roots(folder: &Path) -> Vec<SkillRoot> {
    let root = folder.ancestors().find(|dir| dir.join(".git").exists()).unwrap_or(folder);
    let mut out = Vec::new();
    for dir in folder.ancestors().take_while(|dir| dir.starts_with(root)) {
        out.push(SkillRoot::contained(dir.join(".agents/skills"), SkillSource::Project));
    }
    for dir in folder.ancestors().take_while(|dir| dir.starts_with(root)) {
        out.push(SkillRoot::contained(dir.join(".claude/skills"), SkillSource::Claude));
    }
    out
}

/// The person's skills folders beneath `home`: `~/.agents/skills`, then `~/.claude/skills`.
pub fn user_roots(home: &Path) -> Vec<SkillRoot> {
    vec![
        SkillRoot::new(home.join(".agents/skills"), SkillSource::User),
        SkillRoot::new(home.join(".claude/skills"), SkillSource::Claude),
    ]
}

/// Whether any skills folder among `roots` exists (a front end asks for trust only then).
pub fn any_exists(roots: &[SkillRoot]) -> bool {
    roots.iter().any(|root| root.dir.is_dir())
}

/// Loads every skill beneath `roots`, in order; a name already loaded is reported and skipped.
pub fn discover(roots: &[SkillRoot]) -> Discovery {
    let mut out = Discovery::default();
    let mut seen_roots: Vec<PathBuf> = Vec::new();
    for root in roots {
        let Ok(canonical) = root.dir.canonicalize() else { continue };
        if seen_roots.contains(&canonical) {
            continue;
        }
        seen_roots.push(canonical.clone());
        let Ok(entries) = std::fs::read_dir(&canonical) else { continue };
        let mut dirs: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        dirs.sort();
        if dirs.len() > MAX_SKILLS_PER_ROOT {
            out.problems.push(Problem {
                path: canonical.clone(),
                message: format!(
                    "{} folders; only the first {MAX_SKILLS_PER_ROOT} (by name) are read",
                    dirs.len()
                ),
                refused: false,
            });
            dirs.truncate(MAX_SKILLS_PER_ROOT);
        }
        for dir in dirs {
            if root.contained && !dir.canonicalize().is_ok_and(|real| real.starts_with(&canonical)) {
                out.problems.push(Problem {
                    path: dir,
                    message: "the folder is a link out of the project's skills folder; a project's skills \
                              must be inside it"
                        .to_owned(),
                    refused: true,
                });
                continue;
            }
            if dir.join("SKILL.md").symlink_metadata().is_ok_and(|m| m.file_type().is_symlink()) {
                out.problems.push(Problem {
                    path: dir,
                    message:
                        "SKILL.md is a link; a skill's files are read beneath its folder only, so copy it in"
                            .to_owned(),
                    refused: true,
                });
                continue;
            }
            let Some(file) = skill_file(&dir) else { continue };
            match load(&dir, &file, root.source) {
                Ok((skill, warnings)) => {
                    out.problems.extend(warnings.into_iter().map(|message| Problem {
                        path: dir.clone(),
                        message,
                        refused: false,
                    }));
                    if let Some(first) = out.skills.iter().find(|s| s.name == skill.name) {
                        out.problems.push(Problem {
                            path: dir.clone(),
                            message: format!(
                                "the name `{}` is taken by {}; this one is not loaded",
                                skill.name,
                                first.dir.display()
                            ),
                            refused: true,
                        });
                        continue;
                    }
                    out.skills.push(skill);
                }
                Err(message) => out.problems.push(Problem { path: dir, message, refused: true }),
            }
        }
    }
    out
}

/// The `SKILL.md` of a skill folder (`skill.md` accepted too).
pub fn skill_file(dir: &Path) -> Option<PathBuf> {
    // A regular file, not a link: activation reads it beneath the folder, which a link leaves.
    ["SKILL.md", "skill.md"]
        .iter()
        .map(|name| dir.join(name))
        .find(|p| p.symlink_metadata().is_ok_and(|m| m.file_type().is_file()))
}

/// Reads one skill.
///
/// # Errors
///
/// Why it cannot be loaded, in words for the person.
pub fn load(dir: &Path, file: &Path, source: SkillSource) -> Result<(SkillInfo, Vec<String>), String> {
    let folder = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    // The folder as it really is (a person's skill may be a link to their dotfiles), its file
    // read beneath it, as activation will.
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let file = dir.join(file.file_name().unwrap_or_default());
    let text = read_text(&dir, &file)?;
    let parsed = parse(&text, &folder)?;
    let skill = SkillInfo {
        name: parsed.name,
        description: parsed.description,
        dir,
        file,
        source,
        model_invocable: !parsed.disable_model_invocation,
        user_invocable: parsed.user_invocable,
        argument_hint: parsed.argument_hint,
        allowed_tools: parsed.allowed_tools,
        license: parsed.license,
        compatibility: parsed.compatibility,
    };
    Ok((skill, parsed.warnings))
}

/// A skill's file's text, at most [`MAX_SKILL_FILE`] bytes, opened once beneath the skill's folder
/// `dir` (no link followed, as activation reads it: what was checked is what is read).
///
/// # Errors
///
/// Unreadable, a link, too large, or not UTF-8.
pub fn read_text(dir: &Path, file: &Path) -> Result<String, String> {
    let bytes = computer_runtime::beneath::Opener::rooted(dir)
        .read_prefix(file, MAX_SKILL_FILE + 1)
        .map_err(|e| format!("{} cannot be read: {e}", file.display()))?;
    if bytes.len() > MAX_SKILL_FILE {
        return Err(format!(
            "{} is larger than {} KiB; move detail into references/",
            file.display(),
            MAX_SKILL_FILE / 1024
        ));
    }
    String::from_utf8(bytes).map_err(|_| format!("{} is not UTF-8 text", file.display()))
}

/// A parsed `SKILL.md`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Parsed {
    /// The name the skill is called by.
    pub name: String,
    /// Its description.
    pub description: String,
    /// `license`.
    pub license: Option<String>,
    /// `compatibility`.
    pub compatibility: Option<String>,
    /// `allowed-tools`, split.
    pub allowed_tools: Vec<String>,
    /// `metadata`, as strings.
    pub metadata: BTreeMap<String, String>,
    /// `disable-model-invocation: true`.
    pub disable_model_invocation: bool,
    /// `user-invocable` (default true).
    pub user_invocable: bool,
    /// `argument-hint`.
    pub argument_hint: Option<String>,
    /// The Markdown after the front matter.
    pub body: String,
    /// What breaks the specification but was accepted.
    pub warnings: Vec<String>,
}

/// Splits `text` into front matter and body: the first line is `---` and the front matter ends
/// at the next line that is `---` (or `...`).
pub fn split_front_matter(text: &str) -> Option<(&str, &str)> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let rest = text.strip_prefix("---")?;
    let rest = rest.strip_prefix('\r').unwrap_or(rest);
    let rest = rest.strip_prefix('\n')?;
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        let trimmed = line.trim_end();
        if trimmed == "---" || trimmed == "..." {
            return Some((&rest[..offset], &rest[offset + line.len()..]));
        }
        offset += line.len();
    }
    None
}

/// The body of a `SKILL.md` (what follows its front matter; the whole text without one).
pub fn body_of(text: &str) -> &str {
    split_front_matter(text).map_or(text, |(_, body)| body).trim()
}

/// Parses a `SKILL.md` whose folder is named `folder`.
///
/// # Errors
///
/// Why it cannot be loaded.
pub fn parse(text: &str, folder: &str) -> Result<Parsed, String> {
    let Some((front, body)) = split_front_matter(text) else {
        return Err("SKILL.md does not start with YAML front matter (a `---` line, `name:` and \
                    `description:`, then `---`)"
            .to_owned());
    };
    let mut out = Parsed { user_invocable: true, body: body.trim().to_owned(), ..Parsed::default() };
    let fields = match yaml_serde::from_str::<yaml_serde::Value>(front) {
        Ok(yaml_serde::Value::Mapping(map)) => {
            let mut fields = BTreeMap::new();
            for (key, value) in map {
                match key {
                    yaml_serde::Value::String(key) => {
                        fields.insert(key, value);
                    }
                    other => {
                        out.warnings.push(format!("front matter key {other:?} is not a string; ignored"))
                    }
                }
            }
            fields
        }
        Ok(yaml_serde::Value::Null) => BTreeMap::new(),
        Ok(_) => return Err("the front matter is not a mapping of fields".to_owned()),
        Err(error) => {
            // Clients people use read `key: value` lines where YAML would not (a description
            // with a `: ` in it is the usual case).
            let fields = line_fields(front);
            if !fields.contains_key("description") {
                return Err(format!("the front matter is not valid YAML: {error}"));
            }
            out.warnings.push(format!(
                "the front matter is not valid YAML ({}); read line by line — quote values that hold `: `",
                first_line(&error.to_string())
            ));
            fields
        }
    };
    for key in fields.keys().map(String::as_str).filter(|key| !SPEC_FIELDS.contains(key)) {
        out.warnings.push(if HONOURED_FIELDS.contains(&key) {
            format!("`{key}` is Claude Code's field, not the specification's (honoured)")
        } else if OTHER_CLIENTS_FIELDS.contains(&key) {
            format!("`{key}` is another client's field, not the specification's (not used here)")
        } else {
            format!("unknown field `{key}` (the specification has {})", SPEC_FIELDS.join(", "))
        });
    }
    let text_of = |key: &str| -> Option<String> {
        match fields.get(key)? {
            yaml_serde::Value::String(s) => Some(s.clone()),
            yaml_serde::Value::Bool(b) => Some(b.to_string()),
            yaml_serde::Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    };

    let description = text_of("description").map(|d| d.trim().to_owned()).unwrap_or_default();
    if description.is_empty() {
        return Err(
            "`description` is missing or empty: the model would not know when to use the skill".to_owned()
        );
    }
    let length = description.chars().count();
    if length > MAX_DESCRIPTION {
        out.warnings.push(format!(
            "`description` is {length} characters; the specification allows {MAX_DESCRIPTION}"
        ));
    }
    out.description = description;

    let given = text_of("name").map(|n| n.trim().to_owned()).filter(|n| !n.is_empty());
    out.name = match given {
        Some(name) => {
            let problems = name_problems(&name);
            if problems.is_empty() {
                if name != folder {
                    out.warnings.push(format!("the name `{name}` is not the folder's name `{folder}`"));
                }
                name
            } else if callable(&name) {
                out.warnings.extend(problems);
                name
            } else if name_problems(folder).is_empty() || callable(folder) {
                out.warnings.extend(problems);
                out.warnings.push(format!("called by its folder's name `{folder}` instead"));
                folder.to_owned()
            } else {
                return Err(format!("the name `{name}` cannot be called: {}", problems.join("; ")));
            }
        }
        None if callable(folder) => {
            out.warnings.push(format!("`name` is missing; called by its folder's name `{folder}`"));
            folder.to_owned()
        }
        None => return Err("`name` is missing and the folder's name cannot be called".to_owned()),
    };

    out.license = text_of("license");
    if let Some(compatibility) = text_of("compatibility") {
        let length = compatibility.chars().count();
        if length > MAX_COMPATIBILITY {
            out.warnings.push(format!(
                "`compatibility` is {length} characters; the specification allows {MAX_COMPATIBILITY}"
            ));
        }
        out.compatibility = Some(compatibility);
    }
    match fields.get("allowed-tools") {
        None => {}
        Some(yaml_serde::Value::String(list)) => {
            out.allowed_tools = list.split([' ', ',']).filter(|t| !t.is_empty()).map(str::to_owned).collect();
        }
        Some(yaml_serde::Value::Sequence(items)) => {
            out.allowed_tools = items.iter().filter_map(|i| i.as_str().map(str::to_owned)).collect();
            if out.allowed_tools.len() != items.len() {
                out.warnings
                    .push("`allowed-tools` holds items that are not strings; they are ignored".into());
            }
        }
        Some(_) => out.warnings.push("`allowed-tools` is neither a string nor a list; ignored".into()),
    }
    match fields.get("metadata") {
        None => {}
        Some(yaml_serde::Value::Mapping(map)) => {
            for (key, value) in map {
                let key = scalar(key);
                let value = scalar(value);
                if let (Some(key), Some(value)) = (key, value) {
                    out.metadata.insert(key, value);
                }
            }
        }
        Some(_) => out.warnings.push("`metadata` is not a mapping; ignored".into()),
    }
    let flag = |key: &str| -> Option<bool> {
        match fields.get(key)? {
            yaml_serde::Value::Bool(b) => Some(*b),
            yaml_serde::Value::String(s) => match s.trim() {
                "true" => Some(true),
                "false" => Some(false),
                _ => None,
            },
            _ => None,
        }
    };
    out.disable_model_invocation = flag("disable-model-invocation").unwrap_or(false);
    out.user_invocable = flag("user-invocable").unwrap_or(true);
    out.argument_hint = match fields.get("argument-hint") {
        // `argument-hint: [file]` is YAML for a list; it was meant as the text.
        Some(yaml_serde::Value::Sequence(items)) => {
            Some(format!("[{}]", items.iter().filter_map(scalar).collect::<Vec<_>>().join(" ")))
        }
        _ => text_of("argument-hint"),
    };
    Ok(out)
}

fn scalar(value: &yaml_serde::Value) -> Option<String> {
    match value {
        yaml_serde::Value::String(s) => Some(s.clone()),
        yaml_serde::Value::Bool(b) => Some(b.to_string()),
        yaml_serde::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or(text)
}

/// `key: value` lines of front matter that YAML could not read (indented lines continue the
/// previous value).
fn line_fields(front: &str) -> BTreeMap<String, yaml_serde::Value> {
    let mut fields: BTreeMap<String, String> = BTreeMap::new();
    let mut last: Option<String> = None;
    for line in front.lines() {
        if line.starts_with([' ', '\t']) {
            if let Some(key) = &last
                && let Some(value) = fields.get_mut(key)
            {
                value.push(' ');
                value.push_str(line.trim());
            }
            continue;
        }
        let Some((key, value)) = line.split_once(':') else { continue };
        let key = key.trim();
        if key.is_empty() || key.contains(' ') {
            continue;
        }
        let value = value.trim();
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
            .unwrap_or(value);
        fields.insert(key.to_owned(), value.to_owned());
        last = Some(key.to_owned());
    }
    fields.into_iter().map(|(k, v)| (k, yaml_serde::Value::String(v))).collect()
}

/// What breaks the specification's naming rules (1–64 lowercase letters or digits and single
/// hyphens inside).
pub fn name_problems(name: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let length = name.chars().count();
    if length == 0 || length > MAX_NAME {
        problems.push(format!("a name has 1 to {MAX_NAME} characters (`{name}` has {length})"));
    }
    if name.chars().any(|c| c.is_uppercase()) {
        problems.push(format!("`{name}` is not lowercase"));
    }
    if !name.chars().all(|c| c.is_alphanumeric() || c == '-') {
        problems.push(format!("`{name}` holds characters other than letters, digits and hyphens"));
    }
    if name.starts_with('-') || name.ends_with('-') || name.contains("--") {
        problems.push(format!("`{name}` starts or ends with a hyphen or has two in a row"));
    }
    problems
}

/// Whether a name can be called even though it breaks the rules: one path segment of letters,
/// digits, `-`, `_` and `.`, 1–64 characters, not `.` or `..`.
fn callable(name: &str) -> bool {
    let length = name.chars().count();
    (1..=MAX_NAME).contains(&length)
        && name != "."
        && name != ".."
        && name.chars().all(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skill_by_the_specification() {
        let text = "---\nname: pdf-tools\ndescription: Fills PDF forms. Use when a form is mentioned.\nlicense: MIT\n\
                    allowed-tools: Bash(python:*) Read\nmetadata:\n  author: someone\n  version: 1.0\n---\n\n# PDF\n\nSteps.\n";
        let parsed = parse(text, "pdf-tools").unwrap();
        assert_eq!(parsed.name, "pdf-tools");
        assert_eq!(parsed.description, "Fills PDF forms. Use when a form is mentioned.");
        assert_eq!(parsed.allowed_tools, vec!["Bash(python:*)", "Read"]);
        assert_eq!(parsed.metadata.get("version").map(String::as_str), Some("1.0"));
        assert_eq!(parsed.body, "# PDF\n\nSteps.");
        assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
    }

    #[test]
    fn lenient_where_clients_are() {
        // Claude Code's fields, a name that is not the folder's, an unquoted `: `.
        let claude = "---\nname: Deploy\ndescription: Deploys\ndisable-model-invocation: true\nargument-hint: [env]\n---\nGo";
        let parsed = parse(claude, "deploy").unwrap();
        assert!(parsed.disable_model_invocation);
        assert_eq!(parsed.argument_hint.as_deref(), Some("[env]"));
        assert_eq!(parsed.name, "Deploy", "callable, kept with a warning");
        assert!(parsed.warnings.iter().any(|w| w.contains("not lowercase")), "{:?}", parsed.warnings);
        let colon = "---\nname: review\ndescription: Reviews code: style, bugs and tests\n---\nbody";
        let parsed = parse(colon, "review").unwrap();
        assert_eq!(parsed.description, "Reviews code: style, bugs and tests");
        let broken = "---\nname: x\ndescription: Use when: a: b\nmetadata: [unclosed\n---\n";
        let parsed = parse(broken, "x").unwrap();
        assert_eq!(parsed.description, "Use when: a: b");
        assert!(parsed.warnings.iter().any(|w| w.contains("not valid YAML")), "{:?}", parsed.warnings);
        let unknown = parse("---\nname: y\ndescription: d\ncolour: red\n---\n", "y").unwrap();
        assert!(unknown.warnings.iter().any(|w| w.contains("unknown field `colour`")));
        let unnamed = parse("---\ndescription: d\n---\n", "folder-name").unwrap();
        assert_eq!(unnamed.name, "folder-name");
        let spaced = parse("---\nname: My Skill\ndescription: d\n---\n", "my-skill").unwrap();
        assert_eq!(spaced.name, "my-skill", "a name with a space is called by its folder");
    }

    #[test]
    fn refused_when_it_cannot_load() {
        assert!(parse("# no front matter", "a").unwrap_err().contains("front matter"));
        assert!(parse("---\nname: a\n---\n", "a").unwrap_err().contains("description"));
        assert!(parse("---\nname: a\ndescription: \"\"\n---\n", "a").unwrap_err().contains("description"));
        assert!(parse("---\nname: a\ndescription: d\n", "a").unwrap_err().contains("front matter"));
        assert!(parse("---\n- a\n- b\n---\n", "a").unwrap_err().contains("mapping"));
        assert!(
            parse("---\nname: a/b\ndescription: d\n---\n", "a b").unwrap_err().contains("cannot be called")
        );
    }

    #[test]
    fn names() {
        assert!(name_problems("pdf-2").is_empty());
        assert!(name_problems("données").is_empty(), "Unicode lowercase letters are letters");
        assert!(!name_problems("-a").is_empty());
        assert!(!name_problems("a--b").is_empty());
        assert!(!name_problems(&"a".repeat(65)).is_empty());
        assert!(!name_problems("a_b").is_empty());
        assert!(callable("a_b") && !callable("..") && !callable("a/b"));
    }
}
