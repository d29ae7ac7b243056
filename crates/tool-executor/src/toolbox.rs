//! The tools a pipeline can run: manifests with their runtimes, compiled validators and rule
//! lists, and the tables that manifests name (audits, computed tiers, argument preparation).

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;
use tool_core::{ApiSpec, AuditFn, InterventionPolicy, Tier, TierSpec, ToolManifest, ToolNames, ToolRuntime};

use crate::matcher::{CompiledRules, MatcherError};

/// Rewrites arguments of an older shape into the current one, before validation.
pub type PrepareFn = fn(Value) -> Value;

/// Computes a tier from the arguments.
pub type TierFn = fn(&Value) -> Tier;

/// Why a toolbox cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum ToolboxError {
    /// Two tools share an identifier.
    #[error("two tools are named `{0}`")]
    Duplicate(String),
    /// An API's schema does not compile.
    #[error("{tool}/{api}: the parameter schema does not compile: {message}")]
    Schema {
        /// The tool.
        tool: String,
        /// The API.
        api: String,
        /// Why.
        message: String,
    },
    /// An API's rule list does not compile.
    #[error("{tool}/{api}: {source}")]
    Rules {
        /// The tool.
        tool: String,
        /// The API.
        api: String,
        /// Why.
        source: MatcherError,
    },
}

/// One API ready to run: its spec, its compiled validator and rules.
pub struct CompiledApi {
    /// The spec.
    pub spec: ApiSpec,
    validator: jsonschema::Validator,
    rules: Option<CompiledRules>,
}

impl std::fmt::Debug for CompiledApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledApi").field("name", &self.spec.name).finish_non_exhaustive()
    }
}

impl CompiledApi {
    /// Every violation of the schema, each as `path: message`.
    pub fn violations(&self, arguments: &Value) -> Vec<String> {
        self.validator
            .iter_errors(arguments)
            .map(|error| {
                let path = error.instance_path().to_string();
                let path = if path.is_empty() { "(root)".to_owned() } else { path };
                format!("{path}: {error}")
            })
            .collect()
    }

    /// The compiled rule list, when the API's policy is one.
    pub fn rules(&self) -> Option<&CompiledRules> {
        self.rules.as_ref()
    }
}

/// A tool in the toolbox.
pub struct ToolEntry {
    /// Its manifest.
    pub manifest: ToolManifest,
    /// Its runtime.
    pub runtime: Arc<dyn ToolRuntime>,
    apis: HashMap<String, CompiledApi>,
    tool_rules: Option<CompiledRules>,
}

impl std::fmt::Debug for ToolEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolEntry").field("identifier", &self.manifest.identifier).finish_non_exhaustive()
    }
}

impl ToolEntry {
    /// An API by name.
    pub fn api(&self, name: &str) -> Option<&CompiledApi> {
        self.apis.get(name)
    }

    /// The compiled rules that decide `api` (its own, else the tool's).
    pub fn rules_for<'a>(&'a self, api: &'a CompiledApi) -> Option<&'a CompiledRules> {
        match &api.spec.intervention {
            Some(_) => api.rules(),
            None => self.tool_rules.as_ref(),
        }
    }
}

/// Everything the pipeline can run.
#[derive(Debug, Default)]
pub struct Toolbox {
    tools: Vec<ToolEntry>,
    by_id: HashMap<String, usize>,
    audits: HashMap<String, AuditFn>,
    tiers: HashMap<String, TierFn>,
    prepare: HashMap<(String, String), PrepareFn>,
}

fn compile_rules(policy: &InterventionPolicy) -> Result<Option<CompiledRules>, MatcherError> {
    match policy {
        InterventionPolicy::Rules { rules } => CompiledRules::compile(rules).map(Some),
        _ => Ok(None),
    }
}

impl Toolbox {
    /// An empty toolbox.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tool, compiling each API's validator (formats checked, no remote references) and
    /// rule list once.
    ///
    /// # Errors
    ///
    /// A duplicate identifier, a schema or a rule list that does not compile.
    pub fn add_tool(
        &mut self,
        manifest: ToolManifest,
        runtime: Arc<dyn ToolRuntime>,
    ) -> Result<(), ToolboxError> {
        let tool = manifest.identifier.clone();
        if self.by_id.contains_key(&tool) {
            return Err(ToolboxError::Duplicate(tool));
        }
        let mut apis = HashMap::new();
        for spec in &manifest.apis {
            let validator = jsonschema::options()
                .should_validate_formats(true)
                .build(&spec.parameters)
                .map_err(|e| ToolboxError::Schema {
                    tool: tool.clone(),
                    api: spec.name.clone(),
                    message: e.to_string(),
                })?;
            let rules = spec
                .intervention
                .as_ref()
                .map(compile_rules)
                .transpose()
                .map_err(|source| ToolboxError::Rules { tool: tool.clone(), api: spec.name.clone(), source })?
                .flatten();
            apis.insert(spec.name.clone(), CompiledApi { spec: spec.clone(), validator, rules });
        }
        let tool_rules = compile_rules(&manifest.intervention).map_err(|source| ToolboxError::Rules {
            tool: tool.clone(),
            api: "*".into(),
            source,
        })?;
        self.by_id.insert(tool, self.tools.len());
        self.tools.push(ToolEntry { manifest, runtime, apis, tool_rules });
        Ok(())
    }

    /// Registers a dynamic audit under the name manifests use.
    pub fn add_audit(&mut self, name: impl Into<String>, audit: AuditFn) {
        self.audits.insert(name.into(), audit);
    }

    /// Registers a tier function under the name manifests use.
    pub fn add_tier(&mut self, name: impl Into<String>, tier: TierFn) {
        self.tiers.insert(name.into(), tier);
    }

    /// Registers an argument preparation for one API.
    pub fn add_prepare(&mut self, tool: &str, api: &str, prepare: PrepareFn) {
        self.prepare.insert((tool.to_owned(), api.to_owned()), prepare);
    }

    /// A tool by identifier.
    pub fn tool(&self, identifier: &str) -> Option<&ToolEntry> {
        self.by_id.get(identifier).map(|&i| &self.tools[i])
    }

    /// Every tool, in the order added.
    pub fn tools(&self) -> &[ToolEntry] {
        &self.tools
    }

    /// The function names a model is given for these tools (`None`: every tool of the toolbox).
    pub fn names(&self, active: Option<&[String]>) -> ToolNames {
        let active = |id: &str| active.is_none_or(|tools| tools.iter().any(|t| t == id));
        ToolNames::build(self.tools.iter().filter(|t| active(&t.manifest.identifier)).flat_map(|t| {
            t.manifest.apis.iter().map(move |api| (t.manifest.identifier.as_str(), api.name.as_str()))
        }))
    }

    /// The audit of this name.
    pub fn audit(&self, name: &str) -> Option<AuditFn> {
        self.audits.get(name).copied()
    }

    /// The preparation of an API, if any.
    pub fn prepare(&self, tool: &str, api: &str) -> Option<PrepareFn> {
        self.prepare.get(&(tool.to_owned(), api.to_owned())).copied()
    }

    /// The tier of a call: fixed, or computed by its named function (a missing function counts
    /// as exec, the riskiest).
    pub fn tier_of(&self, spec: &ApiSpec, arguments: &Value) -> Tier {
        match &spec.tier {
            TierSpec::Fixed(tier) => *tier,
            TierSpec::Computed(name) => self.tiers.get(name).map_or(Tier::Exec, |f| f(arguments)),
        }
    }
}
