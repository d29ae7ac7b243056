//! API description documents read into operations a model can call.
//!
//! [`parse`] reads an OpenAPI 3.0, OpenAPI 3.1 or Swagger 2.0 document, in JSON or YAML, into an
//! [`ApiDocument`]: its base URLs, its security schemes and its [`Operation`]s, each with one
//! self-contained JSON Schema (draft 2020-12, no `$ref` left) for the arguments a model fills
//! in. The module does no I/O: the caller reads the file or fetches the URL, and resolves a
//! relative server URL against where the document came from.
//!
//! ```
//! use builtin_tool_api::document::{parse, ParamLocation};
//!
//! let doc = parse(r#"{
//!   "openapi": "3.0.3",
//!   "info": {"title": "Pets", "version": "1"},
//!   "paths": {"/pets/{petId}": {"get": {
//!     "operationId": "showPetById",
//!     "parameters": [{"name": "petId", "in": "path", "required": true, "schema": {"type": "string"}}]
//!   }}}
//! }"#).unwrap();
//! let op = &doc.operations[0];
//! assert_eq!(op.name, "showPetById");
//! assert_eq!(op.parameters[0].location, ParamLocation::Path);
//! assert_eq!(op.input_schema["required"][0], "petId");
//! ```
//!
//! # Choices
//!
//! - **Hostile documents are bounded, not refused.** A reference cycle is cut where it closes: the
//!   reference becomes `{"type": <the target's type>, "description": "Recursive: Node (cut
//!   here)"}` (the type is kept when the target has a single one, so a recursive object stays an
//!   object and a recursive array an array, and the model still reads what was there). Each
//!   operation's schema may produce at most [`MAX_SCHEMA_NODES`] nodes (copied values such as a
//!   long `enum` count too) and nest [`MAX_SCHEMA_DEPTH`] deep (a chain of references counts as
//!   nesting), and the whole document [`MAX_DOCUMENT_NODES`] (see [`Limits`]); past a limit the
//!   subtree becomes `{}` (any value). References are expanded each time they are met (no memo):
//!   the budget already bounds the work, and the output stays a tree.
//! - **Only local references are followed** (`#/...`, with `~0`/`~1` and percent-decoding). An
//!   external one (`other.yaml#/Foo`) becomes `{}`.
//! - **Lenient where the intent is clear:** a broken operation, parameter or request body is
//!   skipped; a path template variable without a declared parameter gets a required string
//!   parameter (each with a note). Keywords beside a `$ref` (a description, `nullable`) apply, in
//!   3.0 as in 3.1; `nullable` is honoured in 3.1 too, and Swagger's `x-nullable`; a property
//!   written with `required: true` is listed in its parent's `required`; YAML merge keys (`<<`)
//!   are applied; keyword values a validator would reject (`minimum: "one"`) are dropped.
//! - **Strict where guessing would mislead:** an unknown version is refused (3.2 included), and so
//!   is a 2.0 or 3.0 document without `paths` (3.1 allows a document of webhooks only: zero
//!   operations, with a note).
//! - **Input direction:** a property marked `readOnly` is removed wherever it appears in an
//!   input schema (body or parameter), since every input schema describes a request.
//! - **Provider-friendly shapes:** an `allOf` whose parts merge without conflict is merged into
//!   one object (OpenAI strict mode cannot take a multi-part `allOf`); keywords JSON Schema does
//!   not know (`discriminator`, `xml`, `example`, `x-*`…) are dropped, so a document's `x-choices`
//!   can never reach the session's choice lists. Names start with a letter (Gemini wants one).

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// The largest document [`parse`] reads, in bytes.
pub const MAX_INPUT_BYTES: usize = 20 * 1024 * 1024;

/// The most schema nodes one operation's input schema may produce; beyond, subtrees become `{}`.
pub const MAX_SCHEMA_NODES: usize = 50_000;

/// The most schema nodes the whole document may produce; beyond, later schemas become `{}`.
pub const MAX_DOCUMENT_NODES: usize = 300_000;

/// The deepest a schema may nest; deeper subtrees become `{}`.
pub const MAX_SCHEMA_DEPTH: usize = 64;

/// The longest operation name, leaving room for a tool prefix within providers' 64.
pub const MAX_NAME_CHARS: usize = 48;

/// The longest argument (property) name providers accept.
pub const MAX_ARGUMENT_CHARS: usize = 64;

/// The longest operation description, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 1024;

/// The longest document description, in characters.
pub const MAX_INFO_DESCRIPTION_CHARS: usize = 1000;

/// The most notes kept; the rest are counted in a last note.
pub const MAX_NOTES: usize = 200;

/// Bounds on the work a document may cause; the default uses [`MAX_INPUT_BYTES`],
/// [`MAX_SCHEMA_NODES`], [`MAX_DOCUMENT_NODES`] and [`MAX_SCHEMA_DEPTH`].
///
/// Every schema node produced is a few hundred bytes of `serde_json` maps, and references can
/// multiply them (each level of `A → 2×B → 4×C…` doubles the output): the node budgets bound
/// both the time and the memory a hostile document takes (the default document budget is about
/// half a second and a few hundred megabytes in a release build at worst).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest text [`parse_with`] reads, in bytes.
    pub max_input_bytes: usize,
    /// The most schema nodes one operation's input schema may produce.
    pub max_schema_nodes: usize,
    /// The most schema nodes the whole document may produce.
    pub max_document_nodes: usize,
    /// The deepest a schema may nest.
    pub max_schema_depth: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_input_bytes: MAX_INPUT_BYTES,
            max_schema_nodes: MAX_SCHEMA_NODES,
            max_document_nodes: MAX_DOCUMENT_NODES,
            max_schema_depth: MAX_SCHEMA_DEPTH,
        }
    }
}

/// Why a document could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DocumentError {
    /// Larger than [`Limits::max_input_bytes`] ([`MAX_INPUT_BYTES`] by default).
    #[error("the document is {size} bytes; the limit is {limit} bytes")]
    TooLarge {
        /// Its size in bytes.
        size: usize,
        /// The limit in bytes.
        limit: usize,
    },
    /// It starts with `{` but is not valid JSON.
    #[error("not valid JSON: {0}")]
    Json(String),
    /// It is not valid YAML.
    #[error("not valid YAML: {0}")]
    Yaml(String),
    /// Its top level is not an object (a mapping).
    #[error("the document is not an object (a mapping) at the top level")]
    NotAnObject,
    /// Neither `swagger: "2.0"` nor `openapi: "3.0.x"` / `"3.1.x"`.
    #[error("unsupported version {0}; expected `swagger: \"2.0\"` or `openapi: \"3.0.x\"` / `\"3.1.x\"`")]
    Version(String),
    /// A 2.0 or 3.0 document without a `paths` object.
    #[error("the document has no `paths` object")]
    NoPaths,
}

/// The specification a document follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SpecVersion {
    /// Swagger 2.0.
    Swagger2,
    /// OpenAPI 3.0.x.
    OpenApi30,
    /// OpenAPI 3.1.x.
    OpenApi31,
}

/// An API description, read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiDocument {
    /// `info.title`, or `"API"`.
    pub title: String,
    /// The specification it follows.
    pub version: SpecVersion,
    /// `info.description`, trimmed, at most [`MAX_INFO_DESCRIPTION_CHARS`] characters.
    pub description: Option<String>,
    /// Base URLs, without a trailing `/`. 3.x: `servers[].url` with `{variables}` replaced by
    /// their defaults (`"/"` when there are none, as the specification says); 2.0:
    /// `scheme://host basePath` (https when listed or when no scheme is given) or the base path
    /// alone without a host. A relative URL (`/v1`) is for the caller to resolve.
    pub servers: Vec<String>,
    /// The security schemes Toolhost can use, by name; others are left out with a note.
    pub security_schemes: BTreeMap<String, SecurityScheme>,
    /// The operations, in document order (paths in order; methods get, put, post, delete,
    /// options, head, patch, trace).
    pub operations: Vec<Operation>,
    /// What was skipped or simplified and why, for people.
    pub notes: Vec<String>,
}

impl ApiDocument {
    /// The operation called `name`.
    pub fn operation(&self, name: &str) -> Option<&Operation> {
        self.operations.iter().find(|op| op.name == name)
    }
}

/// How a request proves who sends it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SecurityScheme {
    /// A key sent in a header, query parameter or cookie.
    ApiKey {
        /// Where the key goes.
        location: KeyLocation,
        /// The header, parameter or cookie name.
        name: String,
    },
    /// A token sent as `Authorization: Bearer …` (http bearer, OAuth 2 and OpenID Connect).
    Bearer,
    /// HTTP basic authentication.
    Basic,
}

/// Where an API key goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum KeyLocation {
    /// A request header.
    Header,
    /// A query parameter.
    Query,
    /// A cookie.
    Cookie,
}

/// An HTTP method an operation can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Method {
    /// GET.
    Get,
    /// PUT.
    Put,
    /// POST.
    Post,
    /// DELETE.
    Delete,
    /// OPTIONS.
    Options,
    /// HEAD.
    Head,
    /// PATCH.
    Patch,
    /// TRACE.
    Trace,
}

impl Method {
    /// Every method, in the order a path item's operations are read.
    pub const ALL: [Method; 8] =
        [Self::Get, Self::Put, Self::Post, Self::Delete, Self::Options, Self::Head, Self::Patch, Self::Trace];

