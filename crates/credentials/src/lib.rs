//! Credentials the model never sees (BRIEF invariant 9).
//!
//! A credential is a named secret — an API key, a token, `user:password` for HTTP basic. It is
//! stored by a person (`toolhost creds set NAME`, into the encrypted [`Vault`]) or given by a
//! server's operator (a file or `TOOLHOST_CREDENTIAL_*` variables), referenced by name from API
//! mounts and MCP servers' headers and environments, and injected only where a request leaves.
//! Its value is in no prompt, argument, result or journal row: the [`Credentials`] in use make a
//! [`Redactor`] that the pipeline applies to every output, and [`RedactingWriter`] applies to
//! logs.
//!
//! ```
//! use credentials::{Credentials, Secret, Source};
//!
//! let credentials = Credentials::new();
//! credentials.insert("github", Secret::new("ghp_0123456789".into()), Source::Operator).unwrap();
//! assert_eq!(credentials.get("github").unwrap().expose(), "ghp_0123456789");
//! assert_eq!(credentials.redactor().redact("ghp_0123456789"), "[redacted: github]");
//! ```
#![deny(missing_docs)]

#[cfg(feature = "store")]
mod store;

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, RwLock};

use serde::Serialize;
pub use tool_core::Redactor;
use zeroize::Zeroizing;

#[cfg(feature = "store")]
pub use store::{StoredCredential, Vault, load_operator_file};

/// The prefix of the variables an operator gives credentials in: `TOOLHOST_CREDENTIAL_GITHUB`
/// is the credential `github`.
pub const ENV_PREFIX: &str = "TOOLHOST_CREDENTIAL_";

/// The longest value kept (a credential is a key or a token, not a document).
pub const MAX_VALUE_BYTES: usize = 16 * 1024;

/// A secret value: shown by no `Debug`, wiped from memory when dropped.
#[derive(Clone)]
pub struct Secret(Zeroizing<String>);

impl Secret {
    /// Wraps a value.
    pub fn new(value: String) -> Self {
        Self(Zeroizing::new(value))
    }

    /// The value, for the one place a request leaves.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

/// Where a credential came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// The person's encrypted store.
    Store,
    /// The server's operator (a file or the environment).
    Operator,
}

/// Why a credential could not be used, stored or read.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// The name is not one a credential can have.
    #[error(
        "`{0}` is not a credential name: use 1 to 64 lower-case letters, digits, `_` or `-`, starting with a letter or digit"
    )]
    Name(String),
    /// The value is empty, too short to be found again, too long, or has a line break.
    #[error("the value of `{name}` {reason}")]
    Value {
        /// The credential.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The store or the operator's file could not be read or written.
    #[error("{0}")]
    Io(String),
    /// The store's key does not open a value (another key, or the file was altered).
    #[error("cannot decrypt `{0}`: the key does not match, or the store was altered")]
    Decrypt(String),
    /// A file's permissions let others read it.
    #[error("{0} is readable by other users: make it readable by its owner only (chmod 600)")]
    Permissions(String),
}

/// Checks a credential's name.
///
/// # Errors
///
/// [`CredentialError::Name`] for an empty or too long name, or a character other than lower-case
/// letters, digits, `_` and `-`.
pub fn check_name(name: &str) -> Result<(), CredentialError> {
    let ok = (1..=64).contains(&name.len())
        && name.bytes().next().is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    if ok { Ok(()) } else { Err(CredentialError::Name(name.to_owned())) }
}

/// Checks a credential's value: not empty, long enough to be redacted, at most
/// [`MAX_VALUE_BYTES`], one line.
///
/// # Errors
///
/// [`CredentialError::Value`] saying what is wrong.
pub fn check_value(name: &str, value: &str) -> Result<(), CredentialError> {
    let reason = if value.is_empty() {
        "is empty"
    } else if value.chars().count() < tool_core::redact::MIN_SECRET_CHARS {
        "is shorter than 8 characters: too short to be told apart from ordinary text and redacted"
    } else if value.len() > MAX_VALUE_BYTES {
        "is longer than 16 KiB"
    } else if value.contains(['\n', '\r', '\0']) {
        "has a line break or a NUL: a credential is one line"
    } else {
        return Ok(());
    };
    Err(CredentialError::Value { name: name.to_owned(), reason: reason.to_owned() })
}

/// One credential as tools and people may see it: never its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CredentialInfo {
    /// Its name.
    pub name: String,
    /// Where it came from.
    pub source: Source,
    /// What references it (`api petstore`, `mcp github`), as mounts said.
    pub used_by: Vec<String>,
}

#[derive(Default)]
struct Inner {
    entries: BTreeMap<String, (Secret, Source)>,
    uses: BTreeMap<String, Vec<String>>,
    redactor: Arc<Redactor>,
}

/// The credentials a process holds: looked up by name where requests leave, listed by name, and
/// redacted from everything by the [`Redactor`] they make. Cheap to clone (shared).
#[derive(Clone, Default)]
pub struct Credentials {
    inner: Arc<RwLock<Inner>>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.read();
        f.debug_struct("Credentials").field("names", &inner.entries.keys().collect::<Vec<_>>()).finish()
    }
}

