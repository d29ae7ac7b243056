//! Reading API description documents into operations.
//!
//! Three hand-written fixtures in the shapes of well-known public APIs (a Swagger 2.0 pet shop in
//! JSON, an OpenAPI 3.0 pet store in YAML, an OpenAPI 3.1 document with recursion, webhooks and an
//! external reference), hostile documents built in the test, and a large generated one. Every
//! operation of every document is also held to the invariants and to the provider projections
//! Toolhost declares APIs with.

use std::collections::HashSet;

use builtin_tool_api::document::{
    ApiDocument, DocumentError, KeyLocation, MAX_INPUT_BYTES, MAX_SCHEMA_NODES, Method, ParamLocation,
    ParamStyle, SecurityScheme, SpecVersion, parse,
};
use serde_json::{Value, json};
use tool_core::ApiSpec;
use tool_core::provider::{Provider, check_openai_strict};

fn fixture(name: &str) -> ApiDocument {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let doc = parse(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
    check_invariants(&doc);
    check_projections(&doc);
    doc
}

fn op<'a>(doc: &'a ApiDocument, name: &str) -> &'a builtin_tool_api::document::Operation {
    doc.operation(name).unwrap_or_else(|| panic!("no operation {name}"))
}

fn names(doc: &ApiDocument) -> Vec<&str> {
    doc.operations.iter().map(|o| o.name.as_str()).collect()
}

fn is_provider_name(name: &str) -> bool {
    (1..=48).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

fn is_argument_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
}

/// Whether a `$ref` key is left anywhere in `value`.
fn has_ref(value: &Value) -> bool {
    match value {
        Value::Object(map) => map.contains_key("$ref") || map.values().any(has_ref),
        Value::Array(items) => items.iter().any(has_ref),
        _ => false,
    }
}

fn count_nodes(value: &Value) -> usize {
    match value {
        Value::Object(map) => 1 + map.values().map(count_nodes).sum::<usize>(),
        Value::Array(items) => items.iter().map(count_nodes).sum(),
        _ => 0,
    }
}

