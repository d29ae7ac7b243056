//! The project's fixture skills against the Agent Skills reference validator (`skills-ref`,
//! pinned and installed by `.ci/interop-tools.sh`; its command is `agentskills validate`): what
//! it accepts loads without a word, what it rejects is reported — with a warning where the skill
//! can still be used (lenient, as the clients people use are), refused where it cannot.

use std::path::{Path, PathBuf};
use std::process::Command;

use builtin_tool_skills::discover::{self, SkillRoot};
use tool_core::SkillSource;

fn fixtures(kind: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(kind);
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    dirs.sort();
    dirs
}

/// The reference validator's verdict on a skill folder, and what it printed.
fn validate(dir: &Path) -> (bool, String) {
    let validator = test_support::interop_dir().join("skills-ref/bin/agentskills");
    assert!(validator.exists(), "{} is missing: run `bash .ci/interop-tools.sh`", validator.display());
    let out = Command::new(&validator).arg("validate").arg(dir).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[test]
fn what_the_reference_validator_accepts_loads_and_what_it_rejects_is_reported() {
    let mut checked = 0;
    for (kind, expected) in [("accepted", true), ("rejected", false)] {
        for dir in fixtures(kind) {
            let (valid, said) = validate(&dir);
            assert_eq!(valid, expected, "the validator on {}: {said}", dir.display());
            let ours = discover::skill_file(&dir)
                .ok_or_else(|| "no SKILL.md".to_owned())
                .and_then(|file| discover::load(&dir, &file, SkillSource::User));
            if valid {
                let (skill, warnings) = ours.unwrap_or_else(|e| panic!("{} refused: {e}", dir.display()));
                assert!(warnings.is_empty(), "{}: {warnings:?}", dir.display());
                assert_eq!(skill.name, dir.file_name().unwrap().to_string_lossy());
            } else {
                match ours {
                    Ok((_, warnings)) => {
                        assert!(!warnings.is_empty(), "{} loaded without a word", dir.display())
                    }
                    Err(reason) => assert!(!reason.is_empty()),
                }
            }
            checked += 1;
        }
    }
    assert!(checked >= 10, "{checked} fixtures");
}

#[test]
fn lenient_where_it_can_be_and_refusing_only_what_cannot_load() {
    let found = discover::discover(&[SkillRoot::new(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/rejected"),
        SkillSource::Project,
    )]);
    let mut loaded: Vec<&str> = found.skills.iter().map(|s| s.name.as_str()).collect();
    loaded.sort_unstable();
    assert_eq!(
        loaded,
        ["Review-Code", "colours", "deploy", "double--hyphen", "long-description", "other-name"],
        "usable despite the specification"
    );
    let refused: Vec<String> = found
        .problems
        .iter()
        .filter(|p| p.refused)
        .map(|p| p.path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(refused, ["no-description", "no-front-matter"]);
    let deploy = found.skills.iter().find(|s| s.name == "deploy").unwrap();
    assert!(!deploy.model_invocable && deploy.user_invocable, "Claude Code's field is honoured");
    assert_eq!(deploy.argument_hint.as_deref(), Some("[environment]"));
    let set = found.set();
    assert!(!set.model_names().contains(&"deploy".to_owned()));
}
