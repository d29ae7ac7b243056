//! Checkpoints through the real pipeline and tools, and rewinds: after writes, edits, moves,
//! deletes and a command that creates and deletes files; the conflict rule; the journal.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use checkpoints::{Checkpointer, FileState, Store};
use computer_runtime::beneath::Opener;
use journal::{AttemptFilter, AttemptStatus, Journal};
use serde_json::{Value, json};
use tool_executor::{ApprovalMode, Batch, Executor, RawCall, Session, SessionConfig, SessionPolicy};

struct World {
    _dir: tempfile::TempDir,
    folder: PathBuf,
    store: Arc<Store>,
    opener: Opener,
    executor: Executor,
    journal: Arc<dyn Journal>,
    session: Arc<Session>,
}

async fn world(max_file_bytes: u64) -> World {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("work");
    std::fs::create_dir(&folder).unwrap();
    let folder = folder.canonicalize().unwrap();
    let journal = journal::open(&format!("sqlite://{}/journal.db", dir.path().display())).await.unwrap();
    // The builtin tools as a front end has them (tiers, audits and preparations included).
    let toolbox = client_executor::device::builtin_toolbox().expect("the builtin tools");
    let executor = Executor::builder(Arc::new(toolbox)).journal(journal.clone()).build();
    let session = executor.open_session(SessionConfig {
        id: "s1".into(),
        tenant: "t".into(),
        working_directory: Some(folder.clone()),
        policy: SessionPolicy { mode: ApprovalMode::AutoRun, ..SessionPolicy::default() },
        ..SessionConfig::default()
    });
    let store = Arc::new(Store::open(dir.path().join("checkpoints"), max_file_bytes).unwrap());
    Checkpointer::attach(store.clone(), &session).unwrap();
    let opener = Opener::new(session.file_boundary());
    World { _dir: dir, folder, store, opener, executor, journal, session }
}

impl World {
    async fn call(&self, id: &str, name: &str, arguments: Value) {
        let batch = Batch {
            message_id: None,
            calls: vec![RawCall { id: id.into(), name: name.into(), arguments: arguments.to_string() }],
            stopped_on_length: false,
        };
        let result = self.executor.execute_batch(&self.session, batch).await.pop().unwrap();
        assert_eq!(result.status, AttemptStatus::Executed, "{id}: {:?}", result.output);
    }

    fn read(&self, path: &str) -> Option<String> {
        std::fs::read_to_string(self.folder.join(path)).ok()
    }

    fn write(&self, path: &str, text: &str) {
        std::fs::write(self.folder.join(path), text).unwrap();
    }

    fn files(&self) -> Vec<String> {
        fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).unwrap().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    walk(root, &path, out);
                } else {
                    out.push(path.strip_prefix(root).unwrap().display().to_string());
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.folder, &self.folder, &mut out);
        out.sort();
        out
    }

    async fn status(&self, call_id: &str) -> AttemptStatus {
        let filter = AttemptFilter { session_id: Some("s1".into()), ..AttemptFilter::default() };
        let rows = self.journal.query("t", &filter).await.unwrap();
        rows.into_iter().find(|r| r.call_id == call_id).unwrap().status
    }
}

