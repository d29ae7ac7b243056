//! The environment commands start with: an allow-list, closed by default.
//!
//! A command never inherits the environment of the process that runs it whole: a server's
//! database URL, Redis URL and API keys, or a person's cloud tokens, would be one `env` away from
//! the model. Only the variables a shell needs are passed on, names that look like secrets never
//! are (even when allowed by a pattern), and neither is any value that carries credentials in a
//! URL.
//!
//! ```
//! use computer_runtime::env::EnvPolicy;
//!
//! let policy = EnvPolicy::default();
//! let env = policy.filter([
//!     ("PATH", "/usr/bin"),
//!     ("LC_ALL", "C.UTF-8"),
//!     ("DATABASE_URL", "postgres://app:hunter2@db/app"),
//!     ("OPENAI_API_KEY", "sk-…"),
//!     ("TOOLHOST_API_KEYS", "acme:…"),
//! ]);
//! assert_eq!(env, [("PATH".to_owned(), "/usr/bin".to_owned()), ("LC_ALL".to_owned(), "C.UTF-8".to_owned())]);
//! ```

use std::ffi::OsString;

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

/// Which variables of the parent's environment commands inherit, and which they are given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvPolicy {
    /// Names (with `*` wildcards, case-insensitive) passed on from the parent.
    pub inherit: Vec<String>,
    /// Names never passed on, even when `inherit` matches them.
    pub deny: Vec<String>,
    /// Variables every command is given, as set by the operator (not filtered).
    pub set: Vec<(String, String)>,
}

/// What a shell and ordinary programs need.
pub const DEFAULT_INHERIT: &[&str] =
    &["PATH", "HOME", "LANG", "LANGUAGE", "LC_*", "TERM", "TZ", "USER", "LOGNAME", "SHELL"];

/// Names that hold secrets, or Toolhost's own settings.
pub const DEFAULT_DENY: &[&str] = &[
    "TOOLHOST_*",
    "*KEY*",
    "*TOKEN*",
    "*SECRET*",
    "*PASSWORD*",
    "*PASSWD*",
    "*CREDENTIAL*",
    "*_AUTH*",
    "*COOKIE*",
    "*SESSION*",
];

impl Default for EnvPolicy {
    fn default() -> Self {
        Self {
            inherit: DEFAULT_INHERIT.iter().map(|&s| s.to_owned()).collect(),
            deny: DEFAULT_DENY.iter().map(|&s| s.to_owned()).collect(),
            set: Vec::new(),
        }
    }
}

impl EnvPolicy {
    /// Whether a variable of the parent may be passed on.
    pub fn allows(&self, name: &str, value: &str) -> bool {
        Compiled::of(self).allows(name, value)
    }

    /// The variables of `parent` that commands inherit, in order, then the operator's own.
    pub fn filter<K, V>(&self, parent: impl IntoIterator<Item = (K, V)>) -> Vec<(String, String)>
    where
        K: Into<String>,
        V: Into<String>,
    {
        let compiled = Compiled::of(self);
        let mut out: Vec<(String, String)> = parent
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .filter(|(name, value)| compiled.allows(name, value))
            .collect();
        for (name, value) in &self.set {
            out.retain(|(existing, _)| existing != name);
            out.push((name.clone(), value.clone()));
        }
        out
    }

    /// The variables of this process that commands inherit (variables that are not UTF-8 are
    /// left out).
    pub fn from_current_process(&self) -> Vec<(OsString, OsString)> {
        let parent =
            std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)));
        self.filter(parent).into_iter().map(|(k, v)| (k.into(), v.into())).collect()
    }
}

/// The policy's patterns, compiled once per filtering.
struct Compiled {
    inherit: GlobSet,
    deny: GlobSet,
}

impl Compiled {
    fn of(policy: &EnvPolicy) -> Self {
        Self { inherit: glob_set(&policy.inherit), deny: glob_set(&policy.deny) }
    }

    fn allows(&self, name: &str, value: &str) -> bool {
        self.inherit.is_match(name) && !self.deny.is_match(name) && !has_url_credentials(value)
    }
}

/// Anchored, case-insensitive globs (`*` is any run of characters); a pattern that does not
/// compile matches nothing, so a bad `inherit` entry passes nothing on.
fn glob_set(patterns: &[String]) -> GlobSet {
    let mut set = GlobSetBuilder::new();
    for pattern in patterns {
        if let Ok(glob) = GlobBuilder::new(pattern).case_insensitive(true).literal_separator(false).build() {
            set.add(glob);
        }
    }
    set.build().unwrap_or_else(|_| GlobSet::empty())
}

#[cfg(test)]
fn matches(pattern: &str, name: &str) -> bool {
    glob_set(&[pattern.to_owned()]).is_match(name)
}

/// `scheme://user:password@host…` anywhere in the value.
fn has_url_credentials(value: &str) -> bool {
    value.match_indices("://").any(|(at, _)| {
        let authority = value[at + 3..].split(['/', '?', '#', ' ', ',', ';']).next().unwrap_or("");
        authority.contains('@')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns() {
        for (pattern, name, expected) in [
            ("PATH", "PATH", true),
            ("PATH", "PATHS", false),
            ("LC_*", "LC_ALL", true),
            ("LC_*", "LC_", true),
            ("LC_*", "XLC_ALL", false),
            ("*KEY*", "OPENAI_API_KEY", true),
            ("*KEY*", "keyring", true),
            ("*KEY*", "MONKEY_X", true),
            ("TOOLHOST_*", "toolhost_database_url", true),
            ("*_URL", "DATABASE_URL", true),
            ("*_URL", "URL", false),
            ("A*B*C", "AxxBxxC", true),
            ("A*B*C", "AC", false),
        ] {
            assert_eq!(matches(pattern, name), expected, "{pattern} ~ {name}");
        }
    }

    #[test]
    fn secrets_never_pass_even_when_allowed() {
        let policy = EnvPolicy {
            inherit: vec!["*".into()],
            set: vec![("GIT_TOKEN".into(), "operator-chose-this".into()), ("PATH".into(), "/opt/bin".into())],
            ..EnvPolicy::default()
        };
        let env = policy.filter([
            ("PATH", "/usr/bin"),
            ("EDITOR", "vi"),
            ("REDIS_URL", "redis://:pw@127.0.0.1:6379"),
            ("MIRROR", "see https://user:pw@example.org/x"),
            ("PLAIN_URL", "https://example.org/a@b"),
            ("AWS_SECRET_ACCESS_KEY", "x"),
            ("GITHUB_TOKEN", "x"),
            ("TOOLHOST_LISTEN", "127.0.0.1:8080"),
        ]);
        let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["EDITOR", "PLAIN_URL", "GIT_TOKEN", "PATH"]);
        assert_eq!(env.last().unwrap().1, "/opt/bin");
    }
}
