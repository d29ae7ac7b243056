//! The one matcher implementation for intervention rule lists.
//!
//! A rule-list policy ([`InterventionPolicy::Rules`](tool_core::InterventionPolicy::Rules)) is
//! compiled once per API with [`CompiledRules::compile`] and then asked per call with
//! [`CompiledRules::decide`]. Semantics (REFERENCE.md, "Approval"):
//!
//! * the **first** matching rule wins; no rule matching means [`Intervention::Required`];
//! * a rule without matchers always matches;
//! * every named parameter must be present in the arguments and match; a missing parameter makes
//!   the rule not match;
//! * a parameter name may be a dotted path into nested objects (`options.mode`); a numeric segment
//!   indexes an array (`items.0.path`). A top-level key that literally contains the dots wins over
//!   the walk;
//! * argument values are compared as text: strings as they are, numbers and booleans by their JSON
//!   text (`42`, `1.5`, `true`). `null`, arrays and objects never match any matcher;
//! * a plain string matcher is an **anchored** wildcard: `*` matches any run of characters
//!   (including none, including `/`), every other character is literal, so `git status*` does not
//!   give `.` or `(` any special meaning. A pattern ending in `:*` (`npm:*`) also matches the bare
//!   prefix (`npm`);
//! * typed matchers: `exact` (equal strings), `prefix` (starts with), `wildcard` (as above) and
//!   `regex` (the pattern's own anchoring; without `^`/`$` it searches anywhere). Regexes are
//!   compiled with a size limit by the `regex` crate, whose matching time is linear: a pattern
//!   from a manifest cannot make a call hang.
//!
//! LobeHub had one code path where any matcher containing `*` matched everything; here the
//! wildcard is positional and anchored everywhere, and this module is the only place that
//! interprets matchers.

use std::borrow::Cow;

use regex::{Regex, RegexBuilder};
use serde_json::Value;
use tool_core::{Intervention, InterventionRule, Matcher, MatcherKind};

/// Largest compiled size of a rule's regex (and of its lazy DFA cache), in bytes.
pub const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// A rule list that could not be compiled.
#[derive(Debug, thiserror::Error)]
pub enum MatcherError {
    /// A `regex` matcher whose pattern does not compile (bad syntax or over the size limit).
    #[error("intervention rule {rule}, parameter `{parameter}`: invalid regex: {source}")]
    InvalidRegex {
        /// Index of the rule in the list, from 0.
        rule: usize,
        /// The parameter the matcher applies to.
        parameter: String,
        /// What the regex compiler said.
        #[source]
        source: regex::Error,
    },
}

/// One matcher, ready to test argument values.
#[derive(Debug, Clone)]
pub struct CompiledMatcher(Compiled);

#[derive(Debug, Clone)]
enum Compiled {
    Exact(String),
    Prefix(String),
    Wildcard(Wildcard),
    Regex(Regex),
}

/// An anchored wildcard: the pattern split at `*`.
#[derive(Debug, Clone)]
struct Wildcard {
    /// The literal pieces between the stars; one piece means "no star".
    pieces: Vec<String>,
    /// For `prefix:*`, the bare `prefix`, which matches too.
    bare: Option<String>,
}

impl Wildcard {
    fn new(pattern: &str) -> Self {
        Self {
            pieces: pattern.split('*').map(str::to_owned).collect(),
            bare: pattern.strip_suffix(":*").map(str::to_owned),
        }
    }

    fn is_match(&self, value: &str) -> bool {
        if self.bare.as_deref() == Some(value) {
            return true;
        }
        let [first, middle @ .., last] = self.pieces.as_slice() else {
            // No star: the whole value must equal the pattern.
            return self.pieces.first().is_some_and(|piece| piece == value);
        };
        // The first piece is anchored at the start, the last at the end, and they may not overlap.
        if value.len() < first.len() + last.len()
            || !value.starts_with(first.as_str())
            || !value.ends_with(last.as_str())
        {
            return false;
        }
        // Both cuts are on character boundaries: `value` starts with `first` and ends with `last`.
        let mut rest = &value[first.len()..value.len() - last.len()];
        // Leftmost placement of each middle piece is optimal for star-only patterns.
        for piece in middle {
            match rest.find(piece.as_str()) {
                Some(at) => rest = &rest[at + piece.len()..],
                None => return false,
            }
        }
        true
    }
}

