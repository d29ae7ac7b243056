//! The tool console (any tool and API, its arguments filled in a form generated from its schema,
//! run through the pipeline without a model), the journal view (this folder's calls, filtered
//! by status and tool, each record whole; remembered decisions, revocable) and the memory view
//! (what the memory tool keeps about the person, each whole, forgettable).

use crossterm::event::{KeyCode, KeyEvent};
use journal::{Attempt, AttemptStatus, RememberedDecision};
use serde_json::{Map, Value};
use tool_executor::CallResult;

/// One API the console offers.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiEntry {
    /// The tool.
    pub tool: String,
    /// The API.
    pub api: String,
    /// The function name (what a model would call).
    pub name: String,
    /// The API's description.
    pub description: String,
    /// Its argument schema.
    pub parameters: Value,
}

/// One argument in the form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormField {
    /// The property.
    pub name: String,
    /// Its JSON type (`string`, `integer`, `number`, `boolean`, `array`, `object`).
    pub kind: String,
    /// Whether the schema requires it.
    pub required: bool,
    /// Its description.
    pub description: String,
    /// What was typed.
    pub value: String,
}

/// The form of one API.
#[derive(Debug, Clone, PartialEq)]
pub struct Form {
    /// The API, as an index into the catalogue.
    pub entry: usize,
    /// Its fields, in the schema's order.
    pub fields: Vec<FormField>,
    /// The field being typed in.
    pub focus: usize,
    /// Why the last run did not start.
    pub error: Option<String>,
}

/// The console.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Console {
    /// The APIs on offer.
    pub catalogue: Vec<ApiEntry>,
    /// The highlighted API.
    pub selected: usize,
    /// The open form.
    pub form: Option<Form>,
    /// A run is in flight.
    pub running: bool,
    /// The last run's result and its arguments.
    pub result: Option<(Box<CallResult>, Value)>,
}

/// What a console key asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum ConsoleAction {
    /// Nothing beyond the state change.
    None,
    /// Leave the console.
    Leave,
    /// Run this call.
    Run {
        /// The function name.
        name: String,
        /// The arguments.
        arguments: Value,
    },
}

/// The form's fields from an object schema: every property, required ones first.
pub fn form_fields(schema: &Value) -> Vec<FormField> {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut fields: Vec<FormField> = schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|properties| {
            properties
                .iter()
                .map(|(name, property)| FormField {
                    name: name.clone(),
                    kind: kind_of(property),
                    required: required.contains(&name.as_str()),
                    description: property
                        .get("description")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                    value: String::new(),
                })
                .collect()
        })
        .unwrap_or_default();
    fields.sort_by_key(|f| !f.required);
    fields
}

fn kind_of(property: &Value) -> String {
    match property.get("type") {
        Some(Value::String(kind)) => kind.clone(),
        // `["string", "null"]` and the like: the first that is not null.
        Some(Value::Array(kinds)) => {
            kinds.iter().filter_map(Value::as_str).find(|k| *k != "null").unwrap_or("string").to_owned()
        }
        _ => {
            let variants = property.get("anyOf").or_else(|| property.get("oneOf")).and_then(Value::as_array);
            variants.and_then(|v| v.iter().map(kind_of).find(|k| k != "null")).unwrap_or_else(|| {
                if property.get("enum").is_some() { "string".into() } else { "object".into() }
            })
        }
    }
}

/// The arguments the form's fields make; an error names the field that is wrong. Empty optional
/// fields are left out; the schema itself is checked by the pipeline, as for any call.
///
/// # Errors
///
/// A required field left empty, or a value that is not of its field's type.
pub fn arguments(fields: &[FormField]) -> Result<Value, String> {
    let mut out = Map::new();
    for field in fields {
        let text = field.value.trim();
        if text.is_empty() {
            if field.required {
                return Err(format!("{} is required", field.name));
            }
            continue;
        }
        let value = match field.kind.as_str() {
            "string" => Value::String(field.value.clone()),
            "integer" => text
                .parse::<i64>()
                .map(Value::from)
                .map_err(|_| format!("{}: not a whole number", field.name))?,
            "number" => text
                .parse::<f64>()
                .ok()
                .and_then(serde_json::Number::from_f64)
                .map(Value::Number)
                .ok_or_else(|| format!("{}: not a number", field.name))?,
            "boolean" => match text {
                "true" | "yes" | "y" => Value::Bool(true),
                "false" | "no" | "n" => Value::Bool(false),
                _ => return Err(format!("{}: true or false", field.name)),
            },
            _ => serde_json::from_str(text).map_err(|e| format!("{}: not JSON ({e})", field.name))?,
        };
        out.insert(field.name.clone(), value);
    }
    Ok(Value::Object(out))
}

