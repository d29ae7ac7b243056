//! `activateSkill` and the `skill://` reader.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use computer_runtime::beneath::Opener;
use computer_runtime::files::{ReadLimits, ReadRequest};
use futures::future::BoxFuture;
use serde_json::{Value, json};
use tool_core::urls::Lines;
use tool_core::{
    CallContext, ErrorKind, FileBoundary, FileRoot, MissingService, OutsideFiles, Services, SkillInfo,
    SkillSet, SkillSource, ToolOutput, ToolRuntime, UrlReader, parse_arguments,
};

use crate::discover::{self, MAX_SKILL_FILE};
use crate::{ActivateArgs, SkillsApi};

/// Files of a skill listed at activation at most.
const MAX_LISTED_FILES: usize = 200;
/// Characters of arguments a skill's instructions take at most (`$ARGUMENTS` may stand many times).
const MAX_ARGUMENTS: usize = 4_000;

/// An opener of the skill's folder exactly as it was found: a folder swapped for a link since
/// (to `/`, to another tenant's folder) is not followed, and the session's protected paths stay
/// closed.
fn opener_of(skill: &SkillInfo, protected: &[PathBuf]) -> Opener {
    Opener::new(&FileBoundary {
        roots: vec![FileRoot::read_only(skill.dir.clone())],
        outside: OutsideFiles::Refuse,
        protected: protected.to_vec(),
        ..FileBoundary::default()
    })
}

/// Whether the skill's folder is still where it was found, with no link on the way (a check for
/// listing its files; reads go through [`opener_of`], which refuses such a folder by itself).
fn still_in_place(skill: &SkillInfo) -> bool {
    std::fs::canonicalize(&skill.dir).is_ok_and(|real| real == skill.dir)
}

/// How the model is shown a skill's folder: an operator's (on a server) by its address only.
fn shown_folder(skill: &SkillInfo) -> String {
    match skill.source {
        SkillSource::Operator => format!("skill://{}/", skill.name),
        _ => skill.dir.display().to_string(),
    }
}
/// Folder depth listed beneath a skill.
const MAX_LIST_DEPTH: usize = 4;

/// Runs `activateSkill` on the skills the pipeline hands each call ([`CallContext::skills`]).
#[derive(Debug, Clone, Default)]
pub struct SkillsRuntime;

/// Builds the runtime (it needs no service: the session's skills come with each call).
///
/// # Errors
///
/// Never; the signature is the registry's.
pub fn runtime(_services: &Services) -> Result<Arc<dyn ToolRuntime>, MissingService> {
    Ok(Arc::new(SkillsRuntime))
}

impl ToolRuntime for SkillsRuntime {
    fn execute<'a>(
        &'a self,
        api: &'a str,
        arguments: Value,
        context: &'a CallContext,
    ) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            match api.parse::<SkillsApi>() {
                Ok(SkillsApi::Activate) => match parse_arguments::<ActivateArgs>(api, arguments) {
                    Ok(args) => {
                        let skills = context.skills.clone();
                        let protected = context.sandbox.files.protected.clone();
                        let result = tokio::task::spawn_blocking(move || {
                            model_activation(&skills, &args.name, args.arguments.as_deref(), &protected)
                        })
                        .await;
                        result.unwrap_or_else(|e| {
                            ToolOutput::error(
                                ErrorKind::Execution,
                                format!("activating the skill failed: {e}"),
                            )
                        })
                    }
                    Err(output) => output,
                },
                Err(_) => ToolOutput::error(ErrorKind::UnknownTool, format!("skills has no api `{api}`")),
            }
        })
    }
}

fn model_activation(
    skills: &SkillSet,
    name: &str,
    arguments: Option<&str>,
    protected: &[PathBuf],
) -> ToolOutput {
    let Some(skill) = skills.get(name).filter(|s| s.model_invocable) else {
        return unknown(skills, name);
    };
    activate_within(skill, arguments, protected)
}

fn unknown(skills: &SkillSet, name: &str) -> ToolOutput {
    let names = skills.model_names();
    let hidden = skills.get(name).is_some_and(|s| !s.model_invocable);
    let message = if hidden {
        format!("the skill `{name}` is started only by the person (`/{name}`), not by the model")
    } else if names.is_empty() {
        "this session has no skills".to_owned()
    } else {
        format!("there is no skill `{name}`; the skills are: {}", names.join(", "))
    };
    ToolOutput::error(ErrorKind::InvalidArguments, message)
}

