//! The knowledge-base tool end to end on the journal's databases (SQLite and Postgres): a folder
//! added (Markdown, HTML, code; binary, oversized and linked files skipped and reported), searched
//! and read by the model's APIs, synced by content hash, and isolated between tenants and persons.

use std::sync::Arc;

use builtin_tool_knowledge_base::KnowledgeBaseRuntime;
use builtin_tool_knowledge_base::ingest::{AddError, AddLimits, Within, add_base};
use serde_json::{Value, json};
use tool_core::knowledge::{KnowledgeStore, NewBase};
use tool_core::sandbox::CallSandbox;
use tool_core::{CallContext, ErrorKind, ToolOutput, ToolRuntime};

fn context(tenant: &str, person: &str) -> CallContext {
    let mut context = CallContext::new("call", "session");
    context.user_id = Some(person.into());
    context.sandbox = Arc::new(CallSandbox { tenant: Some(tenant.into()), ..CallSandbox::default() });
    context
}

fn base(tenant: &str, person: Option<&str>, name: &str, root: &std::path::Path) -> NewBase {
    NewBase {
        tenant: tenant.into(),
        person: person.map(Into::into),
        name: name.into(),
        roots: vec![root.to_string_lossy().into_owned()],
        embedding_model: None,
    }
}

fn write(dir: &std::path::Path, name: &str, text: &str) {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// A one-page PDF whose page says `text` (Helvetica, one line), with a correct cross-reference
/// table.
fn pdf(text: &str) -> Vec<u8> {
    let stream = format!("BT /F1 12 Tf 72 712 Td ({text}) Tj ET");
    let objects = [
        "<< /Type /Catalog /Pages 2 0 R >>".to_owned(),
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_owned(),
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>"
            .to_owned(),
        format!("<< /Length {} >>\nstream\n{stream}\nendstream", stream.len()),
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_owned(),
    ];
    let mut out = b"%PDF-1.4\n".to_vec();
    let mut offsets = Vec::new();
    for (index, object) in objects.iter().enumerate() {
        offsets.push(out.len());
        out.extend(format!("{} 0 obj\n{object}\nendobj\n", index + 1).bytes());
    }
    let xref = out.len();
    out.extend(format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).bytes());
    for offset in offsets {
        out.extend(format!("{offset:010} 00000 n \n").bytes());
    }
    out.extend(
        format!("trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n", objects.len() + 1).bytes(),
    );
    out
}

async fn call(runtime: &KnowledgeBaseRuntime, api: &str, args: Value, context: &CallContext) -> ToolOutput {
    runtime.execute(api, args, context).await
}

