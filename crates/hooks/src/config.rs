//! Hook configuration in Claude Code's shape: event → matchers on tool names → hooks.
//!
//! ```json
//! {"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "…", "timeout": 60}]}]}}
//! ```
//!
//! A file may hold that whole object (`hooks.json`, Claude Code's `settings.json`) or only what
//! is under `"hooks"`. What Toolhost cannot run (other events, `prompt` and `agent` hooks) is
//! reported, not an error: a team's shared settings keep working where they can.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

/// The events Toolhost runs hooks for.
pub const EVENTS: &[&str] =
    &["PreToolUse", "PermissionRequest", "PostToolUse", "UserPromptSubmit", "SessionStart", "Stop"];

/// A hook's default time (Claude Code's).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The longest time a hook may be given.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(600);

/// Why a hook file could not be read at all.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not JSON, or not an object.
    #[error("{path} is not a hook configuration: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
}

/// Who set a hook up, which decides what it may see and how it is described.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The person's own configuration folder.
    Person,
    /// A project folder the person trusted.
    Project,
    /// The server's operator.
    Operator,
}

/// What a hook runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// A shell command (`sh -c`), given the event as JSON on standard input.
    Command(String),
    /// A webhook: the event is POSTed as JSON; the response body is read as a command's output.
    Http {
        /// The URL.
        url: String,
        /// Headers sent with it.
        headers: Vec<(String, String)>,
    },
}

/// What happens when a hook fails (exits other than 0 or 2, times out, cannot start, or says
/// something that is not its protocol).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnFailure {
    /// Reported to the person; what the hook guarded goes on.
    Continue,
    /// Reported to the person; what the hook guarded does not happen.
    Block,
}

/// One hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hook {
    /// The event it runs on.
    pub event: String,
    /// The matcher on tool names (tool events only; empty matches all).
    pub matcher: String,
    /// What it runs.
    pub action: Action,
    /// How long it may take.
    pub timeout: Duration,
    /// What its failure does (`None`: the event's default, see [`Hook::on_failure`]).
    pub on_failure: Option<OnFailure>,
    /// Its name in the journal (`hook:NAME`) and in notes.
    pub name: String,
    /// Who set it up.
    pub origin: Origin,
    /// The file it came from.
    pub source: PathBuf,
}

impl Hook {
    /// What its failure does: as configured, else what it guarded goes on (reported), as in
    /// Claude Code — a script's last `[ … ] && exit 2` leaves status 1 when nothing matched.
    pub fn on_failure(&self) -> OnFailure {
        self.on_failure.unwrap_or(OnFailure::Continue)
    }

    /// `hook:NAME`.
    pub fn label(&self) -> String {
        format!("hook:{}", self.name)
    }
}

/// Hooks read from files, and what in them was left out.
#[derive(Debug, Clone, Default)]
pub struct HookSet {
    /// The hooks, in the order read.
    pub hooks: Vec<Hook>,
    /// What was left out, and why (for the person).
    pub warnings: Vec<String>,
}

