//! The console in a real browser (headless Chromium over WebDriver) against the real server:
//! signing in, approvals arriving live and decided with a click or a key, what the journal says
//! about who decided, what is refused (agent keys, forms without their token, other origins),
//! that arguments are shown as text, and two instances on Postgres and Redis with notifications
//! (a webhook and e-mail, to receivers in the test).

mod browser;
mod common;

use std::time::{Duration, Instant};

use browser::Browser;
use common::{TestServer, submit};
use serde_json::{Value, json};
use test_support::{PgServer, RedisServer};
use toolhost_server::auth::{Role, stored_form_as};

const ALICE: &str = "key-alice-person";
const BOT: &str = "key-bot-agent";
const OPERATOR: &str = "key-ops-operator";

fn keys() -> Vec<String> {
    vec![
        stored_form_as("acme", Role::Person, "alice", ALICE),
        stored_form_as("acme", Role::Agent, "bot", BOT),
        stored_form_as("acme", Role::Operator, "ops", OPERATOR),
        stored_form_as("globex", Role::Person, "gina", "key-gina-person"),
    ]
}

/// The tenants' folders: `acme/` and `globex/`, each a workspace root of its tenant's.
fn roots() -> tempfile::TempDir {
    let roots = tempfile::tempdir().unwrap();
    for tenant in ["acme", "globex"] {
        std::fs::create_dir(roots.path().join(tenant)).unwrap();
    }
    roots
}

/// A folder for a session of `tenant`, inside its root.
fn folder(roots: &tempfile::TempDir, tenant: &str, name: &str) -> std::path::PathBuf {
    let path = roots.path().join(tenant).join(name);
    std::fs::create_dir_all(&path).unwrap();
    path
}

async fn keyed(
    roots: &tempfile::TempDir,
    args_for: impl FnOnce(&mut toolhost_server::ServeArgs),
) -> TestServer {
    let dir = tempfile::tempdir().unwrap();
    let mut args = common::args(dir.path());
    args.api_keys = keys();
    args.workspace_roots = ["acme", "globex"]
        .iter()
        .map(|tenant| toolhost_server::config::WorkspaceRoot::of(tenant, roots.path().join(tenant)))
        .collect();
    args_for(&mut args);
    TestServer::start_with(dir, args).await.with_key(BOT)
}

/// Signs the browser in with `key` through the sign-in form.
async fn sign_in(browser: &Browser, base: &str, key: &str) {
    browser.goto(&format!("{base}/console/login")).await;
    let field =
        browser.wait_for("form[action='/console/login'] input[name=key]", Duration::from_secs(5)).await;
    browser.type_into(&field, key).await;
    let button = browser.find("form[action='/console/login'] button[type=submit]").await.unwrap();
    browser.click(&button).await;
}

/// Waits until the page's event stream is open.
async fn live(browser: &Browser) {
    browser.wait_for("body[data-live=on]", Duration::from_secs(10)).await;
}

fn item(id: &str) -> String {
    format!("#pending [data-approval-id='{id}']")
}

async fn click_action(browser: &Browser, id: &str, action: &str) {
    let button = browser
        .wait_for(&format!("{} button[data-action='{action}']", item(id)), Duration::from_secs(5))
        .await;
    browser.click(&button).await;
}

/// Proposes a command (which waits for a person) and waits for it to appear in the browser's
/// inbox; returns the pending call and the approval's id.
async fn command_waits(
    server: &TestServer,
    browser: &Browser,
    session: &str,
    call: &str,
    command: &str,
) -> (tokio::task::JoinHandle<Value>, String) {
    let arguments = json!({"command": command}).to_string();
    let pending =
        submit(server, session, json!([{"id": call, "name": "runCommand", "arguments": arguments}]));
    let arrived = browser.wait_for("#pending [data-approval-id]", Duration::from_secs(10)).await;
    (pending, browser.attribute(&arrived, "data-approval-id").await.unwrap())
}

