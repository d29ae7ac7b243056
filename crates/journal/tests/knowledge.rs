//! Knowledge bases on both backends: bases per person and shared per tenant, sources replaced
//! and removed as one step, versions that move with every change, chunks read back by range and
//! by id only within their tenant and base.

use std::sync::Arc;

use journal::open_stores;
use test_support::PgServer;
use tool_core::knowledge::{Chunk, KnowledgeStore, NewBase, NewSource};
use tool_core::storage::StorageError;

fn chunk(ordinal: u32, first: u32, text: &str) -> Chunk {
    let lines = text.lines().count() as u32;
    Chunk {
        ordinal,
        heading: format!("Doc > Part {ordinal}"),
        first_line: first,
        last_line: first + lines - 1,
        text: text.into(),
    }
}

fn source(path: &str, hash: &str, texts: &[&str]) -> NewSource {
    let mut first = 1;
    let mut chunks = Vec::new();
    for (ordinal, text) in texts.iter().enumerate() {
        chunks.push(chunk(ordinal as u32, first, text));
        first += text.lines().count() as u32;
    }
    NewSource {
        path: path.into(),
        hash: hash.into(),
        kind: "markdown".into(),
        chunks,
        embeddings: Vec::new(),
    }
}

fn new_base(tenant: &str, person: Option<&str>, name: &str) -> NewBase {
    NewBase {
        tenant: tenant.into(),
        person: person.map(Into::into),
        name: name.into(),
        roots: vec!["/docs".into()],
        embedding_model: None,
    }
}

