//! Which of a session's functions its model sees declared: all of them while they are few; past
//! a threshold, the mounted servers' functions wait behind tool search, which declares what it
//! finds from the next turn on.
//!
//! A tool's manifest says how it wants to be exposed ([`Exposure`]); the session's
//! [`ExposureConfig`] may override that per tool and sets the threshold. When the session opens,
//! every function gets one of `Direct`, `Deferred` or `Hidden`, and stays so; what changes during
//! the session is only the set of deferred functions found (activated).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};
use tool_core::{Exposure, FoundTool, SessionFunction, SessionTools, ToolFinder, ToolNames};

use crate::events::Event;
use crate::session::Session;
use crate::toolbox::Toolbox;

/// Functions a session declares before `Auto` tools are deferred (oh-my-pi's threshold).
pub const DEFAULT_MAX_DIRECT_FUNCTIONS: usize = 40;
/// Schema tokens a session declares before `Auto` tools are deferred (about four characters a
/// token; oh-my-pi's threshold).
pub const DEFAULT_MAX_DIRECT_TOKENS: usize = 16_000;

/// The most names a session's choices declare as an enum.
pub const MAX_DECLARED_CHOICES: usize = 200;

/// How a session exposes its tools.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(default)]
pub struct ExposureConfig {
    /// Per tool identifier, overriding the tool's own exposure (`direct`, `auto`, `deferred`,
    /// `hidden`).
    #[cfg_attr(feature = "openapi", schema(value_type = BTreeMap<String, String>))]
    pub tools: BTreeMap<String, Exposure>,
    /// `auto` tools are deferred when the session would declare more functions than this.
    pub max_direct_functions: usize,
    /// … or when their declarations would take more tokens than this.
    pub max_direct_tokens: usize,
}

impl Default for ExposureConfig {
    fn default() -> Self {
        Self {
            tools: BTreeMap::new(),
            max_direct_functions: DEFAULT_MAX_DIRECT_FUNCTIONS,
            max_direct_tokens: DEFAULT_MAX_DIRECT_TOKENS,
        }
    }
}

/// A session's exposure, fixed at its start, and what tool search activated since.
#[derive(Debug, Default)]
pub(crate) struct Exposures {
    /// Functions that are not `Direct`, by model-facing name (`Deferred` or `Hidden`).
    pub(crate) by_name: HashMap<String, Exposure>,
    pub(crate) activated: RwLock<BTreeSet<String>>,
    pub(crate) version: AtomicU64,
}

/// What a declaration costs, roughly: its name, description and schema, four characters a token.
fn tokens(name: &str, api: &tool_core::ApiSpec) -> usize {
    (name.len() + api.description.len() + api.parameters.to_string().len()).div_ceil(4)
}

/// Resolves every function of `names` to `Direct`, `Deferred` or `Hidden`.
pub(crate) fn resolve(
    toolbox: &Toolbox,
    config: &ExposureConfig,
    names: &ToolNames,
    skills: &tool_core::SkillSet,
    previewing: bool,
) -> Exposures {
    let mut functions: Vec<(String, Exposure, usize)> = Vec::new();
    for entry in toolbox.tools() {
        let manifest = &entry.manifest;
        let exposure = config.tools.get(&manifest.identifier).copied().unwrap_or(manifest.exposure);
        for api in &manifest.apis {
            if let Some(name) = names.name_of(&manifest.identifier, &api.name) {
                // What applies a preview is declared only where writes are previewed.
                let exposure = if api.when_previewing && !previewing { Exposure::Hidden } else { exposure };
                functions.push((name.to_owned(), exposure, tokens(name, api)));
            }
        }
    }
    let (count, cost) = functions
        .iter()
        .filter(|(_, e, _)| matches!(e, Exposure::Direct | Exposure::Auto))
        .fold((0, 0), |(n, t), (_, _, cost)| (n + 1, t + cost));
    // Deferred only where something can find them: a session without tool search declares all.
    let can_search = functions.iter().any(|(_, e, _)| *e == Exposure::WhenDeferred);
    let defer_auto = can_search && (count > config.max_direct_functions || cost > config.max_direct_tokens);
    let mut by_name = HashMap::new();
    for (name, exposure, _) in &functions {
        let exposure = match exposure {
            Exposure::Auto if defer_auto => Exposure::Deferred,
            Exposure::Auto => Exposure::Direct,
            other => *other,
        };
        by_name.insert(name.clone(), exposure);
    }
    let any_deferred = by_name.values().any(|e| *e == Exposure::Deferred);
    for exposure in by_name.values_mut() {
        if *exposure == Exposure::WhenDeferred {
            *exposure = if any_deferred { Exposure::Direct } else { Exposure::Hidden };
        }
        if *exposure == Exposure::WhenSkills {
            let any_skill = skills.for_model().next().is_some();
            *exposure = if any_skill { Exposure::Direct } else { Exposure::Hidden };
        }
    }
    by_name.retain(|_, e| *e != Exposure::Direct);
    Exposures { by_name, ..Exposures::default() }
}