/// The journal's row for a call (read with the person's key).
async fn row(server: &TestServer, session: &str, call: &str) -> Value {
    let person = server.as_key(ALICE);
    let (status, rows) = person.get(&format!("/v1/journal?session_id={session}")).await;
    assert_eq!(status, 200, "{rows}");
    rows.as_array().unwrap().iter().find(|r| r["call_id"] == call).cloned().unwrap_or(Value::Null)
}

async fn result_of(pending: tokio::task::JoinHandle<Value>) -> Value {
    let response =
        tokio::time::timeout(Duration::from_secs(20), pending).await.expect("the call ends").unwrap();
    response["results"][0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_decides_in_the_browser() {
    let roots = roots();
    let server = keyed(&roots, |_| {}).await;
    let browser = Browser::start().await;
    let ws = folder(&roots, "acme", "project");

    // Not signed in: the inbox sends the browser to the sign-in page.
    browser.goto(&server.url("/console/approvals")).await;
    assert!(browser.url().await.contains("/console/login"), "{}", browser.url().await);

    // An agent key proposes calls; it cannot sign in to decide them, and is told why.
    sign_in(&browser, &server.base, BOT).await;
    let refusal = browser.wait_for(".notice.error", Duration::from_secs(5)).await;
    assert!(browser.text(&refusal).await.contains("agent key"), "{}", browser.text(&refusal).await);
    assert!(browser.url().await.contains("/console/login"));
    sign_in(&browser, &server.base, "not-a-key").await;
    let refusal = browser.wait_for(".notice.error", Duration::from_secs(5)).await;
    assert!(browser.text(&refusal).await.contains("not one of this server's"));

    // A person's key: the inbox, empty.
    sign_in(&browser, &server.base, ALICE).await;
    browser.wait_for("#none-waiting:not([hidden])", Duration::from_secs(5)).await;
    assert!(browser.url().await.ends_with("/console/approvals"), "{}", browser.url().await);
    live(&browser).await;
    browser.execute("window.__stayed = 'here';", json!([])).await;

    // A write outside the session's folder (inside the tenant's root) asks; proposed through the
    // API, it appears without a reload, the change it makes as a diff, its hostile content as text.
    let shared = folder(&roots, "acme", "shared");
    std::fs::write(shared.join("hello.txt"), "old line\nsecond line\n").unwrap();
    let session = server.session(json!({"working_directory": ws, "agent_id": "coder-7"})).await;
    let hostile = "<img src=x onerror=\"window.__pwned=1\"><script>window.__pwned=2</script>";
    let proposed = Instant::now();
    let pending = submit(
        &server,
        &session,
        json!([{"id": "w1", "name": "writeFile", "arguments": json!({"path": "../shared/hello.txt", "content": format!("{hostile}\nsecond line\n")}).to_string()}]),
    );
    let arrived = browser.wait_for("#pending [data-approval-id]", Duration::from_secs(10)).await;
    let took = proposed.elapsed();
    let id = browser.attribute(&arrived, "data-approval-id").await.unwrap();
    assert_eq!(
        browser.execute("return window.__stayed;", json!([])).await,
        "here",
        "the page was not reloaded"
    );
    assert!(took < Duration::from_secs(5), "the approval took {took:?} to appear");
    let shown = browser.text(&arrived).await;
    assert!(shown.contains("local-system/writeFile"), "{shown}");
    assert!(shown.contains("hello.txt"), "{shown}");
    assert!(shown.contains("outside the working directory"), "why it asks: {shown}");
    assert!(shown.contains("-old line"), "the diff against the file as it is: {shown}");
    assert!(shown.contains("+<img src=x onerror="), "the content is shown as text: {shown}");
    assert!(shown.contains("agent coder-7") && shown.contains("acme/agent/bot"), "who proposed it: {shown}");
    // "For the session" and "always" grant the file's folder, shown and editable, not the API.
    assert!(shown.contains("allow local-system/writeFile of files within"), "{shown}");
    let scope = browser.find(&format!("{} input[name=prefix]", item(&id))).await.unwrap();
    let shared_folder = shared.canonicalize().unwrap().display().to_string();
    assert_eq!(browser.attribute(&scope, "value").await.as_deref(), Some(shared_folder.as_str()));
    let injected = browser
        .execute(
            "return [document.querySelectorAll('#pending img, #pending script').length, window.__pwned === undefined];",
            json!([]),
        )
        .await;
    assert_eq!(injected, json!([0, true]), "the arguments made no element and ran nothing");
    assert_eq!(browser.text(&browser.find("#waiting-count").await.unwrap()).await, "1");
    // Readable at 360 px: nothing wider than the window, the actions in reach.
    browser.resize(360, 800).await;
    let fits = browser
        .execute(
            "return [document.documentElement.scrollWidth, window.innerWidth, \
             document.querySelector('#pending button[data-action=deny]').getBoundingClientRect().right];",
            json!([]),
        )
        .await;
    let (scroll, inner, deny) =
        (fits[0].as_f64().unwrap(), fits[1].as_f64().unwrap(), fits[2].as_f64().unwrap());
    assert!(inner <= 400.0 && scroll <= inner && deny <= inner, "at 360 px: {fits}");
    browser.resize(1280, 900).await;
    // `TOOLHOST_CONSOLE_SCREENSHOT=docs/console.png` keeps a picture of the inbox (the README's).
    if let Ok(path) = std::env::var("TOOLHOST_CONSOLE_SCREENSHOT") {
        browser.resize(1100, 1000).await;
        std::fs::write(path, browser.screenshot().await).unwrap();
    }

    // Allowed for the session: it runs, and the journal names the person and the console.
    click_action(&browser, &id, "allow-session").await;
    let result = result_of(pending).await;
    assert_eq!(result["status"], "executed", "{result}");
    assert!(std::fs::read_to_string(shared.join("hello.txt")).unwrap().starts_with("<img"));
    browser.wait_gone(&item(&id), Duration::from_secs(5)).await;
    let journalled = row(&server, &session, "w1").await;
    assert_eq!(journalled["decided_by"], "acme/person/alice via console", "{journalled}");
    assert_eq!(journalled["decision"], "allow_session", "{journalled}");
    // The decided list names who decided.
    let decided =
        browser.wait_for(&format!("#decided tr[data-approval-id='{id}']"), Duration::from_secs(5)).await;
    assert!(browser.text(&decided).await.contains("acme/person/alice via console"));
    // The session's grant holds: another such write in it runs without asking.
    let again = server
        .call(&session, "w2", "writeFile", json!({"path": "../shared/again.txt", "content": "x"}))
        .await;
    assert_eq!(again["status"], "executed", "{again}");

    // Denied with a message: the caller's result carries it.
    let (pending, id) = command_waits(&server, &browser, &session, "c1", "rm -rf build").await;
    let message = browser.find(&format!("{} input[name=message]", item(&id))).await.unwrap();
    browser.type_into(&message, "Not the build folder: run make clean instead").await;
    click_action(&browser, &id, "deny").await;
    let result = result_of(pending).await;
    assert_eq!(result["status"], "denied", "{result}");
    assert!(result.to_string().contains("run make clean instead"), "{result}");
    assert_eq!(row(&server, &session, "c1").await["decided_by"], "acme/person/alice via console");

    // By keyboard alone: j to the item, y to allow it once.
    let (pending, id) = command_waits(&server, &browser, &session, "c2", "echo by keyboard").await;
    browser.execute("document.activeElement && document.activeElement.blur();", json!([])).await;
    browser.press("jy").await;
    let result = result_of(pending).await;
    assert_eq!(result["status"], "executed", "{result}");
    assert_eq!(row(&server, &session, "c2").await["decision"], "allow_once");
    browser.wait_gone(&item(&id), Duration::from_secs(5)).await;

    // A decision made elsewhere (the API) takes the item away live.
    let (pending, id) = command_waits(&server, &browser, &session, "c3", "echo from the api").await;
    let (status, body) = server
        .as_key(ALICE)
        .post(&format!("/v1/approvals/{id}"), json!({"decision": {"kind": "deny"}}))
        .await;
    assert_eq!(status, 200, "{body}");
    browser.wait_gone(&item(&id), Duration::from_secs(5)).await;
    assert_eq!(result_of(pending).await["status"], "denied");

    // Forms without the session's token, or from another origin, are refused.
    let (pending, id) = command_waits(&server, &browser, &session, "c4", "echo forged").await;
    let cookie = browser.execute("return document.cookie;", json!([])).await;
    assert_eq!(cookie, "", "the session cookie is HttpOnly: the page's script cannot read it");
    let csrf = browser
        .execute("return document.querySelector('meta[name=csrf-token]').content;", json!([]))
        .await
        .as_str()
        .unwrap()
        .to_owned();
    let token = browser.cookie("toolhost_console").await.expect("the session cookie");
    let client =
        reqwest::Client::builder().no_proxy().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let forge = |fields: Vec<(&'static str, String)>, origin: Option<&'static str>| {
        let mut request = client
            .post(server.url(&format!("/console/approvals/{id}/decide")))
            .header("cookie", format!("toolhost_console={token}"))
            .form(&fields);
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        request.send()
    };
    let no_token = forge(vec![("action", "allow-once".into())], None).await.unwrap();
    assert_eq!(no_token.status(), 403);
    let wrong = forge(vec![("action", "allow-once".into()), ("csrf", "0".repeat(64))], None).await.unwrap();
    assert_eq!(wrong.status(), 403);
    let elsewhere =
        forge(vec![("action", "allow-once".into()), ("csrf", csrf.clone())], Some("http://evil.example"))
            .await
            .unwrap();
    assert_eq!(elsewhere.status(), 403);
    assert!(browser.find(&item(&id)).await.is_some(), "nothing was decided");
    // "Always" for a command without the prefix it remembers would allow every command: refused.
    let everything =
        forge(vec![("action", "allow-always".into()), ("csrf", csrf.clone()), ("prefix", " ".into())], None)
            .await
            .unwrap();
    assert_eq!(everything.status(), 400);
    assert!(everything.text().await.unwrap().contains("every command"));
    // The same request with its token is the person's decision.
    let genuine = forge(vec![("action", "deny".into()), ("csrf", csrf)], None).await.unwrap();
    assert_eq!(genuine.status(), 303);
    assert_eq!(result_of(pending).await["status"], "denied");

    // Signing out ends the session: its cookie no longer opens a page.
    let signout = browser.find("form.signout button").await.unwrap();
    browser.click(&signout).await;
    browser.wait_for("form[action='/console/login']", Duration::from_secs(5)).await;
    let after = server
        .client
        .get(server.url("/console/approvals/x/item"))
        .header("cookie", format!("toolhost_console={token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(after.status(), 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_keeps_its_doors_closed() {
    let roots = roots();
    let server = keyed(&roots, |_| {}).await;
    let client =
        reqwest::Client::builder().no_proxy().redirect(reqwest::redirect::Policy::none()).build().unwrap();

    // Headers: no inline script, no frames, no sniffing, no caching of pages.
    let page = client.get(server.url("/console/login")).send().await.unwrap();
    let csp = page.headers()["content-security-policy"].to_str().unwrap().to_owned();
    assert!(csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"), "{csp}");
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert_eq!(page.headers()["x-frame-options"], "DENY");
    assert_eq!(page.headers()["x-content-type-options"], "nosniff");
    assert_eq!(page.headers()["cache-control"], "no-store");
    let markup = page.text().await.unwrap();
    assert!(!markup.contains("<script>") && !markup.contains(" onclick="), "no inline script");

    // Sign-in: form-encoded `key=`, a cookie that scripts cannot read and other sites do not send.
    let signed = client.post(server.url("/console/login")).form(&[("key", ALICE)]).send().await.unwrap();
    assert_eq!(signed.status(), 303);
    let cookie = signed.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict") && cookie.contains("Max-Age="),
        "{cookie}"
    );
    assert!(!cookie.contains("Secure"), "plain HTTP on loopback");
    let token = cookie.split(';').next().unwrap().to_owned();
    // Behind a TLS proxy the cookie is Secure.
    let proxied = client
        .post(server.url("/console/login"))
        .header("x-forwarded-proto", "https")
        .form(&[("key", ALICE)])
        .send()
        .await
        .unwrap();
    assert!(proxied.headers()["set-cookie"].to_str().unwrap().contains("; Secure"));
    // Another site's page cannot sign a visitor in.
    let forged = client
        .post(server.url("/console/login"))
        .header("origin", "http://evil.example")
        .form(&[("key", ALICE)])
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 403);
    // After sign-in, only the console's own paths.
    let away = client
        .post(server.url("/console/login"))
        .form(&[("key", ALICE), ("next", "//evil.example/")])
        .send()
        .await
        .unwrap();
    assert_eq!(away.headers()["location"], "/console/approvals");

    // Another tenant's approval is not found from acme's console.
    let gina = server.as_key("key-gina-person");
    let theirs = gina.session(json!({"working_directory": folder(&roots, "globex", "theirs")})).await;
    let pending = submit(
        &gina,
        &theirs,
        json!([{"id": "g1", "name": "runCommand", "arguments": json!({"command": "echo globex"}).to_string()}]),
    );
    let id = gina.wait_for_approval("g1").await;
    let seen = client
        .get(server.url(&format!("/console/approvals/{id}")))
        .header("cookie", &token)
        .send()
        .await
        .unwrap();
    assert_eq!(seen.status(), 404);
    let inbox = client
        .get(server.url("/console/approvals"))
        .header("cookie", &token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!inbox.contains(&id), "acme's inbox lists only acme's approvals");
    let (status, _) = gina.post(&format!("/v1/approvals/{id}"), json!({"decision": {"kind": "deny"}})).await;
    assert_eq!(status, 200);
    pending.await.unwrap();

    // The operator's pages: keys by name and role, never a value or a digest.
    let operator = client.post(server.url("/console/login")).form(&[("key", OPERATOR)]).send().await.unwrap();
    let operator_cookie =
        operator.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned();
    let page =
        client.get(server.url("/console/operator")).header("cookie", &operator_cookie).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let page = page.text().await.unwrap();
    for name in ["alice", "bot", "ops", "gina", "database", "disk", "Calls in flight"] {
        assert!(page.contains(name), "{name} on the operator's page");
    }
    for secret in [ALICE, BOT, OPERATOR] {
        assert!(!page.contains(secret), "no key's value on the page");
        let digest: String =
            toolhost_server::auth::digest(secret).iter().map(|b| format!("{b:02x}")).collect();
        assert!(!page.contains(&digest[..16]), "no key's digest on the page");
    }
    // A person's key does not open them.
    let refused = client.get(server.url("/console/operator")).header("cookie", &token).send().await.unwrap();
    assert_eq!(refused.status(), 403);

    // A reload that removes alice's key signs her sessions out.
    let mut kept = keys();
    kept.remove(0);
    let fresh = toolhost_server::auth::Keys::parse(kept.iter().map(String::as_str)).unwrap();
    server.state.keys.replace(&fresh).unwrap();
    let gone = client.get(server.url("/console/approvals")).header("cookie", &token).send().await.unwrap();
    assert_eq!(gone.status(), 303);
    assert!(gone.headers()["location"].to_str().unwrap().starts_with("/console/login"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proposed_on_one_instance_approved_on_the_console_of_another_and_told_once() {
    let pg = PgServer::start();
    let redis = RedisServer::start();
    let database = pg.database_url("console");
    let hook = test_support::http::Service::start(|_| (204, "text/plain", String::new()));
    let mail = test_support::smtp::SmtpSink::start();
    let notify = toolhost_server::config::NotifySettings {
        webhook: vec![toolhost_server::config::WebhookSetting {
            tenant: "acme".into(),
            url: format!("http://127.0.0.1:{}/hook", hook.port()),
            secret: Some("hook-secret".into()),
        }],
        email: vec![toolhost_server::config::EmailSetting {
            tenant: "*".into(),
            smtp: mail.url(),
            from: "toolhost@example.test".into(),
            to: vec!["approvers@example.test".into()],
            username: None,
            password: None,
        }],
    };
    let configure = |args: &mut toolhost_server::ServeArgs| {
        args.database_url = Some(database.clone());
        args.redis_url = Some(redis.url());
        args.notify = notify.clone();
    };
    let roots = roots();
    let a = keyed(&roots, configure).await;
    let b = keyed(&roots, configure).await;
    let browser = Browser::start().await;
    sign_in(&browser, &b.base, ALICE).await;
    browser.wait_for("#none-waiting:not([hidden])", Duration::from_secs(5)).await;
    live(&browser).await;

    // Proposed on A, shown by B's console.
    let ws = folder(&roots, "acme", "across");
    let session = a.session(json!({"working_directory": ws})).await;
    let proposed = Instant::now();
    let pending = submit(
        &a,
        &session,
        json!([{"id": "x1", "name": "runCommand", "arguments": json!({"command": "echo across"}).to_string()}]),
    );
    let arrived = browser.wait_for("#pending [data-approval-id]", Duration::from_secs(10)).await;
    let took = proposed.elapsed();
    assert!(took < Duration::from_secs(5), "{took:?} from A's proposal to B's console");
    let id = browser.attribute(&arrived, "data-approval-id").await.unwrap();
    click_action(&browser, &id, "allow-once").await;
    let result = result_of(pending).await;
    assert_eq!(result["status"], "executed", "{result}");
    assert!(result.to_string().contains("across"), "{result}");
    let journalled = row(&a, &session, "x1").await;
    assert_eq!(journalled["decided_by"], "acme/person/alice via console", "{journalled}");

    // One webhook and one e-mail for the approval, from the instance that asked.
    let deadline = Instant::now() + Duration::from_secs(10);
    while (hook.received().is_empty() || mail.mails().is_empty()) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(800)).await; // time for a duplicate to show itself
    let hooks = hook.received();
    assert_eq!(hooks.len(), 1, "one webhook per approval: {hooks:?}");
    let request = &hooks[0];
    assert_eq!(
        request.header(&notify::SIGNATURE_HEADER.to_ascii_lowercase()).unwrap(),
        notify::signature(b"hook-secret", request.body.as_bytes())
    );
    let body: Value = serde_json::from_str(&request.body).unwrap();
    assert_eq!(body["approval_id"], id.as_str());
    assert_eq!(body["tenant"], "acme");
    assert_eq!(body["session_id"], session.as_str());
    assert_eq!(body["tool"], "local-system");
    assert!(body["summary"].as_str().unwrap().contains("echo across"), "{body}");
    assert!(body["text"].as_str().unwrap().contains("Approval needed"), "{body}");
    let link = body["link"].as_str().unwrap().to_owned();
    assert!(link.ends_with(&format!("/console/approvals/{id}")), "{link}");
    let mails = mail.mails();
    assert_eq!(mails.len(), 1, "one e-mail per approval");
    assert_eq!(mails[0].to, vec!["approvers@example.test".to_owned()]);
    let unwrapped = mails[0].data.replace("=\r\n", "");
    assert!(unwrapped.contains(&id), "the mail links the approval: {unwrapped}");

    // The deep link opens that approval (on the instance it names, signed in there).
    sign_in(&browser, &a.base, ALICE).await;
    browser.goto(&link).await;
    let shown = browser.wait_for("main", Duration::from_secs(5)).await;
    let text = browser.text(&shown).await;
    assert!(text.contains("Decided") && text.contains("acme/person/alice via console"), "{text}");

    // An expired approval is followed up.
    drop(browser);
    let short = |args: &mut toolhost_server::ServeArgs| {
        configure(args);
        args.approval_timeout_secs = 1;
    };
    let c = keyed(&roots, short).await;
    let session = c.session(json!({"working_directory": ws})).await;
    let expired = c.call(&session, "x2", "runCommand", json!({"command": "echo nobody"})).await;
    assert_ne!(expired["status"], "executed", "{expired}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while hook.received().len() < 3 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let bodies: Vec<Value> = hook.received().iter().map(|r| serde_json::from_str(&r.body).unwrap()).collect();
    let events: Vec<&str> = bodies.iter().skip(1).filter_map(|b| b["event"].as_str()).collect();
    assert_eq!(events, ["approval.asked", "approval.expired"], "{bodies:?}");
}
