//! Client executors: the reverse dispatch of the seeds.
//!
//! A *device* (a person's own machine) connects to `toolhost-server` over a WebSocket, registers
//! for its tenant with the tools it can run, and receives `tool_execute` messages for calls that
//! the server's pipeline has already resolved, validated, journalled and approved. It runs each
//! one through its own local pipeline and answers with exactly one `tool_result`.
//!
//! * [`protocol`]: the messages both sides speak (always built; the server uses only this).
//! * `device` (feature `client`): the device — connection, reconnection, de-duplication of
//!   re-sent requests, its own alarm 500 ms before the server's deadline — and the
//!   `toolhost-device` binary that runs the builtin tools.

pub mod protocol;

#[cfg(feature = "client")]
pub mod device;

pub use protocol::{DeviceMessage, ExecuteRequest, ServerMessage};
