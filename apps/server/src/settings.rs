//! The configuration file (`--config FILE`, `TOOLHOST_CONFIG`): every setting a flag holds, under
//! the flag's long name (`workspace-root` or `workspace_root`), in TOML. A flag wins over its
//! environment variable, which wins over the file, which wins over the default. A list is a TOML
//! array; a secret may be read from a file instead of written inline (`database-url = { file =
//! "/run/secrets/db" }`). A key that names no setting is an error naming the closest one.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, CommandFactory as _, FromArgMatches as _};

use crate::config::Cli;

/// The command line parsed, with the configuration file's settings where neither a flag nor an
/// environment variable gave one; with the matches (for printing the effective settings).
///
/// # Errors
///
/// A bad command line (a `clap::Error`, which prints itself with `exit()`), an unreadable or
/// invalid file, a key that names no setting, or a value the setting refuses.
pub fn parse<I, T>(args: I) -> anyhow::Result<(Cli, ArgMatches)>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let argv: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let first = Cli::command().try_get_matches_from(&argv)?;
    let Some(path) = first.get_one::<PathBuf>("config").cloned() else {
        return Ok((Cli::from_arg_matches(&first)?, first));
    };
    let notify = notify_settings(&path)?;
    let from_file = file_args(&path, &first)?;
    let mut combined = Vec::with_capacity(argv.len() + from_file.len());
    combined.extend(argv.first().cloned());
    // Before the command line's own arguments (and any subcommand), which they never repeat.
    combined.extend(from_file);
    combined.extend(argv.into_iter().skip(1));
    let matches = Cli::command().try_get_matches_from(&combined).map_err(|error| {
        // The setting the file gave a value it refuses, and its line.
        let setting =
            error.get(clap::error::ContextKind::InvalidArg).map(ToString::to_string).and_then(|arg| {
                arg.strip_prefix("--").map(|rest| rest.split([' ', '=']).next().unwrap_or("").to_owned())
            });
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        match setting.as_deref().and_then(|setting| line_of(&text, setting).map(|line| (setting, line))) {
            Some((setting, line)) => anyhow::anyhow!(
                "{}:{line}: {setting}: {}",
                path.display(),
                error.render().to_string().trim_start_matches("error: ").trim()
            ),
            None => anyhow::anyhow!("in the configuration file {}: {}", path.display(), error.render()),
        }
    })?;
    let mut cli = Cli::from_arg_matches(&matches)?;
    cli.serve.notify = notify;
    Ok((cli, matches))
}

/// The file's `[notify]` table (channels that tell people a call waits), `{ file = … }` values
/// read; none without one.
fn notify_settings(path: &Path) -> anyhow::Result<crate::config::NotifySettings> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the configuration file {}", path.display()))?;
    let table: toml::Table = toml::from_str(&text)
        .map_err(|e| anyhow::anyhow!("the configuration file {} is not valid TOML: {e}", path.display()))?;
    let Some(value) = table.get("notify") else { return Ok(crate::config::NotifySettings::default()) };
    let mut value = value.clone();
    read_files(path, &mut value)?;
    let at = line_of(&text, "[notify]")
        .or_else(|| text.lines().position(|l| l.trim_start().starts_with("[[notify.")).map(|n| n + 1));
    value.try_into().map_err(|error| match at {
        Some(line) => anyhow::anyhow!("{}:{line}: notify: {error}", path.display()),
        None => anyhow::anyhow!("{}: notify: {error}", path.display()),
    })
}

