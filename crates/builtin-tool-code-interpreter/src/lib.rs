//! The code interpreter: code that runs with state kept between calls, files it writes, and
//! limits.
//!
//! Two engines, chosen per call and named in the result:
//!
//! * **in-process** — a sandboxed Python subset (`monty`) inside Toolhost's own process: no
//!   files, network or packages of its own, so nothing to approve; microseconds to start, its
//!   state kept per session, held to a time limit, a recursion limit and a cap on any single
//!   allocation.
//! * **full** — the machine's `python3` (or `node` for JavaScript) as one persistent process per
//!   session, started like a command: in the session's sandbox and control group, the network as
//!   the session allows it, writable only where commands may write; what the code writes into the
//!   session's outputs folder is listed after each run. An exec-tier call, approved as commands
//!   are.
//!
//! [`plan`] picks the engine when the model leaves it out (the argument preparation
//! [`prepare_run_code`] writes it into the call before approval, so what a person approves is
//! what runs). The two engines keep separate state.
//!
//! ```
//! use builtin_tool_code_interpreter::{Engine, Language, plan};
//! assert_eq!(plan(Language::Python, "sum(range(10))"), Engine::InProcess);
//! assert_eq!(plan(Language::Python, "import numpy as np\nnp.ones(3)"), Engine::Full);
//! ```
#![deny(missing_docs)]

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tool_core::manifest::{InterventionPolicy, InterventionRule, Matcher, MatcherKind};
use tool_core::{ApiSpec, ExecutionMode, Intervention, Tier, TierSpec, ToolManifest, ToolMeta};

#[cfg(feature = "runtime")]
mod driver;
#[cfg(feature = "runtime")]
mod in_process;
#[cfg(feature = "runtime")]
mod outputs;
#[cfg(feature = "render")]
mod render;
#[cfg(feature = "runtime")]
mod runtime;

/// The tool's identifier.
pub const IDENTIFIER: &str = "code-interpreter";

/// The system-role template.
pub const SYSTEM_ROLE: &str = include_str!("system_role.md");

/// The name of the computed tier in the registry's table.
pub const TIER: &str = "codeEngine";

/// The longest code a call may send.
pub const MAX_CODE_BYTES: usize = 256 * 1024;

tool_core::api_enum! {
    /// The APIs of the code interpreter.
    pub enum CodeApi {
        /// Run code in the session's interpreter.
        RunCode = "runCode",
        /// Forget the interpreter's state.
        ResetInterpreter = "resetInterpreter",
        /// List the files the code wrote.
        ListOutputs = "listOutputs",
    }
}

/// The language of the code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    /// Python 3.
    Python,
    /// JavaScript (Node.js).
    Javascript,
}

/// Where code runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Engine {
    /// Let Toolhost choose from the code.
    Auto,
    /// The sandboxed Python subset inside Toolhost: pure computation, no approval.
    InProcess,
    /// The machine's interpreter, in the session's sandbox.
    Full,
}

impl Engine {
    /// The stable string form.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::InProcess => "in-process",
            Self::Full => "full",
        }
    }
}

/// Arguments of `runCode`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RunCodeArgs {
    /// `python` or `javascript`.
    pub language: Language,
    /// The code. Variables, imports and functions stay for the next call (as in a notebook); the
    /// value of a last bare expression is shown. Write files into the outputs folder (its path is
    /// in `OUTPUTS_DIR` / `os.environ["OUTPUTS_DIR"]`).
    pub code: String,
    /// `in-process`: a sandboxed Python subset with no files, network or third-party packages
    /// (math, re, json, datetime, collections, itertools, functools, dataclasses are there),
    /// instant and never asks; `full`: the machine's Python or Node with its packages, in the
    /// session's sandbox, may ask the person first. Leave out (`auto`) to choose from the code.
    /// The two keep separate variables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<Engine>,
    /// Seconds the run may take (default 60, at most 600); past it the run is interrupted and
    /// the state kept when the interpreter answers the interrupt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u32>,
}

/// Arguments of `resetInterpreter`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResetArgs {
    /// Which language's interpreter to reset; both when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<Language>,
}

/// Arguments of `listOutputs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListOutputsArgs {}

/// Python modules the in-process engine has (the pure ones: `os`, `pathlib` and `sys` there
/// reach nothing of the machine, so code that wants them runs in full).
pub const IN_PROCESS_MODULES: &[&str] = &[
    "math",
    "re",
    "json",
    "datetime",
    "collections",
    "itertools",
    "functools",
    "dataclasses",
    "typing",
    "base64",
    "binascii",
    "unicodedata",
];

/// Names whose use means the code wants the machine (files, processes, the network) or
/// features the in-process engine lacks.
const NEEDS_FULL: &[&str] =
    &["open(", "input(", "__import__", "exec(", "eval(", "compile(", "globals(", "locals(", "OUTPUTS_DIR"];

/// The engine that runs `code` when the model leaves the choice to Toolhost: in-process for
/// Python that imports only modules the subset has and touches no files; full otherwise.
pub fn plan(language: Language, code: &str) -> Engine {
    if language != Language::Python {
        return Engine::Full;
    }
    if NEEDS_FULL.iter().any(|needle| code.contains(needle)) {
        return Engine::Full;
    }
    let imports_fit =
        imported_modules(code).iter().all(|module| IN_PROCESS_MODULES.contains(&module.as_str()));
    if imports_fit { Engine::InProcess } else { Engine::Full }
}

