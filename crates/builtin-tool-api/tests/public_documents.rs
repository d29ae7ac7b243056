//! Real public documents, read whole: ReadMe's corpus of OpenAPI examples (Swagger 2.0, OpenAPI
//! 3.0 and 3.1, in JSON and YAML: the petstores, circular schemas, every parameter style,
//! polymorphism, security schemes…) and GitHub's REST API description (OpenAPI 3.0, over a
//! thousand operations), both installed pinned from the npm registry by `.ci/interop-tools.sh`
//! (`@readme/oas-examples`, `@octokit/openapi`), never fetched by a test.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use builtin_tool_api::document::{ApiDocument, ParamLocation, parse};
use builtin_tool_api::mount::{self, MountOptions};
use serde_json::Value;
use tool_core::provider::{Provider, check_openai_strict};
use tool_core::{ApiSpec, Exposure};

fn node_modules() -> PathBuf {
    test_support::interop_dir().join("node/node_modules")
}

/// Every operation of `document` is a function every provider accepts: a unique provider-safe
/// name, a schema with no `$ref` that a validator compiles, strict for OpenAI only when strict mode
/// takes it. Returns how many operations it has.
fn check_functions(document: &ApiDocument, what: &str) -> usize {
    let mut names = HashSet::new();
    for operation in &document.operations {
        let name = &operation.name;
        assert!(
            (1..=48).contains(&name.len())
                && name.starts_with(|c: char| c.is_ascii_alphabetic())
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
            "{what}: {name}"
        );
        assert!(names.insert(name.clone()), "{what}: {name} twice");
        let schema = &operation.input_schema;
        assert!(!schema.to_string().contains("\"$ref\""), "{what}: {name}: {schema}");
        assert!(jsonschema::validator_for(schema).is_ok(), "{what}: {name}: {schema}");
        let mut spec = ApiSpec::new::<Value>(name.clone(), operation.description.clone());
        spec.parameters = schema.clone();
        let openai = Provider::Openai.declare(name, &spec);
        if openai["function"]["strict"] == true {
            check_openai_strict(&openai["function"]["parameters"])
                .unwrap_or_else(|problems| panic!("{what}: {name}: {problems:?}"));
        }
        let anthropic = Provider::Anthropic.declare(name, &spec);
        assert!(jsonschema::validator_for(&anthropic["input_schema"]).is_ok(), "{what}: {name}");
        let gemini = Provider::Gemini.declare(name, &spec);
        assert!(!gemini.to_string().contains("\"$ref\""), "{what}: {name}");
    }
    document.operations.len()
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files(&path, out);
        } else if path.extension().is_some_and(|e| e == "json" || e == "yaml") {
            out.push(path);
        }
    }
}

#[test]
fn every_example_of_the_public_corpus_reads_and_projects() {
    let root = node_modules().join("@readme/oas-examples");
    let mut documents = Vec::new();
    for version in ["2.0", "3.0", "3.1"] {
        files(&root.join(version), &mut documents);
    }
    assert!(documents.len() > 100, "{} documents in {}", documents.len(), root.display());
    let mut operations = 0;
    for path in &documents {
        let text = std::fs::read_to_string(path).unwrap();
        let what = path.strip_prefix(&root).unwrap().display().to_string();
        let document = parse(&text).unwrap_or_else(|e| panic!("{what}: {e}"));
        operations += check_functions(&document, &what);
    }
    assert!(operations > 700, "{operations} operations");

    // A few read closely, in each version.
    let read = |file: &str| parse(&std::fs::read_to_string(root.join(file)).unwrap()).unwrap();
    let swagger = read("2.0/json/petstore.json");
    assert_eq!(swagger.operations.len(), 20);
    let upload = swagger.operation("uploadFile").unwrap();
    assert_eq!(upload.body.as_ref().unwrap().content_type, "multipart/form-data");
    let find = swagger.operation("findPetsByStatus").unwrap();
    assert_eq!(find.parameters[0].location, ParamLocation::Query);
    assert_eq!(find.input_schema["properties"]["status"]["type"], "array");
    let yaml = read("3.0/yaml/petstore.yaml");
    let json = read("3.0/json/petstore.json");
    assert_eq!(
        yaml.operations.iter().map(|o| &o.input_schema).collect::<Vec<_>>(),
        json.operations.iter().map(|o| &o.input_schema).collect::<Vec<_>>(),
        "the same document in YAML and JSON reads the same"
    );
    let add = json.operation("addPet").unwrap();
    assert_eq!(add.body.as_ref().unwrap().content_type, "application/json");
    assert!(add.input_schema["properties"]["body"]["properties"]["name"].is_object(), "{}", add.input_schema);
    assert!(add.input_schema["required"].as_array().unwrap().contains(&Value::from("body")));
    let petstore31 = read("3.1/json/petstore.json");
    assert_eq!(petstore31.operations.len(), 20);
    // A pattern the validator cannot compile goes, alone; the rest of the schema stays.
    let strings = read("3.0/json/schema-validation.json");
    let properties = &strings.operation("get_anything_strings").unwrap().input_schema["properties"];
    assert!(properties["complex-pattern-required"].get("pattern").is_none(), "{properties}");
    assert_eq!(properties["complex-pattern-required"]["type"], "string");
    assert_eq!(properties["name-pattern-required"]["pattern"], "a\\w+b");
    let circular = read("3.0/json/schema-circular.json");
    assert!(
        circular.notes.iter().any(|n| n.to_lowercase().contains("recurs") || n.contains("cycle")),
        "{:?}",
        circular.notes
    );
}

#[tokio::test]
async fn the_github_rest_api_reads_whole_and_waits_behind_search() {
    let file = node_modules().join("@octokit/openapi/generated/api.github.com.json");
    let text = std::fs::read_to_string(&file).unwrap();
    let document = parse(&text).unwrap();
    let count = check_functions(&document, "api.github.com");
    assert!(count > 1000, "{count} operations");
    assert_eq!(document.servers[0], "https://api.github.com");
    // Nothing cut for size: every operation's schema is whole.
    let cut: Vec<&String> = document.notes.iter().filter(|n| n.contains("was cut at")).collect();
    assert!(cut.is_empty(), "{cut:?}");

    let create = document.operation("issues_create").expect("issues/create");
    assert_eq!(create.method.as_str(), "POST");
    assert_eq!(create.path, "/repos/{owner}/{repo}/issues");
    let path: Vec<&str> = create
        .parameters
        .iter()
        .filter(|p| p.location == ParamLocation::Path)
        .map(|p| p.argument.as_str())
        .collect();
    assert_eq!(path, ["owner", "repo"]);
    let body = &create.input_schema["properties"]["body"];
    assert!(body["properties"]["title"].is_object(), "{body}");
    assert!(body["required"].as_array().unwrap().contains(&Value::from("title")), "{body}");
    let get = document.operation("repos_get").expect("repos/get");
    assert!(get.method.is_read());

    // Mounted, it is found through tool search rather than declared all at once.
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(&file, dir.path().join("github.json")).unwrap();
    let apis = mount::parse_config("[apis.github]\nopenapi = \"github.json\"\n").unwrap();
    let (mounted, errors) =
        mount::mount(&apis, &MountOptions { credentials: None, base_dir: Some(dir.path().to_owned()) }).await;
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(mounted[0].manifest.exposure, Exposure::Deferred);
    assert_eq!(mounted[0].manifest.apis.len(), count);
    assert!(mounted[0].manifest.apis.iter().any(|a| a.name == "github__issues_create"));
}
