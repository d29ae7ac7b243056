//! The function names a model sees, and the way back.
//!
//! Providers accept `^[a-zA-Z0-9_-]{1,64}$`, and Gemini wants a leading letter. A unique API name
//! is used as the model knows it best (`readFile`); a name that two tools share is prefixed with
//! its tool (`local-system__readFile`); a name still colliding gets `_2`, `_3`… Every name is
//! sanitised, unique or not (DocsGPT only sanitises prefixed names, so a unique `2fa.check` reached
//! providers as is). The reverse map turns whatever the model sends back into (tool, API), and
//! legacy aliases keep older spellings working.

use std::collections::HashMap;

/// The longest name any provider accepts.
pub const MAX_NAME: usize = 64;

/// Function names of a session's active tools, both ways.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolNames {
    forward: HashMap<(String, String), String>,
    reverse: HashMap<String, (String, String)>,
    aliases: HashMap<String, (String, String)>,
    order: Vec<String>,
}

/// Replaces every character a provider rejects with `_`, makes the first a letter and cuts to
/// [`MAX_NAME`].
pub fn sanitize(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' })
        .collect();
    if !out.starts_with(|c: char| c.is_ascii_alphabetic()) {
        out.insert_str(0, "f_");
    }
    out.truncate(MAX_NAME);
    out
}

impl ToolNames {
    /// Names for `(tool identifier, api name)` pairs, in order (the order decides which duplicate
    /// gets `_2`).
    pub fn build<'a>(apis: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let apis: Vec<(&str, &str)> = apis.into_iter().collect();
        let mut counts: HashMap<String, usize> = HashMap::new();
        for (_, api) in &apis {
            *counts.entry(sanitize(api)).or_default() += 1;
        }
        let mut names = Self::default();
        for (tool, api) in apis {
            let key = (tool.to_owned(), api.to_owned());
            if names.forward.contains_key(&key) {
                continue;
            }
            let base = sanitize(api);
            let base = if counts[&base] == 1 { base } else { sanitize(&format!("{tool}__{api}")) };
            let mut name = base.clone();
            let mut n = 2;
            while names.reverse.contains_key(&name) {
                let suffix = format!("_{n}");
                let mut stem = base.clone();
                stem.truncate(MAX_NAME - suffix.len());
                name = format!("{stem}{suffix}");
                n += 1;
            }
            names.forward.insert(key.clone(), name.clone());
            names.reverse.insert(name.clone(), key.clone());
            names.order.push(name);
            // Spellings older front ends used: `tool__api` and LobeHub's `tool____api`.
            for alias in [format!("{tool}__{api}"), format!("{tool}____{api}")] {
                names.aliases.entry(alias).or_insert_with(|| key.clone());
            }
        }
        names
    }

    /// Adds a legacy alias; ignored if the alias is a real name.
    pub fn alias(&mut self, alias: impl Into<String>, tool: &str, api: &str) {
        let alias = alias.into();
        if !self.reverse.contains_key(&alias) {
            self.aliases.insert(alias, (tool.to_owned(), api.to_owned()));
        }
    }

    /// The name of an API.
    pub fn name_of(&self, tool: &str, api: &str) -> Option<&str> {
        self.forward.get(&(tool.to_owned(), api.to_owned())).map(String::as_str)
    }

    /// The (tool, API) behind a name or an alias.
    pub fn resolve(&self, name: &str) -> Option<(&str, &str)> {
        self.reverse.get(name).or_else(|| self.aliases.get(name)).map(|(t, a)| (t.as_str(), a.as_str()))
    }

    /// Every name, in build order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.order.iter().map(String::as_str)
    }

    /// Up to `n` real names closest to `name` (edit distance, case-insensitive), closest first.
    pub fn closest(&self, name: &str, n: usize) -> Vec<&str> {
        let wanted = name.to_lowercase();
        let mut scored: Vec<(usize, &str)> = self
            .order
            .iter()
            .map(|candidate| (distance(&wanted, &candidate.to_lowercase()), candidate.as_str()))
            .collect();
        scored.sort();
        let limit = wanted.chars().count().max(3);
        scored.into_iter().filter(|(d, _)| *d <= limit).take(n).map(|(_, name)| name).collect()
    }
}

/// Levenshtein distance over characters.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            current[j + 1] = (previous[j] + cost).min(previous[j + 1] + 1).min(current[j] + 1);
        }
        previous = current;
    }
    previous[b.len()]
}

/// The name the model calls for `name` of a mounted `source` (an MCP server's tool, an API's
/// operation): `source__name`, in the characters every provider accepts, at most 64 characters (a
/// long or cleaned one ends with a hash of the raw names, so `get.user` stays apart from
/// `get_user`).
pub fn mounted_name(source: &str, name: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect()
    };
    let joined = format!("{}__{}", clean(source), clean(name));
    if joined.len() <= 64 && clean(name) == name {
        return joined;
    }
    let mut hash: u32 = 0x811c_9dc5;
    for byte in source.bytes().chain([0]).chain(name.bytes()) {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    let keep = joined.len().min(55);
    format!("{}_{hash:08x}", &joined[..keep])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_sanitised_unique_and_reversible() {
        let long = "x".repeat(80);
        let apis = [
            ("local-system", "readFile"),
            ("mcp-github", "search"),
            ("web", "search"),
            ("odd", "2fa.check"),
            ("a", long.as_str()),
            ("b", long.as_str()),
            ("dup", "search"),
        ];
        let names = ToolNames::build(apis);
        let expected = [
            ("local-system", "readFile", "readFile".to_owned()),
            ("mcp-github", "search", "mcp-github__search".to_owned()),
            ("web", "search", "web__search".to_owned()),
            ("odd", "2fa.check", "f_2fa_check".to_owned()),
            ("a", long.as_str(), format!("a__{}", "x".repeat(61))),
            ("b", long.as_str(), format!("b__{}", "x".repeat(61))),
            ("dup", "search", "dup__search".to_owned()),
        ];
        for (tool, api, name) in expected {
            assert_eq!(names.name_of(tool, api), Some(name.as_str()), "{tool}/{api}");
            assert_eq!(names.resolve(&name), Some((tool, api)));
        }
        for name in names.names() {
            assert!(name.len() <= MAX_NAME && name.starts_with(|c: char| c.is_ascii_alphabetic()), "{name}");
            assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'), "{name}");
        }
        assert_eq!(names.resolve("local-system__readFile"), Some(("local-system", "readFile")));
        assert_eq!(names.resolve("local-system____readFile"), Some(("local-system", "readFile")));
    }

    #[test]
    fn cut_names_that_collide_get_numbered() {
        let stem = "y".repeat(70);
        let names =
            ToolNames::build([("t", format!("{stem}1").as_str()), ("t", format!("{stem}2").as_str())]);
        let all: Vec<&str> = names.names().collect();
        // Cut to 64 the two names are equal, so both are prefixed, and the second is numbered.
        assert_eq!(all[0], format!("t__{}", "y".repeat(61)));
        assert_eq!(all[1], format!("t__{}_2", "y".repeat(59)));
    }

    #[test]
    fn closest_names() {
        let names = ToolNames::build([("fs", "readFile"), ("fs", "writeFile"), ("todo", "todo_write")]);
        assert_eq!(names.closest("read_file", 2), ["readFile", "writeFile"]);
        assert_eq!(names.closest("todowrite", 1), ["todo_write"]);
        assert!(names.closest("zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz", 3).len() <= 3);
    }
}
