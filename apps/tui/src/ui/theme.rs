//! Colours for the terminal's background. The screen is drawn in one palette (written for a dark
//! background); a theme maps each drawn cell's colours afterwards, so every view follows it:
//! `light` puts each hue in a dark shade readable on white, `none` (the `NO_COLOR` convention)
//! drops colour and keeps bold, dim, underline and reverse.

use ratatui::buffer::Buffer;
use ratatui::style::Color;

/// The palette in use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Theme {
    /// For a dark background: as drawn.
    #[default]
    Dark,
    /// For a light background.
    Light,
    /// No colour at all (`NO_COLOR`).
    None,
}

impl std::str::FromStr for Theme {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.trim().to_ascii_lowercase().as_str() {
            "dark" => Ok(Self::Dark),
            "light" => Ok(Self::Light),
            "none" | "no-color" | "monochrome" => Ok(Self::None),
            other => Err(format!("unknown theme `{other}`: dark, light or none")),
        }
    }
}

impl Theme {
    /// The theme for this terminal: `NO_COLOR` (set and not empty) wins; then `TOOLHOST_THEME`,
    /// then the configuration's `theme` (`configured`); then the background the terminal
    /// reported when asked (`reported`, OSC 11: [`query_background`]); then the one it states in
    /// `COLORFGBG` (`15;0` is light text on black; a background of 7 or 15 is light); else dark.
    pub fn detect(configured: Option<&str>, reported: Option<Self>) -> Self {
        Self::chosen(configured).unwrap_or_else(|| reported.unwrap_or_else(Self::stated))
    }

    /// What the person chose (`NO_COLOR`, `TOOLHOST_THEME`, the configuration), if anything: then
    /// the terminal need not be asked.
    pub fn chosen(configured: Option<&str>) -> Option<Self> {
        if std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()) {
            return Some(Self::None);
        }
        let chosen = std::env::var("TOOLHOST_THEME").ok().or_else(|| configured.map(str::to_owned));
        chosen.and_then(|t| t.parse().ok())
    }

    /// The background `COLORFGBG` states, else dark.
    fn stated() -> Self {
        let background =
            std::env::var("COLORFGBG").ok().and_then(|v| v.rsplit(';').next().map(str::to_owned));
        match background.as_deref() {
            Some("7" | "15") => Self::Light,
            _ => Self::Dark,
        }
    }

    /// The name, as `/theme` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Dark => "dark",
            Self::Light => "light",
            Self::None => "none",
        }
    }

    /// Puts every cell of `buffer` in this theme.
    pub fn apply(self, buffer: &mut Buffer) {
        if self == Self::Dark {
            return;
        }
        for cell in &mut buffer.content {
            cell.fg = self.map(cell.fg);
            cell.bg = match self {
                Self::None => Color::Reset,
                // Backgrounds are drawn rarely (a selection); a light one keeps them pale.
                _ => light_background(cell.bg),
            };
        }
    }

    fn map(self, color: Color) -> Color {
        match self {
            Self::Dark => color,
            Self::None => Color::Reset,
            Self::Light => on_white(color),
        }
    }
}

/// A colour drawn for a dark background, in a shade readable on white (at least 4.5:1).
fn on_white(color: Color) -> Color {
    match color {
        Color::Reset => Color::Reset,
        Color::Black => Color::Black,
        Color::Red | Color::LightRed | Color::Indexed(1 | 9) => Color::Rgb(0xa8, 0x10, 0x10),
        Color::Green | Color::LightGreen | Color::Indexed(2 | 10) => Color::Rgb(0x1a, 0x6b, 0x1a),
        Color::Yellow | Color::LightYellow | Color::Indexed(3 | 11) => Color::Rgb(0x7a, 0x55, 0x00),
        Color::Blue | Color::LightBlue | Color::Indexed(4 | 12) => Color::Rgb(0x1f, 0x3f, 0xa8),
        Color::Magenta | Color::LightMagenta | Color::Indexed(5 | 13) => Color::Rgb(0x8a, 0x1a, 0x8a),
        Color::Cyan | Color::LightCyan | Color::Indexed(6 | 14) => Color::Rgb(0x00, 0x5f, 0x73),
        Color::Gray | Color::White | Color::Indexed(7 | 15) => Color::Rgb(0x30, 0x30, 0x30),
        Color::DarkGray | Color::Indexed(8) => Color::Rgb(0x55, 0x55, 0x55),
        Color::Rgb(r, g, b) if luminance(r, g, b) > 0.18 => {
            // Darken until it reads on white.
            let scale = |c: u8| (f64::from(c) * 0.45) as u8;
            Color::Rgb(scale(r), scale(g), scale(b))
        }
        other => other,
    }
}

fn light_background(color: Color) -> Color {
    match color {
        Color::Reset => Color::Reset,
        _ => Color::Rgb(0xe4, 0xe4, 0xe4),
    }
}

