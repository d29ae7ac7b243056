//! The execution runtime: each API over an injected [`ComputerRuntime`].

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use computer_runtime::edit::EditSpec;
use computer_runtime::files::{MoveItem, ReadRequest, WriteRequest};
use computer_runtime::process::CommandSpec;
use computer_runtime::search::{GlobRequest, GrepRequest, NameSearchRequest, Stop, WalkOptions};
use computer_runtime::{ComputerError, ComputerRuntime, EditRequest, format};
use futures::future::BoxFuture;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tool_core::urls::{self, Lines};
use tool_core::{
    CallContext, ErrorKind, MissingService, SandboxPolicy, Services, ToolOutput, ToolRuntime, UrlRouter,
    parse_arguments,
};

use crate::args::*;
use crate::manifest::LocalSystemApi;

const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
const MAX_COMMAND_TIMEOUT: Duration = Duration::from_secs(600);
const MAX_GLOB_RESULTS: usize = 1000;
const DEFAULT_SEARCH_RESULTS: u32 = 200;
const DEFAULT_GREP_RESULTS: u32 = 200;
/// The most results a model may ask a search or grep for.
const MAX_RESULTS: u32 = 1000;
const GREP_LINE_CHARS: usize = 500;

/// Builds the runtime from the front end's services: it needs an `Arc<dyn ComputerRuntime>`.
///
/// # Errors
///
/// [`MissingService`] when the services hold no computer runtime.
pub fn runtime(services: &Services) -> Result<Arc<dyn ToolRuntime>, MissingService> {
    let computer = services.require::<Arc<dyn ComputerRuntime>>()?;
    let mut runtime = LocalSystemRuntime::new(computer.clone());
    runtime.urls = services.get::<Arc<UrlRouter>>().cloned();
    Ok(Arc::new(runtime))
}

/// Runs local-system calls on the computer it is given.
#[derive(Debug, Clone)]
pub struct LocalSystemRuntime {
    computer: Arc<dyn ComputerRuntime>,
    /// The internal URLs `readFile` reads (`skill://…`), when the front end offers any.
    urls: Option<Arc<UrlRouter>>,
    /// Changes shown and not yet applied or discarded, by token.
    previews: Arc<std::sync::Mutex<std::collections::HashMap<String, Preview>>>,
}

/// A write or edit shown, not made.
#[derive(Debug, Clone)]
struct Preview {
    /// The session that asked for it (only it may apply it).
    session: String,
    /// `writeFile` or `editFile`.
    api: LocalSystemApi,
    /// The call's arguments, to run again when applied.
    arguments: Value,
    /// What the file held when it was shown (a hash; `None`: no file), to refuse applying it
    /// over a file that changed since.
    base: Option<u64>,
    /// When it was shown.
    at: std::time::Instant,
}

/// How long a preview may wait to be applied.
const PREVIEW_FOR: Duration = Duration::from_secs(3600);

/// The most of a file a preview reads.
const PREVIEW_MAX_BYTES: usize = 16 * 1024 * 1024;

fn content_hash(bytes: &[u8]) -> u64 {
    use std::hash::{Hash as _, Hasher as _};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut hasher);
    hasher.finish()
}

impl LocalSystemRuntime {
    /// A runtime over `computer`.
    pub fn new(computer: Arc<dyn ComputerRuntime>) -> Self {
        Self { computer, urls: None, previews: Arc::default() }
    }

    /// The same runtime reading these internal URLs too.
    #[must_use]
    pub fn with_urls(mut self, urls: Arc<UrlRouter>) -> Self {
        self.urls = Some(urls);
        self
    }

    /// `readFile` of an internal URL (`scheme://…`, a selector allowed).
    async fn read_url(&self, scheme: &str, args: &ReadFileArgs, context: &CallContext) -> Outcome {
        let selected = urls::select(&args.path);
        let lines = Lines {
            offset: args.offset.or(selected.lines.offset),
            limit: args.limit.or(selected.lines.limit),
            raw: selected.lines.raw,
        };
        let rest = selected.target.split_once("://").map_or("", |(_, rest)| rest);
        let Some(reader) = self.urls.as_ref().and_then(|router| router.reader(scheme)) else {
            let known = self.urls.as_ref().map(|router| router.describe()).filter(|d| !d.is_empty());
            return Err(invalid(match known {
                Some(known) => {
                    format!("`{scheme}://` is not an address readFile reads; it reads files and:\n{known}")
                }
                None => format!("`{scheme}://` is not an address readFile reads; give a file's path"),
            }));
        };
        let output = reader.read(rest, lines, context).await;
        if output.success { Ok(output) } else { Err(output) }
    }
}