/// A skill's instructions as the model receives them (read again from its `SKILL.md`, so edits
/// since the session began count), with `$ARGUMENTS` replaced by `arguments` (or the arguments
/// appended when the text has no place for them) and the list of its other files.
pub fn activate(skill: &SkillInfo, arguments: Option<&str>) -> ToolOutput {
    activate_within(skill, arguments, &[])
}

fn activate_within(skill: &SkillInfo, arguments: Option<&str>, protected: &[PathBuf]) -> ToolOutput {
    let opener = opener_of(skill, protected);
    let bytes = match opener.read_prefix(&skill.file, MAX_SKILL_FILE + 1) {
        Ok(bytes) => bytes,
        Err(error) => {
            let error = error
                .to_string()
                .replace(&skill.dir.display().to_string(), &format!("skill://{}", skill.name));
            return ToolOutput::error(
                ErrorKind::NotFound,
                format!("the skill `{}` cannot be read now: {error}", skill.name),
            );
        }
    };
    if bytes.len() > MAX_SKILL_FILE {
        return ToolOutput::error(
            ErrorKind::Execution,
            format!(
                "the skill `{}` has grown past {} KiB and is not loaded",
                skill.name,
                MAX_SKILL_FILE / 1024
            ),
        );
    }
    let text = String::from_utf8_lossy(&bytes);
    let mut body = discover::body_of(&text).to_owned();
    let arguments = arguments.map(str::trim).filter(|a| !a.is_empty());
    if let Some(arguments) = arguments {
        if arguments.chars().count() > MAX_ARGUMENTS {
            return ToolOutput::error(
                ErrorKind::InvalidArguments,
                format!("the arguments are longer than {MAX_ARGUMENTS} characters; give the skill less"),
            );
        }
        if body.contains("$ARGUMENTS") {
            body = body.replace("$ARGUMENTS", arguments);
        } else {
            body.push_str(&format!("\n\nARGUMENTS: {arguments}"));
        }
    }
    let (files, more) = files(skill);
    let folder = shown_folder(skill);
    let mut content = format!(
        "<skill name=\"{}\" folder=\"{}\">\n{}\n</skill>",
        tool_core::render::xml_escape(&skill.name),
        tool_core::render::xml_escape(&folder),
        body.trim()
    );
    let others: Vec<&(String, u64)> = files.iter().filter(|(path, _)| !is_skill_file(path)).collect();
    if !others.is_empty() {
        let scripts = match skill.source {
            SkillSource::Operator => "scripts are for reading here: run what they do with your own tools",
            _ => "scripts run from the folder above",
        };
        content.push_str(&format!(
            "\n\nThe skill's files (read one with readFile \"skill://{}/PATH\"; {scripts}):",
            skill.name
        ));
        for (path, size) in &others {
            content.push_str(&format!("\n- {path} ({})", computer_runtime::format::size(*size)));
        }
        if more {
            content
                .push_str(&format!("\n- … more than {MAX_LISTED_FILES} files; list the folder for the rest"));
        }
    }
    ToolOutput::ok(content).with_state(json!({
        "name": skill.name,
        "description": skill.description,
        "source": skill.source.as_str(),
        "dir": folder,
        "lines": body.lines().count(),
        "files": others.iter().map(|(path, size)| json!({"path": path, "size": size})).collect::<Vec<_>>(),
        "allowed_tools": skill.allowed_tools,
    }))
}

fn is_skill_file(path: &str) -> bool {
    path == "SKILL.md" || path == "skill.md"
}

/// A skill's files (relative paths and sizes, sorted; its `SKILL.md` too), without hidden entries
/// or links, at most 200 (the flag says more were left out); none when its folder is no longer
/// where it was found.
pub fn files(skill: &SkillInfo) -> (Vec<(String, u64)>, bool) {
    if still_in_place(skill) { list_files(&skill.dir) } else { (Vec::new(), false) }
}

