//! What a terminal would show of a command's output: colour and cursor escape sequences taken
//! out, and each line as it stands after its carriage returns and backspaces (a progress bar
//! redrawn a hundred times is its last state, not a hundred copies). The model reads this, and
//! people see it on cards.

use std::borrow::Cow;

/// The text as a terminal would leave it, line by line; text with no escape, carriage return or
/// backspace is returned as it is.
pub fn plain(text: &str) -> Cow<'_, str> {
    if !text.contains(['\x1b', '\r', '\x08', '\u{9b}']) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    for (n, line) in text.split('\n').enumerate() {
        if n > 0 {
            out.push('\n');
        }
        settle_line(line, &mut out);
    }
    Cow::Owned(out)
}

/// One line (no `\n`) as it stands once drawn: `\r` returns to its start, later characters
/// overwrite earlier ones, `\b` steps back, "erase line" (`ESC [ K`) clears what follows the
/// cursor, and every other escape sequence is dropped.
fn settle_line(line: &str, out: &mut String) {
    let mut cells: Vec<char> = Vec::new();
    let mut cursor: usize = 0;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' => cursor = 0,
            '\x08' => cursor = cursor.saturating_sub(1),
            '\x1b' | '\u{9b}' => {
                let introducer = if c == '\u{9b}' { Some('[') } else { chars.next() };
                match introducer {
                    // CSI: parameters and intermediates, then one final byte.
                    Some('[') => {
                        let mut parameters = String::new();
                        for next in chars.by_ref() {
                            if ('\x40'..='\x7e').contains(&next) {
                                if next == 'K' {
                                    match parameters.as_str() {
                                        "" | "0" => cells.truncate(cursor),
                                        "2" => {
                                            cells.clear();
                                            cursor = 0;
                                        }
                                        _ => {}
                                    }
                                }
                                break;
                            }
                            parameters.push(next);
                        }
                    }
                    // OSC (a title, a link): up to BEL or ESC \.
                    Some(']') => {
                        while let Some(next) = chars.next() {
                            if next == '\x07' || (next == '\x1b' && chars.next_if_eq(&'\\').is_some()) {
                                break;
                            }
                        }
                    }
                    // Character sets and the like: intermediates, then a final byte.
                    Some(next) if ('\x20'..='\x2f').contains(&next) => {
                        while chars.next_if(|c| ('\x20'..='\x2f').contains(c)).is_some() {}
                        chars.next();
                    }
                    _ => {}
                }
            }
            c if c.is_control() && c != '\t' => {}
            c => {
                if cursor < cells.len() {
                    cells[cursor] = c;
                } else {
                    cells.push(c);
                }
                cursor += 1;
            }
        }
    }
    out.extend(cells);
}

#[cfg(test)]
mod tests {
    use super::plain;

    #[test]
    fn colours_go_and_progress_settles() {
        let cases = [
            ("plain text\nstays", "plain text\nstays"),
            ("\x1b[1;31merror\x1b[0m: failed", "error: failed"),
            ("\x1b[38;5;208mwarn\x1b[39m", "warn"),
            ("  0%\r 50%\r100%\ndone", "100%\ndone"),
            ("downloading [##   ]\r\x1b[Kdownloading [#####]", "downloading [#####]"),
            ("abcdef\rXY", "XYcdef"),
            ("windows\r\nline", "windows\nline"),
            ("ab\x08c", "ac"),
            ("\x1b]0;title\x07shown", "shown"),
            ("\x1b]8;;https://example.com\x1b\\link\x1b]8;;\x1b\\", "link"),
            ("\x1b(Bascii", "ascii"),
            ("tab\tkept", "tab\tkept"),
        ];
        for (raw, shown) in cases {
            assert_eq!(plain(raw), shown, "{raw:?}");
        }
    }
}
