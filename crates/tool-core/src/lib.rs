//! The Toolhost tool contract.
//!
//! Every builtin tool crate, the execution pipeline and both front ends depend on this crate and on
//! nothing heavier, so it stays small and stable:
//!
//! * [`manifest`]: what a tool declares for the model and for policy — pure data that serialises,
//!   stores and round-trips ([`ToolManifest`], [`ApiSpec`], [`InterventionPolicy`], [`TierSpec`]).
//! * [`runtime`]: the one trait a tool implements to run ([`ToolRuntime`]), the per-call
//!   [`CallContext`] and the [`ToolOutput`] it returns: `content` for the model, `state` for people.
//! * [`render`]: a view model of cards that knows nothing of terminals or HTML, and the
//!   [`RenderHooks`] trait for the six places a call is shown.
//! * [`provider`]: projections of one derived JSON Schema into OpenAI strict, Anthropic, Gemini and
//!   MCP declarations.
//! * [`services`]: the type-keyed [`Services`] a registry builds runtimes from, and the contract
//!   of dynamic audits ([`AuditFn`]).
//! * [`sandbox`]: a session's [`SandboxPolicy`] — what its commands may read, write and reach —
//!   as pure data; the `sandbox` crate enforces it.
//! * [`naming`]: the function names a model sees ([`ToolNames`]), sanitised for every provider,
//!   with the reverse map and legacy aliases.
//! * [`partial_json`]: best-effort parsing of argument JSON that is still streaming.
//! * [`ask`]: questions a call asks the person ([`Question`], [`Answer`]) and the [`PersonAsker`]
//!   a pipeline gives calls to ask them through.
//!
//! **Architecture invariant:** this crate does no I/O and knows no tool. Behaviour that a manifest
//! refers to (dynamic audits, computed tiers) is named here and looked up in a table elsewhere.
//!
//! ```
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//! use tool_core::{ApiSpec, Tier, ToolManifest, ToolMeta};
//!
//! /// Arguments of `greet`.
//! #[derive(Deserialize, JsonSchema)]
//! struct GreetArgs {
//!     /// Who to greet.
//!     name: String,
//! }
//!
//! let manifest = ToolManifest::new("greeter", ToolMeta::new("Greeter", "Says hello"))
//!     .api(ApiSpec::new::<GreetArgs>("greet", "Greet someone by name").tier(Tier::Read));
//! let json = serde_json::to_string(&manifest).unwrap();
//! let back: ToolManifest = serde_json::from_str(&json).unwrap();
//! assert_eq!(back, manifest);
//! assert_eq!(back.apis[0].parameters["required"][0], "name");
//! ```
#![deny(missing_docs)]

pub mod ask;
pub mod embed;
pub mod knowledge;
pub mod manifest;
pub mod naming;
pub mod partial_json;
pub mod provider;
pub mod redact;
pub mod render;
pub mod runtime;
pub mod sandbox;
pub mod services;
pub mod skills;
pub mod storage;
pub mod urls;

pub use ask::{Answer, Asked, PersonAsker, Question};
pub use manifest::{
    ApiSpec, DisplayControl, ExecutionMode, Executor, Exposure, Intervention, InterventionPolicy,
    InterventionRule, Matcher, MatcherKind, PathParam, Tier, TierSpec, ToolManifest, ToolMeta, schema_for,
};
pub use naming::ToolNames;
pub use redact::Redactor;
pub use render::{Badge, Block, Card, Field, RenderHooks, Tone};
pub use runtime::{
    CallContext, ErrorKind, FoundTool, NestedCaller, Progress, ProgressSink, SessionFunction, SessionTools,
    ToolError, ToolFinder, ToolOutput, ToolRuntime, parse_arguments,
};
pub use sandbox::{
    ApprovedFile, CallSandbox, FileBoundary, FileRoot, NetworkAccess, OutsideFiles, Pins, ReadAccess,
    SandboxMode, SandboxPolicy,
};
pub use services::{AuditFn, AuditInput, AuditVerdict, MissingService, Services};
pub use skills::{SkillInfo, SkillSet, SkillSource};
pub use urls::{UrlReader, UrlRouter};

/// Declares the enum of a tool's API names, one variant per API, with its model-facing name.
///
/// The manifest, the registry and the runtime all key on this enum, so a typo in an API name is a
/// compile error rather than a silent miss.
///
/// ```
/// tool_core::api_enum! {
///     /// APIs of the clock tool.
///     pub enum ClockApi {
///         /// Current time.
///         Now = "now",
///     }
/// }
/// assert_eq!(ClockApi::Now.name(), "now");
/// assert_eq!("now".parse::<ClockApi>(), Ok(ClockApi::Now));
/// assert_eq!(ClockApi::ALL.len(), 1);
/// ```
#[macro_export]
macro_rules! api_enum {
    ($(#[$meta:meta])* $vis:vis enum $name:ident { $($(#[$vmeta:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        $vis enum $name { $($(#[$vmeta])* $variant),+ }

        impl $name {
            /// Every API of the tool, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The API's name as the manifest and the model see it.
            pub const fn name(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::UnknownApi;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($text => Ok($name::$variant),)+
                    other => Err($crate::UnknownApi(other.to_owned())),
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

/// An API name that a tool does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown api `{0}`")]
pub struct UnknownApi(pub String);
