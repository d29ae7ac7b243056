//! The path-scope audit on real paths: `..`, symlinks, temp folders, no working directory.

use std::path::Path;

use builtin_tool_local_system::LocalSystemApi;
use builtin_tools::audit;
use serde_json::{Value, json};
use tool_core::{AuditInput, AuditVerdict};

fn verdict(api: LocalSystemApi, arguments: Value, working_directory: Option<&Path>) -> AuditVerdict {
    let spec = api.spec();
    let audit = audit("pathScope").expect("pathScope is registered");
    audit(&AuditInput {
        api: &spec,
        arguments: &arguments,
        working_directory,
        temp_in_scope: true,
        session_temp: None,
        paths_elsewhere: false,
        hard_roots: None,
    })
}

#[test]
fn a_session_that_excludes_temp_folders_asks_for_them() {
    let spec = LocalSystemApi::ReadFile.spec();
    let audit = audit("pathScope").expect("pathScope is registered");
    let work = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let temp_file = std::env::temp_dir().join("someone-elses-file.txt");
    let arguments = json!({"path": temp_file});
    let shared = AuditInput {
        api: &spec,
        arguments: &arguments,
        working_directory: Some(work.path()),
        temp_in_scope: true,
        session_temp: None,
        paths_elsewhere: false,
        hard_roots: None,
    };
    assert_eq!(audit(&shared), AuditVerdict::Pass);
    let private = AuditInput { temp_in_scope: false, ..shared };
    assert!(matches!(audit(&private), AuditVerdict::Flag(_)), "temp is outside when excluded");
    let inside = json!({"path": "notes.txt"});
    let private_inside = AuditInput { arguments: &inside, ..private };
    assert_eq!(audit(&private_inside), AuditVerdict::Pass, "the working directory is still inside");

    // The session's own temp folder (its commands' full output) is always inside.
    let own = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let spill = json!({"path": own.path().join("run-x.log")});
    let with_own = AuditInput { arguments: &spill, ..private };
    assert!(matches!(audit(&with_own), AuditVerdict::Flag(_)));
    let with_own = AuditInput { session_temp: Some(own.path()), ..with_own };
    assert_eq!(audit(&with_own), AuditVerdict::Pass);
}

#[test]
fn path_scope_cases() {
    // The working directory may itself sit under a temp folder (a clone in /tmp), so every
    // "outside" target is a system folder that is never temp: /etc and /usr.
    let work = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let wd = work.path();
    std::fs::create_dir(wd.join("src")).unwrap();
    std::os::unix::fs::symlink("/etc", wd.join("escape")).unwrap();
    std::os::unix::fs::symlink(wd.join("src"), wd.join("inner-link")).unwrap();
    let outside_file = "/etc/hostname";

    use LocalSystemApi::*;
    let cases: Vec<(&str, LocalSystemApi, Value, Option<&Path>, bool)> = vec![
        ("relative inside", ReadFile, json!({"path": "src/main.rs"}), Some(wd), true),
        ("absolute inside", ReadFile, json!({"path": wd.join("src/x.rs")}), Some(wd), true),
        ("new file inside", WriteFile, json!({"path": "new/dir/file.txt", "content": ""}), Some(wd), true),
        ("dotdot that stays inside", ReadFile, json!({"path": "src/../src/x"}), Some(wd), true),
        ("dotdot escape", ReadFile, json!({"path": "../../../../../../etc/passwd"}), Some(wd), false),
        ("absolute outside", ReadFile, json!({"path": outside_file}), Some(wd), false),
        ("etc", ReadFile, json!({"path": "/etc/passwd"}), Some(wd), false),
        ("home", ReadFile, json!({"path": "~/.bashrc"}), Some(wd), false),
        ("symlink inside pointing outside", ReadFile, json!({"path": "escape/hostname"}), Some(wd), false),
        (
            "write through escaping symlink",
            WriteFile,
            json!({"path": "escape/new.txt", "content": ""}),
            Some(wd),
            false,
        ),
        ("symlink inside pointing inside", ReadFile, json!({"path": "inner-link/a.rs"}), Some(wd), true),
        ("temp folder", ReadFile, json!({"path": "/tmp/x.txt"}), Some(wd), true),
        ("var tmp", ReadFile, json!({"path": "/var/tmp/x.txt"}), Some(wd), true),
        ("no working directory, temp", ReadFile, json!({"path": "/tmp/x"}), None, true),
        ("no working directory, elsewhere", ReadFile, json!({"path": "/usr/share/a"}), None, false),
        ("no working directory, relative", ReadFile, json!({"path": "a.txt"}), None, false),
        (
            "move out",
            MoveFiles,
            json!({"items": [{"oldPath": "src/a", "newPath": "src/b"}, {"oldPath": "src/c", "newPath": "/etc/c"}]}),
            Some(wd),
            false,
        ),
        ("move inside", MoveFiles, json!({"items": [{"oldPath": "src/a", "newPath": "b"}]}), Some(wd), true),
        ("glob relative pattern", GlobFiles, json!({"pattern": "../**/*.rs"}), Some(wd), true),
        ("glob absolute pattern outside", GlobFiles, json!({"pattern": "/etc/**/*.conf"}), Some(wd), false),
        (
            "glob directory outside",
            GlobFiles,
            json!({"pattern": "*.rs", "directory": "/usr"}),
            Some(wd),
            false,
        ),
        ("grep default scope", GrepContent, json!({"pattern": "x"}), Some(wd), true),
        ("grep outside", GrepContent, json!({"pattern": "x", "path": "/"}), Some(wd), false),
        ("search outside", SearchFiles, json!({"query": "x", "directory": "/home"}), Some(wd), false),
    ];
    for (name, api, arguments, dir, passes) in cases {
        let got = verdict(api, arguments, dir);
        assert_eq!(got == AuditVerdict::Pass, passes, "{name}: {got:?}");
    }
}

