//! One derived schema, four provider forms.
//!
//! schemars derives a faithful JSON Schema (draft 2020-12), but no provider takes it as is
//! (DEPENDENCIES.md trap 1): OpenAI strict mode wants every property required, optional ones
//! nullable, `additionalProperties: false` everywhere and no `oneOf` or `format`; Gemini wants no
//! `$ref`, no `additionalProperties` and `nullable` instead of type arrays; everyone chokes on a root
//! `$schema` or `title`. The derived schema stays the source of truth and each projection here is
//! a pure function of it. [`check_openai_strict`] re-checks OpenAI's rules independently so a test
//! can hold every builtin API to them.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::manifest::{ApiSpec, Tier, TierSpec};

/// The provider forms Toolhost can emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    /// OpenAI chat completions / responses function tools, strict mode.
    Openai,
    /// Anthropic messages tools.
    Anthropic,
    /// Gemini function declarations.
    Gemini,
    /// MCP `tools/list` entries.
    Mcp,
}

impl Provider {
    /// Every provider.
    pub const ALL: [Provider; 4] = [Self::Openai, Self::Anthropic, Self::Gemini, Self::Mcp];

    /// Parses `openai`, `anthropic`, `gemini` or `mcp`.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == name)
    }

    /// The lowercase name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Openai => "openai",
            Self::Anthropic => "anthropic",
            Self::Gemini => "gemini",
            Self::Mcp => "mcp",
        }
    }

    /// The declaration of `api` under the function name `name`, in this provider's form.
    pub fn declare(self, name: &str, api: &ApiSpec) -> Value {
        // A parameter whose choices the session did not fill in is declared as it is typed.
        let api = &*api.with_choices(|_| None);
        match self {
            Self::Openai => openai_function(name, &api.description, &api.parameters),
            Self::Anthropic => anthropic_tool(name, &api.description, &api.parameters),
            Self::Gemini => gemini_function(name, &api.description, &api.parameters),
            Self::Mcp => mcp_tool(name, api),
        }
    }
}

/// An OpenAI strict function tool: `{type: "function", function: {name, description, strict,
/// parameters}}`.
///
/// Strict mode needs every object closed with all its properties listed; a schema with an open
/// map (an object without properties, `additionalProperties` that is not `false`, or
/// `patternProperties` — common in third-party MCP tools), or one past strict mode's limits
/// (nested deeper than 10 levels, an enum of more than 1 000 values), cannot say what it means
/// in strict mode, so it is declared with `strict: false` and its schema as it is.
pub fn openai_function(name: &str, description: &str, schema: &Value) -> Value {
    let mut parameters = inline_refs(schema);
    strip_root(&mut parameters);
    // Strict only when the shape allows it and the result keeps OpenAI's limits (nesting, enum
    // sizes): a deep third-party schema is declared as it is rather than refused.
    let strict = strict_compatible(&parameters, true) && {
        let mut candidate = parameters.clone();
        openai_strict(&mut candidate);
        let fits = check_openai_strict(&candidate).is_ok();
        if fits {
            parameters = candidate;
        }
        fits
    };
    if !strict {
        walk(&mut parameters, &mut drop_numeric_formats);
    }
    json!({
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "strict": strict,
            "parameters": parameters,
        }
    })
}

