//! The manifest: what the model and the policy see.

use tool_core::{
    ApiSpec, DisplayControl, ExecutionMode, Executor, Intervention, InterventionPolicy, InterventionRule,
    Matcher, PathParam, Tier, ToolManifest, ToolMeta,
};

use crate::args::*;

/// The tool's identifier.
pub const IDENTIFIER: &str = "local-system";

/// The name of the dynamic audit that keeps file APIs inside the session's folder.
pub const PATH_SCOPE_AUDIT: &str = "pathScope";

/// The system-role template (`{{working_directory}}`, `{{date}}`).
pub const SYSTEM_ROLE: &str = include_str!("system_role.md");

tool_core::api_enum! {
    /// The APIs of the local-system tool.
    pub enum LocalSystemApi {
        /// Read a line range of a text file.
        ReadFile = "readFile",
        /// Write a whole file.
        WriteFile = "writeFile",
        /// Replace exact text in a file.
        EditFile = "editFile",
        /// Find files and folders by name.
        SearchFiles = "searchFiles",
        /// Move or rename files.
        MoveFiles = "moveFiles",
        /// Find files by glob.
        GlobFiles = "globFiles",
        /// Search file contents.
        GrepContent = "grepContent",
        /// Run a shell command.
        RunCommand = "runCommand",
        /// Read new output of a background command.
        GetCommandOutput = "getCommandOutput",
        /// Kill a background command.
        KillCommand = "killCommand",
        /// Apply or discard a previewed write or edit.
        ResolveChange = "resolveChange",
    }
}

/// Commands ask (auto-run may skip that); a command that asks to leave the sandbox always asks a
/// person, whatever the mode, grant or remembered decision.
fn run_command_policy() -> InterventionPolicy {
    InterventionPolicy::Rules {
        rules: vec![
            InterventionRule {
                matchers: [("escalate".to_owned(), Matcher::Wildcard("true".to_owned()))].into(),
                policy: Intervention::Always,
            },
            InterventionRule { matchers: Default::default(), policy: Intervention::Required },
        ],
    }
}

fn path_scope() -> InterventionPolicy {
    InterventionPolicy::audit(PATH_SCOPE_AUDIT, Intervention::Never, Intervention::Required)
}

