//! `toolhost creds`: credentials the model never sees, in the data folder's encrypted store
//! (`credentials/`: the sealed values and an owner-only key), and the set this process holds —
//! the store's and `TOOLHOST_CREDENTIAL_*` variables' — which mounts inject and the pipeline and
//! the log redact.

use std::io::{IsTerminal as _, Read as _};
use std::sync::LazyLock;

use anyhow::Context as _;
use clap::Subcommand;
use credentials::{Credentials, Secret, Vault};

use crate::{out, setup};

/// `toolhost creds …`.
#[derive(Debug, clap::Args)]
pub struct CredsArgs {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// Store a credential; its value is read from standard input (typed unseen at a terminal),
    /// one line.
    Set {
        /// Its name: lower-case letters, digits, `_` or `-` (what mounts reference).
        name: String,
    },
    /// The stored names (never the values).
    List,
    /// Forget a credential.
    Rm {
        /// Its name.
        name: String,
    },
}

/// The store in the data folder.
///
/// # Errors
///
/// No data folder.
pub fn vault() -> anyhow::Result<Vault> {
    Ok(Vault::new(setup::data_dir()?.join("credentials")))
}

/// The paths no tool may read: the credential store's folder (made, 0700, so a sandbox can name
/// it before anything is stored). Worked out once per process.
pub fn protected() -> Vec<std::path::PathBuf> {
    static PROTECTED: std::sync::OnceLock<Vec<std::path::PathBuf>> = std::sync::OnceLock::new();
    PROTECTED
        .get_or_init(|| match vault() {
            Ok(vault) => {
                if let Err(error) = vault.prepare() {
                    tracing::warn!(%error, "the credential store's folder cannot be made");
                }
                vec![vault.dir().to_owned()]
            }
            Err(_) => Vec::new(),
        })
        .clone()
}

/// The credentials this process holds (the log's writer redacts them from the start).
pub fn held() -> &'static Credentials {
    static HELD: LazyLock<Credentials> = LazyLock::new(Credentials::new);
    &HELD
}

/// Loads the store's credentials and `TOOLHOST_CREDENTIAL_*` variables into [`held`], and returns
/// it. A store with no credentials needs no key.
///
/// # Errors
///
/// A store that cannot be opened (a key others can read, a value the key does not open), or a
/// variable that makes no credential.
pub fn load() -> anyhow::Result<Credentials> {
    let held = held();
    let stored = vault()?.load().context("opening the credential store (toolhost creds)")?;
    held.extend(&stored);
    held.add_env(credentials::env_vars()).context("reading TOOLHOST_CREDENTIAL_* variables")?;
    Ok(held.clone())
}

/// A value typed at the terminal, not echoed.
fn read_unseen(name: &str) -> anyhow::Result<String> {
    use crossterm::event::{Event, KeyCode, KeyEventKind, KeyModifiers};
    eprint!("value of `{name}` (not shown; Enter ends): ");
    crossterm::terminal::enable_raw_mode().context("reading from the terminal")?;
    let mut value = String::new();
    let outcome = loop {
        match crossterm::event::read() {
            Ok(Event::Key(key)) if key.kind != KeyEventKind::Release => match key.code {
                KeyCode::Enter => break Ok(()),
                KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => {
                    break Err(anyhow::anyhow!("cancelled"));
                }
                // Other control chords are not part of a value.
                KeyCode::Char(_) if key.modifiers.intersects(KeyModifiers::CONTROL | KeyModifiers::ALT) => {}
                KeyCode::Char(c) => value.push(c),
                KeyCode::Backspace => {
                    value.pop();
                }
                _ => {}
            },
            Ok(Event::Paste(text)) => value.push_str(&text),
            Ok(_) => {}
            Err(error) => break Err(error.into()),
        }
    };
    let _ = crossterm::terminal::disable_raw_mode();
    eprintln!();
    outcome.map(|()| value)
}

/// Runs the command.
///
/// # Errors
///
/// A refused name or value, or a store that cannot be read or written.
pub fn run(args: CredsArgs) -> anyhow::Result<()> {
    let vault = vault()?;
    match args.action {
        Action::Set { name } => {
            credentials::check_name(&name)?;
            let value = if std::io::stdin().is_terminal() {
                read_unseen(&name)?
            } else {
                let mut text = String::new();
                std::io::stdin()
                    .take(credentials::MAX_VALUE_BYTES as u64 + 2)
                    .read_to_string(&mut text)
                    .context("reading the value from standard input")?;
                // One line: its line end is not part of it.
                let end = text.trim_end_matches(['\n', '\r']).len();
                text.truncate(end);
                text
            };
            vault.set(&name, &Secret::new(value))?;
            out::line(format_args!("stored `{name}` (encrypted in {})", vault.dir().display()))?;
        }
        Action::List => {
            let stored = vault.list()?;
            if stored.is_empty() {
                out::line("no credentials stored; add one with `toolhost creds set NAME`")?;
            }
            for one in stored {
                out::line(&one.name)?;
            }
        }
        Action::Rm { name } => {
            if !vault.remove(&name)? {
                anyhow::bail!("no credential `{name}` is stored");
            }
            out::line(format_args!("forgot `{name}`"))?;
        }
    }
    Ok(())
}

/// A log file shared by every log line's writer.
#[derive(Debug, Clone)]
pub struct SharedFile(pub std::sync::Arc<std::fs::File>);

impl std::io::Write for SharedFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        (&*self.0).write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        (&*self.0).flush()
    }
}
