//! A small syntax highlighter for code in answers and cards: comments, strings, numbers and the
//! keywords of the languages agents write most. Line by line, no state across lines (a block
//! comment or string spanning lines is coloured line by line as code), which keeps it cheap enough
//! for every frame.

use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};

/// A language's comment markers and keywords.
struct Syntax {
    line_comment: &'static [&'static str],
    keywords: &'static [&'static str],
}

const RUST: Syntax = Syntax {
    line_comment: &["//"],
    keywords: &[
        "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum", "false", "fn",
        "for", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub", "ref", "return",
        "self", "Self", "static", "struct", "super", "trait", "true", "type", "unsafe", "use", "where",
        "while",
    ],
};

const PYTHON: Syntax = Syntax {
    line_comment: &["#"],
    keywords: &[
        "and", "as", "assert", "async", "await", "break", "class", "continue", "def", "elif", "else",
        "except", "False", "finally", "for", "from", "if", "import", "in", "is", "lambda", "None", "not",
        "or", "pass", "raise", "return", "True", "try", "while", "with", "yield",
    ],
};

const SCRIPT: Syntax = Syntax {
    line_comment: &["//"],
    keywords: &[
        "async",
        "await",
        "break",
        "case",
        "catch",
        "class",
        "const",
        "continue",
        "default",
        "else",
        "export",
        "extends",
        "false",
        "for",
        "from",
        "function",
        "if",
        "import",
        "interface",
        "let",
        "new",
        "null",
        "return",
        "switch",
        "this",
        "throw",
        "true",
        "try",
        "type",
        "undefined",
        "var",
        "while",
    ],
};

const SHELL: Syntax = Syntax {
    line_comment: &["#"],
    keywords: &[
        "case", "do", "done", "elif", "else", "esac", "export", "fi", "for", "function", "if", "in", "local",
        "then", "until", "while",
    ],
};

const GO_C: Syntax = Syntax {
    line_comment: &["//"],
    keywords: &[
        "break",
        "case",
        "char",
        "const",
        "continue",
        "default",
        "defer",
        "else",
        "enum",
        "false",
        "for",
        "func",
        "go",
        "if",
        "import",
        "int",
        "interface",
        "nil",
        "package",
        "return",
        "static",
        "struct",
        "switch",
        "true",
        "type",
        "var",
        "void",
        "while",
    ],
};

const DATA: Syntax = Syntax { line_comment: &[], keywords: &["true", "false", "null"] };

fn syntax(language: &str) -> Option<&'static Syntax> {
    Some(match language.trim().to_ascii_lowercase().as_str() {
        "rust" | "rs" => &RUST,
        "python" | "py" => &PYTHON,
        "javascript" | "js" | "typescript" | "ts" | "tsx" | "jsx" => &SCRIPT,
        "sh" | "bash" | "shell" | "zsh" | "console" => &SHELL,
        "go" | "c" | "cpp" | "c++" | "java" | "h" => &GO_C,
        "json" | "toml" | "yaml" | "yml" => &DATA,
        _ => return None,
    })
}

/// One line of code in `language`, coloured; an unknown language is one plain colour.
pub fn line(language: &str, text: &str) -> Line<'static> {
    let plain = Style::default().fg(Color::LightYellow);
    let Some(syntax) = syntax(language) else {
        return Line::from(Span::styled(text.to_owned(), plain));
    };
    let keyword = Style::default().fg(Color::Magenta).add_modifier(Modifier::BOLD);
    let string = Style::default().fg(Color::Green);
    let number = Style::default().fg(Color::Cyan);
    let comment = Style::default().add_modifier(Modifier::DIM | Modifier::ITALIC);
    let mut spans: Vec<Span<'static>> = Vec::new();
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut i = 0;
    let mut plain_from = 0;
    let flush = |spans: &mut Vec<Span<'static>>, from: usize, to: usize| {
        if to > from {
            spans.push(Span::styled(text[from..to].to_owned(), plain));
        }
    };
    while i < chars.len() {
        let (at, c) = chars[i];
        let rest = &text[at..];
        if syntax.line_comment.iter().any(|m| rest.starts_with(m)) {
            flush(&mut spans, plain_from, at);
            spans.push(Span::styled(rest.to_owned(), comment));
            return Line::from(spans);
        }
        if c == '"' || c == '\'' || c == '`' {
            // A string to its closing quote (an escaped one does not close it).
            let mut j = i + 1;
            while j < chars.len() && chars[j].1 != c {
                j += if chars[j].1 == '\\' { 2 } else { 1 };
            }
            let end = chars.get(j + 1).map_or(text.len(), |(b, _)| *b);
            flush(&mut spans, plain_from, at);
            spans.push(Span::styled(text[at..end].to_owned(), string));
            i = j + 1;
            plain_from = end;
            continue;
        }
        if c.is_alphanumeric() || c == '_' {
            let mut j = i;
            while j < chars.len() && (chars[j].1.is_alphanumeric() || chars[j].1 == '_') {
                j += 1;
            }
            let end = chars.get(j).map_or(text.len(), |(b, _)| *b);
            let word = &text[at..end];
            let style = if c.is_ascii_digit() {
                Some(number)
            } else if syntax.keywords.contains(&word) {
                Some(keyword)
            } else {
                None
            };
            if let Some(style) = style {
                flush(&mut spans, plain_from, at);
                spans.push(Span::styled(word.to_owned(), style));
                plain_from = end;
            }
            i = j;
            continue;
        }
        i += 1;
    }
    flush(&mut spans, plain_from, text.len());
    Line::from(spans)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn styled(line: &Line<'_>) -> Vec<(String, Option<Color>)> {
        line.spans.iter().map(|s| (s.content.to_string(), s.style.fg)).collect()
    }

    #[test]
    fn keywords_strings_numbers_and_comments() {
        let line = line("rust", r#"let s = "a \" b"; // note"#);
        let parts = styled(&line);
        assert_eq!(parts[0], ("let".into(), Some(Color::Magenta)));
        assert!(parts.contains(&(r#""a \" b""#.into(), Some(Color::Green))), "{parts:?}");
        assert_eq!(parts.last().unwrap().0, "// note");
        let text: String = line.spans.iter().map(|s| s.content.to_string()).collect();
        assert_eq!(text, r#"let s = "a \" b"; // note"#, "nothing lost or repeated");
        let py = styled(&super::line("python", "x = 42  # answer"));
        assert!(py.contains(&("42".into(), Some(Color::Cyan))), "{py:?}");
        assert_eq!(
            styled(&super::line("cobol", "MOVE A TO B")),
            vec![("MOVE A TO B".into(), Some(Color::LightYellow))]
        );
        // Unterminated strings and odd characters do not panic.
        let _ = super::line("sh", "echo \"unterminated é");
        let _ = super::line("js", "`x\\");
    }
}