impl LocalSystemApi {
    /// The API's declaration.
    pub fn spec(self) -> ApiSpec {
        let name = self.name();
        match self {
            Self::ReadFile => ApiSpec::new::<ReadFileArgs>(
                name,
                "Read a text file, 2000 lines at a time at most. Use offset and limit for line ranges; the result says how to read on.",
            )
            .tier(Tier::Read)
            .timeout_ms(30_000)
            .intervention(path_scope())
            .path_param(PathParam::new("path").with_addresses()),
            Self::WriteFile => ApiSpec::new::<WriteFileArgs>(
                name,
                "Create or overwrite a file with the given content, atomically. Prefer editFile for changes to an existing file.",
            )
            .tier(Tier::Write)
            .timeout_ms(30_000)
            .intervention(path_scope())
            .execution(ExecutionMode::Sequential)
            .display(DisplayControl::Expanded)
            .path_param(PathParam::new("path"))
            .previewable(),
            Self::EditFile => ApiSpec::new::<EditFileArgs>(
                name,
                "Replace exact text in a file. oldText must match the file exactly once (unless replaceAll); give several non-overlapping edits at once with `edits`.",
            )
            .tier(Tier::Write)
            .timeout_ms(30_000)
            .intervention(path_scope())
            .execution(ExecutionMode::Sequential)
            .display(DisplayControl::Expanded)
            .path_param(PathParam::new("path"))
            .previewable(),
            Self::SearchFiles => ApiSpec::new::<SearchFilesArgs>(
                name,
                "Find files and folders whose name contains the query, skipping ignored, hidden and dependency folders.",
            )
            .tier(Tier::Read)
            .timeout_ms(60_000)
            .intervention(path_scope())
            .path_param(PathParam::new("directory")),
            Self::MoveFiles => ApiSpec::new::<MoveFilesArgs>(
                name,
                "Move or rename files and folders. Destinations must not exist; missing parent folders are created.",
            )
            .tier(Tier::Write)
            .timeout_ms(60_000)
            .intervention(path_scope())
            .execution(ExecutionMode::Sequential)
            .path_param(PathParam::new("items[].oldPath"))
            .path_param(PathParam::new("items[].newPath")),
            Self::GlobFiles => ApiSpec::new::<GlobFilesArgs>(
                name,
                "Find files by glob pattern (at most 1000), skipping ignored, hidden and dependency folders unless asked.",
            )
            .tier(Tier::Read)
            .timeout_ms(60_000)
            .intervention(path_scope())
            .path_param(PathParam::new("directory"))
            .path_param(PathParam::absolute_only("pattern")),
            Self::GrepContent => ApiSpec::new::<GrepContentArgs>(
                name,
                "Search file contents with a regular expression; returns path:line: text for each matching line.",
            )
            .tier(Tier::Read)
            .timeout_ms(60_000)
            .intervention(path_scope())
            .path_param(PathParam::new("path")),
            Self::RunCommand => ApiSpec::new::<RunCommandArgs>(
                name,
                "Run a shell command in the working directory. Foreground commands are killed at their timeout and return the output so far; use background for servers and watchers.",
            )
            .tier(Tier::Exec)
            .command_param("command")
            .timeout_ms(60_000)
            .max_timeout_ms(600_000)
            .intervention(run_command_policy())
            .execution(ExecutionMode::Sequential)
            .display(DisplayControl::AlwaysExpanded),
            Self::GetCommandOutput => ApiSpec::new::<CommandIdArgs>(
                name,
                "Read the output a background command wrote since the last call, and whether it is still running.",
            )
            .tier(Tier::Read)
            .timeout_ms(60_000)
            .intervention(Intervention::Never.into()),
            Self::ResolveChange => ApiSpec::new::<ResolveChangeArgs>(
                name,
                "Apply or discard a change writeFile or editFile previewed (this session shows writes first). Applying makes the write itself, approved as it.",
            )
            .tier(Tier::Read)
            .timeout_ms(60_000)
            .intervention(Intervention::Never.into())
            .execution(ExecutionMode::Sequential)
            .when_previewing(),
            Self::KillCommand => ApiSpec::new::<KillCommandArgs>(
                name,
                "Stop a background command and every process it started.",
            )
            .tier(Tier::Write)
            .timeout_ms(10_000)
            .intervention(Intervention::Never.into()),
        }
    }
}

/// The tool's manifest.
pub fn manifest() -> ToolManifest {
    LocalSystemApi::ALL.iter().fold(
        ToolManifest::new(
            IDENTIFIER,
            ToolMeta::new(
                "Local System",
                "Read, write and search files and run commands on the machine that runs the tool.",
            )
            .icon("💻"),
        )
        .intervention(Intervention::Required.into())
        .executors([Executor::Server, Executor::Client])
        .system_role(SYSTEM_ROLE),
        |manifest, api| manifest.api(api.spec()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_round_trips_and_names_every_api() {
        let manifest = manifest();
        let json = serde_json::to_string(&manifest).unwrap();
        let back: ToolManifest = serde_json::from_str(&json).unwrap();
        assert_eq!(back, manifest);
        let names: Vec<_> = manifest.apis.iter().map(|a| a.name.as_str()).collect();
        let expected: Vec<_> = LocalSystemApi::ALL.iter().map(|a| a.name()).collect();
        assert_eq!(names, expected);
        for api in &manifest.apis {
            assert!(api.default_timeout_ms.is_some(), "{} has no timeout", api.name);
            for param in &api.path_params {
                let field = param.pointer.split(['.', '[']).next().unwrap();
                assert!(
                    api.parameters["properties"].get(field).is_some(),
                    "{}: path param {} is not a parameter",
                    api.name,
                    param.pointer
                );
            }
        }
    }
}