    /// The upper-case name (`GET`).
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Get => "GET",
            Self::Put => "PUT",
            Self::Post => "POST",
            Self::Delete => "DELETE",
            Self::Options => "OPTIONS",
            Self::Head => "HEAD",
            Self::Patch => "PATCH",
            Self::Trace => "TRACE",
        }
    }

    /// Whether the method only reads (GET, HEAD and OPTIONS).
    pub fn is_read(&self) -> bool {
        matches!(self, Self::Get | Self::Head | Self::Options)
    }

    /// The lower-case key of a path item (`get`).
    fn key(self) -> &'static str {
        match self {
            Self::Get => "get",
            Self::Put => "put",
            Self::Post => "post",
            Self::Delete => "delete",
            Self::Options => "options",
            Self::Head => "head",
            Self::Patch => "patch",
            Self::Trace => "trace",
        }
    }
}

/// One operation: a method on a path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Operation {
    /// A provider-safe name, unique within the document: `[A-Za-z0-9_-]`, 1 to
    /// [`MAX_NAME_CHARS`] characters, starting with a letter.
    pub name: String,
    /// The `operationId` as written.
    pub operation_id: Option<String>,
    /// The HTTP method.
    pub method: Method,
    /// The path as written (`/pets/{petId}`).
    pub path: String,
    /// Summary and description, at most [`MAX_DESCRIPTION_CHARS`] characters; `"METHOD PATH"`
    /// when the document gives neither.
    pub description: String,
    /// Marked deprecated.
    pub deprecated: bool,
    /// The parameters (path-level ones merged in), in order.
    pub parameters: Vec<Parameter>,
    /// The request body, if any.
    pub body: Option<RequestBody>,
    /// Alternatives (outer) of scheme names required together (inner); the operation's own
    /// `security` overrides the document's. `Some(vec![])` or `Some(vec![vec![]])`: none needed;
    /// `None`: the document says nothing.
    pub security: Option<Vec<Vec<String>>>,
    /// Base URLs of this operation when its path item or itself overrides the document's
    /// `servers` (3.x); empty when it uses the document's.
    pub servers: Vec<String>,
    /// JSON Schema of the arguments: one property per parameter (by its
    /// [`argument`](Parameter::argument)) and `body` for the request body.
    pub input_schema: Value,
}

/// Where a parameter is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ParamLocation {
    /// Replaces `{name}` in the path.
    Path,
    /// A query parameter.
    Query,
    /// A request header.
    Header,
    /// A cookie.
    Cookie,
}

impl ParamLocation {
    /// The lower-case name (`query`), as documents write it.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Path => "path",
            Self::Query => "query",
            Self::Header => "header",
            Self::Cookie => "cookie",
        }
    }
}

/// How an array or object parameter is serialised (OpenAPI 3 `style`; Swagger 2
/// `collectionFormat` mapped onto it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ParamStyle {
    /// `a=1&a=2` (exploded) or `a=1,2`; the default in query and cookie (2.0 `csv`, `multi`).
    Form,
    /// `1,2`; the default in path and header (2.0 `csv` there).
    Simple,
    /// `;a=1,2`.
    Matrix,
    /// `.1.2`.
    Label,
    /// `1 2` (2.0 `ssv`).
    SpaceDelimited,
    /// `1|2` (2.0 `pipes`).
    PipeDelimited,
    /// `1\t2` (2.0 `tsv`, which OpenAPI 3 has no style for).
    TabDelimited,
    /// `a[x]=1&a[y]=2`.
    DeepObject,
}

/// One parameter of an operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Parameter {
    /// The name as written, sent on the wire.
    pub name: String,
    /// Where it is sent.
    pub location: ParamLocation,
    /// Its property name in the input schema: the name when it matches
    /// `^[A-Za-z0-9_.-]{1,64}$` and is free, else cleaned; a name taken by an earlier parameter
    /// gets its location as prefix (`query_id`); never `body`.
    pub argument: String,
    /// Required (path parameters always are).
    pub required: bool,
    /// Serialisation style for arrays and objects.
    pub style: ParamStyle,
    /// Arrays and objects sent as one parameter per value.
    pub explode: bool,
    /// The media type of a 3.x parameter described by `content` (its value is serialised in it,
    /// e.g. JSON text), else `None`.
    pub content_type: Option<String>,
    /// Its JSON Schema (as in the input schema).
    pub schema: Value,
}

/// An operation's request body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestBody {
    /// The media type chosen: `application/json`, then any `+json` type, then
    /// `application/x-www-form-urlencoded`, `multipart/form-data`, `text/plain`, then the first
    /// listed.
    pub content_type: String,
    /// Required.
    pub required: bool,
    /// Its JSON Schema (as in the input schema).
    pub schema: Value,
}

/// Reads a document: JSON when it starts with `{` after whitespace, else YAML.
///
/// # Errors
///
/// [`DocumentError`] when the text is too large, not JSON or YAML, not an object, of an unknown
/// version, or a 2.0/3.0 document without `paths`. Problems inside operations are notes, not
/// errors.
pub fn parse(text: &str) -> Result<ApiDocument, DocumentError> {
    parse_with(text, &Limits::default())
}

/// Reads a document within `limits`.
///
/// # Errors
///
/// As [`parse`].
pub fn parse_with(text: &str, limits: &Limits) -> Result<ApiDocument, DocumentError> {
    if text.len() > limits.max_input_bytes {
        return Err(DocumentError::TooLarge { size: text.len(), limit: limits.max_input_bytes });
    }
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let value = if text.trim_start().starts_with('{') {
        serde_json::from_str::<Value>(text).map_err(|e| DocumentError::Json(e.to_string()))?
    } else {
        let mut value =
            yaml_serde::from_str::<Value>(text).map_err(|e| DocumentError::Yaml(e.to_string()))?;
        apply_merge_keys(&mut value);
        value
    };
    from_value(&value, limits)
}

/// Reads a document already parsed into a JSON value.
///
/// # Errors
///
/// As [`parse`], less the syntax errors.
pub fn from_value(document: &Value, limits: &Limits) -> Result<ApiDocument, DocumentError> {
    let root = document.as_object().ok_or(DocumentError::NotAnObject)?;
    let version = spec_version(root)?;
    let paths = match root.get("paths") {
        Some(Value::Object(paths)) => Some(paths),
        _ if version == SpecVersion::OpenApi31 => None,
        _ => return Err(DocumentError::NoPaths),
    };
    let mut reader = Reader {
        doc: document,
        root,
        limits: *limits,
        version,
        notes: Notes::default(),
        total_nodes: 0,
        schemes: BTreeMap::new(),
        unknown_schemes: HashSet::new(),
    };
    let info = root.get("info");
    let title = info
        .and_then(|i| i.get("title"))
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .unwrap_or("API")
        .to_owned();
    let description = info
        .and_then(|i| i.get("description"))
        .and_then(Value::as_str)
        .map(|d| clip(d, MAX_INFO_DESCRIPTION_CHARS))
        .filter(|d| !d.is_empty());
    let servers = match version {
        SpecVersion::Swagger2 => vec![swagger_server(root)],
        _ => {
            let servers = reader.servers(root.get("servers"));
            if servers.is_empty() { vec!["/".to_owned()] } else { servers }
        }
    };
    reader.schemes = reader.security_schemes(root);
    let global_security = root.get("security").and_then(|s| reader.requirement(s, "the document"));
    if let Some(Value::Object(hooks)) = root.get("webhooks")
        && !hooks.is_empty()
    {
        reader.notes.add(format!(
            "{} webhook(s) not read: they describe calls the API makes, not ones it takes",
            hooks.len()
        ));
    }
    let mut operations = Vec::new();
    let mut names = Names::default();
    match paths {
        Some(paths) => {
            for (path, item) in paths {
                if path.starts_with("x-") {
                    continue;
                }
                reader.path_item(path, item, global_security.as_ref(), &mut names, &mut operations);
            }
        }
        None => reader.notes.add("the document has no `paths`: no operations".to_owned()),
    }
    Ok(ApiDocument {
        title,
        version,
        description,
        servers,
        security_schemes: reader.schemes,
        operations,
        notes: reader.notes.finish(),
    })
}

fn spec_version(root: &Map<String, Value>) -> Result<SpecVersion, DocumentError> {
    let text = |v: &Value| match v {
        Value::String(s) => s.trim().to_owned(),
        other => other.to_string(),
    };
    let is = |version: &str, prefix: &str| {
        version.strip_prefix(prefix).is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
    };
    if let Some(v) = root.get("openapi") {
        let version = text(v);
        if is(&version, "3.0") {
            Ok(SpecVersion::OpenApi30)
        } else if is(&version, "3.1") {
            Ok(SpecVersion::OpenApi31)
        } else {
            Err(DocumentError::Version(format!("openapi {version}")))
        }
    } else if let Some(v) = root.get("swagger") {
        let version = text(v);
        if version == "2.0" || version == "2" {
            Ok(SpecVersion::Swagger2)
        } else {
            Err(DocumentError::Version(format!("swagger {version}")))
        }
    } else {
        Err(DocumentError::Version("(neither `openapi` nor `swagger` is given)".to_owned()))
    }
}

