//! The full-screen conversation: `state` (what is on screen and how keys and events change it),
//! `view` (drawing, a pure function of the state), `run` (the event loop: keys, the agent, the
//! pipeline's events and questions, never awaiting I/O between frames), `panes` (the tool console
//! and the journal view), `broker` (questions to the screen), `paste` (pastes in terminals without
//! bracketed paste) and `vt` (a VT100-emulated terminal for tests and benchmarks).

pub mod broker;
pub mod highlight;
pub mod panes;
pub mod paste;
pub mod run;
pub mod state;
pub mod theme;
pub mod view;
pub mod vt;

pub use state::{App, Cell, Command, View};
pub use view::render;
