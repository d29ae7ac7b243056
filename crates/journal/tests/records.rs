//! Records (`tool_core::storage::RecordStore`) on both databases: each case runs on SQLite (a
//! file in a temp dir) and on a real PostgreSQL server.

use std::sync::Arc;

use journal::open_stores;
use serde_json::json;
use test_support::PgServer;
use tool_core::storage::{
    NewRecord, Owner, ProjectScope, RecordPatch, RecordQuery, RecordStore, StorageError,
};

fn owner(tenant: &str, person: &str) -> Owner {
    Owner { tenant: tenant.into(), person: person.into() }
}

fn record(owner: &Owner, project: Option<&str>, tag: &str, title: &str, body: &str) -> NewRecord {
    NewRecord {
        collection: "memory".into(),
        owner: owner.clone(),
        project: project.map(str::to_owned),
        tag: tag.into(),
        title: title.into(),
        body: body.into(),
        metadata: json!({"source": "test"}),
    }
}

fn query(owner: &Owner, project: ProjectScope, text: Option<&str>) -> RecordQuery {
    RecordQuery {
        collection: "memory".into(),
        owner: owner.clone(),
        project,
        tag: None,
        text: text.map(str::to_owned),
        limit: 10,
    }
}

async fn round_trip_isolation_and_search(store: Arc<dyn RecordStore>) {
    let alice = owner("acme", "alice");
    let bob = owner("acme", "bob");
    let other_tenant = owner("globex", "alice");
    let tabs = store
        .insert_record(
            record(&alice, None, "preferences", "Indentation", "Prefers tabs over spaces in Rust code"),
            100,
        )
        .await
        .unwrap();
    assert!(tabs.id.starts_with("rec_"));
    assert_eq!(tabs.metadata["source"], "test");
    store
        .insert_record(
            record(
                &alice,
                Some("/work/site"),
                "experiences",
                "Deploys",
                "The site deploys with make publish",
            ),
            100,
        )
        .await
        .unwrap();
    store
        .insert_record(record(&alice, Some("/work/other"), "notes", "Other", "Unrelated project notes"), 100)
        .await
        .unwrap();
    store
        .insert_record(record(&bob, None, "preferences", "Indentation", "Bob prefers spaces"), 100)
        .await
        .unwrap();

    // Search is stemmed ("preferring" finds "prefers") and stays within the person.
    let hits = store.find_records(query(&alice, ProjectScope::Any, Some("preferring tabs"))).await.unwrap();
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!(hits[0].record.id, tabs.id);
    assert!(hits[0].score > 0.0);
    // Another person and another tenant see none of alice's.
    for stranger in [&bob, &other_tenant] {
        let found = store.find_records(query(stranger, ProjectScope::Any, Some("tabs"))).await.unwrap();
        assert!(found.iter().all(|h| h.record.owner == *stranger), "{found:?}");
        assert!(store.get_record(stranger, "memory", &tabs.id).await.unwrap().is_none());
        assert!(!store.remove_record(stranger, "memory", &tabs.id).await.unwrap());
        let patch = RecordPatch { body: Some("hijacked".into()), ..RecordPatch::default() };
        assert!(matches!(
            store.update_record(stranger, "memory", &tabs.id, patch).await,
            Err(StorageError::NotFound(_))
        ));
    }
    // Project scope: global records and this project's, not another project's.
    let listed =
        store.find_records(query(&alice, ProjectScope::With("/work/site".into()), None)).await.unwrap();
    let titles: Vec<&str> = listed.iter().map(|h| h.record.title.as_str()).collect();
    assert_eq!(titles.len(), 2, "{titles:?}");
    assert!(titles.contains(&"Deploys") && titles.contains(&"Indentation"));
    let global = store.find_records(query(&alice, ProjectScope::None, None)).await.unwrap();
    assert_eq!(global.len(), 1);
    let mut by_tag = query(&alice, ProjectScope::Any, None);
    by_tag.tag = Some("notes".into());
    assert_eq!(store.find_records(by_tag).await.unwrap().len(), 1);
    // Query syntax of either engine is just text.
    for junk in ["\"unbalanced", "tabs OR", "NEAR(a b)", "*", "a:b", "-tabs", "tabs & | !"] {
        store.find_records(query(&alice, ProjectScope::Any, Some(junk))).await.unwrap();
    }

    let patch =
        RecordPatch { body: Some("Prefers tabs, width 4".into()), tag: None, title: None, metadata: None };
    let updated = store.update_record(&alice, "memory", &tabs.id, patch).await.unwrap();
    assert_eq!(updated.body, "Prefers tabs, width 4");
    assert_eq!(updated.tag, "preferences");
    assert!(updated.updated_at >= tabs.updated_at);
    let found = store.find_records(query(&alice, ProjectScope::Any, Some("width"))).await.unwrap();
    assert_eq!(found.len(), 1, "the index follows an update");
    assert!(store.remove_record(&alice, "memory", &tabs.id).await.unwrap());
    assert!(store.find_records(query(&alice, ProjectScope::Any, Some("tabs"))).await.unwrap().is_empty());
}