/// Applies YAML merge keys (`<<: *base`, `<<: [*a, *b]`): explicit keys win, then earlier
/// sources.
fn apply_merge_keys(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.values_mut().for_each(apply_merge_keys);
            if let Some(merged) = map.shift_remove("<<") {
                let sources = match merged {
                    Value::Array(items) => items,
                    other => vec![other],
                };
                for source in sources {
                    if let Value::Object(source) = source {
                        for (key, v) in source {
                            map.entry(key).or_insert(v);
                        }
                    }
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(apply_merge_keys),
        _ => {}
    }
}

/// The 2.0 base URL.
fn swagger_server(root: &Map<String, Value>) -> String {
    let schemes: Vec<&str> = root
        .get("schemes")
        .and_then(Value::as_array)
        .map(|s| s.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    // https when offered: credentials should not go over plain http when the API has both.
    let scheme =
        if schemes.contains(&"https") { "https" } else { schemes.first().copied().unwrap_or("https") };
    let base = root.get("basePath").and_then(Value::as_str).unwrap_or("").trim();
    let base = if base.is_empty() || base.starts_with('/') { base.to_owned() } else { format!("/{base}") };
    let url = match root.get("host").and_then(Value::as_str).map(str::trim).filter(|h| !h.is_empty()) {
        Some(host) => format!("{scheme}://{}{base}", host.trim_end_matches('/')),
        None if base.is_empty() => "/".to_owned(),
        None => base,
    };
    trim_slash(url)
}

fn trim_slash(url: String) -> String {
    if url.len() > 1 && url.ends_with('/') { url.trim_end_matches('/').to_owned() } else { url }
}

/// The notes of a document, each said once, at most [`MAX_NOTES`].
#[derive(Debug, Default)]
struct Notes {
    list: Vec<String>,
    seen: HashSet<String>,
    more: usize,
}

impl Notes {
    fn add(&mut self, text: String) {
        if self.list.len() >= MAX_NOTES {
            self.more += 1;
        } else {
            self.list.push(text);
        }
    }

    /// Adds the note unless one with `key` was already added.
    fn once(&mut self, key: String, text: impl FnOnce() -> String) {
        if self.seen.insert(key) {
            self.add(text());
        }
    }

    fn finish(mut self) -> Vec<String> {
        if self.more > 0 {
            self.list.push(format!("… and {} more notes", self.more));
        }
        self.list
    }
}

/// Unique operation names.
#[derive(Debug, Default)]
struct Names {
    taken: HashSet<String>,
    next: HashMap<String, usize>,
}

impl Names {
    fn claim(&mut self, base: String) -> String {
        if self.taken.insert(base.clone()) {
            return base;
        }
        let mut n = self.next.get(&base).copied().unwrap_or(2);
        loop {
            let suffix = format!("_{n}");
            let mut stem = base.clone();
            stem.truncate(MAX_NAME_CHARS - suffix.len());
            let candidate = format!("{stem}{suffix}");
            n += 1;
            if self.taken.insert(candidate.clone()) {
                self.next.insert(base, n);
                return candidate;
            }
        }
    }
}

/// Where a `$ref` leads.
enum Target<'d> {
    Found(&'d Value),
    External,
    Missing,
}

/// Looks a reference up in the document: only `#...` fragments are local.
fn lookup<'d>(doc: &'d Value, reference: &str) -> Target<'d> {
    let Some(fragment) = reference.strip_prefix('#') else { return Target::External };
    let step = |node: &'d Value, segment: &str| match node {
        Value::Object(map) => map.get(segment),
        Value::Array(items) => segment.parse::<usize>().ok().and_then(|i| items.get(i)),
        _ => None,
    };
    let mut node = doc;
    if fragment.contains(['%', '~']) {
        let Some(segments) = decode_pointer(fragment) else { return Target::Missing };
        for segment in &segments {
            match step(node, segment) {
                Some(next) => node = next,
                None => return Target::Missing,
            }
        }
    } else if !fragment.is_empty() {
        // The common case (`/components/schemas/Pet`) without allocating: references are
        // resolved once per expansion, which a large document does hundreds of thousands of
        // times.
        let Some(rest) = fragment.strip_prefix('/') else { return Target::Missing };
        for segment in rest.split('/') {
            match step(node, segment) {
                Some(next) => node = next,
                None => return Target::Missing,
            }
        }
    }
    Target::Found(node)
}

/// Splits a URI fragment holding a JSON pointer (`/components/schemas/a~1b%20c`) into its
/// decoded segments (`["components", "schemas", "a/b c"]`); `None` when it is not a pointer.
fn decode_pointer(fragment: &str) -> Option<Vec<String>> {
    let decoded = percent_decode(fragment)?;
    if decoded.is_empty() {
        return Some(Vec::new());
    }
    let rest = decoded.strip_prefix('/')?;
    Some(rest.split('/').map(|s| s.replace("~1", "/").replace("~0", "~")).collect())
}

/// Decodes `%XX` escapes; a `%` not followed by two hex digits stays as it is. `None` when the
/// result is not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    if !text.contains('%') {
        return Some(text.to_owned());
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(hi), Some(lo)) =
                (bytes.get(i + 1).and_then(|b| hex(*b)), bytes.get(i + 2).and_then(|b| hex(*b)))
        {
            out.push((hi * 16 + lo) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The last segment of a reference, for people (`Pet` for `#/components/schemas/Pet`).
fn ref_name(reference: &str) -> String {
    reference
        .strip_prefix('#')
        .and_then(decode_pointer)
        .and_then(|segments| segments.last().cloned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| reference.to_owned())
}

/// Follows a chain of `$ref`s to a non-schema object (a parameter, request body, path item or
/// security scheme).
fn resolve_object<'d>(doc: &'d Value, value: &'d Value) -> Result<&'d Value, String> {
    let mut current = value;
    let mut seen: Vec<&'d str> = Vec::new();
    while let Some(reference) = current.get("$ref").and_then(Value::as_str) {
        if seen.contains(&reference) || seen.len() >= 32 {
            return Err(format!("reference `{reference}` refers back to itself"));
        }
        seen.push(reference);
        current = match lookup(doc, reference) {
            Target::Found(target) => target,
            Target::External => return Err(format!("external reference `{reference}` not followed")),
            Target::Missing => {
                return Err(format!("reference `{reference}` points to nothing in the document"));
            }
        };
    }
    Ok(current)
}

/// Replaces characters outside `[A-Za-z0-9_-]` by `_`, collapses runs of `_` and trims them.
fn clean_name(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for c in raw.chars() {
        let c = if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' };
        if c == '_' && out.ends_with('_') {
            continue;
        }
        out.push(c);
    }
    out.trim_matches('_').to_owned()
}

/// A provider-safe operation name from an operationId or `method_path` (before de-duplication):
/// cleaned, starting with a letter (`op_` is put before a digit or `-`), and at most
/// [`MAX_NAME_CHARS`], a long one ending with a hash of `raw` so two long ids stay apart.
fn operation_name(raw: &str) -> String {
    let mut name = clean_name(raw);
    if name.is_empty() {
        name = "operation".to_owned();
    }
    if !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
        name.insert_str(0, "op_");
    }
    if name.len() > MAX_NAME_CHARS {
        // Cleaned names are ASCII, so any byte index is a char boundary.
        let stem = name[..MAX_NAME_CHARS - 9].trim_end_matches(['_', '-']);
        name = format!("{stem}_{:08x}", fnv1a(raw));
    }
    name
}

/// FNV-1a, 32 bits: small, stable across runs and platforms.
fn fnv1a(text: &str) -> u32 {
    text.bytes().fold(0x811c_9dc5_u32, |hash, b| (hash ^ u32::from(b)).wrapping_mul(0x0100_0193))
}

/// Whether `name` can be a property name as is (`^[A-Za-z0-9_.-]{1,64}$`).
fn is_argument_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_ARGUMENT_CHARS
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// A property name for a parameter whose name is not one.
fn clean_argument(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        let c = if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '_' };
        if c == '_' && out.ends_with('_') {
            continue;
        }
        out.push(c);
    }
    let mut out = out.trim_matches('_').to_owned();
    out.truncate(MAX_ARGUMENT_CHARS);
    if out.is_empty() { "param".to_owned() } else { out }
}

/// `text` trimmed, cut to `max` characters on a char boundary with `…`.
fn clip(text: &str, max: usize) -> String {
    let text = text.trim();
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let cut: String = text.chars().take(max.saturating_sub(1)).collect();
    format!("{}…", cut.trim_end())
}

/// Rank of a media type for the request body: lower is preferred.
fn media_rank(media: &str) -> u8 {
    let essence = media.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    match essence.as_str() {
        "application/json" => 0,
        e if e.ends_with("+json") => 1,
        "application/x-www-form-urlencoded" => 2,
        "multipart/form-data" => 3,
        "text/plain" => 4,
        _ => 5,
    }
}

/// The preferred of `types` (the first listed within a rank).
fn choose_media<'a>(types: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let mut best: Option<(u8, &str)> = None;
    for media in types {
        let rank = media_rank(media);
        if best.is_none_or(|(r, _)| rank < r) {
            best = Some((rank, media));
        }
    }
    best.map(|(_, media)| media)
}

const JSON_TYPES: [&str; 7] = ["string", "number", "integer", "boolean", "array", "object", "null"];

fn any() -> Value {
    Value::Object(Map::new())
}

/// A converted schema and whether it was marked `readOnly` (which a parent's `properties` use,
/// then forget).
struct Converted {
    value: Value,
    read_only: bool,
}

impl From<Value> for Converted {
    fn from(value: Value) -> Self {
        Self { value, read_only: false }
    }
}

/// The state of one operation's schema conversion.
#[derive(Debug)]
struct OpState {
    label: String,
    stack: Vec<String>,
    nodes: usize,
    size_cut: bool,
    depth_cut: bool,
}

