//! `toolhost kb`: the knowledge bases this machine's person searches, in the data folder's
//! journal. `add` makes a base from folders and files, or syncs it when it exists (only changed
//! files are read again, by content hash); `list` shows them; `rm` removes one.

use anyhow::Context;
use builtin_tool_knowledge_base::ingest::{AddLimits, add_base};
use clap::Subcommand;
use tool_core::knowledge::NewBase;

use crate::memory::PERSON;
use crate::{out, setup};

/// `toolhost kb …`.
#[derive(Debug, clap::Args)]
pub struct KbArgs {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// Add a knowledge base from folders and files (Markdown, text, HTML, code, PDF), or sync it
    /// with what they hold now.
    Add {
        /// Its name (letters, digits, `-`, `_`, `.`).
        name: String,
        /// Folders and files to add.
        #[arg(required = true)]
        paths: Vec<std::path::PathBuf>,
        /// Skip files larger than this many MiB.
        #[arg(long, default_value_t = 10)]
        max_file_mib: u64,
        /// The report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// The knowledge bases.
    List {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Remove a knowledge base (the files stay).
    Rm {
        /// Its name.
        name: String,
    },
}

/// Runs the command.
///
/// # Errors
///
/// The journal cannot be opened, a path cannot be read, or the base does not exist.
pub async fn run(args: KbArgs) -> anyhow::Result<()> {
    let store = setup::stores(&setup::data_dir()?).await?.knowledge;
    match args.action {
        Action::Add { name, paths, max_file_mib, json } => {
            let cwd = std::env::current_dir().context("reading the current folder")?;
            let roots = paths.iter().map(|path| cwd.join(path).to_string_lossy().into_owned()).collect();
            let base = NewBase {
                tenant: setup::TENANT.into(),
                person: Some(PERSON.into()),
                name,
                roots,
                embedding_model: None,
            };
            let limits = AddLimits {
                max_file_bytes: max_file_mib.saturating_mul(1024 * 1024),
                ..AddLimits::default()
            };
            // With TOOLHOST_EMBEDDINGS_URL and …_MODEL set, each passage gets a vector too.
            let embedder = agent::OpenAiEmbedder::from_env();
            let embedder = embedder.as_ref().map(|e| e as &dyn tool_core::embed::Embedder);
            // The person's own machine: each folder they name is its own boundary.
            let report = add_base(store.as_ref(), base, None, limits, embedder).await?;
            if json {
                out::line(serde_json::to_string(&report)?)?;
                return Ok(());
            }
            out::line(format!(
                "{}: {} sources, {} passages ({} new, {} changed, {} unchanged, {} removed) in {:.1} s",
                report.base.name,
                report.base.sources,
                report.base.chunks,
                report.added,
                report.changed,
                report.unchanged,
                report.removed,
                report.elapsed_ms as f64 / 1000.0
            ))?;
            if !report.skipped.is_empty() {
                out::line(format!("Skipped {}:", report.skipped.len()))?;
                for skipped in &report.skipped {
                    out::line(format!("  {}: {}", skipped.path, skipped.reason))?;
                }
            }
        }
        Action::List { json } => {
            let bases = store.list_bases(setup::TENANT, Some(PERSON)).await?;
            if bases.is_empty() && !json {
                out::line("No knowledge base yet: `toolhost kb add NAME FOLDER` adds one.")?;
            }
            for base in bases {
                if json {
                    out::line(serde_json::to_string(&base)?)?;
                } else {
                    out::line(format!(
                        "{:<20} {:>6} sources {:>8} passages {:>10}  {}",
                        base.name,
                        base.sources,
                        base.chunks,
                        computer_runtime::format::size(base.bytes),
                        base.roots.join(", ")
                    ))?;
                }
            }
        }
        Action::Rm { name } => {
            let bases = store.list_bases(setup::TENANT, Some(PERSON)).await?;
            let base = bases
                .iter()
                .find(|base| base.name == name && base.person.is_some())
                .with_context(|| format!("no knowledge base `{name}`; `toolhost kb list` shows them"))?;
            store.remove_base(setup::TENANT, &base.id).await?;
            out::line(format!("Removed {name} ({} sources).", base.sources))?;
        }
    }
    Ok(())
}