impl CompiledMatcher {
    /// Compiles a matcher; only a `regex` matcher can fail.
    pub fn new(matcher: &Matcher) -> Result<Self, regex::Error> {
        let compiled = match matcher {
            Matcher::Wildcard(pattern) => Compiled::Wildcard(Wildcard::new(pattern)),
            Matcher::Typed { kind, pattern } => match kind {
                MatcherKind::Exact => Compiled::Exact(pattern.clone()),
                MatcherKind::Prefix => Compiled::Prefix(pattern.clone()),
                MatcherKind::Wildcard => Compiled::Wildcard(Wildcard::new(pattern)),
                MatcherKind::Regex => Compiled::Regex(
                    RegexBuilder::new(pattern)
                        .size_limit(REGEX_SIZE_LIMIT)
                        .dfa_size_limit(REGEX_SIZE_LIMIT)
                        .build()?,
                ),
            },
        };
        Ok(Self(compiled))
    }

    /// An anchored wildcard matcher (the plain-string form), which cannot fail.
    pub fn wildcard(pattern: &str) -> Self {
        Self(Compiled::Wildcard(Wildcard::new(pattern)))
    }

    /// Whether `value` matches.
    pub fn is_match(&self, value: &str) -> bool {
        match &self.0 {
            Compiled::Exact(pattern) => value == pattern,
            Compiled::Prefix(pattern) => value.starts_with(pattern.as_str()),
            Compiled::Wildcard(wildcard) => wildcard.is_match(value),
            Compiled::Regex(regex) => regex.is_match(value),
        }
    }
}

/// Whether `value` matches `matcher` (the same as [`CompiledMatcher::is_match`]).
pub fn matches(matcher: &CompiledMatcher, value: &str) -> bool {
    matcher.is_match(value)
}

/// The outcome of a rule list for one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RuleDecision {
    /// The decision: the matching rule's policy, or `required` when no rule matched.
    pub policy: Intervention,
    /// Index of the rule that matched; `None` when no rule matched.
    pub rule: Option<usize>,
}

#[derive(Debug, Clone)]
struct CompiledRule {
    matchers: Vec<(String, CompiledMatcher)>,
    policy: Intervention,
}

/// A rule list compiled once per API.
#[derive(Debug, Clone, Default)]
pub struct CompiledRules {
    rules: Vec<CompiledRule>,
}

impl CompiledRules {
    /// Compiles `rules`; an invalid regex is an error naming the rule index and the parameter.
    pub fn compile(rules: &[InterventionRule]) -> Result<Self, MatcherError> {
        let rules = rules
            .iter()
            .enumerate()
            .map(|(index, rule)| {
                let matchers = rule
                    .matchers
                    .iter()
                    .map(|(parameter, matcher)| {
                        CompiledMatcher::new(matcher).map(|compiled| (parameter.clone(), compiled)).map_err(
                            |source| MatcherError::InvalidRegex {
                                rule: index,
                                parameter: parameter.clone(),
                                source,
                            },
                        )
                    })
                    .collect::<Result<_, _>>()?;
                Ok(CompiledRule { matchers, policy: rule.policy })
            })
            .collect::<Result<_, MatcherError>>()?;
        Ok(Self { rules })
    }

    /// Decides a call from its arguments: the first matching rule's policy, else `required`.
    pub fn decide(&self, arguments: &Value) -> RuleDecision {
        self.rules
            .iter()
            .position(|rule| {
                rule.matchers.iter().all(|(parameter, matcher)| {
                    lookup(arguments, parameter)
                        .and_then(argument_text)
                        .is_some_and(|text| matcher.is_match(&text))
                })
            })
            .map_or(RuleDecision { policy: Intervention::Required, rule: None }, |index| RuleDecision {
                policy: self.rules[index].policy,
                rule: Some(index),
            })
    }
}

/// Finds a parameter: a literal top-level key first, else a walk along the dotted path.
fn lookup<'a>(arguments: &'a Value, parameter: &str) -> Option<&'a Value> {
    if let Some(value) = arguments.get(parameter) {
        return Some(value);
    }
    if !parameter.contains('.') {
        return None;
    }
    parameter.split('.').try_fold(arguments, |value, segment| match value {
        Value::Object(map) => map.get(segment),
        Value::Array(items) => items.get(segment.parse::<usize>().ok()?),
        _ => None,
    })
}

