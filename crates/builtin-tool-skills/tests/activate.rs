//! `activateSkill` and `skill://` reads on the fixture skills, as the pipeline hands a session's
//! skills to each call.

use std::path::Path;
use std::sync::Arc;

use builtin_tool_skills::discover::{self, SkillRoot};
use builtin_tool_skills::{SkillUrls, runtime};
use serde_json::json;
use tool_core::urls::{Lines, select};
use tool_core::{CallContext, ErrorKind, Services, SkillSet, SkillSource, UrlReader};

fn skills(root: &Path) -> Arc<SkillSet> {
    Arc::new(discover::discover(&[SkillRoot::new(root, SkillSource::User)]).set())
}

fn context(set: Arc<SkillSet>) -> CallContext {
    let mut context = CallContext::new("c1", "s1");
    context.skills = set;
    context
}

fn accepted() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/accepted")
}

#[tokio::test]
async fn activation_returns_the_instructions_and_the_files_and_arguments_fill_in() {
    let runtime = runtime(&Services::new()).unwrap();
    let context = context(skills(&accepted()));
    let out = runtime.execute("activateSkill", json!({"name": "pdf-forms"}), &context).await;
    assert!(out.success, "{}", out.content);
    assert!(out.content.starts_with("<skill name=\"pdf-forms\" folder=\""), "{}", out.content);
    assert!(out.content.contains("1. List the form fields"), "the body: {}", out.content);
    assert!(!out.content.contains("license: Apache-2.0"), "not the front matter: {}", out.content);
    assert!(out.content.contains("- references/field-types.md ("), "{}", out.content);
    assert!(out.content.contains("- scripts/fields.py ("), "{}", out.content);
    assert!(out.content.contains("skill://pdf-forms/PATH"), "{}", out.content);
    assert_eq!(out.state.as_ref().unwrap()["files"].as_array().unwrap().len(), 2);

    let unknown = runtime.execute("activateSkill", json!({"name": "pdf"}), &context).await;
    assert_eq!(unknown.error.as_ref().unwrap().kind, ErrorKind::InvalidArguments);
    assert!(unknown.content.contains("changelog, pdf-forms, sql-2"), "{}", unknown.content);

    // `$ARGUMENTS` is filled in; a skill only a person may start is refused to the model.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("deploy")).unwrap();
    std::fs::write(
        dir.path().join("deploy/SKILL.md"),
        "---\nname: deploy\ndescription: Deploys\ndisable-model-invocation: true\n---\nDeploy to $ARGUMENTS.\n",
    )
    .unwrap();
    let set = skills(dir.path());
    let refused =
        runtime.execute("activateSkill", json!({"name": "deploy"}), &self::context(set.clone())).await;
    assert!(refused.content.contains("only by the person"), "{}", refused.content);
    let by_person = builtin_tool_skills::activate(set.get("deploy").unwrap(), Some("staging"));
    assert!(by_person.content.contains("Deploy to staging."), "{}", by_person.content);
}

