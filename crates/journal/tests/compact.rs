//! A stored result keeps its content once: the state's copy is a reference.

mod common;

use journal::{Journal, SqliteJournal};
use serde_json::json;
use sqlx::Connection as _;

#[tokio::test]
async fn a_read_is_stored_with_its_text_once() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("journal.db").display());
    let journal = SqliteJournal::open(&url).await.unwrap();
    let text: String = (1..=20).map(|i| format!("line {i} of a file that a model asked to read\n")).collect();
    let result = json!({
        "content": format!("{text}\n[Showing lines 1-20 of 200. Use offset=21 to continue.]"),
        "state": {"path": "/w/a.txt", "content": text, "start_line": 1, "end_line": 20, "total_lines": 200},
    });
    let attempt = common::read_call("c", json!({"path": "a.txt", "limit": 20}));
    let key = journal.propose(&attempt).await.unwrap().key;
    let settlement = common::executed(result.clone());
    assert!(journal.settle("t", &key, &settlement).await.unwrap());
    // Read back whole.
    assert_eq!(journal.get("t", &key).await.unwrap().unwrap().result, Some(result.clone()));
    // Stored once.
    let mut raw = sqlx::SqliteConnection::connect(&url).await.unwrap();
    let (kind, stored): (String, i64) =
        sqlx::query_as("SELECT typeof(result), length(result) FROM tool_call_attempts")
            .fetch_one(&mut raw)
            .await
            .unwrap();
    let whole = i64::try_from(result.to_string().len()).unwrap();
    let once = i64::try_from(text.len()).unwrap();
    // Once, and compressed.
    assert_eq!(kind, "blob");
    assert!(stored < once / 2, "stored {stored} bytes for {once} bytes of text ({whole} uncompacted)");
}

#[tokio::test]
async fn a_short_result_stays_readable_text() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("journal.db").display());
    let journal = SqliteJournal::open(&url).await.unwrap();
    let result = json!({"content": "Todo list updated: 0 items.", "state": {"todos": []}});
    let key = journal.propose(&common::read_call("c", json!({}))).await.unwrap().key;
    assert!(journal.settle("t", &key, &common::executed(result.clone())).await.unwrap());
    assert_eq!(journal.get("t", &key).await.unwrap().unwrap().result, Some(result.clone()));
    // Plain JSON that `sqlite3` and its JSON functions read as they are.
    let mut raw = sqlx::SqliteConnection::connect(&url).await.unwrap();
    let content: String =
        sqlx::query_scalar("SELECT json_extract(result, '$.content') FROM tool_call_attempts")
            .fetch_one(&mut raw)
            .await
            .unwrap();
    assert_eq!(content, "Todo list updated: 0 items.");
}
