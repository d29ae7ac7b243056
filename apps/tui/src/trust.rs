//! Folder trust: whether a folder's own files may steer the agent — its project instructions
//! (`AGENTS.md`) now, its skills and hooks as they come. A folder is trusted when the person said
//! so for it or for a folder above it. The answer is kept in the journal as a remembered decision
//! of this folder (tool `toolhost`, API `trustFolder`), so the journal view lists it with the
//! "always" answers and revokes it the same way.

use std::path::{Path, PathBuf};

use journal::{Journal, JournalError, RememberedDecision};

/// The tool name trust is remembered under (no tool of the toolbox has it).
pub const TOOL: &str = "toolhost";
/// The API name trust is remembered under.
pub const API: &str = "trustFolder";

/// The trusted folder that covers `folder` (itself or the nearest folder above it), if any.
///
/// # Errors
///
/// The journal cannot be read.
pub async fn trusted_by(journal: &dyn Journal, folder: &Path) -> Result<Option<PathBuf>, JournalError> {
    let decisions = journal.remembered(crate::setup::TENANT, None).await?;
    Ok(decisions
        .into_iter()
        .filter(|d| d.tool == TOOL && d.api == API)
        .map(|d| PathBuf::from(d.project))
        .filter(|trusted| trusted.is_absolute() && folder.starts_with(trusted))
        .max_by_key(|trusted| trusted.components().count()))
}

/// Remembers that the person trusts `folder` (and what is below it).
///
/// # Errors
///
/// The journal cannot be written.
pub async fn trust(journal: &dyn Journal, folder: &Path) -> Result<(), JournalError> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
    journal
        .remember(&RememberedDecision {
            id: format!("trust-{now:x}"),
            tenant: crate::setup::TENANT.to_owned(),
            project: folder.display().to_string(),
            tool: TOOL.to_owned(),
            api: API.to_owned(),
            argument_prefix: None,
            created_by: Some("terminal".to_owned()),
            created_at: i64::try_from(now).unwrap_or(i64::MAX),
        })
        .await
}