impl OpState {
    fn new(label: String) -> Self {
        Self { label, stack: Vec::new(), nodes: 0, size_cut: false, depth_cut: false }
    }
}

/// A parameter's identity: (name, in).
type ParamKey = (String, String);

/// A parameter before its argument name is chosen.
struct Draft {
    name: String,
    location: ParamLocation,
    required: bool,
    style: ParamStyle,
    explode: bool,
    content_type: Option<String>,
    schema: Value,
}

struct Reader<'d> {
    doc: &'d Value,
    root: &'d Map<String, Value>,
    limits: Limits,
    version: SpecVersion,
    notes: Notes,
    total_nodes: usize,
    schemes: BTreeMap<String, SecurityScheme>,
    unknown_schemes: HashSet<String>,
}

impl<'d> Reader<'d> {
    /// 3.x `servers`, with variables replaced by their defaults.
    fn servers(&mut self, list: Option<&Value>) -> Vec<String> {
        let Some(Value::Array(list)) = list else { return Vec::new() };
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        for server in list {
            let Some(url) = server.get("url").and_then(Value::as_str) else { continue };
            let variables = server.get("variables").and_then(Value::as_object);
            let mut text = String::with_capacity(url.len());
            let mut rest = url;
            while let Some(open) = rest.find('{') {
                text.push_str(&rest[..open]);
                let Some(close) = rest[open..].find('}') else {
                    text.push_str(&rest[open..]);
                    rest = "";
                    break;
                };
                let name = &rest[open + 1..open + close];
                let variable = variables.and_then(|v| v.get(name));
                let value = variable
                    .and_then(|v| v.get("default"))
                    .or_else(|| variable.and_then(|v| v.get("enum")).and_then(|e| e.get(0)));
                match value {
                    Some(Value::String(s)) => text.push_str(s),
                    Some(v @ (Value::Number(_) | Value::Bool(_))) => text.push_str(&v.to_string()),
                    _ => {
                        self.notes.once(format!("server-var:{url}:{name}"), || {
                            format!("server `{url}`: variable `{name}` has no default; left as written")
                        });
                        text.push_str(&rest[open..=open + close]);
                    }
                }
                rest = &rest[open + close + 1..];
            }
            text.push_str(rest);
            let text = trim_slash(text.trim().to_owned());
            if !text.is_empty() && seen.insert(text.clone()) {
                out.push(text);
            }
        }
        out
    }

    fn security_schemes(&mut self, root: &'d Map<String, Value>) -> BTreeMap<String, SecurityScheme> {
        let source = match self.version {
            SpecVersion::Swagger2 => root.get("securityDefinitions"),
            _ => root.get("components").and_then(|c| c.get("securitySchemes")),
        };
        let mut out = BTreeMap::new();
        let Some(Value::Object(source)) = source else { return out };
        for (name, raw) in source {
            let raw = match resolve_object(self.doc, raw) {
                Ok(raw) => raw,
                Err(reason) => {
                    self.notes.add(format!("security scheme `{name}` left out: {reason}"));
                    continue;
                }
            };
            match security_scheme(raw) {
                Ok(scheme) => {
                    out.insert(name.clone(), scheme);
                }
                Err(reason) => self.notes.add(format!("security scheme `{name}` left out: {reason}")),
            }
        }
        out
    }

    /// A `security` requirement list: alternatives of scheme names.
    fn requirement(&mut self, value: &Value, whose: &str) -> Option<Vec<Vec<String>>> {
        let Value::Array(list) = value else {
            self.notes.add(format!("{whose}: `security` is not a list; ignored"));
            return None;
        };
        let mut out = Vec::with_capacity(list.len());
        for alternative in list {
            let Value::Object(names) = alternative else { continue };
            let names: Vec<String> = names.keys().cloned().collect();
            for name in &names {
                if !self.schemes.contains_key(name) && self.unknown_schemes.insert(name.clone()) {
                    self.notes.add(format!(
                        "{whose} requires security scheme `{name}`, which is not defined or not supported"
                    ));
                }
            }
            out.push(names);
        }
        Some(out)
    }

    fn path_item(
        &mut self,
        path: &str,
        item: &'d Value,
        global_security: Option<&Vec<Vec<String>>>,
        names: &mut Names,
        operations: &mut Vec<Operation>,
    ) {
        let item = match resolve_object(self.doc, item) {
            Ok(Value::Object(item)) => item,
            Ok(_) => {
                self.notes.add(format!("path `{path}` skipped: it is not an object"));
                return;
            }
            Err(reason) => {
                self.notes.add(format!("path `{path}` skipped: {reason}"));
                return;
            }
        };
        let item_servers = self.servers(item.get("servers"));
        for method in Method::ALL {
            let Some(op) = item.get(method.key()) else { continue };
            let Value::Object(op) = op else {
                self.notes.add(format!("{} {path} skipped: the operation is not an object", method.as_str()));
                continue;
            };
            let mut operation = self.operation(path, method, item, op, global_security);
            let raw = match &operation.operation_id {
                Some(id) if !clean_name(id).is_empty() => id.clone(),
                _ => format!("{}_{path}", method.key()),
            };
            operation.name = names.claim(operation_name(&raw));
            if operation.servers.is_empty() {
                operation.servers.clone_from(&item_servers);
            }
            operations.push(operation);
        }
    }

