//! The journal's one test suite, run against both stores: every case in `cases` runs as
//! `sqlite::<case>` (a file database in a temp dir) and `postgres::<case>` (a fresh database on a
//! real PostgreSQL server).
//!
//! Postgres servers are shared by the tests that run at the same time and stopped when the last
//! of them ends: `postgres_store` hands out an `Arc<PgServer>` from a `Weak` slot, so a test
//! binary starts one server for a run of Postgres tests, and the server is always stopped
//! (statics never drop, so a server kept in a plain `static` would outlive the run). Under
//! nextest, where each test is its own process, each Postgres test starts its own server.
//!
//! The crash test re-executes this binary (`crash_child`) as a real child process and kills it
//! between propose and settle.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use journal::{
    Attempt, AttemptFilter, AttemptStatus, InstanceInfo, Journal, JournalError, NewAttempt, PendingApproval,
    ReconcilePolicy, RememberedDecision, SessionRecord, Settlement, current_instance, host_name,
    new_instance_id,
};
use serde_json::{Value, json};
use test_support::PgServer;

/// A journal and what must live as long as it (a temp dir, a server).
struct Store {
    journal: Arc<dyn Journal>,
    _keep: Box<dyn std::any::Any + Send + Sync>,
}

async fn sqlite_store() -> Store {
    let dir = tempfile::tempdir().expect("a temp dir");
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("journal.db").display());
    Store { journal: journal::open(&url).await.expect("open the SQLite journal"), _keep: Box::new(dir) }
}

fn pg_server() -> Arc<PgServer> {
    static SHARED: Mutex<Weak<PgServer>> = Mutex::new(Weak::new());
    let mut shared = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(server) = shared.upgrade() {
        return server;
    }
    let server = Arc::new(PgServer::start());
    *shared = Arc::downgrade(&server);
    server
}

async fn postgres_store() -> Store {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let server = pg_server();
    let name = format!("journal_{}_{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    let url = server.database_url(&name);
    Store { journal: journal::open(&url).await.expect("open the Postgres journal"), _keep: Box::new(server) }
}

macro_rules! suite {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let store = super::sqlite_store().await;
                    super::cases::$case(&store.journal).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let store = super::postgres_store().await;
                    super::cases::$case(&store.journal).await;
                }
            )*
        }
    };
}

suite!(
    round_trip_with_every_field,
    query_filters_newest_first,
    propose_twice_leaves_the_row,
    tenants_with_the_same_ids_cannot_touch_each_other,
    late_settle_changes_nothing,
    upsert_settled_paths,
    confirm_only_from_executed,
    undone_only_from_executed_or_confirmed,
    decisions_are_recorded_before_the_call_settles,
    sessions_list_instances_show_and_console_sessions_expire,
    control_characters_are_stripped,
    approvals,
    remembered_decisions,
    sessions,
    reconcile_abandons_dead_instances_only,
    concurrent_calls_all_settle,
    a_failing_write_fails_alone,
    pruning_takes_only_what_is_settled_and_old,
    results_expire_before_their_rows,
);

fn attempt(tenant: &str, message_id: Option<&str>, call_id: &str) -> NewAttempt {
    NewAttempt {
        tenant: tenant.into(),
        call_id: call_id.into(),
        message_id: message_id.map(Into::into),
        session_id: "session-1".into(),
        parent_call_id: None,
        user_id: None,
        agent_id: None,
        tool: "local-system".into(),
        api: "readFile".into(),
        function_name: "local-system__readFile".into(),
        arguments: json!({"path": "src/main.rs"}),
        tier: None,
        instance_id: "instance-test".into(),
    }
}

fn settled(status: AttemptStatus, result: Value) -> Settlement {
    Settlement {
        status,
        result: Some(result),
        error_kind: None,
        error: None,
        decision: Some("policy".into()),
        decided_by: Some("policy".into()),
        duration_ms: Some(12),
        exit_status: None,
    }
}

fn keys(rows: &[Attempt]) -> Vec<&str> {
    rows.iter().map(|row| row.key.as_str()).collect()
}

mod cases {
    use super::*;

    pub async fn pruning_takes_only_what_is_settled_and_old(j: &Arc<dyn Journal>) {
        // Five settled calls and one still open.
        for n in 0..5 {
            let key = j.propose(&attempt("tenant-a", Some("m"), &format!("done{n}"))).await.unwrap().key;
            assert!(
                j.settle("tenant-a", &key, &settled(AttemptStatus::Executed, json!({"n": n}))).await.unwrap()
            );
        }
        j.propose(&attempt("tenant-b", Some("m"), "open")).await.unwrap();
        // A decided approval and a pending one; an ended session and an active one; a remembered
        // decision.
        j.insert_approval(&approval("tenant-a", "decided", "s")).await.unwrap();
        assert!(
            j.decide_approval("tenant-a", "decided", "approved", &json!({"kind": "allow_once"}), None)
                .await
                .unwrap()
        );
        j.insert_approval(&approval("tenant-a", "waiting", "s")).await.unwrap();
        for id in ["ended", "active"] {
            let session = SessionRecord {
                id: id.into(),
                tenant: "tenant-a".into(),
                user_id: None,
                config: json!({}),
                status: "active".into(),
                created_at: 1,
                ended_at: None,
            };
            j.put_session(&session).await.unwrap();
        }
        assert!(j.end_session("tenant-a", "ended").await.unwrap());
        j.remember(&remembered("tenant-a", "always", "p")).await.unwrap();

        // A cutoff before all of it prunes nothing.
        assert_eq!(j.prune(1, 100).await.unwrap(), 0);
        // Past all of it, in batches of two: everything settled, decided and ended goes.
        let later = journal_now() + 60_000;
        let mut batches = Vec::new();
        loop {
            let deleted = j.prune(later, 2).await.unwrap();
            batches.push(deleted);
            if deleted < 2 {
                break;
            }
        }
        assert_eq!(batches.iter().sum::<u64>(), 7, "5 calls, 1 approval, 1 session: {batches:?}");
        assert!(batches.iter().all(|&b| b <= 2), "{batches:?}");
        let all = AttemptFilter { limit: Some(100), ..AttemptFilter::default() };
        assert!(j.query("tenant-a", &all).await.unwrap().is_empty());
        let open = j.query("tenant-b", &all).await.unwrap();
        assert_eq!(
            (open.len(), open[0].status),
            (1, AttemptStatus::Proposed),
            "an open call is never pruned"
        );
        assert!(j.get_approval("tenant-a", "decided").await.unwrap().is_none());
        assert_eq!(j.get_approval("tenant-a", "waiting").await.unwrap().unwrap().status, "pending");
        assert!(j.get_session("tenant-a", "ended").await.unwrap().is_none());
        assert!(j.get_session("tenant-a", "active").await.unwrap().is_some());
        assert_eq!(j.remembered("tenant-a", None).await.unwrap().len(), 1, "remembered decisions stay");
        // The helper does the same in one call.
        let key = j.propose(&attempt("tenant-a", Some("m2"), "late")).await.unwrap().key;
        j.settle("tenant-a", &key, &settled(AttemptStatus::Failed, json!({}))).await.unwrap();
        let pruned = journal::prune_all(j.as_ref(), later, 1, Duration::from_millis(1)).await.unwrap();
        assert_eq!(pruned, 1);
    }

