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
    /// The theme for this terminal: `NO_COLOR` (set and not empty) wins; then `TOOLHOST_THEME`
    /// or the configuration's `theme` (`configured`); then the background the terminal reports
    /// in `COLORFGBG` (`15;0` is light text on black; a background of 7 or 15 is light); else
    /// dark.
    pub fn detect(configured: Option<&str>) -> Self {
        if std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()) {
            return Self::None;
        }
        let chosen = std::env::var("TOOLHOST_THEME").ok().or_else(|| configured.map(str::to_owned));
        if let Some(theme) = chosen.and_then(|t| t.parse().ok()) {
            return theme;
        }
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