#[tokio::test]
async fn every_kind_of_change_is_put_back_and_the_journal_says_so() {
    let w = world(checkpoints::DEFAULT_MAX_FILE_BYTES).await;
    w.write("keep.txt", "original\n");
    w.write("doomed.txt", "delete me\n");
    w.write("old-name.txt", "moving\n");

    w.call("w1", "writeFile", json!({"path": "new/created.txt", "content": "fresh\n"})).await;
    w.call("e1", "editFile", json!({"path": "keep.txt", "oldText": "original", "newText": "edited"})).await;
    w.call(
        "m1",
        "moveFiles",
        json!({"items": [{"oldPath": "old-name.txt", "newPath": "moved/new-name.txt"}]}),
    )
    .await;
    w.call(
        "r1",
        "runCommand",
        json!({"command": "rm doomed.txt && printf made > by-command.txt && printf more >> keep.txt"}),
    )
    .await;
    assert_eq!(w.read("keep.txt").as_deref(), Some("edited\nmore"));

    let calls = checkpoints::calls(&w.store, &w.folder, "s1").unwrap();
    let ids: Vec<&str> = calls.iter().map(|c| c.call_id.as_str()).collect();
    assert_eq!(ids, ["w1", "e1", "m1", "r1"]);
    let command = &calls[3];
    let paths: Vec<&str> = command.files.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(
        paths,
        ["by-command.txt", "doomed.txt", "keep.txt"],
        "what the command changed, found by comparing the tree"
    );
    let diff = checkpoints::diff(&w.store, &calls[1].files[0]);
    assert!(diff.contains("-original") && diff.contains("+edited"), "{diff}");

    // Back to before the edit: the edit, the move and the command are undone; the write stays.
    let plan = checkpoints::plan(&w.store, &w.opener, &w.folder, "s1", Some("e1")).unwrap();
    assert_eq!(plan.calls, ["e1", "m1", "r1"]);
    assert_eq!(plan.conflicts().count(), 0);
    let applied = checkpoints::apply(&w.store, &w.opener, &w.folder, &plan, false).unwrap();
    assert!(applied.skipped.is_empty(), "{applied:?}");
    checkpoints::journal_rewind(w.journal.as_ref(), "t", &plan, &applied, "test").await.unwrap();
    assert_eq!(w.read("keep.txt").as_deref(), Some("original\n"));
    assert_eq!(w.read("doomed.txt").as_deref(), Some("delete me\n"));
    assert_eq!(w.read("old-name.txt").as_deref(), Some("moving\n"));
    assert_eq!(w.files(), ["doomed.txt", "keep.txt", "new/created.txt", "old-name.txt"]);
    for (call, status) in [
        ("w1", AttemptStatus::Executed),
        ("e1", AttemptStatus::Compensated),
        ("r1", AttemptStatus::Compensated),
    ] {
        assert_eq!(w.status(call).await, status, "{call}");
    }
    let rows = w.journal.query("t", &AttemptFilter::default()).await.unwrap();
    let rewind = rows.iter().find(|r| r.api == "rewind").expect("the rewind is journalled");
    assert_eq!(rewind.arguments["to_call"], "e1");

    // Undone calls are no longer listed; the last remaining one can be rewound in turn.
    let left = checkpoints::calls(&w.store, &w.folder, "s1").unwrap();
    assert_eq!(left.len(), 1);
    let last = checkpoints::plan(&w.store, &w.opener, &w.folder, "s1", None).unwrap();
    checkpoints::apply(&w.store, &w.opener, &w.folder, &last, false).unwrap();
    assert_eq!(w.files(), ["doomed.txt", "keep.txt", "old-name.txt"]);
    assert!(
        checkpoints::plan(&w.store, &w.opener, &w.folder, "s1", Some("e1")).is_err(),
        "an undone call is not rewound twice"
    );
}

#[tokio::test]
async fn a_file_changed_since_is_not_overwritten_unless_forced() {
    let w = world(checkpoints::DEFAULT_MAX_FILE_BYTES).await;
    w.write("a.txt", "one\n");
    w.call("e1", "editFile", json!({"path": "a.txt", "oldText": "one", "newText": "two"})).await;
    w.write("a.txt", "the person's own words\n");
    let plan = checkpoints::plan(&w.store, &w.opener, &w.folder, "s1", Some("e1")).unwrap();
    let conflicts: Vec<&str> = plan.conflicts().map(|r| r.path.as_str()).collect();
    assert_eq!(conflicts, ["a.txt"]);
    let applied = checkpoints::apply(&w.store, &w.opener, &w.folder, &plan, false).unwrap();
    assert_eq!(applied.skipped.len(), 1);
    assert_eq!(w.read("a.txt").as_deref(), Some("the person's own words\n"));

    // Asked and answered: forced.
    w.call("e2", "editFile", json!({"path": "a.txt", "oldText": "own", "newText": "very own"})).await;
    w.write("a.txt", "changed again\n");
    let plan = checkpoints::plan(&w.store, &w.opener, &w.folder, "s1", Some("e2")).unwrap();
    assert_eq!(plan.conflicts().count(), 1);
    checkpoints::apply(&w.store, &w.opener, &w.folder, &plan, true).unwrap();
    assert_eq!(w.read("a.txt").as_deref(), Some("the person's own words\n"));
}

#[tokio::test]
async fn files_past_the_cap_are_said_to_be_unrecoverable_and_ignored_files_are_not_scanned() {
    let w = world(64).await;
    w.write(".gitignore", "target/\n");
    w.write("big.bin", &"x".repeat(100));
    std::fs::create_dir(w.folder.join("target")).unwrap();
    w.call(
        "r1",
        "runCommand",
        json!({"command": "printf y >> big.bin; printf z > target/out.o; printf s > small.txt"}),
    )
    .await;
    let calls = checkpoints::calls(&w.store, &w.folder, "s1").unwrap();
    let paths: Vec<&str> = calls[0].files.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(paths, ["big.bin", "small.txt"], "target/ is ignored");
    assert!(matches!(calls[0].files[0].before, FileState::TooLarge { size: 100, .. }));
    let plan = checkpoints::plan(&w.store, &w.opener, &w.folder, "s1", None).unwrap();
    let unrecoverable: Vec<&str> = plan.unrecoverable().map(|r| r.path.as_str()).collect();
    assert_eq!(unrecoverable, ["big.bin"]);
    let applied = checkpoints::apply(&w.store, &w.opener, &w.folder, &plan, false).unwrap();
    assert_eq!(applied.removed, ["small.txt"]);
    assert_eq!(applied.skipped.len(), 1);
    assert!(applied.skipped[0].1.contains("larger than the checkpoints keep"));
}