/// Replaces every `{ file = "…" }` in a value by the file's content (trimmed), read relative to
/// the configuration file's folder.
fn read_files(config: &Path, value: &mut toml::Value) -> anyhow::Result<()> {
    match value {
        toml::Value::Table(table)
            if table.len() == 1 && table.get("file").is_some_and(toml::Value::is_str) =>
        {
            let named = table["file"].as_str().unwrap_or_default();
            let file = config.parent().unwrap_or(Path::new(".")).join(named);
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("reading {} (named in {})", file.display(), config.display()))?;
            *value = toml::Value::String(text.trim().to_owned());
        }
        toml::Value::Table(table) => {
            for (_, item) in table.iter_mut() {
                read_files(config, item)?;
            }
        }
        toml::Value::Array(items) => {
            for item in items {
                read_files(config, item)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// The file's settings as command-line arguments, for the settings `given` has from neither a
/// flag nor an environment variable.
fn file_args(path: &Path, given: &ArgMatches) -> anyhow::Result<Vec<OsString>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the configuration file {}", path.display()))?;
    let table: toml::Table = toml::from_str(&text)
        .map_err(|e| anyhow::anyhow!("the configuration file {} is not valid TOML: {e}", path.display()))?;
    let command = Cli::command();
    let known: Vec<&clap::Arg> =
        command.get_arguments().filter(|arg| arg.get_long().is_some_and(|l| l != "config")).collect();
    let mut out = Vec::new();
    for (key, value) in &table {
        // A table of its own, read by `notify_settings`.
        if key == "notify" {
            continue;
        }
        let long = key.replace('_', "-");
        let Some(arg) = known.iter().find(|arg| arg.get_long() == Some(long.as_str())) else {
            let closest = known
                .iter()
                .filter_map(|arg| arg.get_long())
                .min_by_key(|name| distance(name, &long))
                .unwrap_or_default();
            let at = line_of(&text, key).map(|line| format!(":{line}")).unwrap_or_default();
            bail!(
                "{}{at}: the configuration file names no setting `{key}` (did you mean `{closest}`?)",
                path.display()
            );
        };
        if matches!(
            given.value_source(arg.get_id().as_str()),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        ) {
            continue;
        }
        let values = values_of(path, key, value).map_err(|error| match line_of(&text, &long) {
            Some(line) => anyhow::anyhow!("{}:{line}: {error:#}", path.display()),
            None => error,
        })?;
        let is_switch =
            matches!(arg.get_action(), ArgAction::SetTrue | ArgAction::SetFalse | ArgAction::Count);
        for value in values {
            if is_switch {
                match value.as_str() {
                    "true" => out.push(OsString::from(format!("--{long}"))),
                    "false" => {}
                    other => bail!(
                        "in the configuration file {}: `{key}` is true or false, not `{other}`",
                        path.display()
                    ),
                }
            } else {
                out.push(OsString::from(format!("--{long}={value}")));
            }
        }
    }
    Ok(out)
}

/// A setting's values as text: a string, number or boolean; an array of those; or `{ file =
/// "…" }`, whose content (trimmed) is the value.
fn values_of(path: &Path, key: &str, value: &toml::Value) -> anyhow::Result<Vec<String>> {
    let one = |value: &toml::Value| -> anyhow::Result<String> {
        Ok(match value {
            toml::Value::String(text) => text.clone(),
            toml::Value::Integer(n) => n.to_string(),
            toml::Value::Float(x) => x.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            toml::Value::Table(table)
                if table.len() == 1 && table.get("file").is_some_and(toml::Value::is_str) =>
            {
                // Relative to the configuration file's folder, as a reader of the file expects.
                let named = table["file"].as_str().unwrap_or_default();
                let file = path.parent().unwrap_or(Path::new(".")).join(named);
                let file = file.display().to_string();
                std::fs::read_to_string(&file)
                    .with_context(|| format!("reading `{key}` from {file} (named in {})", path.display()))?
                    .trim()
                    .to_owned()
            }
            _ => bail!(
                "in the configuration file {}: `{key}` must be a string, number, true/false, a list of those, \
                 or {{ file = \"PATH\" }}",
                path.display()
            ),
        })
    };
    match value {
        toml::Value::Array(items) => items.iter().map(one).collect(),
        other => Ok(vec![one(other)?]),
    }
}

/// Where a setting's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The command line (`--workspace-root`).
    Flag,
    /// An environment variable.
    Env(String),
    /// The configuration file, at a line.
    File {
        /// The file.
        path: PathBuf,
        /// Its line (1-based), when found.
        line: Option<usize>,
    },
}

/// Where each setting given a value came from, by its long name.
#[derive(Debug, Clone, Default)]
pub struct Origins {
    origins: Vec<(String, Origin)>,
}

impl Origins {
    /// Works out where each setting of `matches` came from: the file's keys are the ones neither a
    /// flag nor a variable gave, and their lines are found in `config`'s text.
    pub fn of(matches: &ArgMatches, config: Option<&Path>) -> Self {
        let text = config.and_then(|path| std::fs::read_to_string(path).ok()).unwrap_or_default();
        let file_keys: Vec<String> = toml::from_str::<toml::Table>(&text)
            .map(|table| table.keys().map(|key| key.replace('_', "-")).collect())
            .unwrap_or_default();
        let mut origins = Vec::new();
        for arg in Cli::command().get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            let origin = match matches.value_source(arg.get_id().as_str()) {
                Some(ValueSource::EnvVariable) => {
                    Origin::Env(arg.get_env().map(|v| v.to_string_lossy().into_owned()).unwrap_or_default())
                }
                Some(ValueSource::CommandLine)
                    if file_keys.iter().any(|k| k == long) && !flag_given(long) =>
                {
                    Origin::File {
                        path: config.map(Path::to_path_buf).unwrap_or_default(),
                        line: line_of(&text, long),
                    }
                }
                Some(ValueSource::CommandLine) => Origin::Flag,
                _ => continue,
            };
            origins.push((long.to_owned(), origin));
        }
        Self { origins }
    }

    /// Where `setting` (a long name) came from.
    pub fn get(&self, setting: &str) -> Option<&Origin> {
        self.origins.iter().find(|(name, _)| name == setting).map(|(_, origin)| origin)
    }

    /// A problem that starts with `setting:` said with where that setting came from
    /// (`server.toml:12: workspace-root: …`, `TOOLHOST_WORKSPACE_ROOTS (workspace-root): …`).
    pub fn locate(&self, problem: &str) -> String {
        let Some((setting, rest)) = problem.split_once(": ") else { return problem.to_owned() };
        match self.get(setting) {
            Some(Origin::File { path, line: Some(line) }) => {
                format!("{}:{line}: {setting}: {rest}", path.display())
            }
            Some(Origin::File { path, line: None }) => format!("{}: {setting}: {rest}", path.display()),
            Some(Origin::Env(var)) => format!("{var} ({setting}): {rest}"),
            Some(Origin::Flag) => format!("--{setting}: {rest}"),
            None => problem.to_owned(),
        }
    }

    /// Settings a variable gave although the configuration file sets them too: the variable wins,
    /// which an operator reading the file does not see.
    pub fn overridden_by_env(&self, matches: &ArgMatches, config: Option<&Path>) -> Vec<(String, String)> {
        let Some(text) = config.and_then(|path| std::fs::read_to_string(path).ok()) else {
            return Vec::new();
        };
        let Ok(table) = toml::from_str::<toml::Table>(&text) else { return Vec::new() };
        let _ = matches;
        table
            .keys()
            .map(|key| key.replace('_', "-"))
            .filter_map(|key| match self.get(&key) {
                Some(Origin::Env(var)) => Some((key, var.clone())),
                _ => None,
            })
            .collect()
    }
}

