//! Agent Skills for the terminal app: the person's own (`~/.agents/skills`, and
//! `~/.claude/skills` read for compatibility) always, the project's (`.agents/skills` and
//! `.claude/skills` in the folder and the folders above it up to the repository root) only when
//! the folder is trusted ([`crate::trust`]), as project instructions are.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use builtin_tool_skills::discover::{self, Problem, SkillRoot};
use tool_core::SkillSet;

/// The skills found for a folder, and what to tell the person about them.
#[derive(Debug, Clone, Default)]
pub struct Skills {
    /// What sessions in the folder are given.
    pub set: Arc<SkillSet>,
    /// Warnings and refusals.
    pub problems: Vec<Problem>,
    /// Project skills folders that exist but were not read: the folder is not trusted.
    pub untrusted: Vec<PathBuf>,
}

/// Characters of the system prompt the list of skills may take: about 2 % of the model's
/// context window (four characters a token), as codex keeps it.
pub fn prompt_budget(context_window: u64) -> usize {
    usize::try_from(context_window.saturating_mul(8) / 100).unwrap_or(usize::MAX).max(2_000)
}

/// The person's home folder (`HOME`).
fn home() -> Option<PathBuf> {
    std::env::var_os("HOME").filter(|h| !h.is_empty()).map(PathBuf::from)
}

/// The skills for `folder`: the project's first (when trusted, asked of `journal`), then the
/// person's; a name found twice keeps the first.
pub async fn for_folder(journal: Option<&dyn journal::Journal>, folder: &Path, budget: usize) -> Skills {
    let project = discover::project_roots(folder);
    let trusted = match journal {
        Some(journal) if discover::any_exists(&project) => {
            crate::trust::trusted_by(journal, folder).await.ok().flatten().is_some()
        }
        _ => false,
    };
    let user = home().map(|home| discover::user_roots(&home)).unwrap_or_default();
    load(&project, &user, trusted, budget)
}

/// [`for_folder`] once the trust question is answered.
pub fn load(project: &[SkillRoot], user: &[SkillRoot], trusted: bool, budget: usize) -> Skills {
    let mut roots: Vec<SkillRoot> = Vec::new();
    let mut untrusted = Vec::new();
    if trusted {
        roots.extend(project.iter().cloned());
    } else {
        untrusted.extend(project.iter().filter(|r| r.dir.is_dir()).map(|r| r.dir.clone()));
    }
    roots.extend(user.iter().cloned());
    let found = discover::discover(&roots);
    Skills { set: Arc::new(found.set().with_prompt_budget(budget)), problems: found.problems, untrusted }
}

impl Skills {
    /// What the card shown once says (text, and whether it is a warning).
    pub fn describe(&self) -> Vec<(String, bool)> {
        let mut lines = Vec::new();
        if !self.set.is_empty() {
            let names: Vec<&str> = self.set.all().iter().map(|s| s.name.as_str()).collect();
            lines.push((format!("skills: {} (/skills lists them)", names.join(", ")), false));
        }
        for problem in &self.problems {
            let what = if problem.refused { "skill not loaded" } else { "skill" };
            lines.push((format!("{what} {}: {}", problem.path.display(), problem.message), problem.refused));
        }
        if !self.untrusted.is_empty() {
            let folders: Vec<String> = self.untrusted.iter().map(|p| p.display().to_string()).collect();
            lines.push((
                format!(
                    "not used: the skills in {} — this folder is not trusted. /trust uses them from now on",
                    folders.join(", ")
                ),
                true,
            ));
        }
        lines
    }

    /// The `/skills` listing.
    pub fn listing(&self) -> String {
        if self.set.is_empty() {
            let mut text = "no skills: put a folder with a SKILL.md in .agents/skills (this project, once \
                            trusted) or ~/.agents/skills (yours)"
                .to_owned();
            if !self.untrusted.is_empty() {
                text.push_str("; this folder's skills wait for /trust");
            }
            return text;
        }
        let mut lines = vec![
            "skills (/NAME [arguments] starts one; the model starts the others when they fit):".to_owned(),
        ];
        for skill in self.set.all() {
            let mut marks = vec![skill.source.as_str().to_owned()];
            if !skill.model_invocable {
                marks.push("only by you".to_owned());
            }
            if !skill.user_invocable {
                marks.push("only by the model".to_owned());
            }
            let hint = skill.argument_hint.as_deref().map(|h| format!(" {h}")).unwrap_or_default();
            lines.push(format!("  /{}{hint} — {} ({})", skill.name, skill.description, marks.join(", ")));
        }
        lines.join("\n")
    }
}

/// What the model is sent when the person starts a skill with `/NAME arguments`: the skill's
/// instructions, as `activateSkill` would return them.
///
/// # Errors
///
/// No such skill for the person, or it cannot be read now.
pub fn started_by_person(set: &SkillSet, name: &str, arguments: &str) -> Result<String, String> {
    let Some(skill) = set.get(name).filter(|s| s.user_invocable) else {
        return Err(format!("there is no skill `{name}` to start (/skills lists them)"));
    };
    let output = builtin_tool_skills::activate(skill, Some(arguments));
    if !output.success {
        return Err(output.content);
    }
    let asked =
        if arguments.trim().is_empty() { String::new() } else { format!(" with: {}", arguments.trim()) };
    Ok(format!("I am starting the skill `{name}`{asked}. Follow its instructions:\n\n{}", output.content))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skill(root: &Path, name: &str, front: &str) {
        std::fs::create_dir_all(root.join(name)).unwrap();
        std::fs::write(
            root.join(name).join("SKILL.md"),
            format!("---\nname: {name}\n{front}---\n\nDo $ARGUMENTS well.\n"),
        )
        .unwrap();
    }

    #[test]
    fn project_skills_only_when_trusted_and_the_project_wins() {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join("project");
        let home = dir.path().join("home");
        std::fs::create_dir_all(project.join(".git")).unwrap();
        skill(&project.join(".agents/skills"), "review", "description: Project review\n");
        skill(&home.join(".agents/skills"), "review", "description: My review\n");
        skill(
            &home.join(".agents/skills"),
            "deploy",
            "description: Deploys\ndisable-model-invocation: true\n",
        );
        let sub = project.join("src");
        std::fs::create_dir_all(&sub).unwrap();
        let roots = discover::project_roots(&sub);
        let user = discover::user_roots(&home);

        let untrusted = load(&roots, &user, false, 8_000);
        assert_eq!(untrusted.set.get("review").unwrap().description, "My review");
        assert_eq!(untrusted.untrusted, vec![project.join(".agents/skills")]);
        assert!(untrusted.describe().iter().any(|(t, w)| *w && t.contains("not trusted")));

        let trusted = load(&roots, &user, true, 8_000);
        assert_eq!(
            trusted.set.get("review").unwrap().description,
            "Project review",
            "found from a subfolder"
        );
        assert!(trusted.problems.iter().any(|p| p.refused && p.message.contains("taken")));
        assert_eq!(trusted.set.model_names(), vec!["review"], "deploy is the person's to start");
        assert!(trusted.listing().contains("/deploy — Deploys (user, only by you)"));

        let sent = started_by_person(&trusted.set, "deploy", "staging").unwrap();
        assert!(sent.contains("Do staging well."), "{sent}");
        assert!(started_by_person(&trusted.set, "nothing", "").is_err());
    }

    #[test]
    fn the_budget_is_two_percent_of_the_window() {
        assert_eq!(prompt_budget(200_000), 16_000);
        assert_eq!(prompt_budget(8_000), 2_000, "never below a floor");
    }
}