impl Session {
    /// How the function named `name` reaches the model: `Direct`, `Deferred` or `Hidden`.
    pub fn exposure_of(&self, name: &str) -> Exposure {
        self.exposures.by_name.get(name).copied().unwrap_or(Exposure::Direct)
    }

    /// Whether the model is given `name`'s declaration now: a direct function, or a deferred one
    /// tool search has found.
    pub fn declares(&self, name: &str) -> bool {
        match self.exposure_of(name) {
            Exposure::Deferred => {
                self.exposures.activated.read().unwrap_or_else(|p| p.into_inner()).contains(name)
            }
            Exposure::Hidden => false,
            _ => true,
        }
    }

    /// `api` as this session declares it: a parameter that takes one of the session's skills
    /// (`"x-choices": "skills"`) lists their names as its `enum`.
    /// Past [`MAX_DECLARED_CHOICES`] names the parameter stays a plain string (the tool checks
    /// the name): a declaration should not grow without bound.
    pub fn declared_api<'a>(&self, api: &'a tool_core::ApiSpec) -> std::borrow::Cow<'a, tool_core::ApiSpec> {
        api.with_choices(|list| {
            (list == "skills")
                .then(|| self.config.skills.model_names())
                .filter(|names| names.len() <= MAX_DECLARED_CHOICES)
        })
    }

    /// Whether the session has deferred functions (found or not).
    pub fn has_deferred(&self) -> bool {
        self.exposures.by_name.values().any(|e| *e == Exposure::Deferred)
    }

    /// Declares these deferred functions from the model's next turn on; returns those newly
    /// declared. Names that are not deferred are ignored. `call_id` names the call that found them.
    pub fn activate(&self, call_id: &str, names: &[String]) -> Vec<String> {
        let mut activated = self.exposures.activated.write().unwrap_or_else(|p| p.into_inner());
        let new: Vec<String> = names
            .iter()
            .filter(|name| self.exposure_of(name) == Exposure::Deferred && activated.insert((*name).clone()))
            .cloned()
            .collect();
        drop(activated);
        if !new.is_empty() {
            self.exposures.version.fetch_add(1, Ordering::Release);
            self.emit(Event::ToolsActivated { call_id: call_id.to_owned(), names: new.clone() });
        }
        new
    }

    /// The deferred functions tool search has declared, by name.
    pub fn activated(&self) -> Vec<String> {
        self.exposures.activated.read().unwrap_or_else(|p| p.into_inner()).iter().cloned().collect()
    }

    /// Changes each time tool search declares more functions: a front end that declared the
    /// session's tools compares it to know when to declare them again.
    pub fn tools_version(&self) -> u64 {
        self.exposures.version.load(Ordering::Acquire)
    }
}

