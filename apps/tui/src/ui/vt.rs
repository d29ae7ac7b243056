//! A terminal backed by a VT100 emulator: the bytes the crossterm backend writes are interpreted
//! by `vt100`, so tests and benchmarks see the screen a real terminal would show.

use std::io;
use std::num::NonZeroU16;
use std::sync::{Arc, Mutex, MutexGuard};

use ratatui::backend::{Backend, ClearType, CrosstermBackend, WindowSize};
use ratatui::buffer::Cell;
use ratatui::layout::{Position, Size};

/// The emulator, shared by the backend's writer and whoever reads the screen, and the bytes
/// written since the last flush. The emulator sees a frame only when it is flushed whole, so a
/// reader never sees half of one (a real terminal can; a test reading one would be flaky).
#[derive(Clone)]
struct Shared(Arc<Mutex<Emulator>>);

struct Emulator {
    parser: vt100::Parser<Bells>,
    pending: Vec<u8>,
}

/// Counts the terminal bell (`^G`), so tests can see a question rang it.
#[derive(Debug, Default)]
struct Bells(usize);

impl vt100::Callbacks for Bells {
    fn audible_bell(&mut self, _: &mut vt100::Screen) {
        self.0 += 1;
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Emulator> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl io::Write for Shared {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.lock().pending.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        let mut emulator = self.lock();
        let pending = std::mem::take(&mut emulator.pending);
        emulator.parser.process(&pending);
        Ok(())
    }
}

/// The crossterm backend writing into a VT100 screen of a fixed size.
pub struct Vt100Backend {
    inner: CrosstermBackend<Shared>,
    parser: Shared,
    size: Size,
}

impl std::fmt::Debug for Vt100Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vt100Backend").field("size", &self.size).finish_non_exhaustive()
    }
}

impl Vt100Backend {
    /// A screen of `width` × `height`.
    ///
    /// # Panics
    ///
    /// A zero width or height.
    pub fn new(width: u16, height: u16) -> Self {
        let (Some(rows), Some(columns)) = (NonZeroU16::new(height), NonZeroU16::new(width)) else {
            panic!("a screen has at least one row and one column");
        };
        let parser = Shared(Arc::new(Mutex::new(Emulator {
            parser: vt100::Parser::new_with_callbacks(rows, columns, 0, Bells::default()),
            pending: Vec::new(),
        })));
        Self { inner: CrosstermBackend::new(parser.clone()), parser, size: Size { width, height } }
    }

    /// The screen's text, row by row, trailing spaces trimmed.
    pub fn text(&self) -> String {
        self.handle().text()
    }

    /// A handle that reads the screen while the terminal is in use elsewhere.
    pub fn handle(&self) -> ScreenHandle {
        ScreenHandle { parser: self.parser.clone(), width: self.size.width }
    }

    /// The foreground colour of the cell at (`row`, `column`).
    pub fn foreground(&self, row: u16, column: u16) -> Option<vt100::Color> {
        self.parser.lock().parser.screen().cell(row, column).map(|c| c.fgcolor())
    }
}

/// Reads the emulated screen.
#[derive(Clone)]
pub struct ScreenHandle {
    parser: Shared,
    width: u16,
}

impl std::fmt::Debug for ScreenHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ScreenHandle")
    }
}

impl ScreenHandle {
    /// The screen's text, row by row, trailing spaces trimmed.
    pub fn text(&self) -> String {
        let emulator = self.parser.lock();
        emulator
            .parser
            .screen()
            .rows(0, self.width)
            .map(|row| row.trim_end().to_owned())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Where the cursor is: (row, column).
    pub fn cursor(&self) -> (u16, u16) {
        self.parser.lock().parser.screen().cursor_position()
    }

    /// How often the terminal's bell rang.
    pub fn bells(&self) -> usize {
        self.parser.lock().parser.callbacks().0
    }
}

impl Backend for Vt100Backend {
    type Error = io::Error;

    fn draw<'a, I>(&mut self, content: I) -> io::Result<()>
    where
        I: Iterator<Item = (u16, u16, &'a Cell)>,
    {
        self.inner.draw(content)
    }

    fn hide_cursor(&mut self) -> io::Result<()> {
        self.inner.hide_cursor()
    }

    fn show_cursor(&mut self) -> io::Result<()> {
        self.inner.show_cursor()
    }

    fn get_cursor_position(&mut self) -> io::Result<Position> {
        let (row, column) = self.parser.lock().parser.screen().cursor_position();
        Ok(Position { x: column, y: row })
    }

    fn set_cursor_position<P: Into<Position>>(&mut self, position: P) -> io::Result<()> {
        self.inner.set_cursor_position(position)
    }

    fn clear(&mut self) -> io::Result<()> {
        self.inner.clear()
    }

    fn clear_region(&mut self, clear_type: ClearType) -> io::Result<()> {
        self.inner.clear_region(clear_type)
    }

    fn size(&self) -> io::Result<Size> {
        Ok(self.size)
    }

    fn window_size(&mut self) -> io::Result<WindowSize> {
        Ok(WindowSize { columns_rows: self.size, pixels: Size { width: 0, height: 0 } })
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl io::Write for Vt100Backend {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.inner.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        io::Write::flush(&mut self.inner)
    }
}
