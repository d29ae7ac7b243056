//! The registry of builtin tools: the one list, and every table derived from it.
//!
//! **Architecture invariant:** this is the only crate that knows which builtin tools exist. Front
//! ends ask it for manifests, runtimes, render hooks, audits and provider catalogues; adding a
//! tool touches the tool's own crate plus one line in [`registry`] (written by
//! `cargo xtask new-tool`).
//!
//! * [`builtin_tools`]: the list, each entry with its flags (hidden, discoverable, on by default).
//! * [`Registry::runtime`]: a runtime factory that takes the front end's per-request
//!   [`Services`](tool_core::Services) (feature `runtime`).
//! * [`Registry::render`]: the render-hook table keyed by identifier; hooks take the API name
//!   (feature `render`).
//! * [`Registry::names`]: the function names a model sees (`tool_core::naming`), and
//!   [`Registry::resolve_function`] back to the tool and API.
//! * [`audits`]: the dynamic-audit table (`pathScope`).
//! * [`Registry::catalogue`]: the whole catalogue in one provider's form.
//!
//! ```
//! use builtin_tools::Registry;
//! use tool_core::provider::Provider;
//!
//! let registry = Registry::builtin();
//! assert!(registry.get("local-system").is_some());
//! let openai = registry.catalogue(Provider::Openai);
//! assert!(openai.as_array().unwrap().iter().any(|f| f["function"]["name"] == "readFile"));
//! ```
#![deny(missing_docs)]

pub mod audits;
mod registry;

use std::sync::LazyLock;

use serde::Serialize;
use serde_json::{Value, json};
use tool_core::provider::Provider;
use tool_core::{ApiSpec, ToolManifest, ToolNames};

pub use audits::{audit, audits, preparations, tiers};
pub use registry::builtin_tools;

/// Flags of a registered tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ToolFlags {
    /// Never offered to the model (used by the system itself).
    pub hidden: bool,
    /// Can be found by tool discovery when not active.
    pub discoverable: bool,
    /// Active in a new session unless turned off.
    pub default_enabled: bool,
}

impl ToolFlags {
    /// Visible, discoverable, on by default.
    pub const DEFAULT: Self = Self { hidden: false, discoverable: true, default_enabled: true };

    /// Marks the tool hidden.
    #[must_use]
    pub const fn hidden(self) -> Self {
        Self { hidden: true, ..self }
    }

    /// Marks the tool off by default.
    #[must_use]
    pub const fn off_by_default(self) -> Self {
        Self { default_enabled: false, ..self }
    }

    /// On by default only when `on` (a tool that needs configuration to be useful).
    #[must_use]
    pub const fn on_by_default_if(self, on: bool) -> Self {
        Self { default_enabled: on, ..self }
    }

    /// Marks the tool as not discoverable.
    #[must_use]
    pub const fn undiscoverable(self) -> Self {
        Self { discoverable: false, ..self }
    }
}

/// The internal URLs builtin tools read (`skill://NAME/PATH`), for `readFile`: a front end adds
/// it to the services it builds runtimes from (with readers of its own, such as `journal://`).
#[cfg(feature = "runtime")]
pub fn url_router() -> tool_core::UrlRouter {
    tool_core::UrlRouter::new().with(std::sync::Arc::new(builtin_tool_skills::SkillUrls))
}

/// A tool's manifest with its runtime.
#[cfg(feature = "runtime")]
pub type ToolParts = (ToolManifest, std::sync::Arc<dyn tool_core::ToolRuntime>);

/// Builds a tool's runtime from the front end's services.
#[cfg(feature = "runtime")]
pub type RuntimeFactory =
    fn(&tool_core::Services) -> Result<std::sync::Arc<dyn tool_core::ToolRuntime>, tool_core::MissingService>;

/// One registered builtin tool.
pub struct BuiltinTool {
    /// The tool's identifier.
    pub identifier: &'static str,
    /// Builds the manifest.
    pub manifest: fn() -> ToolManifest,
    /// Its flags.
    pub flags: ToolFlags,
    /// Builds its runtime.
    #[cfg(feature = "runtime")]
    pub runtime: RuntimeFactory,
    /// Its render hooks.
    #[cfg(feature = "render")]
    pub render: &'static dyn tool_core::RenderHooks,
}

impl std::fmt::Debug for BuiltinTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuiltinTool")
            .field("identifier", &self.identifier)
            .field("flags", &self.flags)
            .finish_non_exhaustive()
    }
}

/// A registered tool with its manifest built.
#[derive(Debug)]
pub struct Entry {
    /// The tool.
    pub tool: &'static BuiltinTool,
    /// Its manifest.
    pub manifest: ToolManifest,
}

/// The builtin tools with their manifests built once.
#[derive(Debug)]
pub struct Registry {
    entries: Vec<Entry>,
    names: ToolNames,
}