/// What every operation of every document must satisfy.
fn check_invariants(doc: &ApiDocument) {
    let mut seen = HashSet::new();
    for op in &doc.operations {
        let name = &op.name;
        assert!(is_provider_name(name), "name {name:?}");
        assert!(seen.insert(name.clone()), "duplicate name {name}");
        assert!(!has_ref(&op.input_schema), "{name}: $ref left in {}", op.input_schema);
        assert_eq!(op.input_schema["type"], "object", "{name}");
        assert_eq!(op.input_schema["additionalProperties"], false, "{name}");
        let properties = op.input_schema["properties"].as_object().expect("properties");
        let required: Vec<&str> = op.input_schema["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        assert_eq!(properties.len(), op.parameters.len() + usize::from(op.body.is_some()), "{name}");
        let mut arguments = HashSet::new();
        for p in &op.parameters {
            assert!(is_argument_name(&p.argument), "{name}: argument {:?}", p.argument);
            assert_ne!(p.argument, "body", "{name}");
            assert!(arguments.insert(&p.argument), "{name}: argument {} twice", p.argument);
            assert_eq!(properties.get(&p.argument), Some(&p.schema), "{name}: {}", p.argument);
            assert_eq!(required.contains(&p.argument.as_str()), p.required, "{name}: {}", p.argument);
            if p.location == ParamLocation::Path {
                assert!(p.required, "{name}: path parameter {} not required", p.name);
            }
        }
        if let Some(body) = &op.body {
            assert_eq!(properties["body"], body.schema, "{name}");
            assert_eq!(required.contains(&"body"), body.required, "{name}");
        }
        let chars = op.description.chars().count();
        assert!((1..=1024).contains(&chars), "{name}: description of {chars} chars");
        if let Err(e) = jsonschema::validator_for(&op.input_schema) {
            panic!("{name}: the input schema does not compile: {e}\n{}", op.input_schema);
        }
    }
}

/// An API declared the way Toolhost declares one, with the operation's input schema.
fn api_spec(op: &builtin_tool_api::document::Operation) -> ApiSpec {
    let mut api = ApiSpec::new::<Value>(op.name.clone(), op.description.clone());
    api.parameters = op.input_schema.clone();
    api
}

/// Declares every operation for every provider; returns the names OpenAI gets in strict mode.
///
/// A schema strict mode cannot express (an open map, an untyped node, a multi-part `allOf`) is
/// declared with `strict: false` by `openai_function`; that is the projection's choice, not a
/// refusal. A schema declared strict must pass `check_openai_strict`.
fn check_projections(doc: &ApiDocument) -> Vec<String> {
    let mut strict = Vec::new();
    for op in &doc.operations {
        let api = api_spec(op);
        let openai = Provider::Openai.declare(&op.name, &api);
        let parameters = &openai["function"]["parameters"];
        if openai["function"]["strict"] == true {
            if let Err(problems) = check_openai_strict(parameters) {
                panic!("{}: declared strict but refused: {problems:#?}\n{parameters}", op.name);
            }
            strict.push(op.name.clone());
        }
        let anthropic = Provider::Anthropic.declare(&op.name, &api);
        assert_eq!(anthropic["input_schema"]["type"], "object", "{}", op.name);
        if let Err(e) = jsonschema::validator_for(&anthropic["input_schema"]) {
            panic!("{}: the Anthropic schema does not compile: {e}", op.name);
        }
        for provider in [Provider::Gemini, Provider::Mcp] {
            let declared = provider.declare(&op.name, &api);
            assert!(!has_ref(&declared), "{}: {declared}", op.name);
        }
    }
    strict
}

fn accepts(doc: &ApiDocument, name: &str, arguments: Value) {
    let schema = &op(doc, name).input_schema;
    let validator = jsonschema::validator_for(schema).unwrap();
    let errors: Vec<String> = validator.iter_errors(&arguments).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{name} refused {arguments}: {errors:?}\n{schema}");
}

fn refuses(doc: &ApiDocument, name: &str, arguments: Value) {
    let schema = &op(doc, name).input_schema;
    let validator = jsonschema::validator_for(schema).unwrap();
    assert!(!validator.is_valid(&arguments), "{name} accepted {arguments}\n{schema}");
}

fn security(alternatives: &[&[&str]]) -> Option<Vec<Vec<String>>> {
    Some(alternatives.iter().map(|a| a.iter().map(|s| (*s).to_owned()).collect()).collect())
}

fn has_note(doc: &ApiDocument, needle: &str) -> bool {
    doc.notes.iter().any(|n| n.contains(needle))
}

#[test]
fn swagger2_pet_shop() {
    let doc = fixture("petstore-swagger2.json");
    assert_eq!(doc.version, SpecVersion::Swagger2);
    assert_eq!(doc.title, "Harbour Pet Shop");
    assert_eq!(
        doc.description.as_deref(),
        Some("A small pet shop API used to test Swagger 2.0 reading: pets, orders and users.")
    );
    assert_eq!(doc.servers, ["https://pets.harbour.example/v2"], "https over http, no trailing slash");
    assert_eq!(
        names(&doc),
        [
            "updatePet",
            "addPet",
            "findPetsByStatus",
            "findPetsByTags",
            "getPetById",
            "updatePetWithForm",
            "deletePet",
            "uploadFile",
            "getInventory",
            "placeOrder",
            "getOrderById",
            "deleteOrder",
            "loginUser",
            "user_logout",
            "getUserByName",
            "updateUser",
            "deleteUser",
        ]
    );
    assert_eq!(doc.security_schemes.len(), 3);
    assert_eq!(doc.security_schemes["shop_oauth"], SecurityScheme::Bearer);
    assert_eq!(doc.security_schemes["staff"], SecurityScheme::Basic);
    assert_eq!(
        doc.security_schemes["api_key"],
        SecurityScheme::ApiKey { location: KeyLocation::Header, name: "X-Api-Key".into() }
    );

    let add = op(&doc, "addPet");
    assert_eq!((add.method, add.path.as_str()), (Method::Post, "/pet"));
    assert_eq!(add.description, "Add a pet to the shop");
    let body = add.body.as_ref().unwrap();
    assert_eq!(body.content_type, "application/json", "json preferred over the xml listed first");
    assert!(body.required);
    assert_eq!(body.schema["description"], "The pet to add");
    assert_eq!(body.schema["required"], json!(["name", "photoUrls"]));
    assert_eq!(body.schema["properties"]["category"]["properties"]["name"], json!({"type": "string"}));
    assert_eq!(body.schema["properties"]["tags"]["items"]["type"], "object");
    assert_eq!(body.schema["properties"]["nickname"]["type"], json!(["string", "null"]), "x-nullable");
    let text = body.schema.to_string();
    assert!(!text.contains("xml") && !text.contains("example") && !text.contains("x-"), "{text}");
    assert_eq!(add.security, security(&[&["shop_oauth"]]));
    assert!(add.parameters.is_empty());

    let by_status = op(&doc, "findPetsByStatus");
    let [status, trace] = &by_status.parameters[..] else { panic!("{:?}", by_status.parameters) };
    assert_eq!((status.location, status.argument.as_str()), (ParamLocation::Query, "status"));
    assert!(status.explode && status.required);
    assert_eq!(status.style, ParamStyle::Form);
    assert_eq!(
        status.schema,
        json!({"type": "array",
               "items": {"type": "string", "enum": ["available", "pending", "sold"], "default": "available"},
               "description": "Statuses to match; repeat the parameter for each"})
    );
    assert_eq!((trace.name.as_str(), trace.location), ("X-Trace-Id", ParamLocation::Header));
    assert_eq!(trace.argument, "X-Trace-Id");
    assert_eq!(trace.schema["format"], "uuid");
    assert_eq!(by_status.security, security(&[&["shop_oauth"], &["api_key"]]));

    let by_tags = op(&doc, "findPetsByTags");
    assert!(by_tags.deprecated);
    assert!(!by_tags.parameters[0].explode, "csv is one parameter");
    assert_eq!(by_tags.description, "Pets by tags\n\nComma-separated tags.");

    let form = op(&doc, "updatePetWithForm");
    let body = form.body.as_ref().unwrap();
    assert_eq!(body.content_type, "application/x-www-form-urlencoded");
    assert!(!body.required);
    assert_eq!(body.schema["properties"]["status"]["enum"], json!(["available", "pending", "sold"]));
    assert_eq!(form.parameters.len(), 1, "formData is the body, not parameters");

    let upload = op(&doc, "uploadFile");
    let body = upload.body.as_ref().unwrap();
    assert_eq!(body.content_type, "multipart/form-data");
    assert!(body.required);
    assert_eq!(
        body.schema["properties"]["file"],
        json!({"type": "string", "description": "The photo (file contents)"})
    );
    assert_eq!(body.schema["required"], json!(["file"]));

    assert_eq!(
        op(&doc, "getInventory").input_schema,
        json!({"type": "object", "properties": {}, "additionalProperties": false})
    );
    let order = op(&doc, "getOrderById").parameters[0].schema.clone();
    assert_eq!(order["exclusiveMinimum"], 0);
    assert!(order.get("minimum").is_none());
    let place = op(&doc, "placeOrder");
    let schema = &place.body.as_ref().unwrap().schema;
    assert!(schema["properties"].get("id").is_none(), "readOnly removed");
    assert_eq!(schema["required"], json!(["petId", "quantity"]));
    assert_eq!(place.security, None, "neither the operation nor the document says");
    assert_eq!(op(&doc, "deleteOrder").security, security(&[&["staff"]]));
    assert_eq!(op(&doc, "user_logout").operation_id.as_deref(), Some("user.logout"));

    let user = op(&doc, "getUserByName");
    assert_eq!(user.parameters[0].name, "username", "path-level $ref parameter");
    assert_eq!(user.parameters[0].schema["pattern"], "^[a-z0-9_]{3,32}$");
    let delete_user = op(&doc, "deleteUser");
    assert_eq!(delete_user.parameters.len(), 1, "overridden, not repeated");
    assert_eq!(delete_user.parameters[0].schema["description"], "The account to delete");
    let delete_pet = op(&doc, "deletePet");
    assert_eq!(
        delete_pet.parameters.iter().map(|p| (p.argument.as_str(), p.location)).collect::<Vec<_>>(),
        [("api_key", ParamLocation::Header), ("petId", ParamLocation::Path)]
    );
    assert!(doc.notes.is_empty(), "{:?}", doc.notes);

    accepts(&doc, "addPet", json!({"body": {"name": "Rex", "photoUrls": [], "status": "sold"}}));
    refuses(&doc, "addPet", json!({"body": {"name": "Rex"}}));
    refuses(&doc, "addPet", json!({"body": {"name": "Rex", "photoUrls": []}, "extra": 1}));
    accepts(&doc, "getPetById", json!({"petId": 7}));
    refuses(&doc, "getPetById", json!({"petId": "seven"}));
    accepts(&doc, "getOrderById", json!({"orderId": 10}));
    refuses(&doc, "getOrderById", json!({"orderId": 0}));
    accepts(&doc, "findPetsByStatus", json!({"status": ["sold", "pending"], "X-Trace-Id": "t"}));
    refuses(&doc, "findPetsByStatus", json!({"status": ["lost"]}));
    accepts(&doc, "uploadFile", json!({"petId": 1, "body": {"file": "…bytes…"}}));
    refuses(&doc, "uploadFile", json!({"petId": 1}));
    accepts(&doc, "placeOrder", json!({"body": {"petId": 1, "quantity": 2}}));
    refuses(&doc, "placeOrder", json!({"body": {"petId": 1, "quantity": 0}}));
}

#[test]
fn openapi30_pet_store_in_yaml() {
    let doc = fixture("petstore-openapi30.yaml");
    assert_eq!(doc.version, SpecVersion::OpenApi30);
    assert_eq!(doc.title, "Meadow Pets");
    assert!(doc.description.as_deref().unwrap().ends_with("unless it says otherwise."));
    assert_eq!(doc.servers, ["https://api.meadow.example/v3", "http://localhost:8080/v3"]);
    assert_eq!(
        names(&doc),
        [
            "listPets",
            "createPet",
            "showPetById",
            "replacePet",
            "delete_pets_petId",
            "uploadPhoto",
            "listOwnerPets",
            "updateOwner",
            "health",
        ]
    );
    assert_eq!(
        doc.security_schemes.keys().map(String::as_str).collect::<Vec<_>>(),
        ["apiKey", "basicAuth", "bearerAuth"]
    );
    assert_eq!(
        doc.security_schemes["apiKey"],
        SecurityScheme::ApiKey { location: KeyLocation::Query, name: "api_key".into() }
    );
    assert!(has_note(&doc, "security scheme `clientCert` left out"), "{:?}", doc.notes);
    assert!(has_note(&doc, "header parameter `Accept` ignored"), "{:?}", doc.notes);

    let list = op(&doc, "listPets");
    assert_eq!(list.description, "List pets\n\nPages through all pets, newest first.");
    assert_eq!(list.security, security(&[&["bearerAuth"], &["apiKey"]]), "the document's");
    let arguments: Vec<(&str, ParamLocation)> =
        list.parameters.iter().map(|p| (p.argument.as_str(), p.location)).collect();
    assert_eq!(
        arguments,
        [
            ("limit", ParamLocation::Query),
            ("tags", ParamLocation::Query),
            ("session_id", ParamLocation::Cookie)
        ]
    );
    assert_eq!(
        list.parameters[0].schema,
        json!({"type": "integer", "format": "int32", "minimum": 1, "maximum": 100, "default": 20,
               "description": "How many items to return at one time (max 100)"})
    );
    assert!(!list.parameters[1].explode);
    assert!(list.parameters[2].explode, "form style explodes by default");
    assert_eq!(list.input_schema.get("required"), None);

    let create = op(&doc, "createPet");
    let body = create.body.as_ref().unwrap();
    assert_eq!(body.content_type, "application/json");
    assert!(body.required);
    assert_eq!(body.schema["description"], "The pet to create");
    let props = &body.schema["properties"];
    assert_eq!(props["tag"], json!({"type": ["string", "null"], "description": "A free label"}));
    assert_eq!(
        props["status"],
        json!({"type": ["string", "null"], "enum": ["available", "pending", "sold", null]}),
        "allOf of one merged, then made nullable"
    );
    assert_eq!(props["birthday"], json!({"type": "string", "format": "date"}));
    for dropped in ["discriminator", "xml", "example", "x-go-type", "nullable"] {
        assert!(!body.schema.to_string().contains(dropped), "{dropped} left in {}", body.schema);
    }

    let show = op(&doc, "showPetById");
    assert_eq!(show.parameters[0].name, "petId");
    assert_eq!(show.parameters[0].schema, json!({"type": "string", "description": "The id of the pet"}));

    let replace = op(&doc, "replacePet");
    let body = replace.body.as_ref().unwrap();
    assert_eq!(body.content_type, "application/json", "over xml and merge-patch+json listed first");
    assert!(body.schema.get("allOf").is_none(), "Pet's allOf merged: {}", body.schema);
    assert_eq!(body.schema["type"], "object");
    assert!(body.schema["properties"].get("id").is_none(), "readOnly id removed");
    assert_eq!(body.schema["required"], json!(["name"]), "and not required");
    assert_eq!(body.schema["properties"]["weight"], json!({"type": "number", "exclusiveMinimum": 0}));

    let delete = op(&doc, "delete_pets_petId");
    assert_eq!(delete.operation_id, None);
    assert_eq!(delete.method, Method::Delete);
    assert_eq!(delete.description, "Delete a pet");
    assert_eq!(delete.security, security(&[&["basicAuth"]]));

    let photo = op(&doc, "uploadPhoto");
    let params: Vec<(&str, ParamLocation)> =
        photo.parameters.iter().map(|p| (p.name.as_str(), p.location)).collect();
    assert_eq!(params, [("petId", ParamLocation::Path), ("X-Request-ID", ParamLocation::Header)]);
    assert_eq!(photo.parameters[0].schema["type"], "integer", "the operation's petId overrides the path's");
    let body = photo.body.as_ref().unwrap();
    assert_eq!(body.content_type, "multipart/form-data");
    assert!(!body.required);
    assert_eq!(body.schema["properties"]["file"], json!({"type": "string", "format": "binary"}));

    let owner_pets = op(&doc, "listOwnerPets");
    let arguments: Vec<(&str, &str)> =
        owner_pets.parameters.iter().map(|p| (p.name.as_str(), p.argument.as_str())).collect();
    assert_eq!(arguments, [("id", "id"), ("id", "query_id"), ("filter[status]", "filter_status")]);
    assert_eq!(owner_pets.parameters[2].schema["enum"], json!(["available", "pending", "sold"]));

    let owner = op(&doc, "updateOwner");
    let schema = &owner.body.as_ref().unwrap().schema;
    assert!(schema["properties"].get("id").is_none());
    assert_eq!(schema["properties"]["address"]["type"], json!(["object", "null"]));
    assert_eq!(schema["properties"]["phone"], json!({"type": ["string", "null"]}));

    let health = op(&doc, "health");
    assert_eq!(health.security, Some(vec![]), "explicitly none");
    assert!(health.method.is_read() && !Method::Post.is_read());
    assert_eq!(health.method.as_str(), "GET");

    accepts(&doc, "createPet", json!({"body": {"name": "Rex", "tag": null, "status": null}}));
    accepts(&doc, "createPet", json!({"body": {"name": "Rex", "status": "sold"}}));
    refuses(&doc, "createPet", json!({"body": {"name": "Rex", "status": "lost"}}));
    refuses(&doc, "createPet", json!({"body": {"tag": "x"}}));
    accepts(&doc, "replacePet", json!({"petId": "p1", "body": {"name": "Rex", "weight": 3.5}}));
    refuses(&doc, "replacePet", json!({"petId": "p1", "body": {"name": "Rex", "weight": 0}}));
    accepts(&doc, "updateOwner", json!({"id": "o1", "body": {"address": null, "name": "Ann"}}));
    refuses(&doc, "updateOwner", json!({"id": "o1", "body": {"address": "nowhere"}}));
    accepts(&doc, "listOwnerPets", json!({"id": "o1", "query_id": [1, 2], "filter_status": "sold"}));
    refuses(&doc, "listOwnerPets", json!({"query_id": [1]}));
    accepts(&doc, "listPets", json!({}));
    refuses(&doc, "listPets", json!({"limit": 500}));
}

#[test]
fn openapi31_recursion_webhooks_and_external_references() {
    let doc = fixture("openapi31.json");
    assert_eq!(doc.version, SpecVersion::OpenApi31);
    assert_eq!(doc.servers, ["/api/v1"], "relative: the caller resolves it");
    assert_eq!(doc.description, None);
    assert_eq!(names(&doc), ["trees_list", "trees_create", "trees_get", "trees_branches_get", "staff_add"]);
    assert_eq!(op(&doc, "trees_create").operation_id.as_deref(), Some("trees/create"));
    assert!(has_note(&doc, "1 webhook(s) not read"), "{:?}", doc.notes);
    assert_eq!(doc.security_schemes["oidc"], SecurityScheme::Bearer);
    assert_eq!(
        doc.security_schemes["partnerKey"],
        SecurityScheme::ApiKey { location: KeyLocation::Cookie, name: "partner".into() }
    );
    assert!(has_note(&doc, "`signed` left out") && has_note(&doc, "`digest` left out"), "{:?}", doc.notes);

    let create = op(&doc, "trees_create");
    assert_eq!(create.security, security(&[&["oidc"]]));
    let body = &create.body.as_ref().unwrap().schema;
    let props = &body["properties"];
    assert_eq!(props["kind"], json!({"const": "tree", "description": "Always `tree`"}));
    assert_eq!(props["keeper"]["type"], json!(["string", "null"]));
    assert_eq!(props["metadata"], json!({}), "external reference: any value");
    assert!(has_note(&doc, "external reference `other.yaml#/Foo` not followed"), "{:?}", doc.notes);
    assert_eq!(props["root"]["description"], "The trunk", "a description beside $ref wins");
    assert_eq!(props["root"]["properties"]["label"]["examples"], json!(["trunk"]));
    assert_eq!(
        props["root"]["properties"]["children"]["items"],
        json!({"type": "object", "description": "Recursive: TreeNode (cut here)"})
    );
    assert!(has_note(&doc, "recursive schema `#/components/schemas/TreeNode`"), "{:?}", doc.notes);

    let staff = op(&doc, "staff_add");
    assert_eq!(staff.security, security(&[&["oidc", "partnerKey"]]));
    let employee = &staff.body.as_ref().unwrap().schema;
    assert_eq!(employee["properties"]["role"], json!({"enum": ["keeper", "guide", "manager"]}));
    assert_eq!(
        employee["properties"]["manager"]["properties"]["reports"]["items"],
        json!({"type": "object", "description": "Recursive: Employee (cut here)"}),
        "a mutually recursive pair is cut where it closes"
    );
    let cycles = doc.notes.iter().filter(|n| n.contains("recursive schema")).count();
    assert_eq!(cycles, 2, "one note per cycle: {:?}", doc.notes);

    let list = op(&doc, "trees_list");
    let [species, filter, page] = &list.parameters[..] else { panic!() };
    assert_eq!(species.schema, json!({"type": ["string", "null"], "examples": ["oak", "beech"]}));
    assert_eq!(filter.content_type.as_deref(), Some("application/json"));
    assert_eq!(filter.schema["description"], "A filter as JSON");
    assert_eq!(filter.schema["properties"]["minHeight"]["exclusiveMinimum"], 0);
    assert_eq!(page.schema["default"], 1);

    let branch = op(&doc, "trees_branches_get");
    assert_eq!(branch.description, "One branch of a tree.");
    assert_eq!(
        branch.parameters.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        ["treeId", "branchId"],
        "the undeclared template variable is added"
    );
    assert!(has_note(&doc, "path variable `branchId` is not declared"), "{:?}", doc.notes);
    assert_eq!(op(&doc, "trees_get").description, "GET /trees/{treeId}");

    accepts(
        &doc,
        "trees_create",
        json!({"body": {"kind": "tree", "root": {"label": "trunk", "children": [{"label": "b", "children": []}]},
                        "metadata": {"anything": true}, "keeper": null}}),
    );
    refuses(&doc, "trees_create", json!({"body": {"kind": "bush", "root": {"label": "trunk"}}}));
    refuses(&doc, "trees_create", json!({"body": {"kind": "tree", "root": {"girth": 2}}}));
    accepts(&doc, "staff_add", json!({"body": {"name": "Ann", "manager": {"name": "Bo", "reports": [{}]}}}));
    refuses(&doc, "staff_add", json!({"body": {"name": "Ann", "role": "owner"}}));
    accepts(&doc, "trees_branches_get", json!({"treeId": "t", "branchId": "b"}));
    refuses(&doc, "trees_branches_get", json!({"treeId": "t"}));
}

#[test]
fn fixtures_are_mostly_strict_for_openai() {
    // Recursion and external references need open schemas; everything else should stay strict.
    let cases: [(&str, &[&str]); 3] = [
        ("petstore-swagger2.json", &[]),
        ("petstore-openapi30.yaml", &[]),
        ("openapi31.json", &["trees_create", "staff_add"]),
    ];
    for (file, loose) in cases {
        let doc = fixture(file);
        let strict = check_projections(&doc);
        let expected: Vec<&str> = names(&doc).into_iter().filter(|n| !loose.contains(n)).collect();
        assert_eq!(strict, expected, "{file}");
    }
}

/// A document with `count` levels of schemas, each level referring to the next `fanout` times.
fn chain_document(count: usize, fanout: usize, operations: usize) -> Value {
    chain_document_to(count, fanout, operations, json!({"type": "string"}))
}

/// As [`chain_document`], ending in `leaf`.
fn chain_document_to(count: usize, fanout: usize, operations: usize, leaf: Value) -> Value {
    let mut schemas = serde_json::Map::new();
    for level in 0..count {
        let properties: serde_json::Map<String, Value> = (0..fanout)
            .map(|i| (format!("p{i}"), json!({"$ref": format!("#/components/schemas/L{}", level + 1)})))
            .collect();
        schemas.insert(format!("L{level}"), json!({"type": "object", "properties": properties}));
    }
    schemas.insert(format!("L{count}"), leaf);
    let mut paths = serde_json::Map::new();
    for i in 0..operations {
        paths.insert(
            format!("/bomb/{i}"),
            json!({"post": {"operationId": format!("bomb{i}"), "requestBody": {"content": {"application/json": {
                "schema": {"$ref": "#/components/schemas/L0"}}}}}}),
        );
    }
    json!({"openapi": "3.0.0", "info": {"title": "bomb", "version": "1"}, "paths": paths,
           "components": {"schemas": schemas}})
}

#[test]
fn exponential_references_are_cut_by_size() {
    let text = chain_document(40, 2, 8).to_string();
    let doc = parse(&text).unwrap();
    assert_eq!(doc.operations.len(), 8);
    for op in &doc.operations {
        // A schema node with properties is two JSON objects (itself and its `properties`).
        assert!(count_nodes(&op.input_schema) < 2 * MAX_SCHEMA_NODES + 1_000, "{}", op.name);
    }
    assert!(has_note(&doc, "POST /bomb/0: the input schema was cut at 50000 nodes"), "{:?}", doc.notes);
    assert!(has_note(&doc, "cut at 50000 nodes"), "{:?}", doc.notes);
    assert!(has_note(&doc, "cut at the document's"), "the document budget too: {:?}", doc.notes);
    check_invariants(&doc);
}

#[test]
fn copied_values_count_against_the_budget() {
    // 1 024 copies of a 5 000-value enum would be 5 million values.
    let values: Vec<String> = (0..5_000).map(|i| format!("v{i}")).collect();
    let leaf = json!({"type": "string", "enum": values, "description": "x".repeat(10_000)});
    let doc = parse(&chain_document_to(10, 2, 1, leaf).to_string()).unwrap();
    assert!(has_note(&doc, "cut at 50000 nodes"), "{:?}", doc.notes);
    assert!(count_nodes(&doc.operations[0].input_schema) < 2 * MAX_SCHEMA_NODES, "bounded");
    let size = doc.operations[0].input_schema.to_string().len();
    assert!(size < 2_000_000, "{size} bytes");
}

#[test]
fn deep_references_are_cut_by_depth() {
    let doc = parse(&chain_document(100, 1, 1).to_string()).unwrap();
    assert!(has_note(&doc, "cut at depth 64"), "{:?}", doc.notes);
    let mut node = &doc.operations[0].input_schema["properties"]["body"];
    let mut depth = 0;
    while let Some(next) = node.get("properties").and_then(|p| p.get("p0")) {
        node = next;
        depth += 1;
    }
    assert!((60..=64).contains(&depth), "{depth}");
    assert_eq!(node, &json!({}));
    check_invariants(&doc);

    // A long chain of references to references nests the reading, not the schema.
    let schemas: serde_json::Map<String, Value> = (0..5_000)
        .map(|i| (format!("S{i}"), json!({"$ref": format!("#/components/schemas/S{}", i + 1)})))
        .chain([("S5000".to_owned(), json!({"type": "string"}))])
        .collect();
    let doc = json!({"openapi": "3.0.0", "info": {"title": "chain"}, "components": {"schemas": schemas},
        "paths": {"/c": {"get": {"operationId": "chain", "parameters": [
            {"name": "q", "in": "query", "schema": {"$ref": "#/components/schemas/S0"}}]}}}});
    let doc = parse(&doc.to_string()).unwrap();
    assert_eq!(doc.operations[0].parameters[0].schema, json!({}));
    assert!(has_note(&doc, "GET /c: the input schema was cut at depth 64"), "{:?}", doc.notes);
}

#[test]
fn broken_parts_are_skipped_with_notes() {
    let doc = json!({
        "openapi": "3.0.1",
        "info": {"title": "broken"},
        "paths": {
            "/loop": {"get": {"operationId": "loop", "parameters": [
                {"$ref": "#/components/parameters/Loop"},
                {"$ref": "#/components/parameters/Missing"},
                {"name": "ok", "in": "query", "schema": {"type": "string"}},
                {"name": "nowhere", "in": "body"}
            ]}},
            "/bad": {"get": "not an operation", "post": {"operationId": "fine"}},
            "/elsewhere": {"$ref": "paths.yaml#/elsewhere"},
            "/self": {"post": {"operationId": "self", "requestBody": {"$ref": "#/components/requestBodies/Self"}}},
            "/weird": {"get": {"operationId": "weird", "parameters": [
                {"name": "n", "in": "query", "schema": {"type": "int", "minimum": "one", "required": true, "items": 3}}
            ]}}
        },
        "components": {
            "parameters": {"Loop": {"$ref": "#/components/parameters/Loop"}},
            "requestBodies": {"Self": {"$ref": "#/components/requestBodies/Self"}}
        }
    });
    let doc = parse(&doc.to_string()).unwrap();
    check_invariants(&doc);
    check_projections(&doc);
    assert_eq!(names(&doc), ["loop", "fine", "self", "weird"]);
    let looped = op(&doc, "loop");
    assert_eq!(looped.parameters.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["ok"]);
    for needle in [
        "reference `#/components/parameters/Loop` refers back to itself",
        "`#/components/parameters/Missing` points to nothing",
        "parameter `nowhere` in `body` was skipped",
        "GET /bad skipped",
        "path `/elsewhere` skipped: external reference",
        "POST /self: the request body was skipped",
    ] {
        assert!(has_note(&doc, needle), "{needle}: {:?}", doc.notes);
    }
    assert_eq!(op(&doc, "weird").parameters[0].schema, json!({}), "invalid keywords dropped");
}

#[test]
fn documents_that_are_not_api_descriptions_are_refused() {
    assert_eq!(parse("- just\n- a list\n").unwrap_err(), DocumentError::NotAnObject);
    assert_eq!(parse("plain text").unwrap_err(), DocumentError::NotAnObject);
    assert!(matches!(parse("{\"openapi\": ").unwrap_err(), DocumentError::Json(m) if m.contains("EOF")));
    assert!(matches!(parse("a: [\n").unwrap_err(), DocumentError::Yaml(_)));
    assert_eq!(
        parse(r#"{"swagger": "1.2", "apis": []}"#).unwrap_err(),
        DocumentError::Version("swagger 1.2".into())
    );
    assert!(matches!(parse("openapi: 4.0.0\npaths: {}\n").unwrap_err(), DocumentError::Version(_)));
    assert!(matches!(parse("info: {title: x}\n").unwrap_err(), DocumentError::Version(_)));
    assert_eq!(parse("openapi: 3.0.3\ninfo: {title: x}\n").unwrap_err(), DocumentError::NoPaths);
    assert_eq!(parse("swagger: '2.0'\npaths: []\n").unwrap_err(), DocumentError::NoPaths);
    let huge = format!("{{\"openapi\": \"3.0.0\", \"x\": \"{}\"}}", "a".repeat(MAX_INPUT_BYTES));
    assert!(matches!(parse(&huge).unwrap_err(), DocumentError::TooLarge { .. }));
    let message = DocumentError::Version("swagger 1.2".into()).to_string();
    assert!(message.starts_with("unsupported version swagger 1.2"), "{message}");
}

#[test]
fn lenient_cases() {
    // 3.1 with webhooks only: zero operations.
    let doc = parse(r#"{"openapi": "3.1.0", "info": {"title": "hooks"}, "webhooks": {"x": {"post": {}}}}"#)
        .unwrap();
    assert!(doc.operations.is_empty());
    assert_eq!(doc.servers, ["/"], "no servers: `/`, as the specification says");
    // Unquoted YAML versions, a BOM, YAML merge keys, integer keys and no title.
    let text = "\u{feff}swagger: 2.0\nbasePath: /api\nparameters:\n  base: &base {in: query, type: integer}\n\
                paths:\n  /a:\n    get:\n      parameters:\n        - <<: *base\n          name: n\n      \
                responses: {200: {description: ok}}\n";
    let doc = parse(text).unwrap();
    assert_eq!(doc.version, SpecVersion::Swagger2);
    assert_eq!(doc.title, "API");
    assert_eq!(doc.servers, ["/api"], "no host: the base path alone");
    let a = &doc.operations[0];
    assert_eq!(a.name, "get_a");
    assert_eq!(a.parameters[0].schema, json!({"type": "integer"}));
    assert_eq!(a.description, "GET /a");
    let doc = parse("openapi: 3.0\ninfo: {title: '  '}\npaths: {}\n").unwrap();
    assert_eq!(doc.version, SpecVersion::OpenApi30);
    assert_eq!(doc.title, "API");
    // Path-item and operation servers override the document's; a body without a schema.
    let doc = parse(
        &json!({"openapi": "3.0.0", "info": {"title": "t"}, "servers": [{"url": "https://a.example"}],
            "paths": {"/up": {"servers": [{"url": "https://upload.example/"}],
                "put": {"operationId": "upload", "requestBody": {"content": {"application/octet-stream": {}}}},
                "get": {"operationId": "status", "servers": [{"url": "https://status.example"}]}},
                "/plain": {"get": {"operationId": "plain"}}}})
        .to_string(),
    )
    .unwrap();
    assert_eq!(doc.servers, ["https://a.example"]);
    assert_eq!(op(&doc, "upload").servers, ["https://upload.example"]);
    assert_eq!(op(&doc, "status").servers, ["https://status.example"]);
    assert!(op(&doc, "plain").servers.is_empty(), "the document's");
    let body = op(&doc, "upload").body.clone().unwrap();
    assert_eq!(
        (body.content_type.as_str(), body.schema),
        ("application/octet-stream", json!({"type": "string"}))
    );
    check_invariants(&doc);
    // Long descriptions are clipped on a char boundary.
    let long = "é".repeat(3000);
    let doc = parse(
        &json!({"openapi": "3.0.0", "info": {"title": "t", "description": long},
        "paths": {"/x": {"get": {"summary": "s", "description": long}}}})
        .to_string(),
    )
    .unwrap();
    assert_eq!(doc.description.as_ref().unwrap().chars().count(), 1000);
    assert_eq!(doc.operations[0].description.chars().count(), 1024);
    assert!(doc.operations[0].description.ends_with('…'));
}

#[test]
fn a_large_generated_document() {
    let mut paths = serde_json::Map::new();
    let long = "x".repeat(60);
    for i in 0..750 {
        let get_id = match i % 5 {
            0 => json!("duplicate"),
            1 => json!(format!("{long}{i}")),
            2 => Value::Null,
            3 => json!(format!("resource.{i}/list items")),
            _ => json!(format!("get{i}")),
        };
        let mut get = json!({
            "summary": format!("Read resource {i}"),
            "parameters": [
                {"name": "id", "in": "path", "required": true, "schema": {"type": "integer"}},
                {"name": "id", "in": "query", "schema": {"type": "string"}},
                {"$ref": "#/components/parameters/page"}
            ],
            "responses": {"200": {"description": "ok"}}
        });
        if !get_id.is_null() {
            get["operationId"] = get_id;
        }
        paths.insert(
            format!("/resources{i}/{{id}}"),
            json!({
                "get": get,
                "post": {
                    "operationId": format!("create{i}"),
                    "requestBody": {"required": true, "content": {"application/json": {
                        "schema": {"$ref": "#/components/schemas/Item"}}}},
                    "responses": {"201": {"description": "created"}}
                }
            }),
        );
    }
    let document = json!({
        "openapi": "3.0.3",
        "info": {"title": "big", "version": "1"},
        "paths": paths,
        "components": {
            "parameters": {"page": {"name": "page", "in": "query", "schema": {"type": "integer", "minimum": 1}}},
            "schemas": {
                "Item": {"allOf": [{"$ref": "#/components/schemas/Base"},
                                   {"properties": {"size": {"type": "integer", "nullable": true}}}]},
                "Base": {"type": "object", "required": ["name"], "properties": {
                    "id": {"type": "string", "readOnly": true}, "name": {"type": "string"},
                    "tags": {"type": "array", "items": {"type": "string"}}}}
            }
        }
    });
    let text = document.to_string();
    let doc = parse(&text).unwrap();
    assert_eq!(doc.operations.len(), 1500);
    check_invariants(&doc);
    let names = names(&doc);
    assert_eq!(
        &names[..6],
        [
            "duplicate",
            "create0",
            &format!("{}_{}", &long[..39], &names[2][40..]),
            "create1",
            "get_resources2_id",
            "create2"
        ]
    );
    assert_eq!(names[2].len(), 48);
    assert_ne!(names[2], names[12], "long ids stay apart by their hash");
    assert_eq!(names[6], "resource_3_list_items");
    assert_eq!(names[10], "duplicate_2");
    assert_eq!(names[20], "duplicate_3");
    let first = &doc.operations[0];
    assert_eq!(
        first.parameters.iter().map(|p| p.argument.as_str()).collect::<Vec<_>>(),
        ["id", "query_id", "page"]
    );
    let body = &doc.operations[1].body.as_ref().unwrap().schema;
    assert_eq!(
        body,
        &json!({"type": "object", "required": ["name"], "properties": {
            "name": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}},
            "size": {"type": ["integer", "null"]}}})
    );
    let strict = check_projections(&doc);
    assert_eq!(strict.len(), 1500, "every generated operation is strict for OpenAI");
}

/// A body nested deeper than strict mode allows (10 levels) is faithful in the document's schema
/// and declared to OpenAI with `strict: false`, never as a strict schema OpenAI would refuse.
#[test]
fn deep_schemas_are_declared_without_strict_mode() {
    let doc = parse(&chain_document(12, 1, 1).to_string()).unwrap();
    let api = api_spec(&doc.operations[0]);
    let openai = Provider::Openai.declare(&doc.operations[0].name, &api);
    assert_eq!(openai["function"]["strict"], false, "{openai}");
    // The schema is declared whole, deeper than strict mode's limit.
    fn depth(schema: &Value) -> usize {
        let children = schema
            .get("properties")
            .and_then(Value::as_object)
            .map_or(0, |properties| properties.values().map(depth).max().unwrap_or(0));
        1 + children
    }
    assert!(depth(&openai["function"]["parameters"]) > 10, "{openai}");
    assert!(check_openai_strict(&openai["function"]["parameters"]).is_err());
}

/// YAML aliases that expand exponentially ("billion laughs") are refused by the parser, not
/// expanded into memory.
#[test]
fn exponential_yaml_aliases_are_refused() {
    let mut text = String::from(
        "openapi: 3.0.0\ninfo: {title: t, version: '1'}\nx-a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n",
    );
    for i in 1..10 {
        let p = i - 1;
        text.push_str(&format!(
            "x-a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    text.push_str("paths: {}\n");
    let error = parse(&text).unwrap_err();
    assert!(error.to_string().to_lowercase().contains("yaml"), "{error}");
}