impl Console {
    /// Takes a key.
    pub fn on_key(&mut self, key: KeyEvent) -> ConsoleAction {
        let Some(form) = &mut self.form else {
            match key.code {
                KeyCode::Up => self.selected = self.selected.saturating_sub(1),
                KeyCode::Down => {
                    self.selected = (self.selected + 1).min(self.catalogue.len().saturating_sub(1))
                }
                KeyCode::Enter => {
                    if let Some(entry) = self.catalogue.get(self.selected) {
                        self.form = Some(Form {
                            entry: self.selected,
                            fields: form_fields(&entry.parameters),
                            focus: 0,
                            error: None,
                        });
                        self.result = None;
                    }
                }
                KeyCode::Esc => return ConsoleAction::Leave,
                _ => {}
            }
            return ConsoleAction::None;
        };
        match key.code {
            KeyCode::Esc => {
                self.form = None;
            }
            KeyCode::Up | KeyCode::BackTab => form.focus = form.focus.saturating_sub(1),
            KeyCode::Down | KeyCode::Tab => {
                form.focus = (form.focus + 1).min(form.fields.len().saturating_sub(1))
            }
            KeyCode::Backspace => {
                if let Some(field) = form.fields.get_mut(form.focus) {
                    field.value.pop();
                }
            }
            KeyCode::Char(c) => {
                if let Some(field) = form.fields.get_mut(form.focus) {
                    field.value.push(c);
                }
            }
            KeyCode::Enter if !self.running => match arguments(&form.fields) {
                Ok(arguments) => {
                    form.error = None;
                    self.running = true;
                    let name = self.catalogue[form.entry].name.clone();
                    return ConsoleAction::Run { name, arguments };
                }
                Err(error) => form.error = Some(error),
            },
            _ => {}
        }
        ConsoleAction::None
    }

    /// A run finished.
    pub fn finished(&mut self, result: CallResult, arguments: Value) {
        self.running = false;
        if let Some(form) = &mut self.form {
            form.error = (!result.output.success).then(|| result.output.content.clone());
        }
        self.result = Some((Box::new(result), arguments));
    }
}

/// The statuses the journal view cycles through (`None`: all).
pub const STATUSES: [Option<AttemptStatus>; 6] = [
    None,
    Some(AttemptStatus::Executed),
    Some(AttemptStatus::Failed),
    Some(AttemptStatus::Blocked),
    Some(AttemptStatus::Denied),
    Some(AttemptStatus::Abandoned),
];

/// The journal view.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JournalView {
    /// The rows shown, newest first.
    pub rows: Vec<Attempt>,
    /// The highlighted row.
    pub selected: usize,
    /// Only this status.
    pub status: Option<AttemptStatus>,
    /// Only this tool.
    pub tool: Option<String>,
    /// Remembered decisions of this folder.
    pub remembered: Vec<RememberedDecision>,
    /// The remembered decisions are shown instead of the calls.
    pub showing_remembered: bool,
}

/// What a journal key asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum JournalAction {
    /// Nothing beyond the state change.
    None,
    /// Leave the view.
    Leave,
    /// Load the rows again (a filter changed).
    Reload,
    /// Show this record whole.
    Open(String),
    /// Revoke this remembered decision.
    Revoke(String),
}

