//! `[apis.NAME]` tables mounted: what the model is given (names, tiers, trust, exposure, provider
//! projections) and what leaves (parameters in their styles, bodies in their media types, the
//! credential where each security scheme says), against a loopback service that answers every
//! request with what it received.

use std::collections::BTreeMap;
use std::path::Path;

use builtin_tool_api::mount::{self, MountError, MountOptions, Mounted};
use serde_json::{Value, json};
use tool_core::provider::Provider;
use tool_core::{CallContext, ErrorKind, Exposure, Intervention, InterventionPolicy, Tier, TierSpec};

/// A loopback service answering each request with JSON of what it received; it serves
/// `document` at `/openapi.json`. Returns its port.
fn echo_service(document: Option<String>) -> u16 {
    test_support::http::Service::start(move |request| match &document {
        Some(document) if request.target() == "/openapi.json" => (200, "application/json", document.clone()),
        _ => (200, "application/json", test_support::http::echo_json(request)),
    })
    .port()
}

/// A 3.0 document of a few operations, with every kind of security scheme.
fn document(port: u16) -> Value {
    json!({
        "openapi": "3.0.3",
        "info": {"title": "Echo", "version": "1", "description": "Says what it got."},
        "servers": [{"url": format!("http://127.0.0.1:{port}/base")}],
        "security": [{"header_key": []}],
        "components": {"securitySchemes": {
            "header_key": {"type": "apiKey", "in": "header", "name": "X-Key"},
            "query_key": {"type": "apiKey", "in": "query", "name": "api_key"},
            "cookie_key": {"type": "apiKey", "in": "cookie", "name": "session"},
            "token": {"type": "http", "scheme": "bearer"},
            "login": {"type": "http", "scheme": "basic"}
        }},
        "paths": {
            "/items/{id}": {
                "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}],
                "get": {
                    "operationId": "getItem",
                    "summary": "One item",
                    "parameters": [
                        {"name": "tags", "in": "query", "schema": {"type": "array", "items": {"type": "string"}}},
                        {"name": "ids", "in": "query", "explode": false, "schema": {"type": "array", "items": {"type": "integer"}}},
                        {"name": "filter", "in": "query", "style": "deepObject", "schema": {"type": "object", "properties": {"color": {"type": "string"}}}},
                        {"name": "X-Trace", "in": "header", "schema": {"type": "string"}},
                        {"name": "lang", "in": "cookie", "schema": {"type": "string"}}
                    ]
                },
                "delete": {"operationId": "deleteItem", "security": [{"token": []}]},
                "put": {
                    "operationId": "putItem",
                    "security": [{"login": []}],
                    "requestBody": {"required": true, "content": {"application/x-www-form-urlencoded": {"schema": {
                        "type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"}}
                    }}}}
                }
            },
            "/search": {"get": {"operationId": "search", "security": [{"query_key": []}],
                "parameters": [
                    {"name": "q", "in": "query", "required": true, "schema": {"type": "string"}},
                    {"name": "extra", "in": "query", "schema": {"type": "object", "additionalProperties": {"type": "string"}}}
                ]}},
            "/elsewhere": {"get": {"operationId": "elsewhere", "servers": [{"url": "https://other.example"}]}},
            "/me": {"get": {"operationId": "me", "security": [{"cookie_key": []}]}},
            "/open": {"get": {"operationId": "open", "security": []}},
            "/upload": {"post": {"operationId": "upload", "requestBody": {"content": {"multipart/form-data": {"schema": {
                "type": "object", "properties": {"note": {"type": "string"}}
            }}}}}}
        }
    })
}

const SECRET: &str = "user:pa55-word";

fn options(dir: &Path) -> MountOptions {
    let credentials = credentials::Credentials::new();
    credentials
        .insert("echo", credentials::Secret::new(SECRET.into()), credentials::Source::Operator)
        .unwrap();
    MountOptions { credentials: Some(credentials), base_dir: Some(dir.to_owned()) }
}

fn config(text: &str) -> BTreeMap<String, mount::ApiConfig> {
    mount::parse_config(text).unwrap()
}

async fn mount_one(dir: &Path, text: &str) -> Mounted {
    let (mut mounted, errors) = mount::mount(&config(text), &options(dir)).await;
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(mounted.len(), 1);
    mounted.pop().unwrap()
}

async fn call(mounted: &Mounted, function: &str, arguments: Value) -> tool_core::ToolOutput {
    mounted.runtime.execute(function, arguments, &CallContext::new("c", "s")).await
}

/// What the echo service received, from a successful call.
fn received(output: &tool_core::ToolOutput) -> Value {
    assert!(output.success, "{output:?}");
    let body = output.content.split_once('\n').unwrap().1;
    serde_json::from_str(body).unwrap()
}