impl ToolRuntime for LocalSystemRuntime {
    fn execute<'a>(
        &'a self,
        api: &'a str,
        arguments: Value,
        context: &'a CallContext,
    ) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let Ok(api) = api.parse::<LocalSystemApi>() else {
                return ToolOutput::error(ErrorKind::UnknownTool, format!("local-system has no api `{api}`"));
            };
            match self.dispatch(api, arguments, context).await {
                Ok(output) | Err(output) => output,
            }
        })
    }
}

type Outcome = Result<ToolOutput, ToolOutput>;

impl LocalSystemRuntime {
    /// What the file at `path` holds now, read beneath the session's folders (`None`: no file).
    fn current(&self, path: &Path, context: &CallContext) -> Result<Option<Vec<u8>>, ToolOutput> {
        let opener = computer_runtime::beneath::Opener::new(&context.sandbox.files);
        match opener.read_prefix(path, PREVIEW_MAX_BYTES + 1) {
            Ok(bytes) if bytes.len() > PREVIEW_MAX_BYTES => Err(invalid(format!(
                "{} is too large to preview; this session cannot change it",
                path.display()
            ))),
            Ok(bytes) => Ok(Some(bytes)),
            Err(ComputerError::NotFound { .. }) => Ok(None),
            Err(error) => Err(failure(error)),
        }
    }

    /// Shows what a write or edit would change, and keeps it under a token to apply.
    fn preview(&self, api: LocalSystemApi, arguments: Value, context: &CallContext) -> Outcome {
        let dir = context.working_directory.as_deref();
        let path_text = arguments.get("path").and_then(Value::as_str).unwrap_or_default().to_owned();
        let path = resolve(&path_text, dir)?;
        let before = self.current(&path, context)?;
        let old = match &before {
            Some(bytes) => String::from_utf8(bytes.clone())
                .map_err(|_| invalid(format!("{path_text} is not text; a preview cannot show its change")))?,
            None => String::new(),
        };
        let (diff, lines) = match api {
            LocalSystemApi::EditFile => {
                let args: EditFileArgs = parse(api, arguments.clone())?;
                if before.is_none() {
                    return Err(ToolOutput::error(
                        ErrorKind::NotFound,
                        format!("{path_text} does not exist"),
                    ));
                }
                let edits = edits_of(args)?;
                let outcome = computer_runtime::edit::apply_edits(&old, &path_text, &edits)
                    .map_err(|error| ToolOutput::error(ErrorKind::InvalidArguments, error.to_string()))?;
                (outcome.diff, outcome.new_content.lines().count())
            }
            _ => {
                let args: WriteFileArgs = parse(api, arguments.clone())?;
                (
                    computer_runtime::edit::unified_diff(&old, &args.content, &path_text),
                    args.content.lines().count(),
                )
            }
        };
        let token = format!(
            "chg-{:016x}",
            content_hash(
                format!("{}{path_text}{:?}", context.call_id, std::time::SystemTime::now()).as_bytes()
            )
        );
        let mut previews = self.previews.lock().unwrap_or_else(|p| p.into_inner());
        previews.retain(|_, p| p.at.elapsed() < PREVIEW_FOR);
        previews.insert(
            token.clone(),
            Preview {
                session: context.session_id.clone(),
                api,
                arguments,
                base: before.as_deref().map(content_hash),
                at: std::time::Instant::now(),
            },
        );
        let what = if before.is_none() {
            format!("create {path_text} ({lines} lines)")
        } else {
            format!("change {path_text}")
        };
        let content = format!(
            "Preview only: nothing is written yet. This would {what}:\n\n{diff}\nTo make the change call resolveChange {{\"token\": \"{token}\", \"action\": \"apply\"}}; to drop it, \"action\": \"discard\"."
        );
        Ok(ToolOutput::ok(content).with_state(serde_json::json!({
            "type": "preview", "token": token, "path": path_text, "diff": diff, "created": before.is_none(),
        })))
    }