/// Whether the process's own command line names `--long` (as opposed to the file's arguments
/// that [`parse`] adds).
fn flag_given(long: &str) -> bool {
    let flag = format!("--{long}");
    std::env::args().any(|arg| arg == flag || arg.starts_with(&format!("{flag}=")))
}

/// The line of the file where `key` (either spelling) is set.
fn line_of(text: &str, key: &str) -> Option<usize> {
    let spellings = [key.to_owned(), key.replace('-', "_")];
    text.lines()
        .position(|line| {
            let line = line.trim_start();
            spellings.iter().any(|spelling| {
                line.strip_prefix(spelling.as_str()).is_some_and(|rest| rest.trim_start().starts_with('='))
            })
        })
        .map(|index| index + 1)
}

/// Edit distance, to name the setting a mistyped key meant.
pub fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let current = row[j + 1];
            row[j + 1] = (previous + usize::from(ca != *cb)).min(row[j] + 1).min(current + 1);
            previous = current;
        }
    }
    row[b.len()]
}

/// Settings whose values are secrets: shown masked.
const SECRETS: &[&str] = &["api-key", "database-url", "redis-url", "command-set-env", "embeddings-api-key"];

#[cfg(test)]
mod line_tests {
    #[test]
    fn a_keys_line_is_found_in_either_spelling() {
        let text = "# comment\nlisten = \"x\"\n  workspace_root = [\n]\nworkspace-rootx = 1\n";
        assert_eq!(super::line_of(text, "listen"), Some(2));
        assert_eq!(super::line_of(text, "workspace-root"), Some(3));
        assert_eq!(super::line_of(text, "state-dir"), None);
    }
}

/// The effective settings, one `name = value` a line, secrets masked; defaults marked.
pub fn effective(matches: &ArgMatches) -> String {
    let command = Cli::command();
    let mut lines = Vec::new();
    for arg in command.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        let id = arg.get_id().as_str();
        let Some(raw) = matches.get_raw(id) else { continue };
        let values: Vec<String> = raw.map(|v| v.to_string_lossy().into_owned()).collect();
        if values.is_empty() {
            continue;
        }
        let shown = if SECRETS.contains(&long) {
            "\"****\"".to_owned()
        } else if values.len() == 1 && arg.get_num_args().is_none_or(|n| n.max_values() <= 1) {
            format!("{:?}", values[0])
        } else {
            format!("[{}]", values.iter().map(|v| format!("{v:?}")).collect::<Vec<_>>().join(", "))
        };
        let source = match matches.value_source(id) {
            Some(ValueSource::DefaultValue) => "  # default",
            Some(ValueSource::EnvVariable) => "  # from the environment",
            _ => "",
        };
        lines.push(format!("{long} = {shown}{source}"));
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_closest_setting_is_named() {
        assert_eq!(distance("workspace-roots", "workspace-root"), 1);
        assert_eq!(distance("listen", "listen"), 0);
    }
}