impl JournalView {
    /// Takes a key.
    pub fn on_key(&mut self, key: KeyEvent, tools: &[String]) -> JournalAction {
        let len = if self.showing_remembered { self.remembered.len() } else { self.rows.len() };
        match key.code {
            KeyCode::Esc | KeyCode::Char('q') => return JournalAction::Leave,
            KeyCode::Up | KeyCode::Char('k') => self.selected = self.selected.saturating_sub(1),
            KeyCode::Down | KeyCode::Char('j') => {
                self.selected = (self.selected + 1).min(len.saturating_sub(1))
            }
            KeyCode::Char('r') => {
                self.showing_remembered = !self.showing_remembered;
                self.selected = 0;
            }
            KeyCode::Char('s') if !self.showing_remembered => {
                let at = STATUSES.iter().position(|s| *s == self.status).unwrap_or(0);
                self.status = STATUSES[(at + 1) % STATUSES.len()];
                self.selected = 0;
                return JournalAction::Reload;
            }
            KeyCode::Char('t') if !self.showing_remembered => {
                let at = self.tool.as_ref().and_then(|t| tools.iter().position(|x| x == t));
                self.tool = match at {
                    None => tools.first().cloned(),
                    Some(i) => tools.get(i + 1).cloned(),
                };
                self.selected = 0;
                return JournalAction::Reload;
            }
            KeyCode::Enter if !self.showing_remembered => {
                if let Some(row) = self.rows.get(self.selected) {
                    return JournalAction::Open(serde_json::to_string_pretty(row).unwrap_or_default());
                }
            }
            KeyCode::Char('d') | KeyCode::Delete if self.showing_remembered => {
                if let Some(decision) = self.remembered.get(self.selected) {
                    return JournalAction::Revoke(decision.id.clone());
                }
            }
            _ => {}
        }
        JournalAction::None
    }
}

/// The memory view: what the memory tool keeps about this machine's person.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MemoryView {
    /// The memories, newest first.
    pub rows: Vec<tool_core::storage::Record>,
    /// The highlighted one.
    pub selected: usize,
    /// The memory `d` asked to forget, waiting for `y`.
    pub forgetting: Option<String>,
}

/// What a memory key asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum MemoryAction {
    /// Nothing beyond the state change.
    None,
    /// Leave the view.
    Leave,
    /// Load the memories again.
    Reload,
    /// Show this memory whole.
    Open(String),
    /// Forget this memory (confirmed).
    Forget(String),
}

impl MemoryView {
    /// Takes a key. `d` asks, and only `y` then forgets: any other key keeps the memory.
    pub fn on_key(&mut self, key: KeyEvent) -> MemoryAction {
        if let Some(id) = self.forgetting.take() {
            return if key.code == KeyCode::Char('y') {
                MemoryAction::Forget(id)
            } else {
                MemoryAction::None
            };
        }
        match key.code {
            KeyCode::Esc | KeyCode::Char('q') => return MemoryAction::Leave,
            KeyCode::Up | KeyCode::Char('k') => self.selected = self.selected.saturating_sub(1),
            KeyCode::Down | KeyCode::Char('j') => {
                self.selected = (self.selected + 1).min(self.rows.len().saturating_sub(1))
            }
            KeyCode::Char('r') => return MemoryAction::Reload,
            KeyCode::Enter => {
                if let Some(record) = self.rows.get(self.selected) {
                    return MemoryAction::Open(memory_text(record));
                }
            }
            KeyCode::Char('d') | KeyCode::Delete => {
                self.forgetting = self.rows.get(self.selected).map(|record| record.id.clone());
            }
            _ => {}
        }
        MemoryAction::None
    }
}

/// The rewind view (Esc Esc): the session's calls that changed files, newest first.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RewindView {
    /// The calls, newest first.
    pub rows: Vec<checkpoints::Entry>,
    /// The highlighted one.
    pub selected: usize,
    /// A rewind waiting for `y`: files changed since would be overwritten.
    pub confirming: Option<RewindAsk>,
    /// When the calls or the question last appeared: a key typed just before (meant for the
    /// prompt) is not taken as a choice.
    pub shown: Option<std::time::Instant>,
}

/// How long after the rewind view's calls or question appear its choice keys are ignored.
pub const REWIND_GRACE: std::time::Duration = std::time::Duration::from_millis(400);

/// A rewind that overwrites files changed since, waiting for the person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RewindAsk {
    /// The call to rewind to.
    pub call_id: String,
    /// The conversation goes back too.
    pub conversation: bool,
    /// The files changed since.
    pub conflicts: Vec<String>,
}