fn sources(output: &ToolOutput) -> Vec<String> {
    output.state.as_ref().unwrap()["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|hit| hit["source"].as_str().unwrap().rsplit('/').next().unwrap().to_owned())
        .collect()
}

async fn add_search_read_sync_and_isolate(store: Arc<dyn KnowledgeStore>) {
    let docs = tempfile::tempdir().unwrap();
    let root = docs.path();
    let long_install: String =
        (1..=60).map(|i| format!("Step {i}: keep going with the setup.\n\n")).collect();
    write(
        root,
        "guide/install.md",
        &format!(
            "# Install\n\nRun `make install` to put the quasar binary on your path.\n\n## Details\n\n{long_install}"
        ),
    );
    write(
        root,
        "guide/deploy.md",
        "# Deploy\n\nShip with `quasar deploy --region eu`. Rollbacks use `quasar rollback`.\n",
    );
    write(
        root,
        "site/faq.html",
        "<html><head><title>FAQ</title></head><body><nav>menu menu</nav><main><article><h1>Frequently asked</h1><p>The flux capacitor needs 1.21 gigawatts of power to start, which is a lot of power for a small device. Plan your supply accordingly and read the safety notes first.</p><p>More about the flux capacitor: it is sensitive to lightning, and to cheap cables as well.</p></article></main></body></html>",
    );
    write(
        root,
        "src/lib.rs",
        "/// Computes the warp factor.\npub fn warp_factor(speed: f64) -> f64 {\n    speed / 299_792.458\n}\n",
    );
    std::fs::write(root.join("manual.pdf"), pdf("The quantum flux manual says to recalibrate weekly"))
        .unwrap();
    std::fs::write(root.join("broken.pdf"), b"%PDF-1.4 this is not a PDF at all").unwrap();
    std::fs::write(root.join("logo.png"), [0x89, b'P', b'N', b'G', 0, 1, 2]).unwrap();
    std::fs::write(root.join("blob.txt"), [b'a', 0, b'b']).unwrap();
    write(root, "huge.md", &"big ".repeat(300_000));
    std::os::unix::fs::symlink("/etc/passwd", root.join("passwd.md")).unwrap();
    write(root, ".hidden/secret.md", "hidden quasar notes");

    let limits = AddLimits { max_file_bytes: 1024 * 1024, ..AddLimits::default() };
    let report =
        add_base(store.as_ref(), base("acme", Some("ada"), "docs", root), None, limits, None).await.unwrap();
    assert_eq!((report.added, report.changed, report.unchanged, report.removed), (5, 0, 0, 0));
    assert_eq!(report.base.sources, 5);
    let skipped: Vec<(String, &str)> = report
        .skipped
        .iter()
        .map(|s| (s.path.rsplit('/').next().unwrap().to_owned(), s.reason.split(' ').next().unwrap()))
        .collect();
    assert_eq!(
        skipped,
        [
            ("blob.txt".into(), "binary"),
            ("broken.pdf".into(), "the"),
            ("huge.md".into(), "larger"),
            ("logo.png".into(), "binary"),
            ("passwd.md".into(), "a")
        ],
        "{:?}",
        report.skipped
    );

    let tool = KnowledgeBaseRuntime::new(store.clone());
    let ada = context("acme", "ada");
    let found =
        call(&tool, "searchKnowledgeBase", json!({"query": "How do I roll back a deploy?"}), &ada).await;
    assert!(found.success, "{}", found.content);
    assert_eq!(sources(&found)[0], "deploy.md");
    assert!(found.content.starts_with("<knowledgeResults"), "{}", found.content);
    assert!(
        found.content.contains("heading=\"Deploy\"") && found.content.contains("lines=\"1-3\""),
        "{}",
        found.content
    );
    let html = call(&tool, "searchKnowledgeBase", json!({"query": "gigawatts flux capacitor"}), &ada).await;
    assert_eq!(sources(&html)[0], "faq.html", "HTML through the extractor");
    assert!(!html.content.contains("menu menu"), "navigation left out: {}", html.content);
    let manual =
        call(&tool, "searchKnowledgeBase", json!({"query": "recalibrate the quantum flux"}), &ada).await;
    assert_eq!(sources(&manual)[0], "manual.pdf", "PDF text: {}", manual.content);
    let code = call(&tool, "searchKnowledgeBase", json!({"query": "warp_factor"}), &ada).await;
    assert_eq!(sources(&code)[0], "lib.rs");
    let hidden = call(&tool, "searchKnowledgeBase", json!({"query": "hidden quasar notes"}), &ada).await;
    assert!(!sources(&hidden).iter().any(|s| s == "secret.md"), "hidden files are not indexed");

    // Reading around a hit, by the hit's source and lines.
    let install =
        call(&tool, "searchKnowledgeBase", json!({"query": "make install quasar binary"}), &ada).await;
    let hit = &install.state.as_ref().unwrap()["hits"][0];
    let source = hit["source"].as_str().unwrap().to_owned();
    assert!(source.ends_with("guide/install.md"));
    let read = call(&tool, "readKnowledgeBase", json!({"source": source, "range": "3-7"}), &ada).await;
    assert!(read.success, "{}", read.content);
    assert!(read.content.contains("     3\tRun `make install`"), "{}", read.content);
    assert!(read.content.contains("     7\t"), "{}", read.content);
    assert!(!read.content.contains("     8\t"), "{}", read.content);
    assert!(read.content.contains("More follows: read from line 8 on."), "{}", read.content);
    let past = call(&tool, "readKnowledgeBase", json!({"source": source, "range": "5000-5001"}), &ada).await;
    assert_eq!(past.error.unwrap().kind, ErrorKind::InvalidArguments);
    let bad = call(&tool, "readKnowledgeBase", json!({"source": source, "range": "x-y"}), &ada).await;
    assert_eq!(bad.error.unwrap().kind, ErrorKind::InvalidArguments);
    // A line longer than a read comes back begun and said to be cut, never as nothing.
    let minified = root.join("guide/install.md").to_string_lossy().replace("install.md", "minified.js");
    std::fs::write(&minified, format!("{}\n", "x".repeat(100_000))).unwrap();
    add_base(store.as_ref(), base("acme", Some("ada"), "docs", root), None, limits, None).await.unwrap();
    let long = call(&tool, "readKnowledgeBase", json!({"source": minified}), &ada).await;
    assert!(
        long.content.contains("     1\txxxx") && long.content.contains("the line goes on past 48 KiB"),
        "{}",
        &long.content[..200]
    );
    std::fs::remove_file(&minified).unwrap();
    add_base(store.as_ref(), base("acme", Some("ada"), "docs", root), None, limits, None).await.unwrap();
    let missing = call(&tool, "readKnowledgeBase", json!({"source": "/nowhere.md"}), &ada).await;
    assert_eq!(missing.error.unwrap().kind, ErrorKind::NotFound);

    // Bad input: a clear error the model can act on.
    let empty = call(&tool, "searchKnowledgeBase", json!({"query": "  "}), &ada).await;
    assert_eq!(empty.error.unwrap().kind, ErrorKind::InvalidArguments);
    let unknown = call(&tool, "searchKnowledgeBase", json!({"query": "deploy", "base": "nope"}), &ada).await;
    let error = unknown.error.unwrap();
    assert_eq!(error.kind, ErrorKind::NotFound);
    assert!(unknown.content.contains("the bases are: docs"), "{}", unknown.content);
    let nothing = call(&tool, "searchKnowledgeBase", json!({"query": "zzzqqq"}), &ada).await;
    assert!(nothing.success && nothing.content.contains("Nothing matched"), "{}", nothing.content);

    // Isolation: another person, and the same person in another tenant, see no base at all.
    for other in [context("acme", "bob"), context("globex", "ada")] {
        let output = call(&tool, "searchKnowledgeBase", json!({"query": "deploy"}), &other).await;
        assert_eq!(output.error.unwrap().kind, ErrorKind::NotFound, "{}", output.content);
        let read = call(&tool, "readKnowledgeBase", json!({"source": source}), &other).await;
        assert!(!read.success);
    }
    // A shared base of the tenant is seen by all its persons, and by no other tenant.
    let team = tempfile::tempdir().unwrap();
    write(team.path(), "handbook.md", "# Handbook\n\nVacation requests go through the zeppelin portal.\n");
    add_base(store.as_ref(), base("acme", None, "handbook", team.path()), None, AddLimits::default(), None)
        .await
        .unwrap();
    let bob = call(
        &tool,
        "searchKnowledgeBase",
        json!({"query": "zeppelin portal vacation"}),
        &context("acme", "bob"),
    )
    .await;
    assert_eq!(sources(&bob), ["handbook.md"]);
    let listed = call(&tool, "listKnowledgeBases", json!({}), &ada).await;
    assert!(
        listed.content.contains("- docs: 5 sources") && listed.content.contains("- handbook (shared)"),
        "{}",
        listed.content
    );
    let globex = call(&tool, "listKnowledgeBases", json!({}), &context("globex", "bob")).await;
    assert!(!globex.success);

    // Re-adding syncs by content: unchanged, changed, new and removed files; searches see it.
    let again =
        add_base(store.as_ref(), base("acme", Some("ada"), "docs", root), None, limits, None).await.unwrap();
    assert_eq!((again.added, again.changed, again.unchanged, again.removed), (0, 0, 5, 0));
    write(root, "guide/deploy.md", "# Deploy\n\nShip with the teleporter now.\n");
    write(root, "guide/new.md", "# New\n\nThe hyperdrive is new.\n");
    std::fs::remove_file(root.join("src/lib.rs")).unwrap();
    let synced =
        add_base(store.as_ref(), base("acme", Some("ada"), "docs", root), None, limits, None).await.unwrap();
    assert_eq!((synced.added, synced.changed, synced.unchanged, synced.removed), (1, 1, 3, 1));
    let teleporter = call(&tool, "searchKnowledgeBase", json!({"query": "teleporter"}), &ada).await;
    assert_eq!(sources(&teleporter), ["deploy.md"], "the cached index follows the base's version");
    let gone =
        call(&tool, "searchKnowledgeBase", json!({"query": "warp_factor", "base": "docs"}), &ada).await;
    assert!(!sources(&gone).iter().any(|s| s == "lib.rs"));

    // Adds refuse what they cannot take.
    assert!(matches!(
        add_base(store.as_ref(), base("acme", Some("ada"), "../x", root), None, limits, None).await,
        Err(AddError::BadName(_))
    ));
    assert!(matches!(
        add_base(store.as_ref(), base("acme", Some("ada"), "x", &root.join("absent")), None, limits, None)
            .await,
        Err(AddError::NoSuchPath(_))
    ));
    // Within given folders: a root outside them, directly or through a link inside, is refused.
    let inside = [root.join("guide")];
    assert!(matches!(
        add_base(
            store.as_ref(),
            base("acme", Some("ada"), "x", team.path()),
            Some(Within { folders: &inside, protected: &[] }),
            limits,
            None
        )
        .await,
        Err(AddError::Outside(_))
    ));
    std::os::unix::fs::symlink(team.path(), root.join("guide/team")).unwrap();
    assert!(matches!(
        add_base(
            store.as_ref(),
            base("acme", Some("ada"), "x", &root.join("guide/team")),
            Some(Within { folders: &inside, protected: &[] }),
            limits,
            None
        )
        .await,
        Err(AddError::Outside(_))
    ));
    let guide = add_base(
        store.as_ref(),
        base("acme", Some("ada"), "guide", &root.join("guide")),
        Some(Within { folders: &inside, protected: &[] }),
        limits,
        None,
    )
    .await
    .unwrap();
    assert_eq!(guide.base.sources, 3, "install, deploy and new: {:?}", guide.skipped);
    // A protected file inside the folders is never read, and no folder resolving admits nothing.
    let protected = [root.join("guide/deploy.md")];
    let guarded = add_base(
        store.as_ref(),
        base("acme", Some("ada"), "guarded", &root.join("guide")),
        Some(Within { folders: &inside, protected: &protected }),
        limits,
        None,
    )
    .await
    .unwrap();
    assert_eq!(guarded.base.sources, 2, "{:?}", guarded.skipped);
    assert!(
        guarded.skipped.iter().any(|s| s.path.ends_with("deploy.md") && s.reason.starts_with("unreadable"))
    );
    let nowhere = [root.join("no-such-folder")];
    assert!(matches!(
        add_base(
            store.as_ref(),
            base("acme", Some("ada"), "y", &root.join("guide")),
            Some(Within { folders: &nowhere, protected: &[] }),
            limits,
            None
        )
        .await,
        Err(AddError::Outside(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("journal.db").display());
    add_search_read_sync_and_isolate(journal::open_stores(&url).await.unwrap().knowledge).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres() {
    let server = test_support::PgServer::start();
    let url = server.database_url(&format!("kb_tool_{}", std::process::id()));
    add_search_read_sync_and_isolate(journal::open_stores(&url).await.unwrap().knowledge).await;
}
