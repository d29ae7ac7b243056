//! Claude Code's matchers on tool names: empty or `*` matches every tool; a word, or words with
//! `|` between them, match those names exactly; anything else is a regular expression searched
//! in the name (`Notebook.*`, `mcp__github__.*`). Case counts.

use regex::Regex;

/// Whether `matcher` can be used.
pub fn is_valid(matcher: &str) -> bool {
    is_exact(matcher) || Regex::new(matcher).is_ok()
}

fn is_exact(matcher: &str) -> bool {
    matcher.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '|' || c == '-' || c == ' ')
}

/// A compiled matcher.
#[derive(Debug, Clone)]
pub enum Matcher {
    /// Every tool.
    All,
    /// These names.
    Names(Vec<String>),
    /// Names the expression finds something in.
    Pattern(Regex),
    /// An expression that does not compile matches nothing.
    Nothing,
}

impl Matcher {
    /// Compiles `matcher`.
    pub fn new(matcher: &str) -> Self {
        let matcher = matcher.trim();
        if matcher.is_empty() || matcher == "*" {
            Self::All
        } else if is_exact(matcher) {
            Self::Names(matcher.split('|').map(|n| n.trim().to_owned()).filter(|n| !n.is_empty()).collect())
        } else {
            Regex::new(matcher).map_or(Self::Nothing, Self::Pattern)
        }
    }

    /// Whether any of the call's names (its Claude Code name, the function name the model used,
    /// the API's name) matches.
    pub fn matches_any<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> bool {
        match self {
            Self::All => true,
            Self::Nothing => false,
            Self::Names(list) => names.into_iter().any(|name| list.iter().any(|n| n == name)),
            Self::Pattern(regex) => names.into_iter().any(|name| regex.is_match(name)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matchers_follow_claude_code() {
        assert!(Matcher::new("").matches_any(["Bash"]));
        assert!(Matcher::new("*").matches_any(["anything"]));
        assert!(Matcher::new("Bash").matches_any(["Bash"]));
        assert!(!Matcher::new("Bash").matches_any(["BashOutput"]), "a word matches exactly");
        assert!(!Matcher::new("bash").matches_any(["Bash"]), "case counts");
        assert!(Matcher::new("Edit|Write").matches_any(["Write"]));
        assert!(!Matcher::new("Edit|Write").matches_any(["Read"]));
        assert!(Matcher::new("Notebook.*").matches_any(["NotebookEdit"]));
        assert!(Matcher::new("mcp__.*__write.*").matches_any(["mcp__fs__write_file"]));
        assert!(Matcher::new("Read|runCommand").matches_any([
            "Bash",
            "local-system__runCommand",
            "runCommand"
        ]));
        assert!(!Matcher::new("(").matches_any(["("]));
    }
}