/// The deferred functions of `session`, in the toolbox's order.
pub fn deferred_tools(toolbox: &Toolbox, session: &Session) -> Vec<FoundTool> {
    let mut out = Vec::new();
    for entry in toolbox.tools() {
        let manifest = &entry.manifest;
        for api in &manifest.apis {
            let Some(name) = session.names.name_of(&manifest.identifier, &api.name) else { continue };
            if session.exposure_of(name) != Exposure::Deferred {
                continue;
            }
            out.push(FoundTool {
                name: name.to_owned(),
                tool: manifest.identifier.clone(),
                title: manifest.meta.title.clone(),
                description: api.description.clone(),
                parameters: api.parameters.clone(),
                declared: session.declares(name),
            });
        }
    }
    out
}

/// One line per tool whose functions are deferred, with how many (for the system role of tool
/// search: the model should know what it can look for); empty when nothing is deferred.
pub fn deferred_summary(toolbox: &Toolbox, session: &Session) -> String {
    let mut counts: Vec<(String, String, usize)> = Vec::new();
    for found in deferred_tools(toolbox, session) {
        match counts.iter_mut().find(|(tool, _, _)| *tool == found.tool) {
            Some((_, _, n)) => *n += 1,
            None => {
                let description = toolbox
                    .tool(&found.tool)
                    .map(|t| t.manifest.meta.description.clone())
                    .unwrap_or_default();
                counts.push((found.tool, description, 1));
            }
        }
    }
    counts
        .into_iter()
        .map(|(tool, description, n)| {
            let plural = if n == 1 { "" } else { "s" };
            format!("- {tool} ({n} function{plural}): {description}")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The functions `session`'s model is given now, as it is given them: its direct ones and the
/// deferred ones tool search found, in the toolbox's order.
pub fn session_functions(toolbox: &Toolbox, session: &Session) -> Vec<SessionFunction> {
    let mut out = Vec::new();
    for entry in toolbox.tools() {
        for api in &entry.manifest.apis {
            if let Some(name) = session.names.name_of(&entry.manifest.identifier, &api.name)
                && session.declares(name)
            {
                out.push(SessionFunction {
                    name: name.to_owned(),
                    tool: entry.manifest.identifier.clone(),
                    api: session.declared_api(api).into_owned(),
                });
            }
        }
    }
    out
}

/// The values a session fills its system-role templates with.
pub fn role_values(toolbox: &Toolbox, session: &Session) -> BTreeMap<&'static str, String> {
    let folder = session
        .config
        .working_directory
        .as_ref()
        .map_or_else(|| "(none)".to_owned(), |d| d.display().to_string());
    BTreeMap::from([
        ("date", tool_core::manifest::today()),
        ("working_directory", folder),
        ("deferred_tools", deferred_summary(toolbox, session)),
        ("skills", session.config.skills.summary()),
    ])
}

/// A running call's view of its session's tools (see [`SessionTools`]).
#[derive(Debug)]
pub(crate) struct SessionCatalogue {
    pub(crate) toolbox: Arc<Toolbox>,
    pub(crate) session: Arc<Session>,
}

impl SessionTools for SessionCatalogue {
    fn functions(&self) -> Vec<SessionFunction> {
        session_functions(&self.toolbox, &self.session)
    }

    fn roles(&self, tools: &[String]) -> String {
        let values = role_values(&self.toolbox, &self.session);
        self.toolbox
            .tools()
            .iter()
            .filter(|entry| tools.contains(&entry.manifest.identifier))
            .map(|entry| entry.manifest.render_system_role(&values).trim_end().to_owned())
            .filter(|role| !role.trim().is_empty())
            .collect::<Vec<_>>()
            .join("\n\n")
    }
}

/// Tool search's view of a session: its deferred functions and the way to declare them.
#[derive(Debug)]
pub(crate) struct SessionFinder {
    pub(crate) toolbox: Arc<Toolbox>,
    pub(crate) session: Arc<Session>,
    pub(crate) call_id: String,
}

impl ToolFinder for SessionFinder {
    fn deferred(&self) -> Vec<FoundTool> {
        deferred_tools(&self.toolbox, &self.session)
    }

    fn activate(&self, names: &[String]) -> Vec<String> {
        self.session.activate(&self.call_id, names)
    }
}
