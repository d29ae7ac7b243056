//! The one execution pipeline: every call from every front end passes through here.
//!
//! ```text
//! tool call {id, name as the model sent it, raw arguments}
//!   → resolve the name (session names, aliases; unknown → closest names, then a directive)
//!   → parse (truncated JSON diagnosed) → prepare → validate (every violation with its path)
//!   → journal: proposed (within a deadline; a call the journal cannot take is refused, not run)
//!   → a person's hooks (PreToolUse: deny, allow, ask, rewrite)
//!   → approval: tier × policy (global audits, dynamic audits, rules) × session mode
//!       → run | PermissionRequest hooks, then ask a person | block ("Blocked by security/privacy.")
//!   → before hooks (block or rewrite) → one timeout referee
//!   → run the runtime (panics caught) with a cancellation token and progress events
//!   → after hooks → PostToolUse hooks (context for the model) → status from in-band errors → content cut to a budget
//!   → journal: executed | failed | blocked | denied (or the outbox, until it lands) → events
//! ```
//!
//! **Architecture invariant:** every call yields exactly one result and at most one journal row,
//! settled. Failures anywhere — unknown tool, bad or truncated JSON, schema violation, hook block,
//! denial, headless block, timeout, cancel, a panic in a runtime — are error results the model can
//! act on; nothing aborts the batch and nothing waits for a person who is not there.
//!
//! Batches: preflight in the model's order, then concurrently unless a call or the session is
//! sequential — a read/write lock where parallel calls share and sequential calls run alone —
//! with results in the model's order and events in completion order. Nested calls (a runtime
//! calling another tool through its context) pass the same pipeline under `<parent>/<n>` ids.
#![deny(missing_docs)]

pub mod approval;
pub mod call_hooks;
pub mod deny;
pub mod durable;
pub mod events;
pub mod exposure;
pub mod matcher;
mod pipeline;
pub mod scope;
pub mod session;
pub mod shell_audit;
pub mod toolbox;
pub mod urls;

pub use approval::{ApprovalBroker, ApprovalMode, Decided, Decision, LocalBroker, SessionPolicy};
pub use call_hooks::{CallHooks, HookAnswer, HookDecision, HookNote, HookedCall};
pub use durable::JournalHealth;
pub use events::{Event, EventTap};
pub use exposure::{ExposureConfig, deferred_summary, deferred_tools, role_values, session_functions};
pub use journal::AttemptStatus;
pub use pipeline::{
    BLOCKED_CONTENT, Batch, CallResult, Executor, ExecutorBuilder, ExecutorConfig, MAX_KEPT_BYTES, RawCall,
};
pub use session::{AfterHook, AfterPatch, BeforeHook, BeforeOutcome, HookCall, Session, SessionConfig};
pub use toolbox::{Toolbox, ToolboxError};
pub use urls::JournalUrls;