/// The theme for the background a terminal reports in its answer to OSC 11
/// (`ESC ] 11 ; rgb:RRRR/GGGG/BBBB` ended by BEL or ST; each part 1 to 4 hex digits).
pub fn from_background_reply(reply: &[u8]) -> Option<Theme> {
    let text = std::str::from_utf8(reply).ok()?;
    let at = text.find("]11;rgb:")?;
    let rest = &text[at + "]11;rgb:".len()..];
    let end = rest.find(['\x07', '\x1b']).unwrap_or(rest.len());
    let mut parts = rest[..end].split('/').map(|part| {
        let digits = part.len();
        let value = u32::from_str_radix(part, 16).ok()?;
        ((1..=4).contains(&digits)).then(|| (value * 255 / ((1u32 << (4 * digits)) - 1)) as u8)
    });
    let (r, g, b) = (parts.next()??, parts.next()??, parts.next()??);
    if parts.next().is_some() {
        return None;
    }
    Some(if luminance(r, g, b) > 0.5 { Theme::Light } else { Theme::Dark })
}

/// Asks the terminal for its background colour (OSC 11), followed by its attributes (DA1, which
/// every terminal answers), and reads until the attributes come back: an OSC 11 answer before
/// them is the background; none means the terminal does not say. So nothing is left for the
/// keyboard to read later. `wait` bounds it all for a terminal that answers neither. Call it in
/// raw mode, before anything else reads the keyboard. `None`: not a terminal, or no answer.
pub fn query_background(wait: std::time::Duration) -> Option<Theme> {
    use std::io::{IsTerminal as _, Write as _};
    if !std::io::stdin().is_terminal() || !std::io::stdout().is_terminal() {
        return None;
    }
    let mut out = std::io::stdout();
    out.write_all(b"\x1b]11;?\x1b\\\x1b[c").ok()?;
    out.flush().ok()?;
    let stdin = rustix::stdio::stdin();
    let deadline = std::time::Instant::now() + wait;
    let mut reply = Vec::new();
    while reply.len() < 1024 && !attributes_answered(&reply) {
        let left = deadline.checked_duration_since(std::time::Instant::now())?;
        let timeout = rustix::event::Timespec::try_from(left).ok()?;
        let mut fds = [rustix::event::PollFd::new(&stdin, rustix::event::PollFlags::IN)];
        if rustix::event::poll(&mut fds, Some(&timeout)).ok()? == 0 {
            return None;
        }
        let mut chunk = [0u8; 128];
        let read = rustix::io::read(stdin, &mut chunk).ok()?;
        if read == 0 {
            return None;
        }
        reply.extend_from_slice(&chunk[..read]);
    }
    from_background_reply(&reply)
}

/// Whether `reply` holds a DA1 answer (`ESC [ ? … c`).
fn attributes_answered(reply: &[u8]) -> bool {
    reply.windows(3).enumerate().any(|(at, w)| {
        w == b"\x1b[?"
            && reply[at + 3..]
                .iter()
                .position(|b| !(b.is_ascii_digit() || *b == b';'))
                .is_some_and(|end| reply[at + 3 + end] == b'c')
    })
}

/// WCAG relative luminance of an sRGB colour.
pub fn luminance(r: u8, g: u8, b: u8) -> f64 {
    let channel = |c: u8| {
        let c = f64::from(c) / 255.0;
        if c <= 0.039_28 { c / 12.92 } else { ((c + 0.055) / 1.055).powf(2.4) }
    };
    0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b)
}

/// WCAG contrast ratio of two luminances.
pub fn contrast(a: f64, b: f64) -> f64 {
    let (light, dark) = if a > b { (a, b) } else { (b, a) };
    (light + 0.05) / (dark + 0.05)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terminals_background_answer_chooses_the_theme() {
        // White and black, with BEL or ST, in 4, 2 and 1 hex digits.
        assert_eq!(from_background_reply(b"\x1b]11;rgb:ffff/ffff/ffff\x1b\\"), Some(Theme::Light));
        assert_eq!(from_background_reply(b"\x1b]11;rgb:0000/0000/0000\x07"), Some(Theme::Dark));
        assert_eq!(from_background_reply(b"\x1b]11;rgb:fd/f6/e3\x07"), Some(Theme::Light), "solarized light");
        assert_eq!(from_background_reply(b"\x1b]11;rgb:2/2/2\x07"), Some(Theme::Dark));
        assert_eq!(from_background_reply(b"\x1b]11;rgb:1e1e/1e1e/2e2e\x07\x1b[?62;22c"), Some(Theme::Dark));
        for nonsense in [
            &b""[..],
            b"\x1b[?62;22c",
            b"\x1b]11;rgb:ffff/ffff\x07",
            b"\x1b]11;rgb:zz/00/00\x07",
            b"\x1b]11;rgb:fffff/0/0\x07",
        ] {
            assert_eq!(from_background_reply(nonsense), None, "{nonsense:?}");
        }
    }

    #[test]
    fn the_attributes_answer_ends_the_wait() {
        assert!(attributes_answered(b"\x1b]11;rgb:0/0/0\x07\x1b[?62;22;52c"));
        assert!(attributes_answered(b"\x1b[?1;2c"));
        assert!(!attributes_answered(b"\x1b]11;rgb:0/0/0\x07\x1b[?62;2"));
        assert!(!attributes_answered(b"\x1b[?62;22x"));
    }
}