/// What a rewind key asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RewindAction {
    /// Nothing beyond the state change.
    None,
    /// Leave the view.
    Leave,
    /// Load the calls again.
    Reload,
    /// Rewind to before this call.
    Rewind {
        /// The call.
        call_id: String,
        /// The conversation goes back to before the turn that made it, too.
        conversation: bool,
        /// Overwrite files changed since.
        force: bool,
    },
}

impl RewindView {
    /// Takes a key: Enter rewinds the files, `c` the files and the conversation; with files
    /// changed since, only `y` then goes on.
    pub fn on_key(&mut self, key: KeyEvent) -> RewindAction {
        let choice = matches!(key.code, KeyCode::Enter | KeyCode::Char('c' | 'y'));
        if choice && self.shown.is_some_and(|at| at.elapsed() < REWIND_GRACE) {
            return RewindAction::None;
        }
        if let Some(ask) = self.confirming.take() {
            return if key.code == KeyCode::Char('y') {
                RewindAction::Rewind { call_id: ask.call_id, conversation: ask.conversation, force: true }
            } else {
                RewindAction::None
            };
        }
        match key.code {
            KeyCode::Esc | KeyCode::Char('q') => return RewindAction::Leave,
            KeyCode::Up | KeyCode::Char('k') => self.selected = self.selected.saturating_sub(1),
            KeyCode::Down | KeyCode::Char('j') => {
                self.selected = (self.selected + 1).min(self.rows.len().saturating_sub(1))
            }
            KeyCode::Char('r') => return RewindAction::Reload,
            KeyCode::Enter | KeyCode::Char('c') => {
                if let Some(entry) = self.rows.get(self.selected) {
                    return RewindAction::Rewind {
                        call_id: entry.call_id.clone(),
                        conversation: key.code == KeyCode::Char('c'),
                        force: false,
                    };
                }
            }
            _ => {}
        }
        RewindAction::None
    }
}