/// The text a matcher sees: strings as is, numbers and booleans as JSON text, nothing else.
fn argument_text(value: &Value) -> Option<Cow<'_, str>> {
    match value {
        Value::String(text) => Some(Cow::Borrowed(text)),
        Value::Number(number) => Some(Cow::Owned(number.to_string())),
        Value::Bool(flag) => Some(Cow::Borrowed(if *flag { "true" } else { "false" })),
        Value::Null | Value::Array(_) | Value::Object(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn typed(kind: MatcherKind, pattern: &str) -> Matcher {
        Matcher::Typed { kind, pattern: pattern.to_owned() }
    }

    fn wild(pattern: &str) -> Matcher {
        Matcher::Wildcard(pattern.to_owned())
    }

    #[test]
    fn single_matchers() {
        use MatcherKind::{Exact, Prefix, Regex, Wildcard};
        let cases: Vec<(Matcher, &str, bool)> = vec![
            // `*` is anchored and positional.
            (wild("rm *"), "rm -rf x", true),
            (wild("rm *"), "echo rm x", false),
            (wild("rm *"), "rm", false),
            (wild("git *"), "git push", true),
            (wild("git *"), "gitk", false),
            (wild("git *"), "git ", true),
            (wild("*.rs"), "a.rs", true),
            (wild("*.rs"), "src/deep/a.rs", true),
            (wild("*.rs"), "a.rsx", false),
            (wild("*.rs"), ".rs", true),
            (wild("a*b*c"), "abc", true),
            (wild("a*b*c"), "a-b-b-c", true),
            (wild("a*b*c"), "acb", false),
            (wild("ab*ba"), "aba", false),
            (wild("ab*ba"), "abba", true),
            (wild("*"), "", true),
            (wild("*"), "anything / at all", true),
            (wild(""), "", true),
            (wild(""), "x", false),
            (wild("git status"), "git status --short", false),
            // `prefix:*` also matches the bare prefix.
            (wild("npm:*"), "npm", true),
            (wild("npm:*"), "npm:install", true),
            (wild("npm:*"), "npmx", false),
            (wild("npm:*"), "npm:", true),
            // Regex metacharacters are literal in wildcards.
            (wild("a.b*"), "axb", false),
            (wild("a.b*"), "a.bc", true),
            (wild("git status*"), "git status --short", true),
            (wild("f(x)*"), "f(x) = 1", true),
            (wild("f(x)*"), "fx", false),
            (wild("[ab]*"), "a", false),
            (wild("^rm*"), "rm", false),
            (wild("100$*"), "100$ total", true),
            (wild("é*ü"), "é—ü", true),
            // Typed matchers of all four kinds.
            (typed(Exact, "ls"), "ls", true),
            (typed(Exact, "ls"), "ls -la", false),
            (typed(Exact, "a*"), "abc", false),
            (typed(Exact, "a*"), "a*", true),
            (typed(Prefix, "git "), "git log", true),
            (typed(Prefix, "git "), "gitk", false),
            (typed(Prefix, "*"), "anything", false),
            (typed(Wildcard, "cargo * --release"), "cargo build --release", true),
            (typed(Wildcard, "cargo * --release"), "cargo build --release --x", false),
            (typed(Wildcard, "npm:*"), "npm", true),
            (typed(Regex, "^git (status|log)$"), "git log", true),
            (typed(Regex, "^git (status|log)$"), "git logs", false),
            (typed(Regex, "rm"), "echo rm x", true),
            (typed(Regex, r"\.rs$"), "a.rsx", false),
        ];
        assert!(cases.len() >= 25);
        for (matcher, value, expected) in cases {
            let compiled = CompiledMatcher::new(&matcher).unwrap();
            assert_eq!(matches(&compiled, value), expected, "{matcher:?} against {value:?}");
        }
    }

    fn rules(value: Value) -> Vec<InterventionRule> {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn rule_lists_decide() {
        use Intervention::{Always, Never, Required};
        let shell = rules(json!([
            {"match": {"command": "rm *"}, "policy": "always"},
            {"match": {"command": "git *"}, "policy": "never"},
            {"match": {"command": "git push*"}, "policy": "always"},
            {"match": {"command": "ls", "cwd": "/tmp*"}, "policy": "never"},
        ]));
        let typed = rules(json!([
            {"match": {"timeout": "30"}, "policy": "never"},
            {"match": {"force": "true"}, "policy": "always"},
            {"match": {"options.mode": {"type": "exact", "pattern": "dry-run"}}, "policy": "never"},
            {"match": {"items.1": {"type": "prefix", "pattern": "/tmp/"}}, "policy": "never"},
            {"match": {"payload": "*"}, "policy": "never"},
            {"policy": "required"},
        ]));
        let catch_all = rules(json!([{"policy": "never"}, {"match": {"x": "*"}, "policy": "always"}]));
        let regex = rules(json!([{
            "match": {"url": {"type": "regex", "pattern": "^https://([a-z]+\\.)?example\\.com/"}},
            "policy": "never",
        }]));
        let empty: Vec<InterventionRule> = Vec::new();
        let cases: Vec<(&[InterventionRule], Value, Intervention, Option<usize>)> = vec![
            (&shell, json!({"command": "rm -rf x"}), Always, Some(0)),
            (&shell, json!({"command": "echo rm x"}), Required, None),
            (&shell, json!({"command": "git status"}), Never, Some(1)),
            // First match wins: rule 1 shadows the stricter rule 2.
            (&shell, json!({"command": "git push --force"}), Never, Some(1)),
            (&shell, json!({"command": "gitk"}), Required, None),
            // Every named parameter must be present and match.
            (&shell, json!({"command": "ls", "cwd": "/tmp/x"}), Never, Some(3)),
            (&shell, json!({"command": "ls"}), Required, None),
            (&shell, json!({"command": "ls", "cwd": "/home"}), Required, None),
            (&shell, json!({}), Required, None),
            (&shell, json!({"command": 42}), Required, None),
            // Numbers and booleans by their JSON text; dotted paths; null/arrays/objects never match.
            (&typed, json!({"timeout": 30}), Never, Some(0)),
            (&typed, json!({"timeout": 30.5}), Required, Some(5)),
            (&typed, json!({"timeout": "30"}), Never, Some(0)),
            (&typed, json!({"force": true}), Always, Some(1)),
            (&typed, json!({"force": false}), Required, Some(5)),
            (&typed, json!({"options": {"mode": "dry-run"}}), Never, Some(2)),
            (&typed, json!({"options.mode": "dry-run"}), Never, Some(2)),
            (&typed, json!({"options": {"mode": "live"}}), Required, Some(5)),
            (&typed, json!({"items": ["/etc/x", "/tmp/y"]}), Never, Some(3)),
            (&typed, json!({"items": ["/tmp/y"]}), Required, Some(5)),
            (&typed, json!({"payload": null}), Required, Some(5)),
            (&typed, json!({"payload": ["a"]}), Required, Some(5)),
            (&typed, json!({"payload": {"a": 1}}), Required, Some(5)),
            (&typed, json!({"payload": ""}), Never, Some(4)),
            (&typed, json!("not an object"), Required, Some(5)),
            // A rule without matchers always matches.
            (&catch_all, json!({}), Never, Some(0)),
            (&regex, json!({"url": "https://api.example.com/v1"}), Never, Some(0)),
            (&regex, json!({"url": "https://example.com.evil.io/"}), Required, None),
            (&empty, json!({"anything": 1}), Required, None),
        ];
        for (list, arguments, policy, rule) in cases {
            let decision = CompiledRules::compile(list).unwrap().decide(&arguments);
            assert_eq!(decision, RuleDecision { policy, rule }, "{arguments} against {list:?}");
        }
    }

    #[test]
    fn invalid_regexes_name_the_rule_and_parameter() {
        // Over the compiled size limit rather than a syntax error.
        let huge = "(a{1000}){1000}";
        let cases: Vec<(Value, usize, &str)> = vec![
            (
                json!([{"match": {"command": {"type": "regex", "pattern": "(unclosed"}}, "policy": "never"}]),
                0,
                "command",
            ),
            (
                json!([
                    {"match": {"command": "ok*"}, "policy": "never"},
                    {
                        "match": {"path": "fine", "url": {"type": "regex", "pattern": "[z-a]"}},
                        "policy": "always",
                    },
                ]),
                1,
                "url",
            ),
            (
                json!([
                    {"policy": "never"},
                    {"match": {"q": {"type": "regex", "pattern": huge}}, "policy": "never"},
                ]),
                1,
                "q",
            ),
        ];
        for (list, rule, parameter) in cases {
            let error = CompiledRules::compile(&rules(list)).unwrap_err();
            let MatcherError::InvalidRegex { rule: got_rule, parameter: got_parameter, .. } = &error;
            assert_eq!((*got_rule, got_parameter.as_str()), (rule, parameter), "{error}");
            assert!(error.to_string().contains(&format!("rule {rule}, parameter `{parameter}`")), "{error}");
        }
    }
}
