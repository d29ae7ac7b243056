//! The `skills` tool: Agent Skills (the agentskills.io specification) for the model.
//!
//! A skill is a folder with a `SKILL.md` — YAML front matter naming and describing it, then
//! Markdown instructions — and optional `scripts/`, `references/` and `assets/`. Front ends find
//! skills in the folders they trust ([`discover`]: the project's `.agents/skills` up to the
//! repository root, the person's `~/.agents/skills`, Claude Code's `.claude/skills` read for
//! compatibility; a server tenant's operator folders) and give the session its
//! [`tool_core::SkillSet`]. Progressive disclosure: only names and descriptions reach the system
//! role (within the set's budget), `activateSkill {name}` returns the instructions, and
//! `readFile` reads the skill's other files through `skill://NAME/PATH` ([`SkillUrls`]).
//!
//! It exports the four parts every builtin tool exports: [`manifest()`] and [`SYSTEM_ROLE`] for
//! the model, `runtime(&Services)` for the machine (feature `runtime`) and `RENDER` for people
//! (feature `render`). The tool is declared only in sessions that have skills the model may
//! activate ([`Exposure::WhenSkills`]); `activateSkill`'s `name` lists them as an enum.
//!
//! ```
//! assert_eq!(builtin_tool_skills::manifest().identifier, "skills");
//! ```
#![deny(missing_docs)]

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tool_core::{ApiSpec, Exposure, Intervention, Tier, ToolManifest, ToolMeta};

/// The tool's identifier.
pub const IDENTIFIER: &str = "skills";

/// The system-role template (`{{skills}}`: one line per skill the model may activate).
pub const SYSTEM_ROLE: &str = include_str!("system_role.md");

tool_core::api_enum! {
    /// The APIs of the `skills` tool.
    pub enum SkillsApi {
        /// Load a skill's instructions.
        Activate = "activateSkill",
    }
}

/// Arguments of `activateSkill`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ActivateArgs {
    /// The skill's name, as listed.
    #[schemars(length(min = 1, max = 64))]
    pub name: String,
    /// What the skill is to work on, when its instructions take arguments (`$ARGUMENTS`).
    #[serde(default)]
    #[schemars(length(max = 4000))]
    pub arguments: Option<String>,
}

/// The tool's manifest.
pub fn manifest() -> ToolManifest {
    ToolManifest::new(IDENTIFIER, ToolMeta::new("Skills", "Loads the instructions of an Agent Skill"))
        .intervention(Intervention::Never.into())
        .system_role(SYSTEM_ROLE)
        .exposure(Exposure::WhenSkills)
        .api(
            ApiSpec::new::<ActivateArgs>(
                SkillsApi::Activate.name(),
                "Load a skill's instructions (and the list of its files) when the task matches its \
                 description. Follow what it returns.",
            )
            .choices_from("name", "skills")
            .tier(Tier::Read)
            .timeout_ms(10_000),
        )
}

#[cfg(feature = "runtime")]
pub mod discover;
#[cfg(feature = "runtime")]
mod runtime;

#[cfg(feature = "runtime")]
pub use runtime::{SkillUrls, SkillsRuntime, activate, files, runtime};

#[cfg(feature = "render")]
mod render {
    use serde_json::Value;
    use tool_core::render::status_badge;
    use tool_core::{Block, Card, Field, RenderHooks, ToolOutput};

    /// How people see an activation: the skill, where it came from and what it holds.
    #[derive(Debug, Clone, Copy, Default)]
    pub struct SkillsRender;

    impl RenderHooks for SkillsRender {
        fn result(&self, _api: &str, arguments: &Value, output: &ToolOutput) -> Card {
            let name = arguments.get("name").and_then(Value::as_str).unwrap_or_default();
            let mut card = Card::new(format!("Skill · {name}"));
            card.badge = Some(status_badge(output));
            let Some(state) = output.state.as_ref().filter(|_| output.success) else {
                return card.block(Block::Markdown { text: output.content.clone() });
            };
            let text = |key: &str| state.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
            let files = state.get("files").and_then(Value::as_array).map_or(0, Vec::len);
            card.subtitle = Some(text("description"));
            card.block(Block::Fields {
                fields: vec![
                    Field {
                        label: "from".to_owned(),
                        value: format!("{} ({})", text("dir"), text("source")),
                    },
                    Field { label: "instructions".to_owned(), value: format!("{} lines", text("lines")) },
                    Field { label: "files".to_owned(), value: files.to_string() },
                ],
            })
        }
    }
}

#[cfg(feature = "render")]
pub use render::SkillsRender;

/// The render hooks, as the registry's table holds them.
#[cfg(feature = "render")]
pub static RENDER: SkillsRender = SkillsRender;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_round_trips_and_names_come_from_the_session() {
        let manifest = manifest();
        let json = serde_json::to_string(&manifest).unwrap();
        assert_eq!(serde_json::from_str::<ToolManifest>(&json).unwrap(), manifest);
        assert_eq!(manifest.exposure, Exposure::WhenSkills);
        assert!(SYSTEM_ROLE.contains("{{skills}}"));
        let api = &manifest.apis[0];
        let filled =
            api.with_choices(|list| (list == "skills").then(|| vec!["a".to_owned(), "b".to_owned()]));
        assert_eq!(filled.parameters["properties"]["name"]["enum"], serde_json::json!(["a", "b"]));
        assert!(filled.parameters["properties"]["name"].get(tool_core::manifest::CHOICES_KEYWORD).is_none());
        let declared = tool_core::provider::Provider::Openai.declare("skills__activateSkill", api);
        assert!(!declared.to_string().contains(tool_core::manifest::CHOICES_KEYWORD), "{declared}");
    }
}