    pub async fn results_expire_before_their_rows(j: &Arc<dyn Journal>) {
        let long = "a line of a long result\n".repeat(200);
        for call in ["one", "two", "three"] {
            let key = j.propose(&attempt("tenant-a", Some("m"), call)).await.unwrap().key;
            let result = json!({"content": long, "state": {"text": long, "lines": 200}});
            j.settle("tenant-a", &key, &settled(AttemptStatus::Executed, result)).await.unwrap();
        }
        // A short result too (SQLite keeps it as text, the long ones compressed: one batch cuts both).
        let key = j.propose(&attempt("tenant-a", Some("m"), "short")).await.unwrap().key;
        let short = json!({"content": "ok", "state": {"n": 1}});
        j.settle("tenant-a", &key, &settled(AttemptStatus::Executed, short)).await.unwrap();
        j.propose(&attempt("tenant-a", Some("m"), "open")).await.unwrap();
        let later = journal_now() + 60_000;
        // Outside the window nothing is cut.
        assert_eq!(j.expire_results(0, 1, 40, 100).await.unwrap(), 0);
        // In batches of two: every settled call's result, never an open call's.
        let cut = journal::expire_all(j.as_ref(), 0, later, 40, 2, Duration::from_millis(1)).await.unwrap();
        assert_eq!(cut, 4);
        let short = j.get("tenant-a", "m:short").await.unwrap().unwrap().result.unwrap();
        assert_eq!(short, json!({"content": "ok", "expired": true}));
        let row = j.get("tenant-a", "m:one").await.unwrap().unwrap();
        assert_eq!(row.status, AttemptStatus::Executed, "the row stays");
        assert_eq!(row.arguments, attempt("tenant-a", Some("m"), "one").arguments, "and its call");
        let result = row.result.unwrap();
        assert_eq!(result["expired"], true, "{result}");
        assert_eq!(result["content"].as_str().unwrap().chars().count(), 40, "{result}");
        assert!(long.starts_with(result["content"].as_str().unwrap()));
        assert!(result.get("state").is_none(), "the state's copy goes too: {result}");
        assert_eq!(j.get("tenant-a", "m:open").await.unwrap().unwrap().status, AttemptStatus::Proposed);
        // What is cut is cut once.
        assert_eq!(j.expire_results(0, later, 40, 100).await.unwrap(), 0);
    }

    fn journal_now() -> i64 {
        i64::try_from(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis())
            .unwrap()
    }

    pub async fn round_trip_with_every_field(j: &Arc<dyn Journal>) {
        let new = NewAttempt {
            tenant: "tenant-a".into(),
            call_id: "call_1".into(),
            message_id: Some("msg_1".into()),
            session_id: "session-9".into(),
            parent_call_id: Some("call_0".into()),
            user_id: Some("user-7".into()),
            agent_id: Some("agent-3".into()),
            tool: "local-system".into(),
            api: "runCommand".into(),
            function_name: "local-system__runCommand".into(),
            arguments: json!({"command": "cargo test", "timeout": 60000, "env": {"A": [1, 2.5, null, true]}}),
            tier: Some("exec".into()),
            instance_id: "instance-1".into(),
        };
        let before = now_ms();
        let proposed = j.propose(&new).await.unwrap();
        let after = now_ms();
        assert_eq!(proposed.key, "msg_1:call_1");
        assert!(proposed.created);

        let row = j.get("tenant-a", &proposed.key).await.unwrap().expect("the proposed row");
        assert!(
            (before..=after).contains(&row.attempted_at),
            "attempted_at {} not in {before}..={after}",
            row.attempted_at
        );
        let mut expected = Attempt {
            tenant: new.tenant.clone(),
            key: proposed.key.clone(),
            call_id: new.call_id.clone(),
            message_id: new.message_id.clone(),
            session_id: new.session_id.clone(),
            parent_call_id: new.parent_call_id.clone(),
            user_id: new.user_id.clone(),
            agent_id: new.agent_id.clone(),
            tool: new.tool.clone(),
            api: new.api.clone(),
            function_name: new.function_name.clone(),
            arguments: new.arguments.clone(),
            tier: new.tier.clone(),
            instance_id: new.instance_id.clone(),
            status: AttemptStatus::Proposed,
            result: None,
            error_kind: None,
            error: None,
            decision: None,
            decided_by: None,
            duration_ms: None,
            exit_status: None,
            attempted_at: row.attempted_at,
            updated_at: row.attempted_at,
        };
        assert_eq!(row, expected);

        let settlement = Settlement {
            status: AttemptStatus::Failed,
            result: Some(json!({"content": "exit 101", "state": {"stdout": "", "stderr": "boom"}})),
            error_kind: Some("exit_status".into()),
            error: Some("the command exited with 101".into()),
            decision: Some("allow_once".into()),
            decided_by: Some("user-7".into()),
            duration_ms: Some(1234),
            exit_status: Some(101),
        };
        assert!(j.settle("tenant-a", &proposed.key, &settlement).await.unwrap());
        let row = j.get("tenant-a", &proposed.key).await.unwrap().expect("the settled row");
        assert!(row.updated_at >= row.attempted_at);
        expected.status = AttemptStatus::Failed;
        expected.result = settlement.result.clone();
        expected.error_kind = settlement.error_kind.clone();
        expected.error = settlement.error.clone();
        expected.decision = settlement.decision.clone();
        expected.decided_by = settlement.decided_by.clone();
        expected.duration_ms = settlement.duration_ms;
        expected.exit_status = settlement.exit_status;
        expected.updated_at = row.updated_at;
        assert_eq!(row, expected);

        // A bare call id is its own key.
        let bare = j.propose(&attempt("tenant-a", None, "call_bare")).await.unwrap();
        assert_eq!(bare.key, "call_bare");
        assert_eq!(j.get("tenant-a", "call_bare").await.unwrap().unwrap().message_id, None);
        assert_eq!(j.get("tenant-a", "missing").await.unwrap(), None);
    }