async fn bases_sources_and_isolation(store: Arc<dyn KnowledgeStore>) {
    let ada = store.put_base(new_base("acme", Some("ada"), "docs")).await.unwrap();
    assert_eq!((ada.sources, ada.chunks, ada.version), (0, 0, 0));
    let again = store
        .put_base(NewBase { roots: vec!["/elsewhere".into()], ..new_base("acme", Some("ada"), "docs") })
        .await
        .unwrap();
    assert_eq!(again.id, ada.id, "the same person's name is the same base");
    assert_eq!(again.roots, ["/elsewhere"]);
    let bob = store.put_base(new_base("acme", Some("bob"), "docs")).await.unwrap();
    assert_ne!(bob.id, ada.id);
    let team = store.put_base(new_base("acme", None, "handbook")).await.unwrap();
    let other = store.put_base(new_base("globex", Some("ada"), "docs")).await.unwrap();

    let names = |bases: Vec<tool_core::knowledge::KnowledgeBase>| {
        bases.into_iter().map(|b| format!("{}:{}", b.name, b.person.unwrap_or_default())).collect::<Vec<_>>()
    };
    assert_eq!(names(store.list_bases("acme", Some("ada")).await.unwrap()), ["docs:ada", "handbook:"]);
    assert_eq!(names(store.list_bases("acme", None).await.unwrap()), ["docs:ada", "docs:bob", "handbook:"]);
    assert_eq!(names(store.list_bases("globex", Some("bob")).await.unwrap()), Vec::<String>::new());

    store
        .apply_sources(
            "acme",
            &ada.id,
            vec![
                source("/docs/a.md", "h1", &["# A\nalpha\n", "beta\ngamma\n"]),
                NewSource { embeddings: vec![vec![0.6, 0.8]], ..source("/docs/b.md", "h2", &["bee\n"]) },
            ],
            vec![],
        )
        .await
        .unwrap();
    let listed = store.list_bases("acme", Some("ada")).await.unwrap();
    let now = listed.iter().find(|b| b.id == ada.id).unwrap();
    assert_eq!((now.sources, now.chunks, now.version), (2, 3, 1));
    assert_eq!(now.bytes, ("# A\nalpha\n".len() + "beta\ngamma\n".len() + "bee\n".len()) as u64);
    let mut hashes = store.source_hashes("acme", &ada.id).await.unwrap();
    hashes.sort_by(|a, b| a.path.cmp(&b.path));
    assert_eq!(
        hashes.iter().map(|s| (s.path.as_str(), s.hash.as_str())).collect::<Vec<_>>(),
        [("/docs/a.md", "h1"), ("/docs/b.md", "h2")]
    );

    // Lines 3-3 are in the second chunk only; reads never cross into another base or tenant.
    let read = store.read_chunks("acme", &ada.id, "/docs/a.md", 3, 3).await.unwrap();
    assert_eq!(read.len(), 1);
    assert_eq!(read[0].text, "beta\ngamma\n");
    assert!(store.read_chunks("acme", &bob.id, "/docs/a.md", 1, 100).await.unwrap().is_empty());
    assert!(store.read_chunks("globex", &ada.id, "/docs/a.md", 1, 100).await.unwrap().is_empty());

    let all = store.base_chunks("acme", &ada.id).await.unwrap();
    assert_eq!(all.len(), 3);
    let vectors: Vec<Option<Vec<f32>>> = all.iter().map(|c| c.embedding.clone()).collect();
    assert_eq!(vectors, [None, None, Some(vec![0.6, 0.8])], "vectors kept with their chunks");
    let ids: Vec<i64> = all.iter().map(|c| c.id).collect();
    assert_eq!(store.chunks_by_id("acme", &ada.id, &ids).await.unwrap().len(), 3);
    assert!(store.chunks_by_id("acme", &bob.id, &ids).await.unwrap().is_empty(), "ids of another base");
    assert!(store.chunks_by_id("globex", &ada.id, &ids).await.unwrap().is_empty(), "ids of another tenant");

    // A changed source replaces its chunks; a removed one goes; the version moves.
    store
        .apply_sources(
            "acme",
            &ada.id,
            vec![source("/docs/a.md", "h3", &["# A\nnew\n"])],
            vec!["/docs/b.md".into()],
        )
        .await
        .unwrap();
    let texts: Vec<String> =
        store.base_chunks("acme", &ada.id).await.unwrap().into_iter().map(|c| c.chunk.text).collect();
    assert_eq!(texts, ["# A\nnew\n"]);
    let now =
        store.list_bases("acme", Some("ada")).await.unwrap().into_iter().find(|b| b.id == ada.id).unwrap();
    assert_eq!((now.sources, now.chunks, now.version), (1, 1, 2));
    // An empty step still marks a sync.
    store.apply_sources("acme", &ada.id, vec![], vec![]).await.unwrap();
    let now =
        store.list_bases("acme", Some("ada")).await.unwrap().into_iter().find(|b| b.id == ada.id).unwrap();
    assert_eq!(now.version, 3);

    // Removing a base removes what it holds; applying to it then fails.
    assert!(store.remove_base("acme", &ada.id).await.unwrap());
    assert!(!store.remove_base("acme", &ada.id).await.unwrap());
    assert!(store.base_chunks("acme", &ada.id).await.unwrap().is_empty());
    assert!(matches!(
        store.apply_sources("acme", &ada.id, vec![source("/docs/c.md", "h", &["c\n"])], vec![]).await,
        Err(StorageError::NotFound(_))
    ));
    assert!(
        store.base_chunks("acme", &ada.id).await.unwrap().is_empty(),
        "nothing stored for a removed base"
    );
    assert!(!store.remove_base("globex", &team.id).await.unwrap(), "another tenant's base cannot be removed");
    assert_eq!(names(store.list_bases("globex", Some("ada")).await.unwrap()), ["docs:ada"]);
    let _ = other;
}

mod sqlite {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bases_sources_and_isolation() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("journal.db").display());
        super::bases_sources_and_isolation(open_stores(&url).await.unwrap().knowledge).await;
    }
}

mod postgres {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bases_sources_and_isolation() {
        let server = PgServer::start();
        let url = server.database_url(&format!("knowledge_{}", std::process::id()));
        super::bases_sources_and_isolation(open_stores(&url).await.unwrap().knowledge).await;
    }
}