#[tokio::test]
async fn parameters_bodies_and_credentials_leave_as_the_document_says() {
    let dir = tempfile::tempdir().unwrap();
    let port = echo_service(None);
    std::fs::write(dir.path().join("echo.json"), document(port).to_string()).unwrap();
    let api = mount_one(
        dir.path(),
        "[apis.echo]\nopenapi = \"echo.json\"\ncredential = \"echo\"\nallow_hosts = [\"127.0.0.1\"]\n",
    )
    .await;

    let got = received(
        &call(
            &api,
            "echo__getItem",
            json!({"id": "a b/c", "tags": ["x", "y"], "ids": [1, 2], "filter": {"color": "red"},
                   "X-Trace": "t-1", "lang": "fr"}),
        )
        .await,
    );
    assert_eq!(
        got["line"], "GET /base/items/a%20b%2Fc?tags=x&tags=y&ids=1%2C2&filter%5Bcolor%5D=red HTTP/1.1",
        "{got}"
    );
    assert_eq!(got["headers"]["x-trace"], "t-1");
    assert_eq!(got["headers"]["cookie"], "lang=fr");
    // The document's global scheme: a header.
    assert_eq!(got["headers"]["x-key"], SECRET);

    let search = received(&call(&api, "echo__search", json!({"q": "rust"})).await);
    assert!(search["line"].as_str().unwrap().contains("q=rust&api_key=user%3Apa55-word"), "{search}");
    // A parameter the model names like the credential's is dropped, not sent beside it.
    let spoof = received(
        &call(&api, "echo__search", json!({"q": "x", "extra": {"api_key": "mine", "page": "2"}})).await,
    );
    let line = spoof["line"].as_str().unwrap();
    assert!(
        line.contains("page=2") && line.contains("api_key=user%3Apa55-word") && !line.contains("mine"),
        "{line}"
    );
    // A header value with a line break is refused, not dropped.
    let smuggled = call(&api, "echo__getItem", json!({"id": "1", "X-Trace": "a\r\nX-Evil: 1"})).await;
    assert_eq!(smuggled.error.unwrap().kind, ErrorKind::InvalidArguments);
    let me = received(&call(&api, "echo__me", json!({})).await);
    assert_eq!(me["headers"]["cookie"], "session=user%3Apa55-word");
    let delete = received(&call(&api, "echo__deleteItem", json!({"id": "1"})).await);
    assert_eq!(delete["headers"]["authorization"], format!("Bearer {SECRET}"));
    let put =
        received(&call(&api, "echo__putItem", json!({"id": "1", "body": {"name": "a&b", "n": 3}})).await);
    assert_eq!(put["headers"]["authorization"], "Basic dXNlcjpwYTU1LXdvcmQ=");
    assert_eq!(put["headers"]["content-type"], "application/x-www-form-urlencoded");
    assert_eq!(put["body"], "name=a%26b&n=3");
    // An operation served at another origin does not get the credential, and the person is told.
    assert!(
        api.notes.iter().any(|n| n.contains("elsewhere is served at https://other.example")),
        "{:?}",
        api.notes
    );
    // `security: []`: nothing is added.
    let open = received(&call(&api, "echo__open", json!({})).await);
    assert!(
        open["headers"].get("x-key").is_none() && open["headers"].get("authorization").is_none(),
        "{open}"
    );
    let upload = received(&call(&api, "echo__upload", json!({"body": {"note": "hi"}})).await);
    let content_type = upload["headers"]["content-type"].as_str().unwrap();
    let boundary = content_type.strip_prefix("multipart/form-data; boundary=").unwrap();
    assert!(
        upload["body"].as_str().unwrap().contains(&format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nhi\r\n--{boundary}--"
        )),
        "{upload}"
    );

    // A path parameter cannot climb out of its segment.
    for climb in ["..", ".", ""] {
        let refused = call(&api, "echo__getItem", json!({"id": climb})).await;
        let error = refused.error.unwrap();
        assert_eq!(error.kind, ErrorKind::InvalidArguments, "{climb}");
        assert!(error.message.contains("one segment of the path"), "{}", error.message);
    }
    // A missing required path parameter is the model's to fix; nothing is sent.
    let missing = call(&api, "echo__getItem", json!({})).await;
    assert_eq!(missing.error.unwrap().kind, ErrorKind::InvalidArguments);
    let unknown = call(&api, "echo__nope", json!({})).await;
    assert_eq!(unknown.error.unwrap().kind, ErrorKind::UnknownTool);

    // An answer past `max_response_kib` is cut there and said to be.
    let small = mount_one(
        dir.path(),
        "[apis.echo]\nopenapi = \"echo.json\"\nallow_hosts = [\"127.0.0.1\"]\nmax_response_kib = 1\n",
    )
    .await;
    let long = call(&small, "echo__putItem", json!({"id": "1", "body": {"name": "x".repeat(4000)}})).await;
    assert!(long.success, "{long:?}");
    assert!(
        long.content
            .ends_with("[the answer was cut at 1 KiB (max_response_kib); ask for less, e.g. a smaller page]"),
        "{}",
        long.content
    );
    assert_eq!(long.state.unwrap()["truncated"], true);
}

