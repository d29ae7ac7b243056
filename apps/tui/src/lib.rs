//! `toolhost`, the terminal app: a person's front end to Toolhost on their own machine.
//!
//! `setup` builds what every mode shares (the folder, the data folder, the SQLite journal, the
//! pipeline over the builtin tools, the session, the model); `ui` is the full-screen conversation
//! (state, pure rendering, the event loop); `chat` the same in plain lines; `exec` the loop without
//! a person; `call` one call without a model; `serve` the tools over MCP on stdio (`toolhost mcp`); `ask` asks at a plain terminal; `inbox` answers a server's approvals (`toolhost approvals`);
//! `out` prints to standard output and ends quietly when its reader went away.

pub mod ask;
pub mod attach;
pub mod call;
pub mod chat;
pub mod creds;
pub mod exec;
pub mod inbox;
pub mod instructions;
pub mod kb;
pub mod memory;
pub mod out;
pub mod rewind;
pub mod serve;
pub mod setup;
pub mod skills;
pub mod trust;
pub mod ui;