#[tokio::test]
async fn a_rewind_does_not_follow_a_folder_swapped_for_a_link() {
    let w = world(checkpoints::DEFAULT_MAX_FILE_BYTES).await;
    std::fs::create_dir(w.folder.join("sub")).unwrap();
    w.write("sub/a.txt", "mine\n");
    w.call("e1", "editFile", json!({"path": "sub/a.txt", "oldText": "mine", "newText": "edited"})).await;
    // The folder is swapped for a link to a place outside the session's folders.
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::write(elsewhere.path().join("a.txt"), "edited\n").unwrap();
    std::fs::rename(w.folder.join("sub"), w.folder.join("sub-moved")).unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), w.folder.join("sub")).unwrap();
    // A session whose only folder is its own (a server's, with keys): /tmp is not one of them.
    let opener = Opener::rooted(&w.folder);
    let outcome = checkpoints::plan(&w.store, &opener, &w.folder, "s1", Some("e1"))
        .and_then(|plan| checkpoints::apply(&w.store, &opener, &w.folder, &plan, true));
    assert!(outcome.is_err(), "{outcome:?}");
    assert_eq!(
        std::fs::read_to_string(elsewhere.path().join("a.txt")).unwrap(),
        "edited\n",
        "written through the link"
    );
}

#[tokio::test]
async fn a_file_a_changed_gitignore_shows_is_not_taken_for_created() {
    let w = world(checkpoints::DEFAULT_MAX_FILE_BYTES).await;
    w.write(".gitignore", ".env\n");
    w.write(".env", "TOKEN=mine\n");
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
    std::fs::File::options().write(true).open(w.folder.join(".env")).unwrap().set_modified(old).unwrap();
    w.call("r1", "runCommand", json!({"command": "printf '' > .gitignore && printf x > made.txt"})).await;
    let calls = checkpoints::calls(&w.store, &w.folder, "s1").unwrap();
    let paths: Vec<&str> = calls[0].files.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(paths, [".gitignore", "made.txt"], "the .env it now sees was there before");
    let plan = checkpoints::plan(&w.store, &w.opener, &w.folder, "s1", None).unwrap();
    checkpoints::apply(&w.store, &w.opener, &w.folder, &plan, false).unwrap();
    assert_eq!(w.read(".env").as_deref(), Some("TOKEN=mine\n"), "a rewind must not remove it");
    assert!(!w.folder.join("made.txt").exists());
}

#[tokio::test]
async fn a_call_id_used_again_in_another_message_is_its_own_call() {
    let w = world(checkpoints::DEFAULT_MAX_FILE_BYTES).await;
    for (message, content) in [("m1", "one\n"), ("m2", "two\n")] {
        let batch = Batch {
            message_id: Some(message.into()),
            calls: vec![RawCall {
                id: "c1".into(),
                name: "writeFile".into(),
                arguments: json!({"path": "a.txt", "content": content}).to_string(),
            }],
            stopped_on_length: false,
        };
        let result = w.executor.execute_batch(&w.session, batch).await.pop().unwrap();
        assert_eq!(result.status, AttemptStatus::Executed, "{:?}", result.output);
    }
    // `c1` is the latest call of that id: the file goes back to what the first one wrote.
    let plan = checkpoints::plan(&w.store, &w.opener, &w.folder, "s1", Some("c1")).unwrap();
    assert_eq!(plan.calls.len(), 1);
    let applied = checkpoints::apply(&w.store, &w.opener, &w.folder, &plan, false).unwrap();
    checkpoints::journal_rewind(w.journal.as_ref(), "t", &plan, &applied, "test").await.unwrap();
    assert_eq!(w.read("a.txt").as_deref(), Some("one\n"));
    let rows = w
        .journal
        .query("t", &AttemptFilter { session_id: Some("s1".into()), ..AttemptFilter::default() })
        .await
        .unwrap();
    let by_message = |m: &str| rows.iter().find(|r| r.message_id.as_deref() == Some(m)).unwrap().status;
    assert_eq!(by_message("m2"), AttemptStatus::Compensated);
    assert_eq!(by_message("m1"), AttemptStatus::Executed);
}