    /// A previewed change may be applied only by its session, as shown, over the file as it was.
    fn still_as_shown(
        &self,
        token: &str,
        api: LocalSystemApi,
        path: &Path,
        context: &CallContext,
    ) -> Result<(), ToolOutput> {
        let preview = self.previews.lock().unwrap_or_else(|p| p.into_inner()).remove(token);
        let Some(preview) = preview.filter(|p| p.session == context.session_id && p.api == api) else {
            return Err(invalid(format!(
                "no previewed change `{token}` in this session (it was applied, discarded or expired)"
            )));
        };
        let now = self.current(path, context)?;
        if now.as_deref().map(content_hash) != preview.base {
            return Err(ToolOutput::error(
                ErrorKind::Conflict,
                format!(
                    "{} changed since the preview, so the change was not made; preview it again",
                    path.display()
                ),
            ));
        }
        Ok(())
    }

    /// `resolveChange`: applies a preview as the write it is (through the pipeline, so it is
    /// approved — the person sees the change itself — and journalled), or drops it.
    async fn resolve_change(&self, arguments: Value, context: &CallContext) -> Outcome {
        let args: ResolveChangeArgs = parse(LocalSystemApi::ResolveChange, arguments)?;
        let preview = {
            let previews = self.previews.lock().unwrap_or_else(|p| p.into_inner());
            previews.get(&args.token).filter(|p| p.session == context.session_id).cloned()
        };
        let Some(preview) = preview else {
            return Err(invalid(format!(
                "no previewed change `{}` in this session (it was applied, discarded or expired)",
                args.token
            )));
        };
        match args.action {
            ChangeAction::Discard => {
                self.previews.lock().unwrap_or_else(|p| p.into_inner()).remove(&args.token);
                Ok(ToolOutput::ok(format!("Discarded the change `{}`; nothing was written.", args.token)))
            }
            ChangeAction::Apply => {
                let mut arguments = preview.arguments;
                if let Value::Object(map) = &mut arguments {
                    map.insert("previewToken".into(), Value::String(args.token.clone()));
                }
                let output = context
                    .call_tool(&format!("{}/{}", crate::IDENTIFIER, preview.api.name()), arguments)
                    .await;
                if output.success { Ok(output) } else { Err(output) }
            }
        }
    }