/// A memory as a person reads it: its title, where it applies, when it was written, its text.
fn memory_text(record: &tool_core::storage::Record) -> String {
    let scope = match &record.project {
        Some(project) => format!("this project ({project})"),
        None => "every project".to_owned(),
    };
    let mut text = format!(
        "{}\n{} · {} · saved {} UTC",
        record.title,
        record.tag,
        scope,
        crate::setup::time_of(record.created_at)
    );
    if record.updated_at != record.created_at {
        text.push_str(&format!(" · changed {} UTC", crate::setup::time_of(record.updated_at)));
    }
    text.push_str(&format!("\n\n{}\n\nid {}", record.body.trim_end(), record.id));
    if !record.metadata.is_null() && record.metadata != serde_json::json!({}) {
        text.push_str(&format!("\n{}", record.metadata));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_rewind_that_overwrites_waits_for_yes() {
        use crossterm::event::KeyModifiers;
        let key = |code| KeyEvent::new(code, KeyModifiers::NONE);
        let entry = |id: &str| checkpoints::Entry {
            call_id: id.into(),
            key: format!("k-{id}"),
            incomplete: None,
            tool: "local-system".into(),
            api: "writeFile".into(),
            summary: "a.txt".into(),
            at_ms: 0,
            files: Vec::new(),
            undone: false,
        };
        let mut view = RewindView { rows: vec![entry("c2"), entry("c1")], ..RewindView::default() };
        view.on_key(key(KeyCode::Down));
        assert_eq!(
            view.on_key(key(KeyCode::Char('c'))),
            RewindAction::Rewind { call_id: "c1".into(), conversation: true, force: false }
        );
        view.confirming =
            Some(RewindAsk { call_id: "c1".into(), conversation: true, conflicts: vec!["a.txt".into()] });
        assert_eq!(view.on_key(key(KeyCode::Char('n'))), RewindAction::None);
        assert_eq!(view.confirming, None);
        view.confirming =
            Some(RewindAsk { call_id: "c1".into(), conversation: false, conflicts: vec!["a.txt".into()] });
        assert_eq!(
            view.on_key(key(KeyCode::Char('y'))),
            RewindAction::Rewind { call_id: "c1".into(), conversation: false, force: true }
        );
        assert_eq!(view.on_key(key(KeyCode::Esc)), RewindAction::Leave);
    }

    #[test]
    fn keys_typed_as_the_rewind_view_appears_are_not_taken_as_choices() {
        use crossterm::event::KeyModifiers;
        let key = |code| KeyEvent::new(code, KeyModifiers::NONE);
        let entry = checkpoints::Entry {
            call_id: "c1".into(),
            key: "k-c1".into(),
            tool: "local-system".into(),
            api: "writeFile".into(),
            summary: "a.txt".into(),
            at_ms: 0,
            files: Vec::new(),
            incomplete: None,
            undone: false,
        };
        let mut view =
            RewindView { rows: vec![entry], shown: Some(std::time::Instant::now()), ..RewindView::default() };
        assert_eq!(view.on_key(key(KeyCode::Enter)), RewindAction::None, "Enter meant for the prompt");
        view.confirming =
            Some(RewindAsk { call_id: "c1".into(), conversation: false, conflicts: vec!["a.txt".into()] });
        assert_eq!(view.on_key(key(KeyCode::Char('y'))), RewindAction::None, "a word typed is not a yes");
        assert!(view.confirming.is_some(), "the question stays");
        view.shown = Some(std::time::Instant::now() - REWIND_GRACE);
        assert_eq!(
            view.on_key(key(KeyCode::Char('y'))),
            RewindAction::Rewind { call_id: "c1".into(), conversation: false, force: true }
        );
    }

    #[test]
    fn a_memory_is_forgotten_only_after_yes() {
        use crossterm::event::KeyModifiers;
        let key = |code| KeyEvent::new(code, KeyModifiers::NONE);
        let record = |id: &str| tool_core::storage::Record {
            id: id.into(),
            collection: "memory".into(),
            owner: tool_core::storage::Owner { tenant: "local".into(), person: "local".into() },
            project: None,
            tag: "notes".into(),
            title: id.into(),
            body: id.into(),
            metadata: json!({}),
            created_at: 0,
            updated_at: 0,
        };
        let mut view = MemoryView { rows: vec![record("a"), record("b")], ..MemoryView::default() };
        assert_eq!(view.on_key(key(KeyCode::Down)), MemoryAction::None);
        assert_eq!(view.on_key(key(KeyCode::Char('d'))), MemoryAction::None);
        assert_eq!(view.on_key(key(KeyCode::Char('n'))), MemoryAction::None, "anything but y keeps it");
        assert_eq!(view.on_key(key(KeyCode::Char('y'))), MemoryAction::None, "y alone forgets nothing");
        view.on_key(key(KeyCode::Char('d')));
        assert_eq!(view.on_key(key(KeyCode::Char('y'))), MemoryAction::Forget("b".into()));
        assert!(
            matches!(view.on_key(key(KeyCode::Enter)), MemoryAction::Open(text)
                if text == "b\nnotes · every project · saved 1970-01-01 00:00:00 UTC\n\nb\n\nid b"),
            "a memory reads as text, with its date, not as JSON with epoch milliseconds"
        );
        assert_eq!(view.on_key(key(KeyCode::Esc)), MemoryAction::Leave);
    }

    #[test]
    fn a_form_from_a_schema_makes_typed_arguments() {
        let schema = json!({
            "type": "object",
            "properties": {
                "path": { "type": "string", "description": "The file" },
                "offset": { "type": ["integer", "null"] },
                "hidden": { "type": "boolean" },
                "items": { "type": "array", "items": { "type": "string" } },
            },
            "required": ["path"],
        });
        let mut fields = form_fields(&schema);
        assert_eq!(fields[0].name, "path");
        assert!(fields[0].required);
        assert_eq!(
            fields.iter().map(|f| f.kind.as_str()).collect::<Vec<_>>(),
            ["string", "integer", "boolean", "array"]
        );
        assert_eq!(arguments(&fields).unwrap_err(), "path is required");
        fields[0].value = "notes.txt".into();
        fields[1].value = "x".into();
        assert_eq!(arguments(&fields).unwrap_err(), "offset: not a whole number");
        fields[1].value = "10".into();
        fields[2].value = "yes".into();
        fields[3].value = r#"["a", "b"]"#.into();
        assert_eq!(
            arguments(&fields).unwrap(),
            json!({ "path": "notes.txt", "offset": 10, "hidden": true, "items": ["a", "b"] })
        );
    }
}