/// The top-level modules `code` imports (`import a.b, c as d`, `from e.f import g`).
fn imported_modules(code: &str) -> Vec<String> {
    let mut modules = Vec::new();
    for line in code.lines() {
        // Statements after `;` on one line count too.
        for statement in line.split(';') {
            let statement = statement.trim();
            let names = if let Some(rest) = statement.strip_prefix("import ") {
                rest.split(',').map(|part| part.split_whitespace().next().unwrap_or("")).collect::<Vec<_>>()
            } else if let Some(rest) = statement.strip_prefix("from ") {
                vec![rest.split_whitespace().next().unwrap_or("")]
            } else {
                continue;
            };
            for name in names {
                let top = name.split('.').next().unwrap_or("").trim();
                // `from . import x`: a relative import wants files.
                modules.push(if top.is_empty() { ".".to_owned() } else { top.to_owned() });
            }
        }
    }
    modules
}

/// The engine a call runs on, from its (prepared) arguments; anything unclear is full.
pub fn engine_of(arguments: &Value) -> Engine {
    match arguments.get("engine").and_then(Value::as_str) {
        Some("in-process") => Engine::InProcess,
        _ => Engine::Full,
    }
}

/// The argument preparation of `runCode`: an engine left out (or `auto`, or null) is chosen by
/// [`plan`] and written into the call, before it is validated, approved and journalled.
pub fn prepare_run_code(mut arguments: Value) -> Value {
    let Some(object) = arguments.as_object_mut() else { return arguments };
    let chosen = matches!(object.get("engine"), None | Some(Value::Null))
        || object.get("engine").and_then(Value::as_str) == Some("auto");
    if chosen {
        let language = match object.get("language").and_then(Value::as_str) {
            Some("javascript") => Language::Javascript,
            _ => Language::Python,
        };
        let code = object.get("code").and_then(Value::as_str).unwrap_or("");
        object.insert("engine".into(), Value::String(plan(language, code).as_str().to_owned()));
    }
    arguments
}

/// The computed tier of `runCode`: in-process code only computes (read), the full interpreter
/// runs arbitrary code (exec).
pub fn tier_of(arguments: &Value) -> Tier {
    match engine_of(arguments) {
        Engine::InProcess => Tier::Read,
        _ => Tier::Exec,
    }
}

/// The tool's manifest.
pub fn manifest() -> ToolManifest {
    let in_process = InterventionRule {
        matchers: [(
            "engine".to_owned(),
            Matcher::Typed { kind: MatcherKind::Exact, pattern: "in-process".into() },
        )]
        .into(),
        policy: Intervention::Never,
    };
    ToolManifest::new(
        IDENTIFIER,
        ToolMeta::new("Code interpreter", "Runs Python or JavaScript with state kept between calls")
            .icon("🐍"),
    )
    .intervention(Intervention::Required.into())
    .system_role(SYSTEM_ROLE)
    .api(
        ApiSpec::new::<RunCodeArgs>(
            CodeApi::RunCode.name(),
            "Run Python or JavaScript. State persists between calls; the last expression's value, \
             printed output and files written to the outputs folder are returned.",
        )
        .tier_spec(TierSpec::Computed(TIER.to_owned()))
        .intervention(InterventionPolicy::Rules { rules: vec![in_process] })
        .timeout_ms(60_000)
        .max_timeout_ms(600_000)
        .execution(ExecutionMode::Sequential),
    )
    .api(
        ApiSpec::new::<ResetArgs>(
            CodeApi::ResetInterpreter.name(),
            "Forget every variable, import and function of the session's interpreter(s).",
        )
        .tier(Tier::Write)
        .intervention(Intervention::Never.into())
        .timeout_ms(10_000),
    )
    .api(
        ApiSpec::new::<ListOutputsArgs>(
            CodeApi::ListOutputs.name(),
            "List the files in the outputs folder (name, size, type).",
        )
        .tier(Tier::Read)
        .intervention(Intervention::Never.into())
        .timeout_ms(10_000),
    )
}

#[cfg(feature = "render")]
pub use render::{CodeRender, RENDER};
#[cfg(feature = "runtime")]
pub use runtime::{CodeInterpreter, InterpreterSettings, runtime};

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn plans_in_process_only_for_pure_python() {
        let cases = [
            ("x = 1\nx + 1", Engine::InProcess),
            ("import math\nmath.sqrt(2)", Engine::InProcess),
            ("from collections import Counter; Counter('abc')", Engine::InProcess),
            ("import math, json as j", Engine::InProcess),
            ("import os\nos.listdir('.')", Engine::Full),
            ("import numpy as np", Engine::Full),
            ("from os.path import join", Engine::Full),
            ("from . import sibling", Engine::Full),
            ("data = open('a.csv').read()", Engine::Full),
            ("import math; import subprocess", Engine::Full),
            ("__import__('os')", Engine::Full),
        ];
        for (code, engine) in cases {
            assert_eq!(plan(Language::Python, code), engine, "{code}");
        }
        assert_eq!(plan(Language::Javascript, "1 + 1"), Engine::Full);
    }

    #[test]
    fn preparation_writes_the_engine_and_the_tier_follows_it() {
        let prepared = prepare_run_code(json!({"language": "python", "code": "2 ** 100"}));
        assert_eq!(prepared["engine"], "in-process");
        assert_eq!(tier_of(&prepared), Tier::Read);
        let prepared =
            prepare_run_code(json!({"language": "python", "code": "import pandas", "engine": null}));
        assert_eq!(prepared["engine"], "full");
        assert_eq!(tier_of(&prepared), Tier::Exec);
        // A model's explicit choice stands; anything unknown counts as full.
        let prepared = prepare_run_code(json!({"language": "python", "code": "1", "engine": "full"}));
        assert_eq!(prepared["engine"], "full");
        assert_eq!(tier_of(&json!({"engine": "bogus"})), Tier::Exec);
        assert_eq!(tier_of(&json!({})), Tier::Exec);
    }
}