#[tokio::test]
async fn the_table_decides_names_trust_tiers_exposure_and_where_the_credential_goes() {
    let dir = tempfile::tempdir().unwrap();
    let port = echo_service(None);
    std::fs::write(dir.path().join("echo.json"), document(port).to_string()).unwrap();
    let api = mount_one(
        dir.path(),
        "[apis.echo]\nopenapi = \"echo.json\"\ncredential = \"echo\"\nallow_hosts = [\"127.0.0.1\"]\n\
         auth = { in = \"header\", name = \"X-Override\" }\nexclude = [\"upload\"]\n\
         include = [\"getItem\", \"deleteItem\", \"putItem\", \"open\", \"upload\"]\n\
         operations = { deleteItem = \"ask\", putItem = \"deny\", open = \"auto\" }\n",
    )
    .await;
    let manifest = &api.manifest;
    assert_eq!(manifest.identifier, "api-echo");
    assert_eq!(manifest.exposure, Exposure::Auto);
    let names: Vec<&str> = manifest.apis.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["echo__getItem", "echo__deleteItem", "echo__open"]);
    assert!(api.notes.is_empty(), "{:?}", api.notes);
    let spec = |name: &str| manifest.apis.iter().find(|a| a.name == name).unwrap();
    assert_eq!(spec("echo__getItem").tier, TierSpec::Fixed(Tier::Read));
    assert_eq!(spec("echo__getItem").intervention, Some(InterventionPolicy::Fixed(Intervention::Never)));
    assert_eq!(spec("echo__deleteItem").tier, TierSpec::Fixed(Tier::Write));
    assert_eq!(spec("echo__deleteItem").intervention, Some(InterventionPolicy::Fixed(Intervention::Always)));
    assert!(spec("echo__getItem").description.starts_with("One item (GET /items/{id}; API `echo`)"));
    // The override puts the credential in its header on every operation, even `security: []`.
    let open = received(&call(&api, "echo__open", json!({})).await);
    assert_eq!(open["headers"]["x-override"], SECRET, "{open}");

    // Each function's schema is accepted as every provider declares it; closed ones are strict.
    let mut strict = 0;
    for spec in &manifest.apis {
        for provider in [Provider::Openai, Provider::Anthropic, Provider::Gemini] {
            let declared = provider.declare(&spec.name, spec);
            assert!(!declared.to_string().contains("$ref"), "{declared}");
        }
        let openai = Provider::Openai.declare(&spec.name, spec);
        if openai["function"]["strict"] == true {
            tool_core::provider::check_openai_strict(&openai["function"]["parameters"]).unwrap();
            strict += 1;
        }
    }
    assert_eq!(strict, manifest.apis.len(), "every operation here has a closed schema");
}