#[test]
fn flag_reason_names_the_resolved_path() {
    let work = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    std::os::unix::fs::symlink("/etc", work.path().join("etc-link")).unwrap();
    let AuditVerdict::Flag(reason) =
        verdict(LocalSystemApi::ReadFile, json!({"path": "etc-link/hosts"}), Some(work.path()))
    else {
        panic!("an escaping symlink must be flagged");
    };
    assert!(reason.starts_with("/etc/hosts outside the working directory"), "{reason}");
}

#[test]
fn a_working_directory_swapped_for_a_link_flags_every_path() {
    let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let root = std::fs::canonicalize(root.path()).unwrap();
    let work = root.join("work");
    let other = root.join("other");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&other).unwrap();
    let inside = json!({"path": "notes.txt"});
    assert_eq!(verdict(LocalSystemApi::ReadFile, inside.clone(), Some(&work)), AuditVerdict::Pass);
    std::fs::rename(&work, root.join("work-old")).unwrap();
    std::os::unix::fs::symlink(&other, &work).unwrap();
    let AuditVerdict::Flag(reason) = verdict(LocalSystemApi::ReadFile, inside.clone(), Some(&work)) else {
        panic!("a swapped working directory must ask")
    };
    assert!(reason.contains("moved or replaced"), "{reason}");
    // With hard roots (a server with keys) the new target may be another tenant's: nobody is asked.
    let spec = LocalSystemApi::ReadFile.spec();
    let hard = [tool_core::FileRoot::writable(&root)];
    let refused = audit("pathScope").expect("pathScope is registered")(&AuditInput {
        api: &spec,
        arguments: &inside,
        working_directory: Some(&work),
        temp_in_scope: false,
        session_temp: None,
        paths_elsewhere: false,
        hard_roots: Some(&hard),
    });
    let AuditVerdict::Refuse(reason) = refused else { panic!("with hard roots it is refused: {refused:?}") };
    assert!(reason.contains("moved or replaced") && reason.contains("no approval"), "{reason}");
}

#[test]
fn past_hard_roots_nothing_is_asked_everything_is_refused() {
    let spec = LocalSystemApi::ReadFile.spec();
    let audit = audit("pathScope").expect("pathScope is registered");
    let tenant = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let other = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let work = tenant.path().join("project");
    std::fs::create_dir(&work).unwrap();
    std::fs::create_dir(tenant.path().join("notes")).unwrap();
    // A link in the session's folder to the other tenant's: judged by where it leads.
    std::os::unix::fs::symlink(other.path(), work.join("peek")).unwrap();
    let hard = [tool_core::FileRoot::writable(tenant.path()), tool_core::FileRoot::read_only("/usr/share")];
    let check = |path: &Path| {
        let arguments = json!({ "path": path });
        audit(&AuditInput {
            api: &spec,
            arguments: &arguments,
            working_directory: Some(&work),
            temp_in_scope: false,
            session_temp: None,
            paths_elsewhere: false,
            hard_roots: Some(&hard),
        })
    };
    // (path, "pass" | "flag" | "refuse")
    let cases: Vec<(std::path::PathBuf, &str)> = vec![
        (work.join("a.txt"), "pass"),
        (tenant.path().join("notes/n.md"), "flag"),
        (std::path::PathBuf::from("/usr/share/doc"), "flag"),
        (other.path().join("secret.txt"), "refuse"),
        (work.join("peek/secret.txt"), "refuse"),
        (work.join("../../").join(other.path().file_name().unwrap()), "refuse"),
        (std::path::PathBuf::from("/etc/shadow"), "refuse"),
        (std::env::temp_dir().join("x"), "refuse"),
    ];
    for (path, want) in cases {
        let got = match check(&path) {
            AuditVerdict::Pass => "pass",
            AuditVerdict::Flag(_) => "flag",
            AuditVerdict::Refuse(reason) => {
                assert!(reason.contains("no approval can open it"), "{reason}");
                "refuse"
            }
        };
        assert_eq!(got, want, "{}", path.display());
    }
}
