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

/// A folder trusted for this process only (`toolhost exec --trust`): never written anywhere, so
/// nothing is left behind when the run ends, however it ends.
static FOR_THIS_RUN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Trusts `folder` (and what is below it) until this process ends. Once per process: a second
/// call changes nothing.
pub fn trust_for_this_run(folder: &Path) {
    let _ = FOR_THIS_RUN.set(folder.to_owned());
}

/// The trusted folder that covers `folder` (itself or the nearest folder above it), if any: one
/// trusted for this run, else one the person trusted.
///
/// # Errors
///
/// The journal cannot be read.
pub async fn trusted_by(journal: &dyn Journal, folder: &Path) -> Result<Option<PathBuf>, JournalError> {
    if let Some(trusted) = FOR_THIS_RUN.get().filter(|trusted| folder.starts_with(trusted)) {
        return Ok(Some(trusted.clone()));
    }
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

/// The arguments of `toolhost trust` and `toolhost untrust`.
#[derive(Debug, Clone, clap::Args)]
pub struct TrustArgs {
    /// The folder (default: the current folder); what is below it is trusted with it.
    pub folder: Option<PathBuf>,
    /// List the trusted folders instead (newest first).
    #[arg(long, conflicts_with = "folder")]
    pub list: bool,
}

/// `toolhost trust [FOLDER]` (or `--list`): trusts a folder from a script, as `/trust` does on
/// the screen; `toolhost untrust [FOLDER]` takes its trust back.
///
/// # Errors
///
/// The folder does not exist, or the journal cannot be opened, read or written.
pub async fn run(args: TrustArgs, trusting: bool) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let data = crate::setup::data_dir()?;
    let journal = crate::setup::journal(&data).await?;
    if args.list {
        let mut trusted: Vec<RememberedDecision> = journal
            .remembered(crate::setup::TENANT, None)
            .await?
            .into_iter()
            .filter(|d| d.tool == TOOL && d.api == API)
            .collect();
        trusted.sort_by_key(|d| std::cmp::Reverse(d.created_at));
        if trusted.is_empty() {
            crate::out::line("no folder is trusted")?;
        }
        for decision in trusted {
            crate::out::line(format!(
                "{}  since {}",
                decision.project,
                crate::setup::time_of(decision.created_at)
            ))?;
        }
        return Ok(());
    }
    let folder = match &args.folder {
        Some(folder) => folder.clone(),
        None => std::env::current_dir()?,
    };
    let folder = std::fs::canonicalize(&folder).with_context(|| format!("using {}", folder.display()))?;
    if trusting {
        if let Some(by) = trusted_by(journal.as_ref(), &folder).await? {
            crate::out::line(format!("{} is trusted already (as {})", folder.display(), by.display()))?;
            return Ok(());
        }
        trust(journal.as_ref(), &folder).await?;
        crate::out::line(format!(
            "trusted {}: its AGENTS.md, skills and hooks are used from now on (toolhost untrust takes it back)",
            folder.display()
        ))?;
        return Ok(());
    }
    let own: Vec<RememberedDecision> = journal
        .remembered(crate::setup::TENANT, Some(&folder.display().to_string()))
        .await?
        .into_iter()
        .filter(|d| d.tool == TOOL && d.api == API)
        .collect();
    if own.is_empty() {
        match trusted_by(journal.as_ref(), &folder).await? {
            Some(by) => anyhow::bail!(
                "{} is not trusted itself but as part of {}: untrust that folder",
                folder.display(),
                by.display()
            ),
            None => crate::out::line(format!("{} was not trusted", folder.display()))?,
        }
        return Ok(());
    }
    for decision in own {
        journal.revoke(crate::setup::TENANT, &decision.id).await?;
    }
    crate::out::line(format!("{} is no longer trusted", folder.display()))?;
    Ok(())
}