#[tokio::test]
async fn a_call_whose_changes_could_not_be_kept_cannot_be_rewound_across() {
    let w = world(checkpoints::DEFAULT_MAX_FILE_BYTES).await;
    w.call("w1", "writeFile", json!({"path": "a.txt", "content": "x"})).await;
    let incomplete = checkpoints::Entry {
        call_id: "r1".into(),
        key: "t/s1/r1".into(),
        tool: "local-system".into(),
        api: "runCommand".into(),
        summary: "make".into(),
        at_ms: 0,
        files: Vec::new(),
        incomplete: Some("the folder could not be scanned".into()),
        undone: false,
    };
    w.store.append(&w.folder, "s1", &incomplete).unwrap();
    let refused = checkpoints::plan(&w.store, &w.opener, &w.folder, "s1", Some("w1")).unwrap_err();
    assert!(refused.to_string().contains("could not all be kept"), "{refused}");
    assert!(w.folder.join("a.txt").exists());
    // The store is the person's alone.
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(w.store.root().join("objects")).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "{mode:o}");
}

#[tokio::test]
async fn past_its_budget_the_store_keeps_nothing_more_and_says_so() {
    let w = world(checkpoints::DEFAULT_MAX_FILE_BYTES).await;
    let small = Arc::new(Store::open(w._dir.path().join("small"), 1024 * 1024).unwrap().with_budget(200));
    let session = w.executor.open_session(SessionConfig {
        id: "s2".into(),
        tenant: "t".into(),
        working_directory: Some(w.folder.clone()),
        policy: SessionPolicy { mode: ApprovalMode::AutoRun, ..SessionPolicy::default() },
        ..SessionConfig::default()
    });
    Checkpointer::attach(small.clone(), &session).unwrap();
    // Text that does not compress much (xorshift, in hex).
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let random: String = (0..500)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            format!("{state:016x}")
        })
        .collect();
    let batch = Batch {
        message_id: None,
        calls: vec![RawCall {
            id: "w1".into(),
            name: "writeFile".into(),
            arguments: json!({"path": "big.txt", "content": random}).to_string(),
        }],
        stopped_on_length: false,
    };
    let result = w.executor.execute_batch(&session, batch).await.pop().unwrap();
    assert_eq!(result.status, AttemptStatus::Executed, "the call itself runs");
    let calls = checkpoints::calls(&small, &w.folder, "s2").unwrap();
    assert!(calls[0].incomplete.as_deref().is_some_and(|why| why.contains("full")), "{calls:?}");
    assert!(small.used() <= 200);
    assert!(checkpoints::plan(&small, &w.opener, &w.folder, "s2", Some("w1")).is_err());
}

#[tokio::test]
async fn a_forgotten_sessions_contents_are_collected_and_others_are_kept() {
    let w = world(checkpoints::DEFAULT_MAX_FILE_BYTES).await;
    w.write("shared.txt", "shared\n");
    w.call("e1", "editFile", json!({"path": "shared.txt", "oldText": "shared", "newText": "mine"})).await;
    let other = w.executor.open_session(SessionConfig {
        id: "s2".into(),
        tenant: "t".into(),
        working_directory: Some(w.folder.clone()),
        policy: SessionPolicy { mode: ApprovalMode::AutoRun, ..SessionPolicy::default() },
        ..SessionConfig::default()
    });
    Checkpointer::attach(w.store.clone(), &other).unwrap();
    let batch = Batch {
        message_id: None,
        calls: vec![RawCall {
            id: "w2".into(),
            name: "writeFile".into(),
            arguments: json!({"path": "theirs.txt", "content": "only the second session's\n"}).to_string(),
        }],
        stopped_on_length: false,
    };
    w.executor.execute_batch(&other, batch).await;
    // Everything kept is old enough to collect.
    let two_hours_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
    for head in std::fs::read_dir(w.store.root().join("objects")).unwrap().flatten() {
        for object in std::fs::read_dir(head.path()).unwrap().flatten() {
            std::fs::File::options()
                .write(true)
                .open(object.path())
                .unwrap()
                .set_modified(two_hours_ago)
                .unwrap();
        }
    }
    let before = w.store.used();
    assert!(w.store.forget_session("s2"));
    assert!(!w.store.forget_session("s2"), "once");
    let collected = w.store.collect_garbage().unwrap();
    assert_eq!(collected.objects, 1, "the second session's file, which nothing else names");
    assert_eq!(w.store.used(), before - collected.bytes);
    assert!(checkpoints::calls(&w.store, &w.folder, "s2").unwrap().is_empty());
    // The first session can still rewind.
    let plan = checkpoints::plan(&w.store, &w.opener, &w.folder, "s1", Some("e1")).unwrap();
    let applied = checkpoints::apply(&w.store, &w.opener, &w.folder, &plan, false).unwrap();
    assert!(applied.failed.is_empty(), "{applied:?}");
    assert_eq!(w.read("shared.txt").as_deref(), Some("shared\n"));
}
