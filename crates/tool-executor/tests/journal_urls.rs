//! An output cut for the model names the journal's address of the whole (`journal://KEY`), which
//! `readFile` reads on, line by line, for the session's own calls only; a replay is cut alike.

use std::sync::Arc;

use builtin_tools::Registry;
use computer_runtime::{ComputerRuntime, LocalComputer};
use journal::AttemptStatus;
use tool_core::Services;
use tool_executor::{
    ApprovalMode, Batch, Executor, ExecutorConfig, JournalUrls, RawCall, Session, SessionConfig,
    SessionPolicy, Toolbox,
};

async fn executor(dir: &std::path::Path) -> Executor {
    let journal = journal::open(&format!("sqlite://{}/journal.db", dir.display())).await.unwrap();
    let computer: Arc<dyn ComputerRuntime> = Arc::new(LocalComputer::default());
    let urls = builtin_tools::url_router().with(Arc::new(JournalUrls::new(journal.clone())));
    let services = Services::new().with(computer).with(Arc::new(urls));
    let mut toolbox = Toolbox::new();
    for (manifest, runtime) in Registry::builtin().available_runtimes(&services).0 {
        toolbox.add_tool(manifest, runtime).unwrap();
    }
    for (name, audit) in builtin_tools::audits() {
        toolbox.add_audit(*name, *audit);
    }
    let config = ExecutorConfig { content_budget: 300, ..ExecutorConfig::default() };
    Executor::builder(Arc::new(toolbox)).journal(journal).config(config).build()
}

fn open(executor: &Executor, id: &str, dir: &std::path::Path) -> Arc<Session> {
    executor.open_session(SessionConfig {
        id: id.into(),
        tenant: "t".into(),
        working_directory: Some(dir.to_path_buf()),
        policy: SessionPolicy { mode: ApprovalMode::Manual, ..SessionPolicy::default() },
        ..SessionConfig::default()
    })
}

async fn read(
    executor: &Executor,
    session: &Arc<Session>,
    message: &str,
    id: &str,
    path: &str,
) -> tool_executor::CallResult {
    let batch = Batch {
        message_id: Some(message.into()),
        calls: vec![RawCall {
            id: id.into(),
            name: "readFile".into(),
            arguments: serde_json::json!({"path": path}).to_string(),
        }],
        stopped_on_length: false,
    };
    executor.execute_batch(session, batch).await.pop().unwrap()
}

#[tokio::test]
async fn a_cut_output_names_where_the_whole_is_read_and_only_its_session_reads_it() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let executor = executor(dir.path()).await;
    let lines: Vec<String> = (1..=60).map(|n| format!("line {n:02} of the long file")).collect();
    std::fs::write(dir.path().join("long.txt"), lines.join("\n")).unwrap();
    let session = open(&executor, "mine", dir.path());

    let cut = read(&executor, &session, "m1", "c1", "long.txt").await;
    assert_eq!(cut.status, AttemptStatus::Executed);
    let content = &cut.output.content;
    assert!(content.starts_with("line 01 of the long file"), "{content}");
    assert!(!content.contains("line 60"), "cut for the model: {content}");
    let note = content.rsplit("\n\n").next().unwrap();
    assert!(note.starts_with("[Output truncated: showing the first 300 of"), "{note}");
    // The cut fell in line 12 (25 characters and a newline a line): it is read again whole.
    let address = "journal://m1%3Ac1";
    assert!(note.contains(&format!("readFile \"{address}:12-\"")), "{note}");

    // (Each read is a call whose output is cut at 300 characters too: the model reads in ranges.)
    let rest = read(&executor, &session, "m2", "c2", &format!("{address}:12-16")).await;
    assert_eq!(rest.status, AttemptStatus::Executed, "{}", rest.output.content);
    let text = &rest.output.content;
    assert!(text.starts_with("line 12 of the long file\nline 13"), "{text}");
    assert!(text.contains("[Showing lines 12-16 of 60 "), "{text}");
    assert!(text.ends_with("Read on with readFile \"journal://m1%3Ac1:17-\".]"), "{text}");
    let range = read(&executor, &session, "m3", "c3", &format!("{address}:59-60:raw")).await;
    assert_eq!(range.output.content, "line 59 of the long file\nline 60 of the long file");

    // Another session of the same tenant: the key names nothing for it.
    let other = open(&executor, "theirs", dir.path());
    let peek = read(&executor, &other, "m9", "c9", &format!("{address}:1-")).await;
    assert_eq!(peek.status, AttemptStatus::Failed);
    assert!(peek.output.content.contains("names no call of this session"), "{}", peek.output.content);
    assert!(!peek.output.content.contains("line 01"));

    // The same message again (its client lost the answer): the stored result, cut as before.
    let replay = read(&executor, &session, "m1", "c1", "long.txt").await;
    assert_eq!(replay.output.content, cut.output.content);
}

#[tokio::test]
async fn a_one_line_output_reads_on_where_its_cut_stopped() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let executor = executor(dir.path()).await;
    let session = open(&executor, "one-line", dir.path());
    // 2^20000 has 6 021 digits, on one line (as minified JSON would be): cut at 300 for the model.
    let batch = Batch {
        message_id: Some("m1".into()),
        calls: vec![RawCall {
            id: "c1".into(),
            name: "calculate".into(),
            arguments: r#"{"expression": "2^20000"}"#.into(),
        }],
        stopped_on_length: false,
    };
    let cut = executor.execute_batch(&session, batch).await.pop().unwrap();
    assert_eq!(cut.status, AttemptStatus::Executed, "{}", cut.output.content);
    assert!(cut.output.content.contains("readFile \"journal://m1%3Ac1:"), "{}", cut.output.content);
    let row = executor.journal().unwrap().get("t", "m1:c1").await.unwrap().unwrap();
    let whole = row.result.unwrap()["content"].as_str().unwrap().to_owned();
    let longest = whole.lines().max_by_key(|l| l.len()).unwrap().to_owned();
    assert!(longest.len() > 6_000, "{longest}");
    // Lines count in pieces of 2 000 characters: every piece of the long line is reachable (read
    // here by the reader itself: through this pipeline, whose budget is 300, each would be cut).
    let reader = JournalUrls::new(executor.journal().unwrap().clone());
    let mut context = tool_core::CallContext::new("r", "one-line");
    context.sandbox = Arc::new(tool_core::CallSandbox { tenant: Some("t".into()), ..Default::default() });
    let mut joined = String::new();
    let start = whole.lines().position(|l| l == longest).unwrap() as u64 + 1;
    for piece in start..start + 4 {
        let lines = tool_core::urls::Lines { offset: Some(piece), limit: Some(1), raw: true };
        let read = tool_core::UrlReader::read(&reader, "m1%3Ac1", lines, &context).await;
        assert!(read.success, "{}", read.content);
        joined.push_str(&read.content);
    }
    assert_eq!(joined, longest, "the whole line, piece by piece");
}