#[tokio::test]
async fn skill_addresses_read_inside_the_skill_only() {
    let root = tempfile::tempdir().unwrap();
    let skill = root.path().join("notes");
    std::fs::create_dir_all(skill.join("references")).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: notes\ndescription: Notes\n---\nRead references/a.md\n",
    )
    .unwrap();
    std::fs::write(skill.join("references/a.md"), "one\ntwo\nthree\nfour\n").unwrap();
    let secret = root.path().join("secret.txt");
    std::fs::write(&secret, "the secret\n").unwrap();
    std::os::unix::fs::symlink(&secret, skill.join("references/out.md")).unwrap();
    let context = context(skills(root.path()));
    let read = |address: &'static str| {
        let context = &context;
        async move {
            let selected = select(address);
            let rest = selected.target.strip_prefix("skill://").unwrap();
            SkillUrls.read(rest, selected.lines, context).await
        }
    };

    let lines = read("skill://notes/references/a.md:2-3").await;
    assert!(lines.success, "{}", lines.content);
    assert!(lines.content.starts_with("two\nthree"), "{}", lines.content);
    assert!(lines.content.contains("[Showing lines 2-3 of 4"), "{}", lines.content);
    let raw = read("skill://notes/references/a.md:2-3:raw").await;
    assert_eq!(raw.content, "two\nthree");
    let whole = read("skill://notes").await;
    assert!(whole.content.contains("name: notes"), "the SKILL.md itself: {}", whole.content);

    for outside in
        ["skill://notes/../secret.txt", "skill://notes//etc/passwd", "skill://notes/references/out.md"]
    {
        let out = read(outside).await;
        assert!(!out.success, "{outside}: {}", out.content);
        assert!(!out.content.contains("the secret"), "{outside}: {}", out.content);
        assert!(
            !out.content.contains(&root.path().display().to_string()),
            "no folder of this machine: {}",
            out.content
        );
    }
    let unknown = read("skill://other/x.md").await;
    assert!(unknown.content.contains("there is no skill `other`"), "{}", unknown.content);
    let none = SkillUrls.read("notes/x", Lines::default(), &CallContext::new("c", "s")).await;
    assert!(none.content.contains("no skills"), "a session without skills: {}", none.content);
}

#[tokio::test]
async fn a_skill_folder_swapped_for_a_link_after_it_was_found_is_not_followed() {
    let root = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let skill = root.path().join("notes");
    std::fs::create_dir_all(&skill).unwrap();
    std::fs::write(skill.join("SKILL.md"), "---\nname: notes\ndescription: Notes\n---\nbody\n").unwrap();
    std::fs::write(
        elsewhere.path().join("SKILL.md"),
        "---\nname: notes\ndescription: x\n---\nthe secret body\n",
    )
    .unwrap();
    std::fs::write(elsewhere.path().join("secret.txt"), "the secret\n").unwrap();
    let set = skills(root.path());
    // Found; then the folder becomes a link to another folder (to `/`, to another tenant's…).
    std::fs::rename(&skill, root.path().join("moved")).unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), &skill).unwrap();
    let context = context(set.clone());
    let read = SkillUrls.read("notes/secret.txt", Lines::default(), &context).await;
    assert!(!read.success && !read.content.contains("the secret"), "{}", read.content);
    let activated = builtin_tool_skills::activate(set.get("notes").unwrap(), None);
    assert!(!activated.success && !activated.content.contains("the secret body"), "{}", activated.content);
}

#[test]
fn a_projects_skills_stay_inside_it_and_skill_md_is_no_link() {
    let project = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let skills_dir = project.path().join(".agents/skills");
    std::fs::create_dir_all(&skills_dir).unwrap();
    std::fs::write(outside.path().join("SKILL.md"), "---\nname: away\ndescription: Away\n---\n").unwrap();
    std::os::unix::fs::symlink(outside.path(), skills_dir.join("away")).unwrap();
    std::fs::create_dir_all(skills_dir.join("linked")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("SKILL.md"), skills_dir.join("linked/SKILL.md")).unwrap();

    let project_found = discover::discover(&[SkillRoot::contained(&skills_dir, SkillSource::Project)]);
    assert!(project_found.skills.is_empty(), "{:?}", project_found.skills);
    let why: Vec<&str> = project_found.problems.iter().map(|p| p.message.as_str()).collect();
    assert!(why.iter().any(|m| m.contains("link out of the project")), "{why:?}");
    assert!(why.iter().any(|m| m.contains("SKILL.md is a link")), "{why:?}");
    // The person's own may be links (dotfiles), but SKILL.md itself still may not.
    let own = discover::discover(&[SkillRoot::new(&skills_dir, SkillSource::User)]);
    let names: Vec<&str> = own.skills.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["away"]);
}
