//! Services injected into runtimes, and the audit contract.
//!
//! A registry builds each tool's runtime from a [`Services`] value that the front end fills with
//! whatever it has (a `ComputerRuntime`, a todo store, an HTTP client…). Tools take what they need
//! by type; `tool-core` itself knows none of these types.

use std::any::{Any, TypeId, type_name};
use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

use crate::manifest::ApiSpec;
use crate::sandbox::FileRoot;

/// A type-keyed bag of shared services, cheap to clone.
#[derive(Clone, Default)]
pub struct Services {
    entries: HashMap<TypeId, (&'static str, Arc<dyn Any + Send + Sync>)>,
}

impl Services {
    /// An empty bag.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) the service of type `T`.
    #[must_use]
    pub fn with<T: Any + Send + Sync>(mut self, service: T) -> Self {
        self.entries.insert(TypeId::of::<T>(), (type_name::<T>(), Arc::new(service)));
        self
    }

    /// The service of type `T`, if present.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.entries.get(&TypeId::of::<T>()).and_then(|(_, service)| service.downcast_ref())
    }

    /// The service of type `T`, or an error naming it.
    ///
    /// # Errors
    ///
    /// [`MissingService`] when the bag has no `T`.
    pub fn require<T: Any + Send + Sync>(&self) -> Result<&T, MissingService> {
        self.get().ok_or(MissingService(type_name::<T>()))
    }
}

impl fmt::Debug for Services {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.entries.values().map(|(name, _)| name)).finish()
    }
}

/// A runtime needed a service the front end did not provide.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("this front end provides no {0}, which the tool needs")]
pub struct MissingService(pub &'static str);

/// What a dynamic audit looks at.
#[derive(Debug, Clone, Copy)]
pub struct AuditInput<'a> {
    /// The API called.
    pub api: &'a ApiSpec,
    /// Its validated arguments.
    pub arguments: &'a Value,
    /// The session's working directory (the sandbox boundary).
    pub working_directory: Option<&'a Path>,
    /// Whether the system temp folders count as inside the session: yes on a person's own
    /// machine, no on a server whose tenants share them.
    pub temp_in_scope: bool,
    /// The session's own temp folder (where its commands' full output is kept): always inside.
    pub session_temp: Option<&'a Path>,
    /// The paths live on another machine that audits them (a device): not resolvable here.
    pub paths_elsewhere: bool,
    /// The hard limit of the session's files, when it has one (a server with keys): a path
    /// beneath none of these is refused, never asked about, since no approval may open it.
    pub hard_roots: Option<&'a [FileRoot]>,
}

/// What a dynamic audit decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuditVerdict {
    /// Nothing to ask about.
    Pass,
    /// A person should be asked, for this reason.
    Flag(String),
    /// The call must not run whatever anyone answers, for this reason.
    Refuse(String),
}

/// A dynamic audit: a pure function from the call to a verdict, looked up by name.
pub type AuditFn = fn(&AuditInput<'_>) -> AuditVerdict;

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct Clock(u32);

    #[test]
    fn services_by_type() {
        let services = Services::new().with(Clock(3)).with(String::from("x"));
        assert_eq!(services.get::<Clock>(), Some(&Clock(3)));
        assert_eq!(services.require::<String>().unwrap(), "x");
        let missing = services.require::<u64>().unwrap_err();
        assert_eq!(missing.to_string(), "this front end provides no u64, which the tool needs");
        assert!(format!("{services:?}").contains("Clock"));
    }
}