impl HookSet {
    /// Reads `path` if it exists (a missing file is no hooks).
    ///
    /// # Errors
    ///
    /// The file exists but cannot be read or is not JSON.
    pub fn read_file(&mut self, path: &Path, origin: Origin) -> Result<(), ConfigError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(source) => return Err(ConfigError::Read { path: path.to_owned(), source }),
        };
        let value: Value = serde_json::from_str(&text)
            .map_err(|error| ConfigError::Invalid { path: path.to_owned(), message: error.to_string() })?;
        self.add_value(&value, path, origin)
            .map_err(|message| ConfigError::Invalid { path: path.to_owned(), message })
    }

    /// Adds the hooks of one parsed configuration (`{"hooks": {…}}` or the `{…}` itself).
    ///
    /// # Errors
    ///
    /// Not an object of events.
    pub fn add_value(&mut self, value: &Value, source: &Path, origin: Origin) -> Result<(), String> {
        let Some(object) = value.as_object() else { return Err("not a JSON object".into()) };
        let events = match object.get("hooks") {
            Some(Value::Object(events)) => events,
            Some(_) => return Err("`hooks` is not an object".into()),
            // A settings file without hooks has none; a bare object of events is the hooks.
            None if object.keys().any(|k| k.chars().next().is_some_and(|c| c.is_ascii_uppercase())) => object,
            None => return Ok(()),
        };
        let file = source.display();
        for (event, groups) in events {
            if !EVENTS.contains(&event.as_str()) {
                self.warnings.push(format!("{file}: {event} hooks are not run by Toolhost (left out)"));
                continue;
            }
            let Some(groups) = groups.as_array() else {
                self.warnings.push(format!("{file}: {event} is not a list of matchers (left out)"));
                continue;
            };
            for group in groups {
                let matcher = group.get("matcher").and_then(Value::as_str).unwrap_or("").to_owned();
                let Some(hooks) = group.get("hooks").and_then(Value::as_array) else {
                    self.warnings.push(format!("{file}: a {event} matcher has no `hooks` list (left out)"));
                    continue;
                };
                for hook in hooks {
                    match parse_hook(event, &matcher, hook, source, origin.clone()) {
                        Ok(hook) => self.hooks.push(hook),
                        Err(why) => self.warnings.push(format!("{file}: a {event} hook {why} (left out)")),
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.hooks.is_empty()
    }
}

fn parse_hook(
    event: &str,
    matcher: &str,
    hook: &Value,
    source: &Path,
    origin: Origin,
) -> Result<Hook, String> {
    let kind = hook.get("type").and_then(Value::as_str).unwrap_or("command");
    let action = match kind {
        "command" => {
            let command = hook
                .get("command")
                .and_then(Value::as_str)
                .filter(|c| !c.trim().is_empty())
                .ok_or("has no command")?;
            Action::Command(command.to_owned())
        }
        "http" => {
            let url = hook.get("url").and_then(Value::as_str).ok_or("has no url")?.to_owned();
            let headers = match hook.get("headers") {
                None => Vec::new(),
                Some(Value::Object(map)) => map
                    .iter()
                    .map(|(k, v)| {
                        v.as_str().map(|v| (k.clone(), v.to_owned())).ok_or("has a header that is not text")
                    })
                    .collect::<Result<_, _>>()?,
                Some(_) => return Err("has `headers` that are not an object".into()),
            };
            // Claude Code's `allowedEnvVars`: only the variables named go into header values.
            let allowed: Vec<String> = hook
                .get("allowedEnvVars")
                .and_then(Value::as_array)
                .map(|names| names.iter().filter_map(Value::as_str).map(str::to_owned).collect())
                .unwrap_or_default();
            let headers = headers
                .into_iter()
                .map(|(name, value)| {
                    (name, crate::run::interpolate(&value, &allowed, |v| std::env::var(v).ok()))
                })
                .collect();
            Action::Http { url, headers }
        }
        other => return Err(format!("of type `{other}` cannot be run by Toolhost")),
    };
    let timeout = match hook.get("timeout") {
        None | Some(Value::Null) => DEFAULT_TIMEOUT,
        Some(value) => {
            let seconds =
                value.as_f64().filter(|s| *s > 0.0).ok_or("has a timeout that is not a positive number")?;
            Duration::from_secs_f64(seconds.min(MAX_TIMEOUT.as_secs_f64()))
        }
    };
    // Claude Code's `onFailure`; `failClosed: true` says the same.
    let on_failure = match (hook.get("onFailure").and_then(Value::as_str), hook.get("failClosed")) {
        (Some("block"), _) | (None, Some(Value::Bool(true))) => Some(OnFailure::Block),
        (Some("continue" | "allow"), _) | (None, Some(Value::Bool(false))) => Some(OnFailure::Continue),
        (None, None) => None,
        (Some(other), _) => return Err(format!("has an unknown onFailure `{other}`")),
        (None, Some(_)) => return Err("has a failClosed that is not true or false".into()),
    };
    if matcher != "*" && !matcher.is_empty() && !crate::matcher::is_valid(matcher) {
        return Err(format!("has a matcher that is not a regular expression: `{matcher}`"));
    }
    let name = match hook.get("name").and_then(Value::as_str) {
        Some(name) if !name.trim().is_empty() => name.trim().to_owned(),
        _ => match &action {
            Action::Command(command) => name_of_command(command),
            Action::Http { url, .. } => url.split('?').next().unwrap_or(url).to_owned(),
        },
    };
    Ok(Hook {
        event: event.to_owned(),
        matcher: matcher.to_owned(),
        action,
        timeout,
        on_failure,
        name,
        origin,
        source: source.to_owned(),
    })
}

/// A short name for a command: the file name of the script it runs (`block-rm.sh` for
/// `"$CLAUDE_PROJECT_DIR"/.claude/hooks/block-rm.sh`), else its first word.
pub fn name_of_command(command: &str) -> String {
    let words: Vec<&str> = command.split_whitespace().map(|w| w.trim_matches(['"', '\''])).collect();
    let script = words
        .iter()
        .find(|w| w.contains('/') || w.rsplit_once('.').is_some_and(|(_, ext)| (1..=4).contains(&ext.len())))
        .or(words.first())
        .copied()
        .unwrap_or("command");
    let name = script.rsplit('/').next().unwrap_or(script);
    let name: String = name.chars().filter(|c| !c.is_control()).take(60).collect();
    if name.is_empty() { "command".into() } else { name }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn claude_codes_settings_are_read_as_they_are() {
        let mut set = HookSet::default();
        let settings = json!({
            "permissions": {"allow": ["Bash(npm test)"]},
            "hooks": {
                "PreToolUse": [{"matcher": "Bash", "hooks": [
                    {"type": "command", "command": "\"$CLAUDE_PROJECT_DIR\"/.claude/hooks/block-rm.sh", "timeout": 5}
                ]}],
                "PostToolUse": [{"matcher": "Edit|Write", "hooks": [{"type": "command", "command": "npx prettier --write"}]}],
                "Notification": [{"hooks": [{"type": "command", "command": "notify-send hi"}]}],
                "Stop": [{"hooks": [{"type": "prompt", "prompt": "Is the work done?"}]}]
            }
        });
        set.add_value(&settings, Path::new(".claude/settings.json"), Origin::Project).unwrap();
        assert_eq!(set.hooks.len(), 2);
        assert_eq!(set.hooks[0].name, "block-rm.sh");
        assert_eq!(set.hooks[0].timeout, Duration::from_secs(5));
        assert_eq!(set.hooks[0].on_failure(), OnFailure::Continue);
        assert_eq!(set.hooks[1].name, "npx");
        assert_eq!(set.hooks[1].on_failure(), OnFailure::Continue);
        assert_eq!(set.hooks[1].timeout, DEFAULT_TIMEOUT);
        assert_eq!(set.warnings.len(), 2, "{:?}", set.warnings);
        assert!(set.warnings[0].contains("Notification"));
        assert!(set.warnings[1].contains("`prompt`"));
    }

    #[test]
    fn a_bare_hooks_object_is_read_and_bad_hooks_are_left_out_with_a_reason() {
        let mut set = HookSet::default();
        let hooks = json!({
            "PreToolUse": [{"matcher": "(", "hooks": [{"type": "command", "command": "x"}]},
                           {"matcher": "*", "hooks": [{"type": "command", "command": "x", "onFailure": "continue", "timeout": 9000},
                                                       {"type": "command"}]}],
            "PermissionRequest": [{"hooks": [{"type": "http", "url": "https://audit.example/hook", "failClosed": true}]}]
        });
        set.add_value(&hooks, Path::new("hooks.json"), Origin::Person).unwrap();
        assert_eq!(set.hooks.len(), 2, "{:?}", set.warnings);
        assert_eq!(set.hooks[0].on_failure(), OnFailure::Continue);
        assert_eq!(set.hooks[0].timeout, MAX_TIMEOUT);
        assert_eq!(set.hooks[1].on_failure(), OnFailure::Block);
        assert_eq!(set.hooks[1].label(), "hook:https://audit.example/hook");
        assert!(set.warnings.iter().any(|w| w.contains("not a regular expression")));
        assert!(set.warnings.iter().any(|w| w.contains("has no command")));
        assert!(set.add_value(&json!([1]), Path::new("x"), Origin::Person).is_err());
        // A settings file without hooks has none.
        let before = set.hooks.len();
        set.add_value(&json!({"model": "x"}), Path::new("settings.json"), Origin::Project).unwrap();
        assert_eq!(set.hooks.len(), before);
    }

    #[test]
    fn commands_are_named_by_their_script() {
        assert_eq!(name_of_command("python3 .claude/hooks/check.py --strict"), "check.py");
        assert_eq!(name_of_command("jq -r .tool_input.command"), "jq");
        assert_eq!(name_of_command("'/opt/hooks/audit' x"), "audit");
        assert_eq!(name_of_command("./guard.sh"), "guard.sh");
    }
}