    /// One operation; problems in it become notes, never a failure.
    fn operation(
        &mut self,
        path: &str,
        method: Method,
        item: &'d Map<String, Value>,
        op: &'d Map<String, Value>,
        global_security: Option<&Vec<Vec<String>>>,
    ) -> Operation {
        let label = &format!("{} {path}", method.as_str());
        let shared = item.get("parameters");
        let mut state = OpState::new(label.to_owned());
        let operation_id = op.get("operationId").and_then(Value::as_str).map(str::to_owned);

        // Path-level parameters first, each replaced in place by an operation-level one with the
        // same (name, in); then the operation's others.
        let mut raw_params: Vec<(&'d Map<String, Value>, ParamKey)> = Vec::new();
        let mut slots: HashMap<ParamKey, usize> = HashMap::new();
        for list in [shared, op.get("parameters")] {
            let Some(list) = list else { continue };
            let Value::Array(list) = list else {
                self.notes.add(format!("{label}: `parameters` is not a list; ignored"));
                continue;
            };
            for param in list {
                let param = match resolve_object(self.doc, param) {
                    Ok(Value::Object(param)) => param,
                    Ok(_) => {
                        self.notes.add(format!("{label}: a parameter that is not an object was skipped"));
                        continue;
                    }
                    Err(reason) => {
                        self.notes.add(format!("{label}: a parameter was skipped: {reason}"));
                        continue;
                    }
                };
                let key = (
                    param.get("name").and_then(Value::as_str).unwrap_or("").to_owned(),
                    param.get("in").and_then(Value::as_str).unwrap_or("").to_owned(),
                );
                match slots.get(&key) {
                    Some(&slot) => raw_params[slot].0 = param,
                    None => {
                        slots.insert(key.clone(), raw_params.len());
                        raw_params.push((param, key));
                    }
                }
            }
        }

        let mut drafts = Vec::new();
        let mut body = None;
        let mut form: Vec<(&'d Map<String, Value>, String)> = Vec::new();
        for (param, (name, location)) in raw_params {
            if name.is_empty() {
                self.notes.add(format!("{label}: a parameter without a name was skipped"));
                continue;
            }
            let location = match location.as_str() {
                "path" => ParamLocation::Path,
                "query" => ParamLocation::Query,
                "header" => ParamLocation::Header,
                "cookie" if self.version != SpecVersion::Swagger2 => ParamLocation::Cookie,
                "body" if self.version == SpecVersion::Swagger2 => {
                    if body.is_some() {
                        self.notes.add(format!("{label}: a second body parameter `{name}` was skipped"));
                    } else {
                        body = Some(self.swagger_body(&mut state, param, op));
                    }
                    continue;
                }
                "formData" if self.version == SpecVersion::Swagger2 => {
                    form.push((param, name));
                    continue;
                }
                other => {
                    self.notes.add(format!("{label}: parameter `{name}` in `{other}` was skipped"));
                    continue;
                }
            };
            // OpenAPI 3: these headers come from the body's media type and the security schemes.
            if location == ParamLocation::Header
                && self.version != SpecVersion::Swagger2
                && ["accept", "content-type", "authorization"].contains(&name.to_ascii_lowercase().as_str())
            {
                self.notes.once(format!("header:{label}:{name}"), || {
                    format!("{label}: header parameter `{name}` ignored, as OpenAPI 3 says")
                });
                continue;
            }
            drafts.push(self.parameter(&mut state, param, name, location));
        }
        if !form.is_empty() {
            if body.is_some() {
                self.notes.add(format!("{label}: formData parameters beside a body parameter were skipped"));
            } else {
                body = Some(self.form_body(&mut state, &form, op));
            }
        }
        if self.version != SpecVersion::Swagger2
            && let Some(raw) = op.get("requestBody")
        {
            body = self.request_body(&mut state, raw);
        }

        // A template variable the document forgot to declare is still needed to build the URL.
        let declared: HashSet<String> =
            drafts.iter().filter(|d| d.location == ParamLocation::Path).map(|d| d.name.clone()).collect();
        for variable in template_variables(path) {
            if !declared.contains(variable) {
                self.notes.add(format!(
                    "{label}: path variable `{variable}` is not declared; taken as a required string"
                ));
                drafts.push(Draft {
                    name: variable.to_owned(),
                    location: ParamLocation::Path,
                    required: true,
                    style: ParamStyle::Simple,
                    explode: false,
                    content_type: None,
                    schema: json!({"type": "string"}),
                });
            }
        }

        let mut taken: HashSet<String> = HashSet::from(["body".to_owned()]);
        let mut properties = Map::new();
        let mut required = Vec::new();
        let mut parameters = Vec::with_capacity(drafts.len());
        for draft in drafts {
            let argument = argument_name(&mut taken, &draft.name, draft.location);
            properties.insert(argument.clone(), draft.schema.clone());
            if draft.required {
                required.push(Value::String(argument.clone()));
            }
            parameters.push(Parameter {
                name: draft.name,
                location: draft.location,
                argument,
                required: draft.required,
                style: draft.style,
                explode: draft.explode,
                content_type: draft.content_type,
                schema: draft.schema,
            });
        }
        if let Some(body) = &body {
            properties.insert("body".to_owned(), body.schema.clone());
            if body.required {
                required.push(Value::String("body".to_owned()));
            }
        }
        let mut input_schema = Map::new();
        input_schema.insert("type".into(), json!("object"));
        input_schema.insert("properties".into(), Value::Object(properties));
        if !required.is_empty() {
            input_schema.insert("required".into(), Value::Array(required));
        }
        input_schema.insert("additionalProperties".into(), Value::Bool(false));

        let security = match op.get("security") {
            // A malformed requirement says nothing; the document's applies.
            Some(value) => self.requirement(value, label).or_else(|| global_security.cloned()),
            None => global_security.cloned(),
        };
        let servers = match self.version {
            SpecVersion::Swagger2 => Vec::new(),
            _ => self.servers(op.get("servers")),
        };
        Operation {
            name: String::new(),
            operation_id,
            method,
            path: path.to_owned(),
            description: describe(op, item, method, path),
            deprecated: op.get("deprecated").and_then(Value::as_bool).unwrap_or(false),
            parameters,
            body,
            security,
            servers,
            input_schema: Value::Object(input_schema),
        }
    }

    /// A path, query, header or cookie parameter.
    fn parameter(
        &mut self,
        state: &mut OpState,
        param: &'d Map<String, Value>,
        name: String,
        location: ParamLocation,
    ) -> Draft {
        let required = location == ParamLocation::Path
            || param.get("required").and_then(Value::as_bool).unwrap_or(false);
        let description = param.get("description").and_then(Value::as_str).map(str::trim);
        let mut content_type = None;
        let (style, explode, mut schema) = if self.version == SpecVersion::Swagger2 {
            let (style, explode) = match param.get("collectionFormat").and_then(Value::as_str) {
                Some("multi") => (ParamStyle::Form, true),
                Some("ssv") => (ParamStyle::SpaceDelimited, false),
                Some("pipes") => (ParamStyle::PipeDelimited, false),
                Some("tsv") => (ParamStyle::TabDelimited, false),
                _ if matches!(location, ParamLocation::Path | ParamLocation::Header) => {
                    (ParamStyle::Simple, false)
                }
                _ => (ParamStyle::Form, false),
            };
            let schema = self.schema(state, &swagger_param_schema(param), 0).value;
            (style, explode, schema)
        } else {
            let style = match param.get("style").and_then(Value::as_str) {
                Some("form") => ParamStyle::Form,
                Some("simple") => ParamStyle::Simple,
                Some("matrix") => ParamStyle::Matrix,
                Some("label") => ParamStyle::Label,
                Some("spaceDelimited") => ParamStyle::SpaceDelimited,
                Some("pipeDelimited") => ParamStyle::PipeDelimited,
                Some("deepObject") => ParamStyle::DeepObject,
                _ if matches!(location, ParamLocation::Path | ParamLocation::Header) => ParamStyle::Simple,
                _ => ParamStyle::Form,
            };
            let explode = param.get("explode").and_then(Value::as_bool).unwrap_or(style == ParamStyle::Form);
            let raw = match (param.get("schema"), param.get("content")) {
                (Some(schema), _) => Some(schema),
                (None, Some(Value::Object(content))) => content.iter().next().map(|(media, entry)| {
                    content_type = Some(media.clone());
                    entry.get("schema").unwrap_or(&Value::Bool(true))
                }),
                _ => None,
            };
            // Values on the wire are text: a parameter that says nothing is a string.
            let schema = match raw {
                Some(raw) => self.schema(state, raw, 0).value,
                None => json!({"type": "string"}),
            };
            (style, explode, schema)
        };
        if let (Some(description), Value::Object(map)) = (description, &mut schema)
            && !description.is_empty()
            && !map.contains_key("description")
        {
            map.insert("description".into(), Value::String(description.to_owned()));
        }
        Draft { name, location, required, style, explode, content_type, schema }
    }

    /// A 2.0 `in: body` parameter.
    fn swagger_body(
        &mut self,
        state: &mut OpState,
        param: &'d Map<String, Value>,
        op: &'d Map<String, Value>,
    ) -> RequestBody {
        let consumes = self.consumes(op);
        let content_type = choose_media(consumes.iter().copied()).unwrap_or("application/json").to_owned();
        let mut schema = match param.get("schema") {
            Some(raw) => self.schema(state, raw, 1).value,
            None => any(),
        };
        if let Some(description) = param.get("description").and_then(Value::as_str) {
            add_description(&mut schema, description);
        }
        RequestBody {
            content_type,
            required: param.get("required").and_then(Value::as_bool).unwrap_or(false),
            schema,
        }
    }

    /// 2.0 `in: formData` parameters as one object body.
    fn form_body(
        &mut self,
        state: &mut OpState,
        form: &[(&'d Map<String, Value>, String)],
        op: &'d Map<String, Value>,
    ) -> RequestBody {
        let multipart = self.consumes(op).iter().any(|m| media_rank(m) == 3)
            || form.iter().any(|(p, _)| p.get("type").and_then(Value::as_str) == Some("file"));
        let mut properties = Map::new();
        let mut required = Vec::new();
        for (param, name) in form {
            let schema = self.schema(state, &swagger_param_schema(param), 2).value;
            properties.insert(name.clone(), schema);
            if param.get("required").and_then(Value::as_bool).unwrap_or(false) {
                required.push(Value::String(name.clone()));
            }
        }
        let any_required = !required.is_empty();
        let mut schema = Map::new();
        schema.insert("type".into(), json!("object"));
        schema.insert("properties".into(), Value::Object(properties));
        if any_required {
            schema.insert("required".into(), Value::Array(required));
        }
        RequestBody {
            content_type: if multipart { "multipart/form-data" } else { "application/x-www-form-urlencoded" }
                .to_owned(),
            required: any_required,
            schema: Value::Object(schema),
        }
    }

    /// 2.0 `consumes`: the operation's over the document's.
    fn consumes(&self, op: &'d Map<String, Value>) -> Vec<&'d str> {
        op.get("consumes")
            .or_else(|| self.root.get("consumes"))
            .and_then(Value::as_array)
            .map(|list| list.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default()
    }

    /// A 3.x `requestBody`.
    fn request_body(&mut self, state: &mut OpState, raw: &'d Value) -> Option<RequestBody> {
        let label = state.label.clone();
        let raw = match resolve_object(self.doc, raw) {
            Ok(Value::Object(raw)) => raw,
            Ok(_) => {
                self.notes.add(format!("{label}: the request body is not an object; skipped"));
                return None;
            }
            Err(reason) => {
                self.notes.add(format!("{label}: the request body was skipped: {reason}"));
                return None;
            }
        };
        let Some(Value::Object(content)) =
            raw.get("content").filter(|c| c.as_object().is_some_and(|c| !c.is_empty()))
        else {
            self.notes.add(format!("{label}: the request body lists no media type; skipped"));
            return None;
        };
        let content_type = choose_media(content.keys().map(String::as_str))?.to_owned();
        let mut schema = match content.get(&content_type).and_then(|m| m.get("schema")) {
            Some(raw) => self.schema(state, raw, 1).value,
            // A body without a schema: any JSON value, or the raw text of other media types.
            None if media_rank(&content_type) <= 1 => any(),
            None => json!({"type": "string"}),
        };
        if let Some(description) = raw.get("description").and_then(Value::as_str) {
            add_description(&mut schema, description);
        }
        Some(RequestBody {
            content_type,
            required: raw.get("required").and_then(Value::as_bool).unwrap_or(false),
            schema,
        })
    }

    /// Converts a document schema to a self-contained JSON Schema.
    fn schema(&mut self, state: &mut OpState, raw: &Value, depth: usize) -> Converted {
        if !self.charge(state, 1) {
            return any().into();
        }
        let limits = self.limits;
        // A chain of references (`A → B → C…`) nests the recursion without nesting the schema;
        // it is bounded the same way.
        if depth > limits.max_schema_depth || state.stack.len() > limits.max_schema_depth {
            if !state.depth_cut {
                state.depth_cut = true;
                self.notes.add(format!(
                    "{}: the input schema was cut at depth {}; deeper parts accept any value",
                    state.label, limits.max_schema_depth
                ));
            }
            return any().into();
        }
        match raw {
            Value::Object(map) => match map.get("$ref") {
                Some(Value::String(reference)) => self.reference(state, map, reference, depth),
                _ => self.schema_object(state, map, depth),
            },
            Value::Bool(true) => any().into(),
            Value::Bool(false) => json!({"not": {}}).into(),
            _ => {
                let label = state.label.clone();
                self.notes.once(format!("not-schema:{label}"), || {
                    format!("{label}: a schema that is not an object was taken as any value")
                });
                any().into()
            }
        }
    }

    /// Counts `cost` against the operation's and the document's node budgets; `false` (with a
    /// note, once per operation) when they are spent.
    ///
    /// A schema node costs 1; plain values (an `enum`, a `default`, a long description) cost
    /// their [`weight`], since a reference expanded many times copies them each time.
    fn charge(&mut self, state: &mut OpState, cost: usize) -> bool {
        state.nodes += cost;
        self.total_nodes += cost;
        let limits = self.limits;
        if state.nodes <= limits.max_schema_nodes && self.total_nodes <= limits.max_document_nodes {
            return true;
        }
        if !state.size_cut {
            state.size_cut = true;
            let limit = if self.total_nodes > limits.max_document_nodes {
                format!("the document's {}", limits.max_document_nodes)
            } else {
                format!("{}", limits.max_schema_nodes)
            };
            self.notes.add(format!(
                "{}: the input schema was cut at {limit} nodes (its references expand too far); \
                 the rest accepts any value",
                state.label
            ));
        }
        false
    }

    fn reference(
        &mut self,
        state: &mut OpState,
        map: &Map<String, Value>,
        reference: &str,
        depth: usize,
    ) -> Converted {
        let doc = self.doc;
        let target = match lookup(doc, reference) {
            Target::Found(target) => target,
            Target::External => {
                let label = state.label.clone();
                self.notes.once(format!("external:{reference}"), || {
                    format!("{label}: external reference `{reference}` not followed; it accepts any value")
                });
                return sibling_annotations(map).into();
            }
            Target::Missing => {
                let label = state.label.clone();
                self.notes.once(format!("missing:{reference}"), || {
                    format!("{label}: reference `{reference}` points to nothing in the document; it accepts any value")
                });
                return sibling_annotations(map).into();
            }
        };
        if state.stack.iter().any(|r| r == reference) {
            let label = state.label.clone();
            self.notes.once(format!("cycle:{reference}"), || {
                format!("{label}: recursive schema `{reference}` cut where it refers to itself")
            });
            return cycle_cut(target, reference).into();
        }
        state.stack.push(reference.to_owned());
        let siblings = map.len() > 1;
        let out = match target {
            // Keywords beside the `$ref` (a description, `nullable`) win over the target's.
            Value::Object(target) if siblings => {
                let mut merged = target.clone();
                for (key, value) in map {
                    if key != "$ref" {
                        merged.insert(key.clone(), value.clone());
                    }
                }
                match merged.get("$ref") {
                    Some(Value::String(next)) => {
                        let next = next.clone();
                        self.reference(state, &merged, &next, depth)
                    }
                    _ => self.schema_object(state, &merged, depth),
                }
            }
            _ => {
                // The target counts as a node of its own but sits where the `$ref` was.
                state.nodes = state.nodes.saturating_sub(1);
                self.total_nodes = self.total_nodes.saturating_sub(1);
                self.schema(state, target, depth)
            }
        };
        state.stack.pop();
        out
    }

    fn schema_object(&mut self, state: &mut OpState, map: &Map<String, Value>, depth: usize) -> Converted {
        let mut out = Map::with_capacity(map.len() + 1);
        let mut read_only = false;
        let mut nullable = false;
        let mut file = false;
        let mut exclusive_min = false;
        let mut exclusive_max = false;
        let mut removed: Vec<String> = Vec::new();
        let mut lifted: Vec<String> = Vec::new();
        let child = depth + 1;
        for (key, value) in map {
            match key.as_str() {
                "type" => match value {
                    Value::String(kind) if kind == "file" => {
                        file = true;
                        out.insert("type".into(), json!("string"));
                    }
                    Value::String(kind) if JSON_TYPES.contains(&kind.as_str()) => {
                        out.insert("type".into(), value.clone());
                    }
                    Value::Array(kinds) => {
                        let mut valid: Vec<Value> = Vec::new();
                        for kind in kinds {
                            if let Some(k) = kind.as_str().filter(|k| JSON_TYPES.contains(k))
                                && !valid.iter().any(|v| v == k)
                            {
                                valid.push(json!(k));
                            }
                        }
                        match valid.len() {
                            0 => {}
                            1 => {
                                out.insert("type".into(), valid.remove(0));
                            }
                            _ => {
                                out.insert("type".into(), Value::Array(valid));
                            }
                        }
                    }
                    _ => {}
                },
                "properties" => {
                    let Value::Object(props) = value else { continue };
                    let mut converted = Map::with_capacity(props.len());
                    for (name, raw) in props {
                        if raw.get("required") == Some(&Value::Bool(true)) {
                            lifted.push(name.clone());
                        }
                        let c = self.schema(state, raw, child);
                        if c.read_only {
                            removed.push(name.clone());
                        } else {
                            converted.insert(name.clone(), c.value);
                        }
                    }
                    out.insert("properties".into(), Value::Object(converted));
                }
                "patternProperties" | "dependentSchemas" => {
                    let Value::Object(props) = value else { continue };
                    let mut converted = Map::with_capacity(props.len());
                    for (name, raw) in props {
                        converted.insert(name.clone(), self.schema(state, raw, child).value);
                    }
                    out.insert(key.clone(), Value::Object(converted));
                }
                "items" => match value {
                    // Draft 4 tuples are 2020-12's prefixItems.
                    Value::Array(parts) => {
                        let parts = parts.iter().map(|p| self.schema(state, p, child).value).collect();
                        out.insert("prefixItems".into(), Value::Array(parts));
                    }
                    Value::Object(_) | Value::Bool(_) => {
                        out.insert("items".into(), self.schema(state, value, child).value);
                    }
                    _ => {}
                },
                "additionalProperties" | "unevaluatedProperties" => match value {
                    Value::Bool(_) => {
                        out.insert(key.clone(), value.clone());
                    }
                    Value::Object(_) => {
                        out.insert(key.clone(), self.schema(state, value, child).value);
                    }
                    _ => {}
                },
                "allOf" | "anyOf" | "oneOf" | "prefixItems" => {
                    let Value::Array(parts) = value else { continue };
                    if parts.is_empty() {
                        continue;
                    }
                    let mut converted = Vec::with_capacity(parts.len());
                    for part in parts {
                        let c = self.schema(state, part, child);
                        read_only |= key == "allOf" && c.read_only;
                        converted.push(c.value);
                    }
                    out.insert(key.clone(), Value::Array(converted));
                }
                "not" | "contains" | "propertyNames" | "if" | "then" | "else"
                    if value.is_object() || value.is_boolean() =>
                {
                    out.insert(key.clone(), self.schema(state, value, child).value);
                }
                "required" => {
                    if let Value::Array(names) = value
                        && self.charge(state, weight(value))
                    {
                        let mut seen = HashSet::new();
                        let list: Vec<Value> = names
                            .iter()
                            .filter(|n| n.as_str().is_some_and(|n| seen.insert(n)))
                            .cloned()
                            .collect();
                        out.insert("required".into(), Value::Array(list));
                    }
                }
                "exclusiveMinimum" | "exclusiveMaximum" => match value {
                    Value::Number(_) => {
                        out.insert(key.clone(), value.clone());
                    }
                    Value::Bool(true) if key == "exclusiveMinimum" => exclusive_min = true,
                    Value::Bool(true) => exclusive_max = true,
                    _ => {}
                },
                // Copies are charged: a reference expanded many times copies them each time.
                _ if plain_keyword(key, value) && self.charge(state, weight(value)) => {
                    out.insert(key.clone(), value.clone());
                }
                "readOnly" => read_only = value == &Value::Bool(true),
                "nullable" | "x-nullable" => nullable = value == &Value::Bool(true),
                // discriminator, xml, externalDocs, example, deprecated, writeOnly, x-*,
                // collectionFormat, allowEmptyValue, $id, $schema, $defs and the like.
                _ => {}
            }
        }
        if file {
            let text = match out.get("description").and_then(Value::as_str) {
                Some(description) => format!("{description} (file contents)"),
                None => "file contents".to_owned(),
            };
            out.insert("description".into(), Value::String(text));
        }
        if exclusive_min && let Some(minimum) = out.shift_remove("minimum") {
            out.insert("exclusiveMinimum".into(), minimum);
        }
        if exclusive_max && let Some(maximum) = out.shift_remove("maximum") {
            out.insert("exclusiveMaximum".into(), maximum);
        }
        if !removed.is_empty() || !lifted.is_empty() {
            let mut list: Vec<Value> = match out.shift_remove("required") {
                Some(Value::Array(list)) => list,
                _ => Vec::new(),
            };
            let mut seen: HashSet<String> =
                list.iter().filter_map(Value::as_str).map(str::to_owned).collect();
            for name in lifted {
                if seen.insert(name.clone()) {
                    list.push(Value::String(name));
                }
            }
            let removed: HashSet<String> = removed.into_iter().collect();
            list.retain(|n| n.as_str().is_none_or(|n| !removed.contains(n)));
            if !list.is_empty() {
                out.insert("required".into(), Value::Array(list));
            }
        }
        if out.get("required").and_then(Value::as_array).is_some_and(Vec::is_empty) {
            out.shift_remove("required");
        }
        merge_all_of(&mut out);
        if !out.contains_key("type") {
            if out.contains_key("properties") {
                out.insert("type".into(), json!("object"));
            } else if out.contains_key("items") || out.contains_key("prefixItems") {
                out.insert("type".into(), json!("array"));
            }
        }
        if nullable {
            allow_null(&mut out);
        }
        Converted { value: Value::Object(out), read_only }
    }
}

/// Whether the schema validator (the one the pipeline checks arguments with) compiles `pattern`;
/// answers are remembered, since one document repeats its patterns.
fn pattern_compiles(pattern: &str) -> bool {
    thread_local! {
        static SEEN: std::cell::RefCell<std::collections::HashMap<String, bool>> = Default::default();
    }
    if let Some(known) = SEEN.with(|seen| seen.borrow().get(pattern).copied()) {
        return known;
    }
    let ok = jsonschema::validator_for(&serde_json::json!({"type": "string", "pattern": pattern})).is_ok();
    SEEN.with(|seen| {
        let mut seen = seen.borrow_mut();
        if seen.len() > 10_000 {
            seen.clear();
        }
        seen.insert(pattern.to_owned(), ok);
    });
    ok
}

/// Whether `key` is a keyword with a plain (not schema) value that is kept, and `value` is valid
/// for it; an invalid value would make the schema fail to compile, so it is dropped.
fn plain_keyword(key: &str, value: &Value) -> bool {
    match key {
        "enum" | "examples" => value.as_array().is_some_and(|v| !v.is_empty()),
        "const" | "default" => true,
        "description" | "title" | "format" | "contentMediaType" | "contentEncoding" => value.is_string(),
        // A pattern the validator cannot compile (ECMA syntax it does not take, a brace left
        // unescaped) would make the whole schema refused: the pattern alone goes.
        "pattern" => value.as_str().is_some_and(pattern_compiles),
        "minimum" | "maximum" => value.is_number(),
        "multipleOf" => value.as_f64().is_some_and(|v| v > 0.0),
        "minLength" | "maxLength" | "minItems" | "maxItems" | "minProperties" | "maxProperties"
        | "minContains" | "maxContains" => value.is_u64(),
        "uniqueItems" => value.is_boolean(),
        "dependentRequired" => value.as_object().is_some_and(|m| {
            m.values().all(|v| v.as_array().is_some_and(|names| names.iter().all(Value::is_string)))
        }),
        _ => false,
    }
}

/// The cost of copying a plain value: one per value, plus one per 100 bytes of text.
fn weight(value: &Value) -> usize {
    match value {
        Value::String(text) => 1 + text.len() / 100,
        Value::Array(items) => 1 + items.iter().map(weight).sum::<usize>(),
        Value::Object(map) => 1 + map.iter().map(|(k, v)| k.len() / 100 + weight(v)).sum::<usize>(),
        _ => 1,
    }
}

/// A 2.0 parameter's schema: its own fields.
fn swagger_param_schema(param: &Map<String, Value>) -> Value {
    let mut schema = Map::new();
    for key in [
        "type",
        "format",
        "items",
        "enum",
        "default",
        "maximum",
        "exclusiveMaximum",
        "minimum",
        "exclusiveMinimum",
        "maxLength",
        "minLength",
        "pattern",
        "maxItems",
        "minItems",
        "uniqueItems",
        "multipleOf",
        "description",
        "x-nullable",
    ] {
        if let Some(value) = param.get(key) {
            schema.insert(key.to_owned(), value.clone());
        }
    }
    if !schema.contains_key("type") {
        schema.insert("type".into(), json!("string"));
    }
    Value::Object(schema)
}

/// The annotations beside a `$ref` that could not be followed.
fn sibling_annotations(map: &Map<String, Value>) -> Value {
    let mut out = Map::new();
    for key in ["description", "title"] {
        if let Some(value @ Value::String(_)) = map.get(key) {
            out.insert(key.to_owned(), value.clone());
        }
    }
    Value::Object(out)
}

/// What a reference that closes a cycle becomes.
fn cycle_cut(target: &Value, reference: &str) -> Value {
    let kind = match target.get("type") {
        Some(Value::String(kind)) if kind == "file" => Some("string"),
        Some(Value::String(kind)) if JSON_TYPES.contains(&kind.as_str()) && kind != "null" => {
            Some(kind.as_str())
        }
        _ if target.get("properties").is_some() => Some("object"),
        _ if target.get("items").is_some() => Some("array"),
        _ => None,
    };
    let mut out = Map::new();
    if let Some(kind) = kind {
        out.insert("type".into(), json!(kind));
    }
    out.insert("description".into(), Value::String(format!("Recursive: {} (cut here)", ref_name(reference))));
    Value::Object(out)
}

/// Merges `allOf` parts into the schema when no keyword conflicts (the common OpenAPI
/// composition `allOf: [Base, {properties: …}]`), since OpenAI strict mode takes no multi-part
/// `allOf`. On any conflict the `allOf` stays as it is.
fn merge_all_of(out: &mut Map<String, Value>) {
    let Some(Value::Array(parts)) = out.get("allOf") else { return };
    if !parts.iter().all(Value::is_object) {
        return;
    }
    let mut merged = out.clone();
    merged.shift_remove("allOf");
    for part in parts {
        let Value::Object(part) = part else { return };
        for (key, value) in part {
            match key.as_str() {
                "properties" => {
                    let Value::Object(props) = value else { return };
                    let target = merged.entry("properties").or_insert_with(|| json!({}));
                    let Value::Object(target) = target else { return };
                    for (name, schema) in props {
                        match target.get(name) {
                            Some(existing) if existing != schema => return,
                            Some(_) => {}
                            None => {
                                target.insert(name.clone(), schema.clone());
                            }
                        }
                    }
                }
                "required" => {
                    let Value::Array(names) = value else { return };
                    let target = merged.entry("required").or_insert_with(|| json!([]));
                    let Value::Array(target) = target else { return };
                    let mut seen: HashSet<Value> = target.iter().cloned().collect();
                    for name in names {
                        if seen.insert(name.clone()) {
                            target.push(name.clone());
                        }
                    }
                }
                // Annotations: the outer schema's, then the first part's.
                "description" | "title" | "examples" | "default" => {
                    merged.entry(key.clone()).or_insert_with(|| value.clone());
                }
                _ => match merged.get(key) {
                    Some(existing) if existing != value => return,
                    Some(_) => {}
                    None => {
                        merged.insert(key.clone(), value.clone());
                    }
                },
            }
        }
    }
    *out = merged;
}

/// Lets a schema also accept `null` (OpenAPI 3.0 `nullable: true`).
fn allow_null(out: &mut Map<String, Value>) {
    let composed = ["allOf", "anyOf", "oneOf", "not", "const"].iter().any(|k| out.contains_key(*k));
    if !composed {
        if let Some(Value::Array(values)) = out.get_mut("enum")
            && !values.contains(&Value::Null)
        {
            values.push(Value::Null);
        }
        match out.get_mut("type") {
            Some(Value::String(kind)) => {
                if kind != "null" {
                    let kind = std::mem::take(kind);
                    out.insert("type".into(), json!([kind, "null"]));
                }
                return;
            }
            Some(Value::Array(kinds)) => {
                if !kinds.iter().any(|k| k == "null") {
                    kinds.push(json!("null"));
                }
                return;
            }
            _ => {}
        }
        if out.contains_key("enum") || out.is_empty() {
            return;
        }
    }
    if out.len() == 1
        && let Some(Value::Array(options)) = out.get_mut("anyOf")
    {
        if !options.iter().any(|o| o.get("type") == Some(&json!("null"))) {
            options.push(json!({"type": "null"}));
        }
        return;
    }
    let mut inner = std::mem::take(out);
    for key in ["description", "title"] {
        if let Some(value) = inner.shift_remove(key) {
            out.insert(key.to_owned(), value);
        }
    }
    out.insert("anyOf".into(), json!([Value::Object(inner), {"type": "null"}]));
}

/// Sets a schema's description when it has none.
fn add_description(schema: &mut Value, description: &str) {
    let description = description.trim();
    if let Value::Object(map) = schema
        && !description.is_empty()
        && !map.contains_key("description")
    {
        map.insert("description".into(), Value::String(description.to_owned()));
    }
}

/// The `{name}`s of a path template.
fn template_variables(path: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut rest = path;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else { break };
        let name = &rest[open + 1..open + close];
        if !name.is_empty() && seen.insert(name) {
            out.push(name);
        }
        rest = &rest[open + close + 1..];
    }
    out
}

/// The property name for a parameter (see [`Parameter::argument`]).
fn argument_name(taken: &mut HashSet<String>, name: &str, location: ParamLocation) -> String {
    let base = if is_argument_name(name) { name.to_owned() } else { clean_argument(name) };
    if taken.insert(base.clone()) {
        return base;
    }
    let mut prefixed = format!("{}_{base}", location.as_str());
    prefixed.truncate(MAX_ARGUMENT_CHARS);
    if taken.insert(prefixed.clone()) {
        return prefixed;
    }
    let mut n = 2;
    loop {
        let suffix = format!("_{n}");
        let mut stem = prefixed.clone();
        stem.truncate(MAX_ARGUMENT_CHARS - suffix.len());
        let candidate = format!("{stem}{suffix}");
        if taken.insert(candidate.clone()) {
            return candidate;
        }
        n += 1;
    }
}

/// The operation's description: summary, then description; the path item's when the operation
/// has neither; `"METHOD PATH"` when nothing is said.
fn describe(op: &Map<String, Value>, item: &Map<String, Value>, method: Method, path: &str) -> String {
    let join = |m: &Map<String, Value>| {
        let text = |key: &str| m.get(key).and_then(Value::as_str).map(str::trim).unwrap_or("");
        match (text("summary"), text("description")) {
            ("", "") => String::new(),
            (summary, "") => summary.to_owned(),
            ("", description) => description.to_owned(),
            (summary, description) => format!("{summary}\n\n{description}"),
        }
    };
    let mut text = join(op);
    if text.is_empty() {
        text = join(item);
    }
    if text.is_empty() {
        text = format!("{} {path}", method.as_str());
    }
    clip(&text, MAX_DESCRIPTION_CHARS)
}

/// A security scheme Toolhost can use, or why not.
fn security_scheme(raw: &Value) -> Result<SecurityScheme, String> {
    let kind = raw.get("type").and_then(Value::as_str).unwrap_or("");
    match kind {
        "apiKey" => {
            let name = raw
                .get("name")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .ok_or("an apiKey scheme without a `name`")?;
            let location = match raw.get("in").and_then(Value::as_str) {
                Some("header") => KeyLocation::Header,
                Some("query") => KeyLocation::Query,
                Some("cookie") => KeyLocation::Cookie,
                other => return Err(format!("an apiKey scheme in {other:?}")),
            };
            Ok(SecurityScheme::ApiKey { location, name: name.to_owned() })
        }
        "basic" => Ok(SecurityScheme::Basic),
        "oauth2" | "openIdConnect" => Ok(SecurityScheme::Bearer),
        "http" => {
            let scheme = raw.get("scheme").and_then(Value::as_str).unwrap_or("").to_ascii_lowercase();
            match scheme.as_str() {
                "bearer" => Ok(SecurityScheme::Bearer),
                "basic" => Ok(SecurityScheme::Basic),
                other => Err(format!("http scheme `{other}` is not supported")),
            }
        }
        other => Err(format!("type `{other}` is not supported")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_cleaned() {
        for (raw, expected) in [
            ("listPets", "listPets"),
            ("pets.list", "pets_list"),
            ("get /pets/{petId}", "get_pets_petId"),
            ("get_/pets/{petId}", "get_pets_petId"),
            ("__a  b__", "a_b"),
            ("Pets::list-all", "Pets_list-all"),
            ("2fa.check", "op_2fa_check"),
            ("-x", "op_-x"),
            ("élan", "lan"),
            ("!!!", "operation"),
        ] {
            assert_eq!(operation_name(raw), expected, "{raw}");
        }
    }

    #[test]
    fn long_names_keep_apart_by_hash() {
        let a = "a".repeat(60) + "One";
        let b = "a".repeat(60) + "Two";
        let (na, nb) = (operation_name(&a), operation_name(&b));
        assert_eq!(na.len(), MAX_NAME_CHARS);
        assert_ne!(na, nb);
        assert!(na.starts_with(&"a".repeat(39)));
        assert_eq!(na, operation_name(&a), "stable");
        let hash = &na[na.len() - 8..];
        assert!(hash.chars().all(|c| c.is_ascii_hexdigit()), "{na}");
    }

    #[test]
    fn duplicates_are_numbered() {
        let mut names = Names::default();
        assert_eq!(names.claim("a".into()), "a");
        assert_eq!(names.claim("a".into()), "a_2");
        assert_eq!(names.claim("a_2".into()), "a_2_2");
        assert_eq!(names.claim("a".into()), "a_3");
        let long = "x".repeat(MAX_NAME_CHARS);
        assert_eq!(names.claim(long.clone()), long);
        let second = names.claim(long);
        assert_eq!(second.len(), MAX_NAME_CHARS);
        assert!(second.ends_with("_2"));
    }

    #[test]
    fn pointers_are_decoded() {
        for (fragment, expected) in [
            ("", Some(vec![])),
            ("/components/schemas/Pet", Some(vec!["components", "schemas", "Pet"])),
            ("/paths/~1pets~1{id}/get", Some(vec!["paths", "/pets/{id}", "get"])),
            ("/a~0b/~01", Some(vec!["a~b", "~1"])),
            ("/a%20b/%7Bid%7D", Some(vec!["a b", "{id}"])),
            ("/100%", Some(vec!["100%"])),
            ("/%zz", Some(vec!["%zz"])),
            ("/%C3%A9", Some(vec!["é"])),
            ("/%FF", None),
            ("components", None),
        ] {
            let expected = expected.map(|v: Vec<&str>| v.into_iter().map(str::to_owned).collect::<Vec<_>>());
            assert_eq!(decode_pointer(fragment), expected, "{fragment}");
        }
    }

    #[test]
    fn references_resolve_in_the_document() {
        let doc = json!({"a": {"b/c": [1, {"d": 2}]}, "e f": 3});
        assert!(matches!(lookup(&doc, "#/a/b~1c/1/d"), Target::Found(v) if v == 2));
        assert!(matches!(lookup(&doc, "#/e%20f"), Target::Found(v) if v == 3));
        assert!(matches!(lookup(&doc, "#"), Target::Found(v) if v == &doc));
        assert!(matches!(lookup(&doc, "#/a/x"), Target::Missing));
        assert!(matches!(lookup(&doc, "#/a/b~1c/9"), Target::Missing));
        assert!(matches!(lookup(&doc, "other.yaml#/Foo"), Target::External));
        assert_eq!(ref_name("#/components/schemas/Pet"), "Pet");
        assert_eq!(ref_name("#/definitions/a~1b"), "a/b");
    }

    #[test]
    fn arguments_are_named() {
        let mut taken = HashSet::from(["body".to_owned()]);
        assert_eq!(argument_name(&mut taken, "id", ParamLocation::Path), "id");
        assert_eq!(argument_name(&mut taken, "id", ParamLocation::Query), "query_id");
        assert_eq!(argument_name(&mut taken, "id", ParamLocation::Query), "query_id_2");
        assert_eq!(argument_name(&mut taken, "body", ParamLocation::Query), "query_body");
        assert_eq!(argument_name(&mut taken, "filter[status]", ParamLocation::Query), "filter_status");
        assert_eq!(argument_name(&mut taken, "X-Request-ID", ParamLocation::Header), "X-Request-ID");
        assert_eq!(argument_name(&mut taken, "$$", ParamLocation::Query), "param");
        assert_eq!(argument_name(&mut taken, &"a".repeat(70), ParamLocation::Query).len(), 64);
    }

    #[test]
    fn text_is_clipped_on_char_boundaries() {
        assert_eq!(clip("  hi  ", 10), "hi");
        let long = "é".repeat(30);
        let cut = clip(&long, 10);
        assert_eq!(cut.chars().count(), 10);
        assert!(cut.ends_with('…'));
    }

    #[test]
    fn media_types_are_ranked() {
        assert_eq!(choose_media(["text/plain", "application/json"]), Some("application/json"));
        assert_eq!(
            choose_media(["application/xml", "application/merge-patch+json"]),
            Some("application/merge-patch+json")
        );
        assert_eq!(
            choose_media(["multipart/form-data", "application/x-www-form-urlencoded"]),
            Some("application/x-www-form-urlencoded")
        );
        assert_eq!(choose_media(["application/xml", "image/png"]), Some("application/xml"));
        assert_eq!(
            choose_media(["application/json; charset=utf-8"]),
            Some("application/json; charset=utf-8")
        );
        assert_eq!(choose_media([]), None);
    }

    #[test]
    fn nullable_allows_null() {
        let cases = [
            (json!({"type": "string"}), json!({"type": ["string", "null"]})),
            (json!({"type": ["integer"]}), json!({"type": ["integer", "null"]})),
            (
                json!({"type": "string", "enum": ["a"]}),
                json!({"type": ["string", "null"], "enum": ["a", null]}),
            ),
            (
                json!({"allOf": [{"type": "object"}], "description": "d"}),
                json!({"description": "d", "anyOf": [{"allOf": [{"type": "object"}]}, {"type": "null"}]}),
            ),
            (
                json!({"anyOf": [{"type": "string"}]}),
                json!({"anyOf": [{"type": "string"}, {"type": "null"}]}),
            ),
            (json!({}), json!({})),
        ];
        for (input, expected) in cases {
            let Value::Object(mut map) = input.clone() else { unreachable!() };
            allow_null(&mut map);
            assert_eq!(Value::Object(map), expected, "{input}");
        }
    }

    #[test]
    fn all_of_merges_only_without_conflict() {
        let mut ok = json!({"allOf": [
            {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
            {"type": "object", "properties": {"b": {"type": "integer"}}, "required": ["b"], "description": "x"}
        ]});
        merge_all_of(ok.as_object_mut().unwrap());
        assert_eq!(
            ok,
            json!({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
                   "required": ["a", "b"], "description": "x"})
        );
        let conflict = json!({"allOf": [{"type": "string"}, {"type": "integer"}]});
        let mut same = conflict.clone();
        merge_all_of(same.as_object_mut().unwrap());
        assert_eq!(same, conflict);
    }

    #[test]
    fn merge_keys_apply() {
        let mut value = json!({"base": {"a": 1, "b": 2}, "x": {"<<": {"a": 1, "b": 2}, "b": 3}});
        apply_merge_keys(&mut value);
        assert_eq!(value["x"], json!({"b": 3, "a": 1}));
    }

    #[test]
    fn template_variables_are_found() {
        assert_eq!(template_variables("/a/{x}/b/{y}.{fmt}/{x}"), ["x", "y", "fmt"]);
        assert!(template_variables("/a/{").is_empty());
    }
}
