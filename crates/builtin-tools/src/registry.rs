//! The list of builtin tools.
//!
//! Every tool crate exports the same four parts — `IDENTIFIER` and `manifest()`, `SYSTEM_ROLE`,
//! `runtime(&Services)` and `RENDER` — so registering one is a single `tool!` line.

use std::sync::LazyLock;

use crate::{BuiltinTool, ToolFlags};

macro_rules! tool {
    ($krate:ident) => {
        tool!($krate, ToolFlags::DEFAULT)
    };
    ($krate:ident, $flags:expr) => {
        BuiltinTool {
            identifier: $krate::IDENTIFIER,
            manifest: $krate::manifest,
            flags: $flags,
            #[cfg(feature = "runtime")]
            runtime: $krate::runtime,
            #[cfg(feature = "render")]
            render: &$krate::RENDER,
        }
    };
}

static TOOLS: LazyLock<Vec<BuiltinTool>> = LazyLock::new(|| {
    vec![
        tool!(builtin_tool_local_system),
        tool!(builtin_tool_todo),
        // Search needs a provider; without one the tool is there for front ends that turn it on.
        tool!(
            builtin_tool_web_browsing,
            ToolFlags::DEFAULT.on_by_default_if(builtin_tool_web_browsing::search_configured_in_env())
        ),
        tool!(builtin_tool_calculator),
        tool!(builtin_tool_code_interpreter),
        tool!(builtin_tool_memory),
        tool!(builtin_tool_documents),
        tool!(builtin_tool_knowledge_base),
        tool!(builtin_tool_tool_search),
        tool!(builtin_tool_skills),
        tool!(builtin_tool_ask_user),
        tool!(builtin_tool_sub_agent),
        // No functions of its own: each mounted API (`[apis.NAME]`) is a tool `api-NAME` that
        // shares its system role and cards.
        tool!(builtin_tool_api, ToolFlags::DEFAULT.hidden().undiscoverable().off_by_default()),
        tool!(builtin_tool_creds),
        // new-tool: register
    ]
});

/// Every builtin tool, in registration order.
pub fn builtin_tools() -> &'static [BuiltinTool] {
    &TOOLS
}