impl Credentials {
    /// None yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds (or replaces) a credential.
    ///
    /// # Errors
    ///
    /// A name or value [`check_name`] or [`check_value`] refuses.
    pub fn insert(&self, name: &str, secret: Secret, source: Source) -> Result<(), CredentialError> {
        check_name(name)?;
        check_value(name, secret.expose())?;
        let mut inner = self.write();
        let previous = inner.entries.insert(name.to_owned(), (secret, source));
        let redactor =
            Redactor::new(inner.entries.iter().map(|(name, (secret, _))| (name.as_str(), secret.expose())));
        if redactor.is_broken() {
            // Closed: a value that could not be redacted is not held.
            match previous {
                Some(previous) => inner.entries.insert(name.to_owned(), previous),
                None => inner.entries.remove(name),
            };
            return Err(CredentialError::Value {
                name: name.to_owned(),
                reason: "cannot be added to the redactor (too many or too long credentials)".into(),
            });
        }
        inner.redactor = Arc::new(redactor);
        Ok(())
    }

    /// Adds the credentials given in `TOOLHOST_CREDENTIAL_NAME` variables among `vars` (the name
    /// is the rest, lower-cased). Returns the names added.
    ///
    /// # Errors
    ///
    /// A variable whose name or value makes no credential (nothing is added then).
    pub fn add_env(
        &self,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Vec<String>, CredentialError> {
        let mut found = Vec::new();
        for (key, value) in vars {
            if let Some(rest) = key.strip_prefix(ENV_PREFIX) {
                let name = rest.to_ascii_lowercase();
                check_name(&name)?;
                check_value(&name, &value)?;
                found.push((name, value));
            }
        }
        let names = found.iter().map(|(n, _)| n.clone()).collect();
        for (name, value) in found {
            self.insert(&name, Secret::new(value), Source::Operator)?;
        }
        Ok(names)
    }

    /// Adds every credential of `other` (a loaded store, an operator's file).
    pub fn extend(&self, other: &Credentials) {
        let entries: Vec<(String, Secret, Source)> =
            other.read().entries.iter().map(|(n, (s, src))| (n.clone(), s.clone(), *src)).collect();
        for (name, secret, source) in entries {
            // Both were checked on the way in.
            let _ = self.insert(&name, secret, source);
        }
    }

    /// The credential `name`.
    pub fn get(&self, name: &str) -> Option<Secret> {
        self.read().entries.get(name).map(|(secret, _)| secret.clone())
    }

    /// Whether there is a credential `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.read().entries.contains_key(name)
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.read().entries.is_empty()
    }

    /// Records that `user` (`api petstore`) references `name`, for [`Credentials::list`].
    pub fn note_use(&self, name: &str, user: &str) {
        let mut inner = self.write();
        let users = inner.uses.entry(name.to_owned()).or_default();
        if !users.iter().any(|u| u == user) {
            users.push(user.to_owned());
        }
    }

    /// Every credential by name, with its source and users; never a value.
    pub fn list(&self) -> Vec<CredentialInfo> {
        let inner = self.read();
        inner
            .entries
            .iter()
            .map(|(name, (_, source))| CredentialInfo {
                name: name.clone(),
                source: *source,
                used_by: inner.uses.get(name).cloned().unwrap_or_default(),
            })
            .collect()
    }

    /// The redactor of every value held now (shared; a later insert makes a new one).
    pub fn redactor(&self) -> Arc<Redactor> {
        self.read().redactor.clone()
    }
}

/// This process's variables that are text (a variable that is not UTF-8 is no credential, and
/// is passed over rather than stopping the start).
pub fn env_vars() -> impl Iterator<Item = (String, String)> {
    std::env::vars_os().filter_map(|(key, value)| Some((key.into_string().ok()?, value.into_string().ok()?)))
}

/// A writer that redacts credentials from what passes through it: a log's writer (each write is
/// redacted whole; a formatted log line is one write).
#[derive(Debug)]
pub struct RedactingWriter<W> {
    credentials: Credentials,
    inner: W,
}

impl<W> RedactingWriter<W> {
    /// Wraps `inner`.
    pub fn new(credentials: Credentials, inner: W) -> Self {
        Self { credentials, inner }
    }
}

impl<W: Write> Write for RedactingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let redactor = self.credentials.redactor();
        match std::str::from_utf8(buf) {
            Ok(text) if !redactor.is_empty() => {
                self.inner.write_all(redactor.redact(text).as_bytes())?;
            }
            _ => self.inner.write_all(buf)?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_values_are_checked() {
        for good in ["github", "a", "my-key_2", "0x"] {
            check_name(good).unwrap();
        }
        for bad in ["", "GitHub", "-a", "a b", "a.b", &"x".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
        assert!(check_value("k", "").is_err());
        assert!(check_value("k", "abcdefg").is_err());
        assert!(check_value("k", "abcd\nefgh").is_err());
        check_value("k", "abcdefgh").unwrap();
    }

    #[test]
    fn env_list_redactor_and_writer() {
        let credentials = Credentials::new();
        let names = credentials
            .add_env([
                ("TOOLHOST_CREDENTIAL_GITHUB".to_owned(), "ghp_secret_value".to_owned()),
                ("PATH".to_owned(), "/bin".to_owned()),
            ])
            .unwrap();
        assert_eq!(names, ["github"]);
        credentials.note_use("github", "mcp github");
        credentials.note_use("github", "mcp github");
        let listed = credentials.list();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].used_by, ["mcp github"]);
        assert!(!format!("{credentials:?} {:?}", credentials.get("github")).contains("ghp_"));
        let mut out = Vec::new();
        writeln!(RedactingWriter::new(credentials.clone(), &mut out), "token=ghp_secret_value").unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "token=[redacted: github]\n");
        assert!(
            credentials
                .add_env([("TOOLHOST_CREDENTIAL_BAD NAME".to_owned(), "valuevalue".to_owned())])
                .is_err()
        );
    }
}
