//! A session's Agent Skills, as the front end found them: folders holding a `SKILL.md` whose
//! front matter names and describes the skill (the agentskills.io specification). Only names and
//! descriptions reach the system role ([`SkillSet::summary`]); the `skills` tool's
//! `activateSkill` returns a skill's body, and `skill://NAME/PATH` reads its files.
//!
//! This module is pure data: the `skills` tool crate finds and parses skills, the front end
//! decides which folders count (trust), the pipeline hands the set to every call.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Where a skill was found, which says who vouches for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SkillSource {
    /// The working folder's project (`.agents/skills` up to the repository root), trusted by the
    /// person.
    Project,
    /// The person's own (`~/.agents/skills`).
    User,
    /// Claude Code's folders (`.claude/skills`), read for compatibility.
    Claude,
    /// The server operator's folders for the tenant.
    Operator,
}

impl SkillSource {
    /// The stable string form.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Project => "project",
            Self::User => "user",
            Self::Claude => "claude",
            Self::Operator => "operator",
        }
    }
}

/// One skill.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkillInfo {
    /// Its name (the folder's name, lowercase letters, digits and hyphens).
    pub name: String,
    /// What it does and when to use it.
    pub description: String,
    /// Its folder (canonical).
    pub dir: PathBuf,
    /// Its `SKILL.md`.
    pub file: PathBuf,
    /// Where it was found.
    pub source: SkillSource,
    /// The model may activate it (`disable-model-invocation` not set).
    pub model_invocable: bool,
    /// A person may activate it by name (`user-invocable` not false).
    pub user_invocable: bool,
    /// What a person may type after `/NAME` (`argument-hint`).
    #[serde(default)]
    pub argument_hint: Option<String>,
    /// The tools it says it needs (`allowed-tools`); informative only: approval stays policy's.
    #[serde(default)]
    pub allowed_tools: Vec<String>,
    /// Its licence.
    #[serde(default)]
    pub license: Option<String>,
    /// What it needs of the environment.
    #[serde(default)]
    pub compatibility: Option<String>,
}

/// Characters of the system role given to the skills list when the front end sets none (codex's
/// default: about 2 % of a 100 000-token window).
pub const DEFAULT_PROMPT_BUDGET: usize = 8_000;

/// The skills of a session, by name (one per name: the first found wins).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkillSet {
    skills: Vec<SkillInfo>,
    /// Characters the list of skills may take in the system role.
    pub prompt_budget: usize,
}

impl Default for SkillSet {
    fn default() -> Self {
        Self { skills: Vec::new(), prompt_budget: DEFAULT_PROMPT_BUDGET }
    }
}

impl SkillSet {
    /// A set of `skills`; a later skill of a name already taken is dropped.
    pub fn new(skills: Vec<SkillInfo>) -> Self {
        let mut kept: Vec<SkillInfo> = Vec::with_capacity(skills.len());
        for skill in skills {
            if !kept.iter().any(|k| k.name == skill.name) {
                kept.push(skill);
            }
        }
        Self { skills: kept, prompt_budget: DEFAULT_PROMPT_BUDGET }
    }

    /// The same set with another prompt budget (characters).
    #[must_use]
    pub fn with_prompt_budget(mut self, chars: usize) -> Self {
        self.prompt_budget = chars;
        self
    }

    /// Every skill, in the order found.
    pub fn all(&self) -> &[SkillInfo] {
        &self.skills
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.skills.is_empty()
    }

    /// The skill named `name`.
    pub fn get(&self, name: &str) -> Option<&SkillInfo> {
        self.skills.iter().find(|s| s.name == name)
    }

    /// The skills the model may activate.
    pub fn for_model(&self) -> impl Iterator<Item = &SkillInfo> {
        self.skills.iter().filter(|s| s.model_invocable)
    }

