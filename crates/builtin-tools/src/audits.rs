//! The dynamic-audit table: behaviour that manifests name and the pipeline calls.

use std::path::Path;

use computer_runtime::scope::PathScope;
use tool_core::{AuditFn, AuditInput, AuditVerdict};

/// The name of the path-scope audit.
pub const PATH_SCOPE: &str = "pathScope";

/// Every audit by name.
pub fn audits() -> &'static [(&'static str, AuditFn)] {
    &[(PATH_SCOPE, path_scope)]
}

/// A tier computed from a call's arguments (the pipeline's `TierFn`).
pub type TierFn = fn(&serde_json::Value) -> tool_core::Tier;

/// An argument preparation run before validation (the pipeline's `PrepareFn`).
pub type PrepareFn = fn(serde_json::Value) -> serde_json::Value;

/// Every computed tier by the name manifests use.
pub fn tiers() -> &'static [(&'static str, TierFn)] {
    &[(builtin_tool_code_interpreter::TIER, builtin_tool_code_interpreter::tier_of)]
}

/// Every argument preparation: tool, API, function. `runCode`'s writes the engine it chose into
/// the call, so the approval, the journal and the run all see the same one.
pub fn preparations() -> &'static [(&'static str, &'static str, PrepareFn)] {
    &[(builtin_tool_code_interpreter::IDENTIFIER, "runCode", builtin_tool_code_interpreter::prepare_run_code)]
}

/// The audit of this name.
pub fn audit(name: &str) -> Option<AuditFn> {
    audits().iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
}

/// Flags any declared path argument that resolves outside the session's working directory and
/// (unless the session excludes them) the temp folders, and refuses one beyond the session's hard
/// roots when it has them.
///
/// Paths are resolved before the decision: `..` is normalised and symlinks are followed, so a link
/// inside the working directory that points elsewhere is judged by its target. A session without a
/// working directory has only the temp folders in scope, so everything else asks. The boundary
/// comes from the session, never from the arguments.
pub fn path_scope(input: &AuditInput<'_>) -> AuditVerdict {
    let mut roots = if input.temp_in_scope {
        PathScope::for_session(input.working_directory).roots().to_vec()
    } else {
        input.working_directory.map(Path::to_path_buf).into_iter().collect()
    };
    roots.extend(input.session_temp.map(Path::to_path_buf));
    let scope = PathScope::new(roots);
    // Resolving a device's paths on this machine's disk would judge the wrong files: the device,
    // which runs the call, audits them against its own folder.
    if input.paths_elsewhere {
        return AuditVerdict::Pass;
    }
    let paths: Vec<&str> =
        input.api.path_params.iter().flat_map(|param| param.select(input.arguments)).collect();
    // The session's folder was pinned when it opened: if it no longer resolves to itself, a
    // component was swapped for a link, and nothing under it is the session's any more.
    if let Some(dir) = input.working_directory
        && dir.is_absolute()
        && computer_runtime::scope::resolve(&dir.to_string_lossy(), None) != dir
        && !paths.is_empty()
    {
        let reason =
            format!("the working directory {} was moved or replaced since the session opened", dir.display());
        // With a hard boundary nobody may approve following it: the new target may be another
        // tenant's.
        return match input.hard_roots {
            Some(_) => AuditVerdict::Refuse(format!("{reason}; no approval can open paths there")),
            None => AuditVerdict::Flag(reason),
        };
    }
    // Without a working directory a relative path has nothing safe to resolve against (the
    // process's own folder is not the session's), so it is judged as outside.
    if input.working_directory.is_none()
        && let Some(relative) = paths.iter().find(|p| !p.starts_with('/') && !p.starts_with('~'))
    {
        return AuditVerdict::Flag(format!(
            "`{relative}` is relative and the session has no working directory"
        ));
    }
    let outside = scope.outside(paths.iter().copied(), input.working_directory);
    if outside.is_empty() {
        return AuditVerdict::Pass;
    }
    // Past a hard boundary (a server with keys) nobody may be asked: the person approving is a
    // tenant, and what lies beyond is other tenants' or the server's. The runtime refuses such a
    // path too; refusing here says so before anyone is asked.
    if let Some(hard) = input.hard_roots {
        let limit = PathScope::new(scope.roots().iter().cloned().chain(hard.iter().map(|r| r.path.clone())));
        let beyond: Vec<String> =
            outside.iter().filter(|p| !limit.contains(p)).map(|p| p.display().to_string()).collect();
        if !beyond.is_empty() {
            let folders: Vec<String> = limit.roots().iter().map(|r| r.display().to_string()).collect();
            return AuditVerdict::Refuse(format!(
                "{} is outside every folder this session may use ({}); no approval can open it",
                beyond.join(", "),
                folders.join(", ")
            ));
        }
    }
    let listed: Vec<String> = outside.iter().map(|p| p.display().to_string()).collect();
    let place = match input.working_directory {
        Some(dir) => format!("outside the working directory {}", dir.display()),
        None => "and the session has no working directory".to_owned(),
    };
    AuditVerdict::Flag(format!("{} {place}", listed.join(", ")))
}