    pub async fn query_filters_newest_first(j: &Arc<dyn Journal>) {
        let mut times = Vec::new();
        for (call, session, tool) in
            [("r1", "s1", "fs"), ("r2", "s1", "web"), ("r3", "s2", "fs"), ("r4", "s2", "web")]
        {
            let mut new = attempt("q", None, call);
            new.session_id = session.into();
            new.tool = tool.into();
            assert!(j.propose(&new).await.unwrap().created);
            times.push(j.get("q", call).await.unwrap().unwrap().attempted_at);
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
        // Another tenant's row in the same session and tool is never listed.
        let mut other = attempt("other", None, "r5");
        other.session_id = "s1".into();
        other.tool = "fs".into();
        j.propose(&other).await.unwrap();
        assert!(j.settle("q", "r2", &settled(AttemptStatus::Executed, json!("ok"))).await.unwrap());
        assert!(j.settle("q", "r4", &settled(AttemptStatus::Failed, json!("no"))).await.unwrap());

        let query = |filter: AttemptFilter| {
            let j = Arc::clone(j);
            async move {
                keys(&j.query("q", &filter).await.unwrap()).into_iter().map(str::to_owned).collect::<Vec<_>>()
            }
        };
        assert_eq!(query(AttemptFilter::default()).await, ["r4", "r3", "r2", "r1"]);
        assert_eq!(
            query(AttemptFilter { session_id: Some("s1".into()), ..Default::default() }).await,
            ["r2", "r1"]
        );
        assert_eq!(
            query(AttemptFilter { status: Some(AttemptStatus::Executed), ..Default::default() }).await,
            ["r2"]
        );
        assert_eq!(
            query(AttemptFilter { status: Some(AttemptStatus::Proposed), ..Default::default() }).await,
            ["r3", "r1"]
        );
        assert_eq!(
            query(AttemptFilter { tool: Some("fs".into()), ..Default::default() }).await,
            ["r3", "r1"]
        );
        assert_eq!(
            query(AttemptFilter { since: Some(times[1]), ..Default::default() }).await,
            ["r4", "r3", "r2"]
        );
        assert_eq!(query(AttemptFilter { until: Some(times[2]), ..Default::default() }).await, ["r2", "r1"]);
        // Pages: the rows after the last one of the page before, by time then key.
        assert_eq!(query(AttemptFilter { limit: Some(2), ..Default::default() }).await, ["r4", "r3"]);
        assert_eq!(
            query(AttemptFilter {
                limit: Some(2),
                after: Some((times[2], "r3".into())),
                ..Default::default()
            })
            .await,
            ["r2", "r1"]
        );
        assert!(
            query(AttemptFilter { after: Some((times[0], "r1".into())), ..Default::default() })
                .await
                .is_empty()
        );
        let mut decided = settled(AttemptStatus::Executed, json!(1));
        decided.decision = Some("allow_once".into());
        assert!(j.settle("q", "r3", &decided).await.unwrap());
        assert_eq!(
            query(AttemptFilter { decision: Some("allow_once".into()), ..Default::default() }).await,
            ["r3"]
        );
        assert_eq!(
            query(AttemptFilter { since: Some(times[1]), until: Some(times[3]), ..Default::default() }).await,
            ["r3", "r2"]
        );
        assert_eq!(query(AttemptFilter { limit: Some(2), ..Default::default() }).await, ["r4", "r3"]);
        assert_eq!(query(AttemptFilter { limit: Some(0), ..Default::default() }).await, Vec::<String>::new());
        assert_eq!(
            query(AttemptFilter {
                session_id: Some("s2".into()),
                tool: Some("web".into()),
                ..Default::default()
            })
            .await,
            ["r4"]
        );
        let rows = j.query("q", &AttemptFilter::default()).await.unwrap();
        assert!(rows.iter().all(|row| row.tenant == "q"));

        // Rows proposed back to back (maybe in the same millisecond) still come newest first.
        for call in ["t1", "t2", "t3"] {
            j.propose(&attempt("ties", None, call)).await.unwrap();
        }
        assert_eq!(keys(&j.query("ties", &AttemptFilter::default()).await.unwrap()), ["t3", "t2", "t1"]);
    }

    pub async fn propose_twice_leaves_the_row(j: &Arc<dyn Journal>) {
        let first = attempt("t", Some("m"), "c");
        assert!(j.propose(&first).await.unwrap().created);
        let before = j.get("t", "m:c").await.unwrap().unwrap();
        let mut second = first.clone();
        second.arguments = json!({"path": "/etc/shadow"});
        second.tool = "other".into();
        second.instance_id = "instance-2".into();
        let again = j.propose(&second).await.unwrap();
        assert_eq!(again.key, "m:c");
        assert!(!again.created);
        assert_eq!(j.get("t", "m:c").await.unwrap().unwrap(), before);
        // Also after it settled.
        assert!(j.settle("t", "m:c", &settled(AttemptStatus::Executed, json!(1))).await.unwrap());
        let settled_row = j.get("t", "m:c").await.unwrap().unwrap();
        assert!(!j.propose(&second).await.unwrap().created);
        assert_eq!(j.get("t", "m:c").await.unwrap().unwrap(), settled_row);
    }

    pub async fn tenants_with_the_same_ids_cannot_touch_each_other(j: &Arc<dyn Journal>) {
        let mut a = attempt("tenant-a", Some("msg"), "call");
        a.arguments = json!({"who": "a"});
        let mut b = attempt("tenant-b", Some("msg"), "call");
        b.arguments = json!({"who": "b"});
        let pa = j.propose(&a).await.unwrap();
        let pb = j.propose(&b).await.unwrap();
        assert_eq!(pa.key, pb.key);
        assert!(pa.created && pb.created, "each tenant gets its own row for the same ids");

        // A settles "its" key: only its own row moves.
        assert!(j.settle("tenant-a", &pa.key, &settled(AttemptStatus::Failed, json!("a"))).await.unwrap());
        let row_b = j.get("tenant-b", &pb.key).await.unwrap().unwrap();
        assert_eq!(row_b.status, AttemptStatus::Proposed);
        assert_eq!(row_b.arguments, json!({"who": "b"}));
        assert_eq!(j.get("tenant-a", &pa.key).await.unwrap().unwrap().status, AttemptStatus::Failed);

        // A key only B has: A can neither settle, confirm nor read it.
        let only_b = j.propose(&attempt("tenant-b", Some("msg"), "only-b")).await.unwrap();
        assert!(
            !j.settle("tenant-a", &only_b.key, &settled(AttemptStatus::Executed, json!("x"))).await.unwrap()
        );
        assert!(!j.confirm("tenant-a", &only_b.key).await.unwrap());
        assert_eq!(j.get("tenant-a", &only_b.key).await.unwrap(), None);
        assert_eq!(j.get("tenant-b", &only_b.key).await.unwrap().unwrap().status, AttemptStatus::Proposed);

        // B settles its own row; A's row keeps A's settlement.
        assert!(j.settle("tenant-b", &pb.key, &settled(AttemptStatus::Executed, json!("b"))).await.unwrap());
        assert!(j.confirm("tenant-b", &pb.key).await.unwrap());
        let row_a = j.get("tenant-a", &pa.key).await.unwrap().unwrap();
        assert_eq!(row_a.status, AttemptStatus::Failed);
        assert_eq!(row_a.result, Some(json!("a")));
        assert_eq!(row_a.arguments, json!({"who": "a"}));

        let listed = j.query("tenant-a", &AttemptFilter::default()).await.unwrap();
        assert_eq!(listed.len(), 1);
        assert!(listed.iter().all(|row| row.tenant == "tenant-a"));
        let filtered = j
            .query("tenant-a", &AttemptFilter { session_id: Some("session-1".into()), ..Default::default() })
            .await
            .unwrap();
        assert!(filtered.iter().all(|row| row.tenant == "tenant-a"));
        assert_eq!(j.query("tenant-b", &AttemptFilter::default()).await.unwrap().len(), 2);
    }

    pub async fn late_settle_changes_nothing(j: &Arc<dyn Journal>) {
        j.propose(&attempt("t", Some("m"), "c")).await.unwrap();
        assert!(
            j.settle("t", "m:c", &settled(AttemptStatus::Executed, json!({"content": "first"})))
                .await
                .unwrap()
        );
        let first = j.get("t", "m:c").await.unwrap().unwrap();
        let mut late = settled(AttemptStatus::Failed, json!({"content": "late"}));
        late.error_kind = Some("timeout".into());
        assert!(!j.settle("t", "m:c", &late).await.unwrap(), "a late settle reports that nothing moved");
        assert!(
            !j.settle("t", "m:c", &settled(AttemptStatus::Executed, json!({"content": "again"})))
                .await
                .unwrap()
        );
        assert_eq!(j.get("t", "m:c").await.unwrap().unwrap(), first, "the row keeps its first settlement");

        // A settlement must settle: `proposed` (or a status that is not a settlement) is refused.
        j.propose(&attempt("t", Some("m"), "open")).await.unwrap();
        for status in [
            AttemptStatus::Proposed,
            AttemptStatus::Confirmed,
            AttemptStatus::Abandoned,
            AttemptStatus::Compensated,
        ] {
            assert!(!j.settle("t", "m:open", &settled(status, json!(null))).await.unwrap(), "{status:?}");
        }
        let open = j.get("t", "m:open").await.unwrap().unwrap();
        assert_eq!(open.status, AttemptStatus::Proposed);
        assert_eq!(open.result, None);

        // Settling a row that was never proposed creates nothing.
        assert!(!j.settle("t", "m:ghost", &settled(AttemptStatus::Executed, json!(1))).await.unwrap());
        assert_eq!(j.get("t", "m:ghost").await.unwrap(), None);
    }

    pub async fn upsert_settled_paths(j: &Arc<dyn Journal>) {
        // Missing: inserted settled, with every field.
        let mut missing = attempt("t", Some("m"), "missing");
        missing.user_id = Some("u".into());
        missing.tier = Some("read".into());
        let mut done = settled(AttemptStatus::Executed, json!({"content": "ran"}));
        done.exit_status = Some(0);
        assert!(j.upsert_settled(&missing, &done).await.unwrap());
        let row = j.get("t", "m:missing").await.unwrap().unwrap();
        assert_eq!(row.status, AttemptStatus::Executed);
        assert_eq!(row.result, Some(json!({"content": "ran"})));
        assert_eq!(row.exit_status, Some(0));
        assert_eq!(row.user_id.as_deref(), Some("u"));
        assert_eq!(row.tier.as_deref(), Some("read"));
        assert_eq!(row.arguments, missing.arguments);

        // Proposed: settled, keeping what was proposed.
        let proposed = attempt("t", Some("m"), "proposed");
        j.propose(&proposed).await.unwrap();
        let mut changed = proposed.clone();
        changed.arguments = json!({"path": "elsewhere"});
        let mut failed = settled(AttemptStatus::Failed, json!({"content": "boom"}));
        failed.error = Some("boom".into());
        assert!(j.upsert_settled(&changed, &failed).await.unwrap());
        let row = j.get("t", "m:proposed").await.unwrap().unwrap();
        assert_eq!(row.status, AttemptStatus::Failed);
        assert_eq!(row.error.as_deref(), Some("boom"));
        assert_eq!(row.arguments, proposed.arguments);

        // Settled: left as it is.
        assert!(
            !j.upsert_settled(&proposed, &settled(AttemptStatus::Executed, json!("late"))).await.unwrap()
        );
        assert!(!j.upsert_settled(&missing, &settled(AttemptStatus::Failed, json!("late"))).await.unwrap());
        assert_eq!(j.get("t", "m:proposed").await.unwrap().unwrap(), row);
        assert_eq!(j.get("t", "m:missing").await.unwrap().unwrap().status, AttemptStatus::Executed);

        // Not a settlement: refused, nothing written.
        let refused = attempt("t", Some("m"), "refused");
        assert!(!j.upsert_settled(&refused, &settled(AttemptStatus::Proposed, json!(null))).await.unwrap());
        assert_eq!(j.get("t", "m:refused").await.unwrap(), None);
    }

    pub async fn confirm_only_from_executed(j: &Arc<dyn Journal>) {
        j.propose(&attempt("t", None, "c1")).await.unwrap();
        assert!(!j.confirm("t", "c1").await.unwrap(), "proposed cannot be confirmed");
        assert!(j.settle("t", "c1", &settled(AttemptStatus::Executed, json!(1))).await.unwrap());
        assert!(j.confirm("t", "c1").await.unwrap());
        assert_eq!(j.get("t", "c1").await.unwrap().unwrap().status, AttemptStatus::Confirmed);
        assert!(!j.confirm("t", "c1").await.unwrap(), "confirmed stays confirmed");
        assert!(!j.settle("t", "c1", &settled(AttemptStatus::Failed, json!(1))).await.unwrap());

        j.propose(&attempt("t", None, "c2")).await.unwrap();
        assert!(j.settle("t", "c2", &settled(AttemptStatus::Failed, json!(1))).await.unwrap());
        assert!(!j.confirm("t", "c2").await.unwrap(), "failed cannot be confirmed");
        assert_eq!(j.get("t", "c2").await.unwrap().unwrap().status, AttemptStatus::Failed);
        assert!(!j.confirm("t", "nothing").await.unwrap());
    }

    pub async fn undone_only_from_executed_or_confirmed(j: &Arc<dyn Journal>) {
        j.propose(&attempt("t", None, "u1")).await.unwrap();
        assert!(!j.mark_undone("t", "u1").await.unwrap(), "a proposed row did nothing to undo");
        assert!(j.settle("t", "u1", &settled(AttemptStatus::Executed, json!(1))).await.unwrap());
        assert!(!j.mark_undone("other", "u1").await.unwrap(), "another tenant's row is not touched");
        assert!(j.mark_undone("t", "u1").await.unwrap());
        assert_eq!(j.get("t", "u1").await.unwrap().unwrap().status, AttemptStatus::Compensated);
        assert!(!j.mark_undone("t", "u1").await.unwrap(), "undone once");

        j.propose(&attempt("t", None, "u2")).await.unwrap();
        assert!(j.settle("t", "u2", &settled(AttemptStatus::Executed, json!(1))).await.unwrap());
        assert!(j.confirm("t", "u2").await.unwrap());
        assert!(j.mark_undone("t", "u2").await.unwrap(), "a confirmed call can be undone");

        j.propose(&attempt("t", None, "u3")).await.unwrap();
        assert!(j.settle("t", "u3", &settled(AttemptStatus::Failed, json!(1))).await.unwrap());
        assert!(!j.mark_undone("t", "u3").await.unwrap(), "a failed call is not marked undone");
        assert_eq!(j.get("t", "u3").await.unwrap().unwrap().status, AttemptStatus::Failed);
    }

    pub async fn decisions_are_recorded_before_the_call_settles(j: &Arc<dyn Journal>) {
        j.propose(&attempt("t", None, "d1")).await.unwrap();
        assert!(
            !j.record_decision("other", "d1", "allow_once", Some("x")).await.unwrap(),
            "another tenant's"
        );
        assert!(j.record_decision("t", "d1", "allow_once", Some("t/person/ann")).await.unwrap());
        let row = j.get("t", "d1").await.unwrap().unwrap();
        assert_eq!(row.status, AttemptStatus::Proposed, "still running");
        assert_eq!(
            (row.decision.as_deref(), row.decided_by.as_deref()),
            (Some("allow_once"), Some("t/person/ann"))
        );
        // A crash now: the reconciler abandons the row and keeps who let it run.
        let dead = journal::InstanceInfo {
            id: "gone".into(),
            host: "elsewhere".into(),
            pid: 1,
            ..Default::default()
        };
        j.register_instance(&dead).await.unwrap();
        let mut orphan = attempt("t", None, "d2");
        orphan.instance_id = "gone".into();
        j.propose(&orphan).await.unwrap();
        assert!(j.record_decision("t", "d2", "allow_session", Some("t/approver/bo")).await.unwrap());
        let policy = journal::ReconcilePolicy {
            current_instance: "instance-test".into(),
            instance_lease_ms: -1_000_000,
            unconfirmed_after_ms: None,
        };
        j.reconcile(&policy).await.unwrap();
        let row = j.get("t", "d2").await.unwrap().unwrap();
        assert_eq!(row.status, AttemptStatus::Abandoned);
        assert_eq!(row.decided_by.as_deref(), Some("t/approver/bo"));
        // Settled: the settlement's fields, and no later decision moves it.
        assert!(j.settle("t", "d1", &settled(AttemptStatus::Executed, json!(1))).await.unwrap());
        assert!(!j.record_decision("t", "d1", "deny", None).await.unwrap(), "a settled row is not moved");
        assert_ne!(j.get("t", "d1").await.unwrap().unwrap().decision.as_deref(), Some("deny"));
    }

    pub async fn sessions_list_instances_show_and_console_sessions_expire(j: &Arc<dyn Journal>) {
        for (n, id) in ["s1", "s2", "s3"].iter().enumerate() {
            let record = journal::SessionRecord {
                id: (*id).into(),
                tenant: "t".into(),
                user_id: None,
                config: json!({"n": n}),
                status: if n == 1 { "ended".into() } else { "active".into() },
                created_at: 1_000 + n as i64,
                ended_at: None,
            };
            j.put_session(&record).await.unwrap();
        }
        let ids =
            |records: Vec<journal::SessionRecord>| records.into_iter().map(|r| r.id).collect::<Vec<_>>();
        let all = journal::SessionFilter::default();
        assert_eq!(ids(j.list_sessions("t", &all).await.unwrap()), ["s3", "s2", "s1"]);
        assert!(j.list_sessions("other", &all).await.unwrap().is_empty(), "another tenant's are not listed");
        let active = journal::SessionFilter { status: Some("active".into()), ..Default::default() };
        assert_eq!(ids(j.list_sessions("t", &active).await.unwrap()), ["s3", "s1"]);
        let page = journal::SessionFilter {
            after: Some((1_002, "s3".into())),
            limit: Some(1),
            ..Default::default()
        };
        assert_eq!(ids(j.list_sessions("t", &page).await.unwrap()), ["s2"]);

        let me = journal::InstanceInfo {
            id: "shown".into(),
            host: "h".into(),
            pid: 7,
            version: Some("1.2.3".into()),
            address: Some("127.0.0.1:8080".into()),
            in_flight: Some(4),
            ..Default::default()
        };
        j.register_instance(&me).await.unwrap();
        let shown = j.instances().await.unwrap().into_iter().find(|i| i.id == "shown").unwrap();
        assert_eq!(
            (shown.version.as_deref(), shown.address.as_deref(), shown.in_flight),
            (Some("1.2.3"), Some("127.0.0.1:8080"), Some(4))
        );

        let now = 1_700_000_000_000;
        let session = journal::ConsoleSession {
            digest: "d1".into(),
            tenant: "t".into(),
            principal: "t/person/ann".into(),
            role: "person".into(),
            csrf: "c".into(),
            created_at: now,
            expires_at: now + 1_000,
        };
        j.put_console_session(&session).await.unwrap();
        assert_eq!(j.console_session("d1", now + 10).await.unwrap(), Some(session.clone()));
        assert_eq!(j.console_session("d1", now + 1_000).await.unwrap(), None, "expired");
        assert_eq!(j.console_session("d2", now).await.unwrap(), None);
        assert!(j.end_console_session("d1").await.unwrap());
        assert_eq!(j.console_session("d1", now + 10).await.unwrap(), None, "signed out");
        assert!(!j.end_console_session("d1").await.unwrap());
    }

    pub async fn control_characters_are_stripped(j: &Arc<dyn Journal>) {
        let mut new = attempt("t", Some("m\u{1}"), "c\u{0}1");
        new.tool = "to\u{0}ol".into();
        new.function_name = "fn\u{0}\u{7f}name".into();
        new.user_id = Some("u\u{0}".into());
        new.arguments = json!({"ke\u{0}y": "va\u{0}l\nue\ttab", "list": ["\u{0}", "a\u{1b}[31mred", 1], "nested": {"x": "\u{0}\u{0}"}});
        let proposed = j.propose(&new).await.unwrap();
        assert_eq!(proposed.key, "m:c1");
        // Lookups clean their identifiers the same way: the raw key finds the row.
        let row = j.get("t", &new.key()).await.unwrap().expect("found by the raw key");
        assert_eq!(row.key, "m:c1");
        assert_eq!(row.call_id, "c1");
        assert_eq!(row.message_id.as_deref(), Some("m"));
        assert_eq!(row.tool, "tool");
        assert_eq!(row.function_name, "fnname");
        assert_eq!(row.user_id.as_deref(), Some("u"));
        assert_eq!(
            row.arguments,
            json!({"key": "val\nue\ttab", "list": ["", "a[31mred", 1], "nested": {"x": ""}})
        );

        let settlement = Settlement {
            status: AttemptStatus::Executed,
            result: Some(json!({"content": "out\u{0}put\r\n", "state": {"bytes\u{0}": "\u{0}"}})),
            error_kind: Some("kind\u{0}".into()),
            error: Some("bad\u{0}\u{7}thing\tok".into()),
            decision: Some("allow\u{0}_once".into()),
            decided_by: Some("user\u{0}".into()),
            duration_ms: None,
            exit_status: None,
        };
        assert!(j.settle("t", &new.key(), &settlement).await.unwrap());
        let row = j.get("t", "m:c1").await.unwrap().unwrap();
        assert_eq!(row.result, Some(json!({"content": "output\r\n", "state": {"bytes": ""}})));
        assert_eq!(row.error_kind.as_deref(), Some("kind"));
        assert_eq!(row.error.as_deref(), Some("badthing\tok"));
        assert_eq!(row.decision.as_deref(), Some("allow_once"));
        assert_eq!(row.decided_by.as_deref(), Some("user"));

        let mut approval = approval("t", "ap\u{0}1", "s");
        approval.arguments = json!({"cmd": "rm\u{0} -rf"});
        approval.reason = "why\u{0}".into();
        j.insert_approval(&approval).await.unwrap();
        let stored = j.get_approval("t", "ap\u{0}1").await.unwrap().expect("approval found by its raw id");
        assert_eq!(stored.id, "ap1");
        assert_eq!(stored.arguments, json!({"cmd": "rm -rf"}));
        assert_eq!(stored.reason, "why");
        assert!(
            j.decide_approval("t", "ap1", "denied", &json!({"message": "no\u{0}"}), Some("me\u{0}"))
                .await
                .unwrap()
        );
        let stored = j.get_approval("t", "ap1").await.unwrap().unwrap();
        assert_eq!(stored.decision, Some(json!({"message": "no"})));
        assert_eq!(stored.decided_by.as_deref(), Some("me"));

        let session = SessionRecord {
            id: "s\u{0}1".into(),
            tenant: "t".into(),
            user_id: Some("u\u{0}".into()),
            config: json!({"cwd": "/w\u{0}ork"}),
            status: "active".into(),
            created_at: 1,
            ended_at: None,
        };
        j.put_session(&session).await.unwrap();
        let stored = j.get_session("t", "s1").await.unwrap().unwrap();
        assert_eq!(stored.config, json!({"cwd": "/work"}));
        assert_eq!(stored.user_id.as_deref(), Some("u"));

        j.remember(&remembered("t", "r\u{0}1", "pro\u{0}ject")).await.unwrap();
        let stored = j.remembered("t", Some("project")).await.unwrap();
        assert_eq!(stored.len(), 1);
        assert_eq!(stored[0].id, "r1");
    }

    fn approval(tenant: &str, id: &str, session: &str) -> PendingApproval {
        PendingApproval {
            id: id.into(),
            tenant: tenant.into(),
            session_id: session.into(),
            attempt_key: format!("m:{id}"),
            call_id: id.into(),
            tool: "local-system".into(),
            api: "runCommand".into(),
            arguments: json!({"command": "rm -rf target"}),
            reason: "exec tier needs approval".into(),
            status: "pending".into(),
            decision: None,
            decided_by: None,
            created_at: 1_700_000_000_000,
            decided_at: None,
        }
    }

    pub async fn approvals(j: &Arc<dyn Journal>) {
        let a1 = approval("A", "ap1", "s1");
        let mut a2 = approval("A", "ap2", "s2");
        a2.created_at += 1;
        let mut b1 = approval("B", "ap1", "s1");
        b1.reason = "tenant B's".into();
        for approval in [&a1, &a2, &b1] {
            j.insert_approval(approval).await.unwrap();
        }
        let ids = |rows: Vec<PendingApproval>| rows.into_iter().map(|a| (a.tenant, a.id)).collect::<Vec<_>>();
        assert_eq!(
            ids(j.list_pending_approvals("A", None).await.unwrap()),
            [("A".into(), "ap1".into()), ("A".into(), "ap2".into())]
        );
        assert_eq!(
            ids(j.list_pending_approvals("A", Some("s1")).await.unwrap()),
            [("A".into(), "ap1".into())]
        );
        assert_eq!(ids(j.list_pending_approvals("B", None).await.unwrap()), [("B".into(), "ap1".into())]);
        assert_eq!(j.get_approval("A", "ap1").await.unwrap(), Some(a1.clone()));

        // `pending` is not a decision.
        assert!(!j.decide_approval("A", "ap1", "pending", &json!({}), None).await.unwrap());
        // First decision wins; the second changes nothing.
        assert!(
            j.decide_approval("A", "ap1", "approved", &json!({"scope": "once"}), Some("alice"))
                .await
                .unwrap()
        );
        assert!(
            !j.decide_approval("A", "ap1", "denied", &json!({"message": "too late"}), Some("bob"))
                .await
                .unwrap()
        );
        let decided = j.get_approval("A", "ap1").await.unwrap().unwrap();
        assert_eq!(decided.status, "approved");
        assert_eq!(decided.decision, Some(json!({"scope": "once"})));
        assert_eq!(decided.decided_by.as_deref(), Some("alice"));
        assert!(decided.decided_at.is_some());
        // Tenant B's approval with the same id is untouched, and B can decide only its own.
        assert_eq!(j.get_approval("B", "ap1").await.unwrap(), Some(b1.clone()));
        assert!(!j.decide_approval("B", "ap2", "approved", &json!({}), None).await.unwrap());
        assert_eq!(j.get_approval("A", "ap2").await.unwrap().unwrap().status, "pending");
        // Re-inserting cannot reopen a decided question.
        j.insert_approval(&a1).await.unwrap();
        assert_eq!(j.get_approval("A", "ap1").await.unwrap().unwrap().status, "approved");

        assert_eq!(ids(j.list_pending_approvals("A", None).await.unwrap()), [("A".into(), "ap2".into())]);
        // Decided ones, the latest first; another tenant's never.
        let decided = j.decided_approvals("A", 10).await.unwrap();
        assert_eq!(ids(decided.clone()), [("A".into(), "ap1".into())]);
        assert_eq!(decided[0].decided_by.as_deref(), Some("alice"));
        assert!(j.decided_approvals("B", 10).await.unwrap().is_empty());
        assert_eq!(j.get_approval("A", "missing").await.unwrap(), None);
        assert_eq!(j.get_approval("C", "ap1").await.unwrap(), None);
    }

    fn remembered(tenant: &str, id: &str, project: &str) -> RememberedDecision {
        RememberedDecision {
            id: id.into(),
            tenant: tenant.into(),
            project: project.into(),
            tool: "local-system".into(),
            api: "runCommand".into(),
            argument_prefix: Some("cargo test".into()),
            created_by: Some("alice".into()),
            created_at: 1_700_000_000_000,
        }
    }

    pub async fn remembered_decisions(j: &Arc<dyn Journal>) {
        let r1 = remembered("A", "r1", "/work/one");
        let mut r2 = remembered("A", "r2", "/work/two");
        r2.api = "*".into();
        r2.argument_prefix = None;
        r2.created_at += 1;
        let b1 = remembered("B", "r1", "/work/one");
        for decision in [&r1, &r2, &b1] {
            j.remember(decision).await.unwrap();
        }
        assert_eq!(j.remembered("A", None).await.unwrap(), [r1.clone(), r2.clone()]);
        assert_eq!(j.remembered("A", Some("/work/one")).await.unwrap(), std::slice::from_ref(&r1));
        assert_eq!(j.remembered("A", Some("/work/none")).await.unwrap(), []);
        assert_eq!(j.remembered("B", None).await.unwrap(), std::slice::from_ref(&b1));

        assert!(!j.revoke("B", "r2").await.unwrap(), "B cannot revoke A's decision");
        assert!(j.revoke("A", "r1").await.unwrap());
        assert!(!j.revoke("A", "r1").await.unwrap());
        assert_eq!(j.remembered("A", None).await.unwrap(), [r2.clone()]);
        assert_eq!(
            j.remembered("B", None).await.unwrap(),
            std::slice::from_ref(&b1),
            "A's revoke left B's decision of the same id"
        );

        // Same id again replaces.
        let mut replaced = r2.clone();
        replaced.argument_prefix = Some("cargo build".into());
        j.remember(&replaced).await.unwrap();
        assert_eq!(j.remembered("A", None).await.unwrap(), [replaced]);
    }

    pub async fn sessions(j: &Arc<dyn Journal>) {
        let a = SessionRecord {
            id: "s1".into(),
            tenant: "A".into(),
            user_id: Some("alice".into()),
            config: json!({"cwd": "/work", "mode": "manual", "allow": ["read"]}),
            status: "active".into(),
            created_at: 1_700_000_000_000,
            ended_at: None,
        };
        let mut b = a.clone();
        b.tenant = "B".into();
        b.config = json!({"cwd": "/elsewhere"});
        j.put_session(&a).await.unwrap();
        j.put_session(&b).await.unwrap();
        assert_eq!(j.get_session("A", "s1").await.unwrap(), Some(a.clone()));
        assert_eq!(j.get_session("C", "s1").await.unwrap(), None);

        assert!(j.end_session("A", "s1").await.unwrap());
        assert!(!j.end_session("A", "s1").await.unwrap(), "a session ends once");
        let ended = j.get_session("A", "s1").await.unwrap().unwrap();
        assert_eq!(ended.status, "ended");
        assert!(ended.ended_at.is_some());
        assert_eq!(
            j.get_session("B", "s1").await.unwrap(),
            Some(b.clone()),
            "B's session of the same id is still active"
        );
        assert!(!j.end_session("A", "missing").await.unwrap());

        // Put replaces.
        let mut replaced = a.clone();
        replaced.config = json!({"cwd": "/work", "mode": "auto-run"});
        j.put_session(&replaced).await.unwrap();
        assert_eq!(j.get_session("A", "s1").await.unwrap(), Some(replaced));
    }

    pub async fn reconcile_abandons_dead_instances_only(j: &Arc<dyn Journal>) {
        let host = host_name();
        let me = current_instance(new_instance_id());
        let my_ticks = me.start_ticks.expect("start ticks of this process");
        let remote = |id: &str| InstanceInfo {
            id: id.into(),
            host: "elsewhere.invalid".into(),
            pid: 1,
            start_ticks: Some(1),
            ..Default::default()
        };
        let propose_for = |call: &str, instance: &str| {
            let mut new = attempt("R", None, call);
            new.instance_id = instance.into();
            new
        };

        // Registered before the lease runs out: one goes silent, one keeps beating.
        j.register_instance(&remote("stale")).await.unwrap();
        j.register_instance(&remote("beating")).await.unwrap();
        j.register_instance(&me).await.unwrap();
        for (call, instance) in [
            ("stale-row", "stale"),
            ("beating-row", "beating"),
            ("mine", me.id.as_str()),
            ("ghost-row", "ghost"),
        ] {
            assert!(j.propose(&propose_for(call, instance)).await.unwrap().created);
        }
        for call in ["exec-old", "exec-confirmed"] {
            j.propose(&propose_for(call, &me.id)).await.unwrap();
            assert!(j.settle("R", call, &settled(AttemptStatus::Executed, json!(call))).await.unwrap());
        }
        assert!(j.confirm("R", "exec-confirmed").await.unwrap());

        tokio::time::sleep(Duration::from_millis(1300)).await;

        j.heartbeat("beating").await.unwrap();
        j.register_instance(&me).await.unwrap();
        // Fresh heartbeats, but this host's process table says otherwise.
        let mut reaped = Command::new("true").spawn().expect("spawn true");
        let dead_pid = reaped.id();
        reaped.wait().expect("reap true");
        j.register_instance(&InstanceInfo {
            id: "dead-pid".into(),
            host: host.clone(),
            pid: dead_pid,
            start_ticks: None,
            ..Default::default()
        })
        .await
        .unwrap();
        j.register_instance(&InstanceInfo {
            id: "reused-pid".into(),
            host: host.clone(),
            pid: me.pid,
            start_ticks: Some(my_ticks + 1),
            ..Default::default()
        })
        .await
        .unwrap();
        // Another live instance in this very process (same pid and start time).
        j.register_instance(&InstanceInfo {
            id: "alive-local".into(),
            host: host.clone(),
            pid: me.pid,
            start_ticks: Some(my_ticks),
            ..Default::default()
        })
        .await
        .unwrap();
        for (call, instance) in
            [("dead-pid-row", "dead-pid"), ("reused-row", "reused-pid"), ("alive-local-row", "alive-local")]
        {
            assert!(j.propose(&propose_for(call, instance)).await.unwrap().created);
        }
        j.propose(&propose_for("exec-new", &me.id)).await.unwrap();
        assert!(j.settle("R", "exec-new", &settled(AttemptStatus::Executed, json!("new"))).await.unwrap());

        let policy = ReconcilePolicy {
            current_instance: me.id.clone(),
            instance_lease_ms: 1000,
            unconfirmed_after_ms: Some(700),
        };
        let report = j.reconcile(&policy).await.unwrap();
        let mut abandoned = report.abandoned.clone();
        abandoned.sort();
        let expected: Vec<(String, String)> = ["dead-pid-row", "ghost-row", "reused-row", "stale-row"]
            .iter()
            .map(|key| ("R".to_owned(), (*key).to_owned()))
            .collect();
        assert_eq!(abandoned, expected);
        for key in ["dead-pid-row", "ghost-row", "reused-row", "stale-row"] {
            let row = j.get("R", key).await.unwrap().unwrap();
            assert_eq!(row.status, AttemptStatus::Abandoned, "{key}");
            assert_eq!(row.error_kind.as_deref(), Some("abandoned"));
            assert_eq!(
                row.error.as_deref(),
                Some("the process that proposed this call ended before it settled")
            );
        }
        for key in ["mine", "beating-row", "alive-local-row"] {
            assert_eq!(j.get("R", key).await.unwrap().unwrap().status, AttemptStatus::Proposed, "{key}");
        }
        assert_eq!(keys(&report.unconfirmed), ["exec-old"], "only the old executed row is unconfirmed");
        assert_eq!(report.unconfirmed[0].status, AttemptStatus::Executed);
        assert_eq!(
            j.get("R", "exec-old").await.unwrap().unwrap().status,
            AttemptStatus::Executed,
            "reported, not changed"
        );

        // An abandoned row stays abandoned: a settle that comes back late changes nothing.
        assert!(!j.settle("R", "stale-row", &settled(AttemptStatus::Executed, json!("late"))).await.unwrap());
        // Reconciling again finds nothing more to abandon.
        assert!(j.reconcile(&policy).await.unwrap().abandoned.is_empty());
        assert_eq!(j.get("R", "beating-row").await.unwrap().unwrap().status, AttemptStatus::Proposed);

        // Without a threshold (the periodic run) the old executed row is not read, and a dead
        // instance's row is abandoned all the same.
        assert!(j.propose(&propose_for("late-ghost-row", "ghost")).await.unwrap().created);
        let quiet = ReconcilePolicy { unconfirmed_after_ms: None, ..policy.clone() };
        let report = j.reconcile(&quiet).await.unwrap();
        assert_eq!(report.abandoned, [("R".to_owned(), "late-ghost-row".to_owned())]);
        assert!(report.unconfirmed.is_empty(), "read {:?}", keys(&report.unconfirmed));
        assert_eq!(keys(&j.reconcile(&policy).await.unwrap().unconfirmed), ["exec-old"]);
    }

    pub async fn concurrent_calls_all_settle(j: &Arc<dyn Journal>) {
        let barrier = Arc::new(tokio::sync::Barrier::new(64));
        let tasks: Vec<_> = (0..64)
            .map(|n| {
                let j = Arc::clone(j);
                let barrier = Arc::clone(&barrier);
                tokio::spawn(async move {
                    barrier.wait().await;
                    let proposed = j.propose(&attempt("c", Some("m"), &format!("call-{n}"))).await?;
                    let moved =
                        j.settle("c", &proposed.key, &settled(AttemptStatus::Executed, json!(n))).await?;
                    Ok::<_, JournalError>((proposed.created, moved))
                })
            })
            .collect();
        for task in tasks {
            assert_eq!(task.await.unwrap().unwrap(), (true, true));
        }
        let rows = j
            .query("c", &AttemptFilter { status: Some(AttemptStatus::Executed), ..Default::default() })
            .await
            .unwrap();
        assert_eq!(rows.len(), 64);

        // Racing proposes of one row: exactly one creates it.
        let barrier = Arc::new(tokio::sync::Barrier::new(32));
        let tasks: Vec<_> = (0..32)
            .map(|n| {
                let j = Arc::clone(j);
                let barrier = Arc::clone(&barrier);
                tokio::spawn(async move {
                    let mut new = attempt("dup", None, &format!("d{}", n % 16));
                    new.arguments = json!({"proposer": n});
                    barrier.wait().await;
                    (n, j.propose(&new).await.unwrap())
                })
            })
            .collect();
        let mut creators = std::collections::HashMap::new();
        for task in tasks {
            let (n, proposed) = task.await.unwrap();
            if proposed.created {
                assert!(
                    creators.insert(proposed.key, n).is_none(),
                    "two proposes of one row both created it"
                );
            }
        }
        assert_eq!(creators.len(), 16);
        for (key, n) in creators {
            assert_eq!(j.get("dup", &key).await.unwrap().unwrap().arguments, json!({"proposer": n}));
        }

        // Racing settles of one row: exactly one wins, and the row holds the winner's settlement.
        for n in 0..16 {
            j.propose(&attempt("race", None, &format!("r{n}"))).await.unwrap();
        }
        let barrier = Arc::new(tokio::sync::Barrier::new(32));
        let tasks: Vec<_> = (0..32)
            .map(|n| {
                let j = Arc::clone(j);
                let barrier = Arc::clone(&barrier);
                tokio::spawn(async move {
                    barrier.wait().await;
                    let key = format!("r{}", n % 16);
                    let status = if n < 16 { AttemptStatus::Executed } else { AttemptStatus::Failed };
                    (key.clone(), status, j.settle("race", &key, &settled(status, json!(n))).await.unwrap())
                })
            })
            .collect();
        let mut winners = std::collections::HashMap::new();
        for task in tasks {
            let (key, status, moved) = task.await.unwrap();
            if moved {
                assert!(winners.insert(key, status).is_none(), "two settles of one row both reported a move");
            }
        }
        assert_eq!(winners.len(), 16);
        for (key, status) in winners {
            assert_eq!(j.get("race", &key).await.unwrap().unwrap().status, status);
        }
    }

    pub async fn a_failing_write_fails_alone(j: &Arc<dyn Journal>) {
        // An empty key is refused by the database; sent together with 63 good writes, only it fails.
        let barrier = Arc::new(tokio::sync::Barrier::new(64));
        let tasks: Vec<_> = (0..64)
            .map(|n| {
                let j = Arc::clone(j);
                let barrier = Arc::clone(&barrier);
                tokio::spawn(async move {
                    let new =
                        if n == 13 { attempt("f", None, "") } else { attempt("f", None, &format!("ok-{n}")) };
                    barrier.wait().await;
                    j.propose(&new).await
                })
            })
            .collect();
        let mut failures = 0;
        for (n, task) in tasks.into_iter().enumerate() {
            match task.await.unwrap() {
                Ok(proposed) => {
                    assert_ne!(n, 13);
                    assert!(proposed.created);
                }
                Err(JournalError::Database(_) | JournalError::Sqlite(_)) => {
                    assert_eq!(n, 13, "only the bad write fails");
                    failures += 1;
                }
                Err(other) => panic!("unexpected error {other}"),
            }
        }
        assert_eq!(failures, 1);
        assert_eq!(j.query("f", &AttemptFilter::default()).await.unwrap().len(), 63);
        assert_eq!(j.get("f", "").await.unwrap(), None);
        // The journal still works afterwards.
        assert!(j.settle("f", "ok-1", &settled(AttemptStatus::Executed, json!(1))).await.unwrap());
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

#[tokio::test]
async fn unsupported_urls_are_refused_without_echoing_them() {
    let error = journal::open("mysql://user:secret@host/db").await.unwrap_err();
    assert!(matches!(error, JournalError::UnsupportedUrl(_)), "{error}");
    assert!(!error.to_string().contains("secret"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_in_memory_works_on_one_shared_connection() {
    let j = journal::open("sqlite::memory:").await.unwrap();
    let other = journal::open("sqlite::memory:").await.unwrap();
    cases::concurrent_calls_all_settle(&j).await;
    assert!(
        other.query("c", &AttemptFilter::default()).await.unwrap().is_empty(),
        "each in-memory journal is private"
    );
    let p = j.propose(&attempt("t", None, "c")).await.unwrap();
    assert!(j.settle("t", &p.key, &settled(AttemptStatus::Executed, json!(1))).await.unwrap());
    assert_eq!(j.get("t", "c").await.unwrap().unwrap().status, AttemptStatus::Executed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_reopening_keeps_the_rows() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("j.db").display());
    {
        let j = journal::open(&url).await.unwrap();
        j.propose(&attempt("t", Some("m"), "c")).await.unwrap();
    }
    let j = journal::open(&url).await.unwrap();
    assert_eq!(j.get("t", "m:c").await.unwrap().unwrap().status, AttemptStatus::Proposed);
}

const CRASH_CHILD_DB: &str = "JOURNAL_CRASH_CHILD_DB";
const CRASH_READY: &str = "JOURNAL-CRASH-CHILD-READY";

/// The child half of the crash test: a no-op unless `JOURNAL_CRASH_CHILD_DB` names a database.
/// Then it registers itself, proposes a call, says so, and waits to be killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_child() {
    let Ok(path) = std::env::var(CRASH_CHILD_DB) else { return };
    let j = journal::open(&format!("sqlite://{path}?mode=rwc")).await.unwrap();
    let me = current_instance(new_instance_id());
    j.register_instance(&me).await.unwrap();
    let mut new = attempt("crash", Some("m"), "running");
    new.instance_id = me.id.clone();
    let proposed = j.propose(&new).await.unwrap();
    assert!(proposed.created);
    println!("\n{CRASH_READY} {} {}", me.pid, proposed.key);
    tokio::time::sleep(Duration::from_secs(120)).await;
    panic!("the crash test should have killed this process");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_killed_between_proposed_and_settled_is_abandoned_at_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.db");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "crash_child", "--nocapture", "--test-threads", "1"])
        .env(CRASH_CHILD_DB, &path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("re-execute the test binary");
    let stdout = child.stdout.take().unwrap();
    let (lines, ready) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            // libtest may print "test crash_child ... " on the same line first.
            if let Some(at) = line.find(CRASH_READY) {
                let _ = lines.send(line[at..].to_owned());
            }
        }
    });
    let line = ready.recv_timeout(Duration::from_secs(60));
    child.kill().expect("SIGKILL the child");
    child.wait().expect("reap the child");
    let line = line.expect("the child proposed its call within 60 s");
    let mut words = line.split_whitespace().skip(1);
    let child_pid: u32 = words.next().unwrap().parse().unwrap();
    let key = words.next().unwrap().to_owned();
    assert_eq!(child_pid, child.id());

    // The next start: a new instance opens the same file and reconciles.
    let j = journal::open(&format!("sqlite://{}?mode=rwc", path.display())).await.unwrap();
    assert_eq!(
        j.get("crash", &key).await.unwrap().unwrap().status,
        AttemptStatus::Proposed,
        "the kill left it proposed"
    );
    let me = current_instance(new_instance_id());
    j.register_instance(&me).await.unwrap();
    // A long lease: the child is found dead by its pid, not by a stale heartbeat.
    let policy = ReconcilePolicy {
        current_instance: me.id.clone(),
        instance_lease_ms: 3_600_000,
        unconfirmed_after_ms: Some(3_600_000),
    };
    let report = j.reconcile(&policy).await.unwrap();
    assert_eq!(report.abandoned, [("crash".to_owned(), key.clone())]);
    let row = j.get("crash", &key).await.unwrap().unwrap();
    assert_eq!(row.status, AttemptStatus::Abandoned);
    assert_eq!(row.error_kind.as_deref(), Some("abandoned"));
    assert!(!j.settle("crash", &key, &settled(AttemptStatus::Executed, json!("late"))).await.unwrap());
}

/// `inspect` reads without writing: a missing file stays missing, a database nothing ran on gets
/// no table, and the migrations a start would run are named until one has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspection_changes_nothing_and_names_pending_migrations() {
    let timeout = std::time::Duration::from_secs(10);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    let url = format!("sqlite://{}", path.display());
    let seen = journal::inspect(&url, timeout).await.unwrap();
    assert!(seen.missing && !seen.pending.is_empty(), "{seen:?}");
    assert!(!path.exists(), "inspecting made the file");
    drop(journal::open(&format!("{url}?mode=rwc")).await.unwrap());
    let seen = journal::inspect(&url, timeout).await.unwrap();
    assert!(!seen.missing && seen.pending.is_empty(), "{seen:?}");

    let server = pg_server();
    let fresh = server.database_url("inspected_fresh");
    let seen = journal::inspect(&fresh, timeout).await.unwrap();
    assert!(
        seen.describe.starts_with("Postgres at 127.0.0.1:") && seen.describe.ends_with("/inspected_fresh"),
        "{seen:?}"
    );
    let all = seen.pending.len();
    assert!(all >= 5, "{seen:?}");
    assert_eq!(journal::inspect(&fresh, timeout).await.unwrap().pending.len(), all, "still nothing ran");
    drop(journal::open(&fresh).await.unwrap());
    assert!(journal::inspect(&fresh, timeout).await.unwrap().pending.is_empty());
    let unreachable = format!("postgres://toolhost@127.0.0.1:{}/x", test_support::free_port());
    assert!(journal::inspect(&unreachable, timeout).await.is_err());
}