/// Whether strict mode can express `schema`: no open maps anywhere (the root may have no
/// properties at all: a call without arguments).
fn strict_compatible(schema: &Value, root: bool) -> bool {
    let Value::Object(node) = schema else { return root };
    let is_object = match node.get("type") {
        Some(Value::String(kind)) => kind == "object",
        Some(Value::Array(kinds)) => kinds.iter().any(|k| k == "object"),
        _ => node.contains_key("properties"),
    };
    // Strict mode needs a type (or a choice of typed schemas) on every node, closed objects and
    // no keyword it would have to drop.
    let typed = node.contains_key("type")
        || node.contains_key("anyOf")
        || node.contains_key("oneOf")
        || node.contains_key("enum")
        || node.contains_key("const")
        || node.get("allOf").and_then(Value::as_array).is_some_and(|parts| parts.len() == 1);
    let open = node.contains_key("patternProperties")
        || node.get("additionalProperties").is_some_and(|a| a != &Value::Bool(false))
        || (is_object && !root && !node.contains_key("properties"));
    let unsupported =
        ["not", "prefixItems", "if", "then", "else", "dependentSchemas", "unevaluatedProperties"]
            .iter()
            .any(|k| node.contains_key(*k))
            || node.get("allOf").and_then(Value::as_array).is_some_and(|parts| parts.len() > 1);
    if open || unsupported || (!typed && !root) {
        return false;
    }
    let children = |key: &str| -> bool {
        match node.get(key) {
            Some(Value::Object(map)) if key == "properties" || key == "$defs" => {
                map.values().all(|child| strict_compatible(child, false))
            }
            Some(Value::Array(items)) => items.iter().all(|child| strict_compatible(child, false)),
            Some(child @ Value::Object(_)) => strict_compatible(child, false),
            _ => true,
        }
    };
    ["properties", "items", "anyOf", "oneOf", "allOf", "$defs"].iter().all(|key| children(key))
}

/// An Anthropic tool: `{name, description, input_schema}`.
pub fn anthropic_tool(name: &str, description: &str, schema: &Value) -> Value {
    let mut input_schema = inline_refs(schema);
    strip_root(&mut input_schema);
    walk(&mut input_schema, &mut drop_numeric_formats);
    json!({ "name": name, "description": description, "input_schema": input_schema })
}

/// A Gemini function declaration: `{name, description, parameters}` in Gemini's schema subset.
pub fn gemini_function(name: &str, description: &str, schema: &Value) -> Value {
    let mut parameters = inline_refs(schema);
    strip_root(&mut parameters);
    walk(&mut parameters, &mut gemini_node);
    json!({ "name": name, "description": description, "parameters": parameters })
}

/// An MCP tool with annotations derived from the API's tier.
pub fn mcp_tool(name: &str, api: &ApiSpec) -> Value {
    let mut input_schema = inline_refs(&api.parameters);
    strip_root(&mut input_schema);
    walk(&mut input_schema, &mut drop_numeric_formats);
    let (read_only, destructive) = match &api.tier {
        TierSpec::Fixed(Tier::Read) => (true, false),
        TierSpec::Fixed(Tier::Write) => (false, false),
        TierSpec::Fixed(Tier::Exec) | TierSpec::Computed(_) => (false, true),
    };
    // A mounted tool's own annotations are kept (its title, idempotence…); the hints that say
    // what it may change are Toolhost's, from the tier its policy uses.
    let mut annotations = api.annotations.clone().filter(Value::is_object).unwrap_or_else(|| json!({}));
    annotations["readOnlyHint"] = json!(read_only);
    annotations["destructiveHint"] = json!(destructive);
    annotations["openWorldHint"] = json!(api.open_world || destructive);
    let mut tool = json!({
        "name": name,
        "title": api.name,
        "description": api.description,
        "inputSchema": input_schema,
        "annotations": annotations,
    });
    if let Some(schema) = api.output_schema.as_ref().filter(|s| s.is_object()) {
        tool["outputSchema"] = schema.clone();
    }
    tool
}