    /// The names the model may activate, sorted (the enum of `activateSkill`).
    pub fn model_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.for_model().map(|s| s.name.clone()).collect();
        names.sort();
        names
    }

    /// The skills the model may activate, one `- name: description` line each, within
    /// [`SkillSet::prompt_budget`] characters: past it, descriptions are shortened to fit, and
    /// when even names alone do not fit, the last ones are left out and a line says how many
    /// (they stay in `activateSkill`'s list).
    pub fn summary(&self) -> String {
        let skills: Vec<&SkillInfo> = self.for_model().collect();
        if skills.is_empty() {
            return String::new();
        }
        let line = |s: &SkillInfo, room: Option<usize>| -> String {
            let description = one_line(&s.description);
            match room {
                Some(room) if description.chars().count() > room => {
                    let cut: String = description.chars().take(room.saturating_sub(1)).collect();
                    format!("- {}: {}…", s.name, cut.trim_end())
                }
                _ => format!("- {}: {description}", s.name),
            }
        };
        let whole: Vec<String> = skills.iter().map(|s| line(s, None)).collect();
        let budget = self.prompt_budget;
        if whole.iter().map(|l| l.chars().count() + 1).sum::<usize>() <= budget {
            return whole.join("\n");
        }
        // Share what is left after the names equally among the descriptions.
        let names: usize = skills.iter().map(|s| s.name.chars().count() + 5).sum();
        if names < budget {
            let room = (budget - names) / skills.len();
            if room >= 20 {
                return skills.iter().map(|s| line(s, Some(room))).collect::<Vec<_>>().join("\n");
            }
        }
        let mut out = Vec::new();
        let mut used = 0;
        for s in &skills {
            let entry = format!("- {}", s.name);
            if used + entry.len() + 1 + 60 > budget {
                break;
            }
            used += entry.len() + 1;
            out.push(entry);
        }
        let left = skills.len() - out.len();
        if left > 0 {
            out.push(format!("- ({left} more: activateSkill lists every name)"));
        }
        out.join("\n")
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skill(name: &str, description: &str) -> SkillInfo {
        SkillInfo {
            name: name.to_owned(),
            description: description.to_owned(),
            dir: PathBuf::from(format!("/s/{name}")),
            file: PathBuf::from(format!("/s/{name}/SKILL.md")),
            source: SkillSource::User,
            model_invocable: true,
            user_invocable: true,
            argument_hint: None,
            allowed_tools: Vec::new(),
            license: None,
            compatibility: None,
        }
    }

    #[test]
    fn first_of_a_name_wins_and_hidden_ones_stay_out_of_the_model_list() {
        let mut hidden = skill("deploy", "Deploys");
        hidden.model_invocable = false;
        let set = SkillSet::new(vec![skill("pdf", "Reads PDFs"), skill("pdf", "Other"), hidden]);
        assert_eq!(set.all().len(), 2);
        assert_eq!(set.get("pdf").unwrap().description, "Reads PDFs");
        assert_eq!(set.model_names(), vec!["pdf"]);
        assert_eq!(set.summary(), "- pdf: Reads PDFs");
    }

    #[test]
    fn the_summary_keeps_to_its_budget() {
        let long = "word ".repeat(200);
        let skills: Vec<SkillInfo> = (0..40).map(|i| skill(&format!("skill-{i:02}"), &long)).collect();
        let set = SkillSet::new(skills.clone()).with_prompt_budget(4_000);
        let summary = set.summary();
        assert!(summary.chars().count() <= 4_000, "{}", summary.len());
        assert_eq!(summary.lines().count(), 40, "every name, descriptions shortened");
        assert!(summary.lines().all(|l| l.ends_with('…')));
        let tight = SkillSet::new(skills).with_prompt_budget(400);
        let summary = tight.summary();
        assert!(summary.chars().count() <= 400, "{summary}");
        assert!(summary.ends_with("more: activateSkill lists every name)"), "{summary}");
        assert!(summary.starts_with("- skill-00\n"));
    }
}
