//! `toolhost memory`: what the memory tool keeps about this machine's person, to read and to
//! forget, in the data folder's journal.

use anyhow::Context;
use clap::Subcommand;
use tool_core::storage::{Owner, ProjectScope, RecordQuery};

use crate::{out, setup};

/// The person of the terminal app's sessions.
pub const PERSON: &str = "local";

/// `toolhost memory …`.
#[derive(Debug, clap::Args)]
pub struct MemoryArgs {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// What is remembered, newest first (or the best matches of `--query`).
    List {
        /// Words to look for.
        #[arg(long)]
        query: Option<String>,
        /// Only this category: identity, preferences, experiences or notes.
        #[arg(long)]
        category: Option<String>,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// One memory in full.
    Show {
        /// Its id (`rec_…`).
        id: String,
    },
    /// Forget a memory.
    Rm {
        /// Its id (`rec_…`).
        id: String,
    },
}

fn owner() -> Owner {
    Owner { tenant: setup::TENANT.into(), person: PERSON.into() }
}

/// Runs the command.
///
/// # Errors
///
/// The journal cannot be opened, or the memory does not exist.
pub async fn run(args: MemoryArgs) -> anyhow::Result<()> {
    let records = setup::stores(&setup::data_dir()?).await?.records;
    let collection = builtin_tool_memory::COLLECTION;
    match args.action {
        Action::List { query, category, json } => {
            let hits = records
                .find_records(RecordQuery {
                    collection: collection.into(),
                    owner: owner(),
                    project: ProjectScope::Any,
                    tag: category,
                    text: query.filter(|q| !q.trim().is_empty()),
                    limit: 1000,
                })
                .await?;
            if hits.is_empty() && !json {
                out::line("Nothing is remembered.")?;
            }
            for hit in hits {
                let record = hit.record;
                if json {
                    out::line(serde_json::to_string(&record)?)?;
                } else {
                    let project = record.project.map(|p| format!("  [{p}]")).unwrap_or_default();
                    out::line(format!(
                        "{}  {:<11}  {}: {}{project}",
                        record.id, record.tag, record.title, record.body
                    ))?;
                }
            }
        }
        Action::Show { id } => {
            let record = records
                .get_record(&owner(), collection, &id)
                .await?
                .with_context(|| format!("no memory `{id}`; `toolhost memory list` shows the ids"))?;
            out::line(serde_json::to_string_pretty(&record)?)?;
        }
        Action::Rm { id } => {
            if !records.remove_record(&owner(), collection, &id).await? {
                anyhow::bail!("no memory `{id}`; `toolhost memory list` shows the ids");
            }
            out::line(format!("Forgot {id}."))?;
        }
    }
    Ok(())
}