async fn the_limit_holds_under_concurrency(store: Arc<dyn RecordStore>) {
    let carol = owner("acme", "carol");
    let attempts = (0..20).map(|i| {
        let store = store.clone();
        let carol = carol.clone();
        tokio::spawn(async move {
            store.insert_record(record(&carol, None, "notes", &format!("n{i}"), "x"), 5).await
        })
    });
    let results = futures::future::join_all(attempts).await;
    let stored = results.iter().filter(|r| matches!(r, Ok(Ok(_)))).count();
    let full = results.iter().filter(|r| matches!(r, Ok(Err(StorageError::Full { limit: 5 })))).count();
    assert_eq!((stored, full), (5, 15));
    let mut all = query(&carol, ProjectScope::Any, None);
    all.limit = 100;
    assert_eq!(store.find_records(all).await.unwrap().len(), 5);
}

async fn vectors_are_kept_per_model(store: Arc<dyn RecordStore>) {
    let ada = Owner { tenant: "acme".into(), person: "ada".into() };
    let new = |title: &str| NewRecord {
        collection: "memory".into(),
        owner: ada.clone(),
        project: None,
        tag: "notes".into(),
        title: title.into(),
        body: title.into(),
        metadata: json!({}),
    };
    let one = store.insert_record(new("one"), 10).await.unwrap();
    let two = store.insert_record(new("two"), 10).await.unwrap();
    store.set_record_vector(&ada, "memory", &one.id, Some(("m1", vec![1.0, 0.0]))).await.unwrap();
    store.set_record_vector(&ada, "memory", &two.id, Some(("m2", vec![0.0, 1.0]))).await.unwrap();
    let query = RecordQuery {
        collection: "memory".into(),
        owner: ada.clone(),
        project: ProjectScope::Any,
        tag: None,
        text: None,
        limit: 10,
    };
    assert_eq!(store.record_vectors(&query, "m1").await.unwrap(), [(one.id.clone(), vec![1.0, 0.0])]);
    let bob = RecordQuery { owner: Owner { tenant: "acme".into(), person: "bob".into() }, ..query.clone() };
    assert!(store.record_vectors(&bob, "m1").await.unwrap().is_empty(), "another person's");
    store.set_record_vector(&ada, "memory", &one.id, None).await.unwrap();
    assert!(store.record_vectors(&query, "m1").await.unwrap().is_empty(), "cleared");
}

mod sqlite {
    use super::*;

    async fn store() -> (Arc<dyn RecordStore>, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("journal.db").display());
        (open_stores(&url).await.unwrap().records, dir)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn round_trip_isolation_and_search() {
        let (store, _dir) = store().await;
        super::round_trip_isolation_and_search(store).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_limit_holds_under_concurrency() {
        let (store, _dir) = store().await;
        super::the_limit_holds_under_concurrency(store).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn vectors_are_kept_per_model() {
        let (store, _dir) = store().await;
        super::vectors_are_kept_per_model(store).await;
    }
}

mod postgres {
    use super::*;

    async fn store(server: &PgServer, name: &str) -> Arc<dyn RecordStore> {
        open_stores(&server.database_url(&format!("{name}_{}", std::process::id()))).await.unwrap().records
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn round_trip_isolation_and_search() {
        let server = PgServer::start();
        super::round_trip_isolation_and_search(store(&server, "records_a").await).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_limit_holds_under_concurrency() {
        let server = PgServer::start();
        super::the_limit_holds_under_concurrency(store(&server, "records_b").await).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn vectors_are_kept_per_model() {
        let server = PgServer::start();
        super::vectors_are_kept_per_model(store(&server, "records_c").await).await;
    }
}