/// The files beneath `dir` (relative paths and sizes, sorted), without hidden entries or links,
/// at most [`MAX_LISTED_FILES`] (the flag says more were left out).
fn list_files(dir: &Path) -> (Vec<(String, u64)>, bool) {
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), 0usize)];
    let mut more = false;
    while let Some((folder, depth)) = stack.pop() {
        if more {
            break;
        }
        let Ok(entries) = std::fs::read_dir(&folder) else { continue };
        let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
        entries.sort_by_key(std::fs::DirEntry::file_name);
        for entry in entries {
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let Ok(kind) = entry.file_type() else { continue };
            let path = entry.path();
            if kind.is_dir() && depth < MAX_LIST_DEPTH {
                stack.push((path, depth + 1));
            } else if kind.is_file() {
                if out.len() >= MAX_LISTED_FILES {
                    more = true;
                    break;
                }
                let size = entry.metadata().map_or(0, |m| m.len());
                let relative = path.strip_prefix(dir).unwrap_or(&path).to_string_lossy().into_owned();
                out.push((relative, size));
            }
        }
    }
    out.sort();
    (out, more)
}

/// Reads `skill://NAME/PATH`: a file beneath a skill's folder (its `SKILL.md` without a path),
/// opened beneath that folder (no `..`, no link out), for the skills the model may activate.
#[derive(Debug, Clone, Copy, Default)]
pub struct SkillUrls;

impl UrlReader for SkillUrls {
    fn scheme(&self) -> &'static str {
        "skill"
    }

    fn describe(&self) -> &'static str {
        "a skill's files: skill://NAME/PATH"
    }

    fn read<'a>(
        &'a self,
        rest: &'a str,
        lines: Lines,
        context: &'a CallContext,
    ) -> BoxFuture<'a, ToolOutput> {
        let skills = context.skills.clone();
        let protected = context.sandbox.files.protected.clone();
        let rest = rest.to_owned();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || read_url(&skills, &rest, lines, &protected))
                .await
                .unwrap_or_else(|e| ToolOutput::error(ErrorKind::Execution, format!("the read failed: {e}")))
        })
    }
}

fn read_url(skills: &SkillSet, rest: &str, lines: Lines, protected: &[PathBuf]) -> ToolOutput {
    let (name, path) = rest.split_once('/').unwrap_or((rest, ""));
    // Any skill of the session: who may start one is not who may read it (a skill a person
    // started points the model to its files).
    let Some(skill) = skills.get(name) else {
        return unknown(skills, name);
    };
    let relative = Path::new(path);
    if relative.components().any(|c| !matches!(c, Component::Normal(_))) {
        return ToolOutput::error(
            ErrorKind::InvalidArguments,
            format!("`skill://{rest}`: a path inside the skill's folder, without `..` or a leading `/`"),
        );
    }
    let file: PathBuf =
        if relative.as_os_str().is_empty() { skill.file.clone() } else { skill.dir.join(relative) };
    let opener = opener_of(skill, protected);
    let request = ReadRequest { path: file, offset: lines.offset, limit: lines.limit };
    match computer_runtime::files::read(&opener, &request, ReadLimits::default()) {
        Ok(mut state) => {
            // The model named it by its address; the folder on this machine is the skill's own.
            state.path = PathBuf::from(format!("skill://{name}/{path}"));
            let content =
                if lines.raw { state.content.clone() } else { computer_runtime::format::read(&state) };
            ToolOutput::ok(content).with_state_of(&state)
        }
        Err(error) => {
            let message =
                error.to_string().replace(&skill.dir.display().to_string(), &format!("skill://{name}"));
            ToolOutput::error(error.kind(), message)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listing_skips_hidden_files_and_links() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("scripts")).unwrap();
        std::fs::write(dir.path().join("SKILL.md"), "x").unwrap();
        std::fs::write(dir.path().join("scripts/run.py"), "print(1)").unwrap();
        std::fs::write(dir.path().join(".secret"), "x").unwrap();
        std::os::unix::fs::symlink("/etc", dir.path().join("etc")).unwrap();
        let (files, more) = list_files(dir.path());
        assert_eq!(files, vec![("SKILL.md".to_owned(), 1), ("scripts/run.py".to_owned(), 8)]);
        assert!(!more);
    }
}