    async fn dispatch(&self, api: LocalSystemApi, arguments: Value, context: &CallContext) -> Outcome {
        let computer = &self.computer;
        let dir = context.working_directory.as_deref();
        // Where this session's file calls may open files (pinned folders; the session's choice).
        let files = &context.sandbox.files;
        match api {
            LocalSystemApi::ReadFile => {
                let args: ReadFileArgs = parse(api, arguments)?;
                if let Some((scheme, _)) = urls::scheme_of(&args.path) {
                    return self.read_url(scheme, &args, context).await;
                }
                // `file:10-20` selects lines, always: the path-scope audit and the approval saw the
                // path without its selector (`PathParam::with_addresses`), and this opens exactly
                // that one (a file really named `x:1-5` is read with offset and limit instead).
                let selected = urls::select(&args.path);
                let (path, lines) = (resolve(selected.target, dir)?, selected.lines);
                let request = ReadRequest {
                    path,
                    offset: args.offset.or(lines.offset),
                    limit: args.limit.or(lines.limit),
                };
                let state = computer.read(files, request).await.map_err(failure)?;
                let content = if lines.raw { state.content.clone() } else { format::read(&state) };
                Ok(done(content, &state))
            }
            LocalSystemApi::WriteFile if context.preview => self.preview(api, arguments, context),
            LocalSystemApi::EditFile if context.preview => self.preview(api, arguments, context),
            LocalSystemApi::ResolveChange => self.resolve_change(arguments, context).await,
            LocalSystemApi::WriteFile => {
                let args: WriteFileArgs = parse(api, arguments)?;
                let path = resolve(&args.path, dir)?;
                if let Some(token) = &args.preview_token {
                    self.still_as_shown(token, api, &path, context)?;
                }
                let request = WriteRequest { path, content: args.content };
                let state = computer.write(files, request).await.map_err(failure)?;
                Ok(done(format::write(&state), &state))
            }
            LocalSystemApi::EditFile => {
                let args: EditFileArgs = parse(api, arguments)?;
                let path = resolve(&args.path, dir)?;
                if let Some(token) = &args.preview_token {
                    self.still_as_shown(token, api, &path, context)?;
                }
                let edits = edits_of(args)?;
                let state = computer.edit(files, EditRequest { path, edits }).await.map_err(failure)?;
                Ok(done(format::edit(&state), &state))
            }
            LocalSystemApi::SearchFiles => {
                let args: SearchFilesArgs = parse(api, arguments)?;
                let root = folder(args.directory.as_deref(), dir)?;
                let walk = WalkOptions {
                    include_hidden: args.include_hidden.unwrap_or(false),
                    include_ignored: false,
                    stop: Stop::on(context.cancel.clone()),
                };
                let limit = args.limit.unwrap_or(DEFAULT_SEARCH_RESULTS).clamp(1, MAX_RESULTS) as usize;
                let query = args.query;
                let state = computer
                    .search(files, NameSearchRequest { query: query.clone(), root, walk, limit })
                    .await
                    .map_err(failure)?;
                Ok(done(format::found(&state, &format!("the name `{query}`")), &state))
            }
            LocalSystemApi::MoveFiles => {
                let args: MoveFilesArgs = parse(api, arguments)?;
                if args.items.is_empty() {
                    return Err(invalid("items is empty; give at least one {oldPath, newPath}"));
                }
                let items = args
                    .items
                    .iter()
                    .map(|item| {
                        Ok(MoveItem {
                            from: resolve(&item.old_path, dir)?,
                            to: resolve(&item.new_path, dir)?,
                        })
                    })
                    .collect::<Result<Vec<_>, ToolOutput>>()?;
                let state = computer.move_items(files, items).await.map_err(failure)?;
                let content = format::moved(&state);
                if state.failures() == state.results.len() {
                    return Err(ToolOutput::error(ErrorKind::Execution, content).with_state_of(&state));
                }
                Ok(done(content, &state))
            }
            LocalSystemApi::GlobFiles => {
                let args: GlobFilesArgs = parse(api, arguments)?;
                let root = folder(args.directory.as_deref(), dir).or_else(|e| {
                    // An absolute pattern needs no folder of its own.
                    if args.pattern.starts_with('/') { Ok(PathBuf::from("/")) } else { Err(e) }
                })?;
                let walk = WalkOptions {
                    include_hidden: args.include_hidden.unwrap_or(false),
                    include_ignored: args.include_ignored.unwrap_or(false),
                    stop: Stop::on(context.cancel.clone()),
                };
                let pattern = args.pattern;
                let state = computer
                    .glob(
                        files,
                        GlobRequest { pattern: pattern.clone(), root, walk, limit: MAX_GLOB_RESULTS },
                    )
                    .await
                    .map_err(failure)?;
                Ok(done(format::found(&state, &format!("`{pattern}`")), &state))
            }
            LocalSystemApi::GrepContent => {
                let args: GrepContentArgs = parse(api, arguments)?;
                let root = folder(args.path.as_deref(), dir)?;
                let pattern = args.pattern;
                let request = GrepRequest {
                    pattern: pattern.clone(),
                    root,
                    glob: args.glob,
                    case_insensitive: args.case_insensitive.unwrap_or(false),
                    fixed_strings: args.fixed_strings.unwrap_or(false),
                    walk: WalkOptions {
                        include_hidden: args.include_hidden.unwrap_or(false),
                        include_ignored: false,
                        stop: Stop::on(context.cancel.clone()),
                    },
                    // The model names the cap, the runtime bounds it.
                    max_matches: args.max_results.unwrap_or(DEFAULT_GREP_RESULTS).clamp(1, MAX_RESULTS)
                        as usize,
                    max_line_chars: GREP_LINE_CHARS,
                };
                let state = computer.grep(files, request).await.map_err(failure)?;
                Ok(done(format::grep(&state, &pattern), &state))
            }
            LocalSystemApi::RunCommand => {
                let args: RunCommandArgs = parse(api, arguments)?;
                let Some(cwd) = dir else {
                    return Err(invalid("this session has no working directory, so commands cannot run"));
                };
                // The pipeline's referee already turned the `timeout` argument into the deadline;
                // without a pipeline deadline the argument or the API default applies.
                let timeout = context
                    .remaining()
                    .or(args.timeout.map(Duration::from_millis))
                    .unwrap_or(DEFAULT_COMMAND_TIMEOUT)
                    .min(MAX_COMMAND_TIMEOUT);
                let mut sandbox = (*context.sandbox).clone();
                if args.escalate == Some(true) {
                    // The manifest makes an escalation always ask a person; the session decides
                    // whether it may be asked at all.
                    if !sandbox.policy.allow_escalation {
                        return Err(ToolOutput::error(
                            ErrorKind::Blocked,
                            format!(
                                "this session may not run commands outside its sandbox ({}); \
                                 do the work inside the working directory instead",
                                sandbox.policy.describe()
                            ),
                        ));
                    }
                    sandbox.policy = SandboxPolicy::off();
                }
                let spec = CommandSpec {
                    command: args.command,
                    cwd: cwd.to_path_buf(),
                    env: Vec::new(),
                    timeout,
                    background: args.background.unwrap_or(false),
                    owner: context.session_id.clone(),
                    sandbox,
                    live: Some(live_output(context.progress.clone())),
                };
                let state = computer.run_command(spec, &context.cancel).await.map_err(failure)?;
                let content = format::run(&state);
                let failed = match &state.exit {
                    _ if state.timed_out => Some(ErrorKind::Timeout),
                    _ if state.cancelled => Some(ErrorKind::Cancelled),
                    Some(exit) if !exit.success => Some(ErrorKind::Execution),
                    _ => None,
                };
                match failed {
                    Some(kind) => Err(ToolOutput::error(kind, content).with_state_of(&state)),
                    None => Ok(done(content, &state)),
                }
            }
            LocalSystemApi::GetCommandOutput => {
                let args: CommandIdArgs = parse(api, arguments)?;
                let state =
                    computer.command_output(&context.session_id, &args.command_id).await.map_err(failure)?;
                Ok(done(format::output(&state), &state))
            }
            LocalSystemApi::KillCommand => {
                let args: CommandIdArgs = parse(api, arguments)?;
                let state =
                    computer.kill_command(&context.session_id, &args.command_id).await.map_err(failure)?;
                Ok(done(format::kill(&state), &state))
            }
        }
    }
}