static BUILTIN: LazyLock<Registry> = LazyLock::new(|| {
    let entries: Vec<Entry> =
        builtin_tools().iter().map(|tool| Entry { tool, manifest: (tool.manifest)() }).collect();
    // Every visible tool has its names, so one turned on by a front end resolves too.
    let names = ToolNames::build(entries.iter().filter(|e| !e.tool.flags.hidden).flat_map(|e| {
        e.manifest.apis.iter().map(move |api| (e.manifest.identifier.as_str(), api.name.as_str()))
    }));
    Registry { entries, names }
});

fn catalogued(entry: &Entry) -> bool {
    !entry.tool.flags.hidden && entry.tool.flags.default_enabled
}

impl Registry {
    /// The builtin registry.
    pub fn builtin() -> &'static Registry {
        &BUILTIN
    }

    /// Every entry, in registration order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The entry of a tool.
    pub fn get(&self, identifier: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.tool.identifier == identifier)
    }

    /// The catalogue's tools: visible and on by default.
    pub fn catalogued(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter().filter(|e| catalogued(e))
    }

    /// The function names of the catalogue's APIs (built once with the registry).
    pub fn names(&self) -> &ToolNames {
        &self.names
    }

    /// The manifest and API spec behind a function name (or a legacy alias).
    pub fn resolve_function(&self, name: &str) -> Option<(&Entry, &ApiSpec)> {
        let (tool, api) = self.names.resolve(name)?;
        let entry = self.get(tool)?;
        entry.manifest.find_api(api).map(|spec| (entry, spec))
    }

    /// Builds a tool's runtime.
    ///
    /// # Errors
    ///
    /// `None` for an unknown tool; the factory's error when a service is missing.
    #[cfg(feature = "runtime")]
    pub fn runtime(
        &self,
        identifier: &str,
        services: &tool_core::Services,
    ) -> Option<Result<std::sync::Arc<dyn tool_core::ToolRuntime>, tool_core::MissingService>> {
        self.get(identifier).map(|entry| (entry.tool.runtime)(services))
    }

    /// Every tool's manifest with its runtime, ready for the pipeline's toolbox.
    ///
    /// # Errors
    ///
    /// The first missing service a runtime needs.
    #[cfg(feature = "runtime")]
    pub fn runtimes(
        &self,
        services: &tool_core::Services,
    ) -> Result<Vec<ToolParts>, tool_core::MissingService> {
        self.entries
            .iter()
            .map(|entry| Ok((entry.manifest.clone(), (entry.tool.runtime)(services)?)))
            .collect()
    }

    /// The manifests and runtimes of the tools whose services are all there, and the tools left
    /// out with the service each lacks: a front end without a record store, say, offers no
    /// memory rather than a tool that always fails.
    #[cfg(feature = "runtime")]
    pub fn available_runtimes(
        &self,
        services: &tool_core::Services,
    ) -> (Vec<ToolParts>, Vec<(String, tool_core::MissingService)>) {
        let mut parts = Vec::new();
        let mut missing = Vec::new();
        for entry in &self.entries {
            match (entry.tool.runtime)(services) {
                Ok(runtime) => parts.push((entry.manifest.clone(), runtime)),
                Err(error) => missing.push((entry.manifest.identifier.clone(), error)),
            }
        }
        (parts, missing)
    }

    /// A tool's render hooks (a mounted API's, `api-NAME`, are the `api` tool's); unknown tools
    /// get the generic defaults.
    #[cfg(feature = "render")]
    pub fn render(&self, identifier: &str) -> &'static dyn tool_core::RenderHooks {
        static DEFAULT: tool_core::render::DefaultRender = tool_core::render::DefaultRender;
        if identifier.starts_with(builtin_tool_api::MOUNTED_PREFIX) {
            return &builtin_tool_api::RENDER;
        }
        self.get(identifier).map_or(&DEFAULT, |entry| entry.tool.render)
    }

    /// The visible, on-by-default tools' APIs in one provider's form, as a JSON array.
    pub fn catalogue(&self, provider: Provider) -> Value {
        let names = &self.names;
        let declarations = self
            .catalogued()
            .flat_map(|e| {
                let names = &names;
                e.manifest.apis.iter().map(move |api| {
                    let name = names.name_of(&e.manifest.identifier, &api.name).unwrap_or(&api.name);
                    provider.declare(name, api)
                })
            })
            .collect();
        Value::Array(declarations)
    }

    /// Every tool's manifest and flags (hidden ones included), as a JSON array.
    pub fn manifests(&self) -> Value {
        Value::Array(
            self.entries.iter().map(|e| json!({ "flags": e.tool.flags, "manifest": e.manifest })).collect(),
        )
    }
}