#[tokio::test]
async fn a_document_by_url_a_large_one_and_what_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    // 1 200 operations: found through tool search, not declared at once.
    let mut paths = serde_json::Map::new();
    for i in 0..600 {
        paths.insert(
            format!("/things{i}/{{id}}"),
            json!({
                "get": {"operationId": format!("getThing{i}"), "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "integer"}}]},
                "post": {"operationId": format!("makeThing{i}"), "requestBody": {"content": {"application/json": {"schema": {"type": "object"}}}}}
            }),
        );
    }
    let large = json!({"openapi": "3.1.0", "info": {"title": "Big", "version": "1"}, "paths": paths});
    let port = echo_service(Some(large.to_string()));
    let text = format!(
        "[apis.big]\nopenapi = \"http://127.0.0.1:{port}/openapi.json\"\nallow_hosts = [\"127.0.0.1\"]\n"
    );
    let api = mount_one(dir.path(), &text).await;
    assert_eq!(api.manifest.apis.len(), 1200);
    assert_eq!(api.manifest.exposure, Exposure::Deferred);
    let mut names: Vec<&str> = api.manifest.apis.iter().map(|a| a.name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), 1200);
    // The document's server is relative to nothing, so the URL it came from is the base.
    let got = received(&call(&api, "big__getThing7", json!({"id": 3})).await);
    assert_eq!(got["line"], "GET /things7/3 HTTP/1.1");

    // The same URL with its host not allowed: the document is not fetched (a private address).
    let (mounted, errors) = mount::mount(
        &config(&format!("[apis.big]\nopenapi = \"http://127.0.0.1:{port}/openapi.json\"\n")),
        &options(dir.path()),
    )
    .await;
    assert!(mounted.is_empty());
    assert!(errors[0].to_string().contains("allow_hosts"), "{errors:?}");

    // A credential no one holds, an unknown auth kind, no server: each API is left out, said why.
    std::fs::write(dir.path().join("echo.json"), document(port).to_string()).unwrap();
    std::fs::write(
        dir.path().join("bare.json"),
        json!({"openapi": "3.0.0", "info": {"title": "B", "version": "1"}, "paths": {"/x": {"get": {}}}})
            .to_string(),
    )
    .unwrap();
    let (mounted, errors) = mount::mount(
        &config(
            "[apis.a]\nopenapi = \"echo.json\"\ncredential = \"absent\"\n\
             [apis.b]\nopenapi = \"echo.json\"\ncredential = \"echo\"\nauth = { in = \"header\" }\n\
             [apis.c]\nopenapi = \"bare.json\"\n\
             [apis.d]\nopenapi = \"missing.json\"\n\
             [apis.e]\nopenapi = \"echo.json\"\nenabled = false\n",
        ),
        &options(dir.path()),
    )
    .await;
    assert!(mounted.is_empty());
    let said: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert_eq!(said.len(), 4, "{said:?}");
    assert!(said[0].contains("toolhost creds set absent"), "{said:?}");
    assert!(said[1].contains("needs a `name`"), "{said:?}");
    assert!(said[2].contains("set `base_url`"), "{said:?}");
    assert!(said[3].contains("missing.json"), "{said:?}");

    // A credential goes only where the operator said: a document fetched from a URL needs
    // `base_url`, and clear-text http to a host not allowed is refused.
    let (_, errors) = mount::mount(
        &config(&format!(
            "[apis.a]\nopenapi = \"http://127.0.0.1:{port}/openapi.json\"\nallow_hosts = [\"127.0.0.1\"]\ncredential = \"echo\"\n\
             [apis.b]\nopenapi = \"echo.json\"\ncredential = \"echo\"\nbase_url = \"http://api.example.com/v1\"\n"
        )),
        &options(dir.path()),
    )
    .await;
    let said: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert!(said[0].contains("set `base_url`"), "{said:?}");
    assert!(said[1].contains("clear text"), "{said:?}");

    // A table with an unknown field or a bad name is refused whole.
    for bad in ["[apis.a]\nopenapi = \"x\"\nurl = \"y\"\n", "[apis.\"a b\"]\nopenapi = \"x\"\n"] {
        assert!(matches!(mount::parse_config(bad), Err(MountError::Config(_))), "{bad}");
    }
    // Other tables of the mount file are left alone.
    assert!(mount::parse_config("[servers.x]\ncommand = \"y\"\n").unwrap().is_empty());
}

#[tokio::test]
async fn a_private_address_is_refused_when_called() {
    let dir = tempfile::tempdir().unwrap();
    let port = echo_service(None);
    std::fs::write(dir.path().join("echo.json"), document(port).to_string()).unwrap();
    // The document names a loopback server; the table does not allow it.
    let api = mount_one(dir.path(), "[apis.echo]\nopenapi = \"echo.json\"\ncredential = \"echo\"\n").await;
    let refused = call(&api, "echo__open", json!({})).await;
    let error = refused.error.unwrap();
    assert_eq!(error.kind, ErrorKind::Blocked);
    assert!(error.message.contains("allow_hosts"), "{}", error.message);
    // A metadata address given as the base is refused the same way.
    let api = mount_one(
        dir.path(),
        "[apis.echo]\nopenapi = \"echo.json\"\nbase_url = \"http://169.254.169.254/latest\"\n",
    )
    .await;
    let refused = call(&api, "echo__open", json!({})).await;
    assert_eq!(refused.error.unwrap().kind, ErrorKind::Blocked);
}

#[tokio::test]
async fn what_reading_the_document_simplified_is_told() {
    let dir = tempfile::tempdir().unwrap();
    let document = json!({
        "openapi": "3.1.0",
        "info": {"title": "Refs", "version": "1"},
        "servers": [{"url": "https://api.example.com"}],
        "paths": {"/x": {"post": {"operationId": "makeX", "requestBody": {"content": {"application/json": {
            "schema": {"$ref": "other.yaml#/Thing"}
        }}}}}}
    });
    std::fs::write(dir.path().join("refs.json"), document.to_string()).unwrap();
    let api = mount_one(dir.path(), "[apis.refs]\nopenapi = \"refs.json\"\n").await;
    assert!(
        api.notes.iter().any(|n| n.starts_with("API `refs`: ") && n.contains("other.yaml")),
        "{:?}",
        api.notes
    );
}