/// A command's output as it is written, as progress updates of the call.
fn live_output(progress: tool_core::ProgressSink) -> computer_runtime::process::LiveOutput {
    computer_runtime::process::LiveOutput::new(move |text| {
        progress.send(tool_core::Progress { output: Some(text), ..tool_core::Progress::default() });
    })
}

fn parse<T: DeserializeOwned>(api: LocalSystemApi, arguments: Value) -> Result<T, ToolOutput> {
    parse_arguments(api.name(), arguments)
}

fn done<T: Serialize>(content: String, state: &T) -> ToolOutput {
    ToolOutput::ok(content).with_state_of(state)
}

fn failure(error: ComputerError) -> ToolOutput {
    ToolOutput::error(error.kind(), error.to_string())
}

fn invalid(message: impl Into<String>) -> ToolOutput {
    ToolOutput::error(ErrorKind::InvalidArguments, message)
}

/// Resolves a model-given path against the session's folder; a relative path needs one.
fn resolve(path: &str, dir: Option<&Path>) -> Result<PathBuf, ToolOutput> {
    let given = Path::new(path);
    if path.is_empty() {
        return Err(invalid("path is empty"));
    }
    if given.is_absolute() {
        return Ok(given.to_path_buf());
    }
    match dir {
        Some(dir) => Ok(dir.join(given)),
        None => Err(invalid(format!(
            "`{path}` is relative but this session has no working directory; give an absolute path"
        ))),
    }
}

fn folder(path: Option<&str>, dir: Option<&Path>) -> Result<PathBuf, ToolOutput> {
    match (path, dir) {
        (Some(path), _) => resolve(path, dir),
        (None, Some(dir)) => Ok(dir.to_path_buf()),
        (None, None) => Err(invalid("this session has no working directory; give the folder to search")),
    }
}

fn edits_of(args: EditFileArgs) -> Result<Vec<EditSpec>, ToolOutput> {
    match (args.old_text, args.new_text, args.edits) {
        (Some(old_text), Some(new_text), None) => {
            Ok(vec![EditSpec { old_text, new_text, replace_all: args.replace_all.unwrap_or(false) }])
        }
        (None, None, Some(edits)) if !edits.is_empty() => Ok(edits
            .into_iter()
            .map(|e| EditSpec { old_text: e.old_text, new_text: e.new_text, replace_all: e.replace_all })
            .collect()),
        (None, None, Some(_)) => Err(invalid("edits is empty; give at least one {oldText, newText}")),
        (Some(_), None, _) | (None, Some(_), _) => {
            Err(invalid("give both oldText and newText (single edit), or use edits for several"))
        }
        (Some(_), Some(_), Some(_)) => Err(invalid("give either oldText/newText or edits, not both")),
        (None, None, None) => Err(invalid("nothing to edit: give oldText and newText, or edits")),
    }
}