/// Replaces every local `$ref` (`#/$defs/X`, `#/definitions/X`) by the definition it points to.
///
/// A recursive type cannot be inlined; its inner reference becomes an unconstrained object, which
/// every provider accepts. No builtin argument type is recursive.
pub fn inline_refs(schema: &Value) -> Value {
    let defs = schema
        .get("$defs")
        .or_else(|| schema.get("definitions"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut out = schema.clone();
    if let Some(root) = out.as_object_mut() {
        root.remove("$defs");
        root.remove("definitions");
    }
    resolve(&mut out, &defs, &mut Vec::new());
    out
}

fn resolve(node: &mut Value, defs: &Map<String, Value>, seen: &mut Vec<String>) {
    match node {
        Value::Object(map) => {
            if let Some(Value::String(reference)) = map.get("$ref") {
                let name = reference
                    .strip_prefix("#/$defs/")
                    .or_else(|| reference.strip_prefix("#/definitions/"))
                    .map(str::to_owned);
                if let Some(name) = name {
                    let mut replacement = match defs.get(&name) {
                        Some(def) if !seen.contains(&name) => def.clone(),
                        // A cycle is cut to an object; a reference that resolves to nothing here
                        // accepts anything rather than forcing a type.
                        Some(_) => json!({"type": "object"}),
                        None => json!({}),
                    };
                    seen.push(name);
                    resolve(&mut replacement, defs, seen);
                    seen.pop();
                    map.remove("$ref");
                    // Sibling keywords (a description beside the $ref) win over the definition's.
                    if let Value::Object(def) = replacement {
                        for (key, value) in def {
                            map.entry(key).or_insert(value);
                        }
                    }
                    return;
                }
            }
            for value in map.values_mut() {
                resolve(value, defs, seen);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|item| resolve(item, defs, seen)),
        _ => {}
    }
}

fn strip_root(schema: &mut Value) {
    if let Some(root) = schema.as_object_mut() {
        root.remove("$schema");
        root.remove("title");
        root.remove("$id");
        // The root description is the argument struct's doc comment, written for Rust readers;
        // the API's own description is what the model should read.
        root.remove("description");
        root.entry("type").or_insert_with(|| json!("object"));
        if root.get("type") == Some(&json!("object")) {
            root.entry("properties").or_insert_with(|| json!({}));
        }
    }
}

/// Applies `f` to every schema node, children first.
fn walk(node: &mut Value, f: &mut dyn FnMut(&mut Map<String, Value>)) {
    let Value::Object(map) = node else { return };
    for key in ["items", "additionalProperties", "not"] {
        if let Some(child) = map.get_mut(key) {
            walk(child, f);
        }
    }
    for key in ["properties", "patternProperties"] {
        if let Some(Value::Object(children)) = map.get_mut(key) {
            children.values_mut().for_each(|child| walk(child, f));
        }
    }
    for key in ["anyOf", "oneOf", "allOf", "prefixItems"] {
        if let Some(Value::Array(children)) = map.get_mut(key) {
            children.iter_mut().for_each(|child| walk(child, f));
        }
    }
    f(map);
}

/// Rust-specific formats (`uint32`, `int64`, `double`) that schemars emits and providers reject.
fn drop_numeric_formats(node: &mut Map<String, Value>) {
    let numeric = matches!(
        node.get("format").and_then(Value::as_str),
        Some(
            "uint"
                | "uint8"
                | "uint16"
                | "uint32"
                | "uint64"
                | "int"
                | "int8"
                | "int16"
                | "int32"
                | "int64"
                | "float"
                | "double"
        )
    );
    if numeric {
        node.remove("format");
    }
}

/// Keywords OpenAI strict mode accepts on a schema node.
const OPENAI_KEYWORDS: &[&str] = &[
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
    "description",
    "anyOf",
];

fn openai_strict(schema: &mut Value) {
    walk(schema, &mut |node| {
        if let Some(one_of) = node.remove("oneOf") {
            node.insert("anyOf".into(), one_of);
        }
        if let Some(Value::Array(all_of)) = node.remove("allOf") {
            // schemars uses a single-element allOf to attach a description to a reference.
            for part in all_of {
                if let Value::Object(part) = part {
                    for (key, value) in part {
                        node.entry(key).or_insert(value);
                    }
                }
            }
        }
        let mut hints = Vec::new();
        for (keyword, label) in [
            ("default", "Default"),
            ("minimum", "Minimum"),
            ("maximum", "Maximum"),
            ("minLength", "Minimum length"),
            ("maxLength", "Maximum length"),
            ("minItems", "Minimum items"),
            ("maxItems", "Maximum items"),
            ("pattern", "Pattern"),
        ] {
            // `minimum: 0` only restates an unsigned Rust type; it is noise to the model.
            let noise = |v: &Value| v.is_null() || (keyword == "minimum" && v == &json!(0));
            if let Some(value) = node.get(keyword).filter(|v| !noise(v)) {
                hints.push(format!("{label}: {value}."));
            }
        }
        if !hints.is_empty() {
            let description = node.get("description").and_then(Value::as_str).unwrap_or_default();
            let joined = if description.is_empty() {
                hints.join(" ")
            } else {
                format!("{description} {}", hints.join(" "))
            };
            node.insert("description".into(), Value::String(joined));
        }
        node.retain(|key, _| OPENAI_KEYWORDS.contains(&key.as_str()));
        let is_object = node.get("type") == Some(&json!("object")) || node.contains_key("properties");
        if is_object {
            let required: Vec<String> = node
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).map(str::to_owned).collect())
                .unwrap_or_default();
            let mut all = Vec::new();
            if let Some(Value::Object(properties)) = node.get_mut("properties") {
                for (name, property) in properties.iter_mut() {
                    if !required.contains(name) {
                        make_nullable(property);
                    }
                    all.push(Value::String(name.clone()));
                }
            } else {
                node.insert("properties".into(), json!({}));
            }
            node.insert("required".into(), Value::Array(all));
            node.insert("additionalProperties".into(), Value::Bool(false));
        }
    });
}

fn make_nullable(schema: &mut Value) {
    let Value::Object(node) = schema else { return };
    if let Some(Value::Array(values)) = node.get_mut("enum")
        && !values.contains(&Value::Null)
    {
        values.push(Value::Null);
    }
    match node.get_mut("type") {
        Some(Value::String(kind)) if kind != "null" => {
            let kind = std::mem::take(kind);
            node.insert("type".into(), json!([kind, "null"]));
        }
        Some(Value::Array(kinds)) => {
            if !kinds.contains(&json!("null")) {
                kinds.push(json!("null"));
            }
        }
        Some(_) => {}
        None => {
            if let Some(Value::Array(options)) = node.get_mut("anyOf") {
                if !options.iter().any(|o| o.get("type") == Some(&json!("null"))) {
                    options.push(json!({"type": "null"}));
                }
            } else {
                let inner = Value::Object(std::mem::take(node));
                node.insert("anyOf".into(), json!([inner, {"type": "null"}]));
            }
        }
    }
}

fn gemini_node(node: &mut Map<String, Value>) {
    drop_numeric_formats(node);
    for key in ["additionalProperties", "$schema", "title", "default", "examples", "$comment"] {
        node.remove(key);
    }
    if let Some(one_of) = node.remove("oneOf") {
        node.insert("anyOf".into(), one_of);
    }
    if let Some(constant) = node.remove("const") {
        node.insert("enum".into(), json!([constant]));
    }
    // Gemini has no `null` type: `anyOf [X, null]` becomes X with `nullable: true`.
    if let Some(Value::Array(mut options)) = node.remove("anyOf") {
        let before = options.len();
        options.retain(|o| o.get("type") != Some(&json!("null")));
        if options.len() < before {
            node.insert("nullable".into(), Value::Bool(true));
        }
        match options.pop() {
            Some(Value::Object(only)) if options.is_empty() => {
                for (key, value) in only {
                    node.entry(key).or_insert(value);
                }
            }
            Some(last) => {
                options.push(last);
                node.insert("anyOf".into(), Value::Array(options));
            }
            None => {}
        }
    }
    if let Some(Value::Array(kinds)) = node.get("type").cloned() {
        let non_null: Vec<&Value> = kinds.iter().filter(|k| *k != "null").collect();
        if non_null.len() == 1 {
            node.insert("type".into(), non_null[0].clone());
            if non_null.len() < kinds.len() {
                node.insert("nullable".into(), Value::Bool(true));
            }
        }
    }
    if let Some(Value::Array(values)) = node.get_mut("enum")
        && values.contains(&Value::Null)
    {
        values.retain(|v| !v.is_null());
        node.insert("nullable".into(), Value::Bool(true));
    }
    if let Some(format) = node.get("format").and_then(Value::as_str)
        && !matches!(format, "date-time" | "enum")
    {
        node.remove("format");
    }
}

/// Removes `null` members from every object in `arguments`.
///
/// Strict-mode providers send `null` for an optional parameter the model left out; the argument
/// types see a missing field instead, which `Option` and `#[serde(default)]` both accept.
pub fn drop_null_fields(arguments: &mut Value) {
    match arguments {
        Value::Object(map) => {
            map.retain(|_, value| !value.is_null());
            map.values_mut().for_each(drop_null_fields);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_null_fields),
        _ => {}
    }
}

/// Checks OpenAI strict-mode rules on a function's `parameters`; returns every violation with its
/// JSON path.
///
/// # Errors
///
/// The list of violations, when there is at least one.
pub fn check_openai_strict(parameters: &Value) -> Result<(), Vec<String>> {
    let mut problems = Vec::new();
    if parameters.get("type") != Some(&json!("object")) {
        problems.push("$: root must be an object schema".to_owned());
    }
    check_node(parameters, "$", 1, &mut problems);
    if problems.is_empty() { Ok(()) } else { Err(problems) }
}

fn check_node(node: &Value, path: &str, depth: usize, problems: &mut Vec<String>) {
    let Some(map) = node.as_object() else {
        problems.push(format!("{path}: schema must be an object"));
        return;
    };
    if depth > 10 {
        problems.push(format!("{path}: nested deeper than 10 levels"));
    }
    for key in map.keys() {
        if !OPENAI_KEYWORDS.contains(&key.as_str()) {
            problems.push(format!("{path}: keyword `{key}` is not allowed in strict mode"));
        }
    }
    if let Some(Value::Array(values)) = map.get("enum")
        && values.len() > 1000
    {
        problems.push(format!("{path}: enum has more than 1000 values"));
    }
    let is_object = map.get("type") == Some(&json!("object")) || map.contains_key("properties");
    if is_object {
        if map.get("additionalProperties") != Some(&Value::Bool(false)) {
            problems.push(format!("{path}: object needs additionalProperties: false"));
        }
        let properties = map.get("properties").and_then(Value::as_object);
        let required: Vec<&str> = map
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if let Some(properties) = properties {
            for (name, child) in properties {
                if !required.contains(&name.as_str()) {
                    problems.push(format!("{path}.{name}: property must be listed in required"));
                }
                check_node(child, &format!("{path}.{name}"), depth + 1, problems);
            }
        }
    }
    if let Some(items) = map.get("items") {
        check_node(items, &format!("{path}[]"), depth + 1, problems);
    }
    if let Some(Value::Array(options)) = map.get("anyOf") {
        for (i, option) in options.iter().enumerate() {
            check_node(option, &format!("{path}.anyOf[{i}]"), depth + 1, problems);
        }
    }
}

#[cfg(test)]
mod strict_tests {
    use super::*;

    #[test]
    fn open_maps_are_declared_without_strict_mode() {
        let closed =
            json!({ "type": "object", "properties": { "path": { "type": "string" } }, "required": ["path"] });
        assert_eq!(openai_function("read", "", &closed)["function"]["strict"], true);
        let map = json!({ "type": "object", "properties": { "env": { "type": "object", "additionalProperties": { "type": "string" } } } });
        let declared = openai_function("run", "", &map);
        assert_eq!(declared["function"]["strict"], false);
        assert_eq!(
            declared["function"]["parameters"]["properties"]["env"]["additionalProperties"],
            json!({ "type": "string" }),
            "the map stays a map"
        );
        let free = json!({ "type": "object", "properties": { "data": { "type": "object" } } });
        assert_eq!(openai_function("put", "", &free)["function"]["strict"], false);
        let no_arguments = json!({ "type": "object" });
        assert_eq!(openai_function("ping", "", &no_arguments)["function"]["strict"], true);
        let nullable_map = json!({ "type": "object", "properties": { "m": { "type": ["object", "null"] } } });
        assert_eq!(openai_function("n", "", &nullable_map)["function"]["strict"], false);
        let untyped = json!({ "type": "object", "properties": { "anything": {} } });
        assert_eq!(openai_function("u", "", &untyped)["function"]["strict"], false);
        let merged = json!({ "type": "object", "properties": { "x": { "allOf": [{ "type": "string" }, { "minLength": 1 }] } } });
        assert_eq!(openai_function("m", "", &merged)["function"]["strict"], false);
        let open = json!({ "type": "object", "additionalProperties": true });
        assert_eq!(openai_function("o", "", &open)["function"]["strict"], false, "an open root stays open");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use schemars::JsonSchema;
    use serde::Deserialize;

    /// Sample arguments covering what schemars does that providers dislike.
    #[allow(dead_code)]
    #[derive(Deserialize, JsonSchema)]
    struct Sample {
        /// A required path.
        path: String,
        /// An optional limit.
        limit: Option<u32>,
        /// A defaulted flag.
        #[serde(default)]
        all: bool,
        /// Nested items.
        items: Vec<Item>,
        /// A mode.
        mode: Option<Mode>,
    }

    #[allow(dead_code)]
    #[derive(Deserialize, JsonSchema)]
    struct Item {
        /// Old name.
        old: String,
        /// New name.
        new: Option<String>,
    }

    /// Modes.
    #[allow(dead_code)]
    #[derive(Deserialize, JsonSchema)]
    #[serde(rename_all = "snake_case")]
    enum Mode {
        Fast,
        Slow,
    }

    fn sample() -> ApiSpec {
        ApiSpec::new::<Sample>("sample", "A sample API").tier(Tier::Read)
    }

    #[test]
    fn openai_projection_is_strict() {
        let declared = Provider::Openai.declare("t__sample", &sample());
        check_openai_strict(&declared["function"]["parameters"]).unwrap();
        insta::assert_json_snapshot!("openai", declared);
    }

    #[test]
    fn strict_checker_finds_violations() {
        let raw = crate::schema_for::<Sample>();
        let problems = check_openai_strict(&raw).unwrap_err();
        assert!(problems.iter().any(|p| p.contains("additionalProperties")), "{problems:?}");
        assert!(problems.iter().any(|p| p == "$.limit: property must be listed in required"), "{problems:?}");
        assert!(problems.iter().any(|p| p.contains("`$schema`")), "{problems:?}");
    }

    #[test]
    fn other_projections() {
        let api = sample();
        let anthropic = Provider::Anthropic.declare("t__sample", &api);
        let gemini = Provider::Gemini.declare("t__sample", &api);
        let mcp = Provider::Mcp.declare("t__sample", &api);
        for declared in [&anthropic, &gemini, &mcp] {
            let text = declared.to_string();
            assert!(!text.contains("$ref") && !text.contains("$defs") && !text.contains("$schema"), "{text}");
            assert!(!text.contains("uint32"), "{text}");
        }
        assert!(!gemini.to_string().contains("additionalProperties"));
        assert_eq!(gemini["parameters"]["properties"]["limit"]["nullable"], true);
        assert_eq!(gemini["parameters"]["properties"]["mode"]["nullable"], true);
        assert!(!gemini.to_string().contains(r#""null""#), "{gemini}");
        assert_eq!(mcp["annotations"]["readOnlyHint"], true);
        insta::assert_json_snapshot!("anthropic", anthropic);
        insta::assert_json_snapshot!("gemini", gemini);
        insta::assert_json_snapshot!("mcp", mcp);
    }

    #[test]
    fn a_mounted_tools_output_schema_and_annotations_are_kept_but_not_its_claims() {
        let mut api = sample().tier(Tier::Write);
        api.output_schema = Some(json!({"type": "object", "properties": {"n": {"type": "integer"}}}));
        api.annotations = Some(json!({"readOnlyHint": true, "idempotentHint": false, "title": "Sample"}));
        let declared = mcp_tool("t__sample", &api);
        assert_eq!(declared["outputSchema"]["properties"]["n"]["type"], "integer");
        assert_eq!(declared["annotations"]["idempotentHint"], false, "its own");
        assert_eq!(declared["annotations"]["title"], "Sample", "its own");
        assert_eq!(declared["annotations"]["readOnlyHint"], false, "Toolhost's, from the tier");
        let plain = mcp_tool("t__sample", &sample());
        assert!(plain.get("outputSchema").is_none());
    }

    #[test]
    fn recursive_references_do_not_loop() {
        let schema = json!({
            "type": "object",
            "properties": {"node": {"$ref": "#/$defs/Node"}},
            "$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}},
        });
        let inlined = inline_refs(&schema);
        assert_eq!(inlined["properties"]["node"]["properties"]["next"], json!({"type": "object"}));
    }
}
