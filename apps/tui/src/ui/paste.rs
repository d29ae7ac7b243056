//! Pastes in terminals without bracketed paste. There a paste arrives as keys, all at once: its
//! newlines as Enter (which would send each line as a message) and its indentation as Tab (which
//! would complete). [`PasteBursts`] wraps the terminal's event stream: keys that are already
//! waiting behind a key (no person types that fast) and that are plain text — characters, Enter,
//! Tab — come out as one `Paste` of their text, as a bracketed paste would. A key on its own
//! comes out as itself.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use crossterm::event::{Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use futures::Stream;

/// The terminal's events with bursts of plain keys turned into pastes (see the module docs).
#[derive(Debug)]
pub struct PasteBursts<S> {
    inner: S,
    /// What was read past the burst, given out next.
    held: VecDeque<std::io::Result<Event>>,
    ended: bool,
}

impl<S> PasteBursts<S> {
    /// Wraps `inner`.
    pub fn new(inner: S) -> Self {
        Self { inner, held: VecDeque::new(), ended: false }
    }
}

/// The text a key stands for in a paste, when it is plain text.
fn text_of(key: &KeyEvent) -> Option<char> {
    if key.kind != KeyEventKind::Press || !(key.modifiers - KeyModifiers::SHIFT).is_empty() {
        return None;
    }
    match key.code {
        KeyCode::Char(c) => Some(c),
        KeyCode::Enter => Some('\n'),
        KeyCode::Tab => Some('\t'),
        _ => None,
    }
}

impl<S> Stream for PasteBursts<S>
where
    S: Stream<Item = std::io::Result<Event>> + Unpin,
{
    type Item = std::io::Result<Event>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if let Some(held) = this.held.pop_front() {
            return Poll::Ready(Some(held));
        }
        if this.ended {
            return Poll::Ready(None);
        }
        let first = match Pin::new(&mut this.inner).poll_next(cx) {
            Poll::Ready(Some(Ok(Event::Key(key)))) => key,
            Poll::Ready(None) => return Poll::Ready(None),
            other => return other,
        };
        let Some(c) = text_of(&first) else { return Poll::Ready(Some(Ok(Event::Key(first)))) };
        // Everything already waiting behind it.
        let mut text = String::from(c);
        let mut keys = 1;
        loop {
            match Pin::new(&mut this.inner).poll_next(cx) {
                Poll::Ready(Some(Ok(Event::Key(key)))) => match text_of(&key) {
                    Some(c) => {
                        text.push(c);
                        keys += 1;
                    }
                    None => {
                        this.held.push_back(Ok(Event::Key(key)));
                        break;
                    }
                },
                Poll::Ready(Some(other)) => {
                    this.held.push_back(other);
                    break;
                }
                Poll::Ready(None) => {
                    this.ended = true;
                    break;
                }
                // Nothing more waiting: the inner stream has registered the waker.
                Poll::Pending => break,
            }
        }
        if keys == 1 {
            return Poll::Ready(Some(Ok(Event::Key(first))));
        }
        Poll::Ready(Some(Ok(Event::Paste(text))))
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt as _;

    use super::*;

    fn key(code: KeyCode) -> std::io::Result<Event> {
        Ok(Event::Key(KeyEvent::new(code, KeyModifiers::NONE)))
    }

    fn typed(text: &str) -> Vec<std::io::Result<Event>> {
        text.chars()
            .map(|c| match c {
                '\n' => key(KeyCode::Enter),
                '\t' => key(KeyCode::Tab),
                c => key(KeyCode::Char(c)),
            })
            .collect()
    }

    fn shown(event: &std::io::Result<Event>) -> String {
        match event {
            Ok(Event::Paste(text)) => format!("paste {text:?}"),
            Ok(Event::Key(key)) => format!("key {:?} {:?}", key.code, key.modifiers),
            other => format!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn keys_that_arrive_together_are_one_paste_with_newlines_and_indentation() {
        let mut events = typed("fn main() {\n\tprintln!(\"hi\");\n}");
        events.push(Ok(Event::Key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL))));
        events.push(Ok(Event::FocusGained));
        let out: Vec<String> =
            PasteBursts::new(futures::stream::iter(events)).map(|e| shown(&e)).collect().await;
        assert_eq!(
            out,
            [
                "paste \"fn main() {\\n\\tprintln!(\\\"hi\\\");\\n}\"".to_owned(),
                "key Char('c') KeyModifiers(CONTROL)".to_owned(),
                "Ok(FocusGained)".to_owned(),
            ]
        );
    }

    #[tokio::test]
    async fn keys_typed_one_at_a_time_stay_keys_and_enter_still_sends() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut events = PasteBursts::new(tokio_stream_of(rx));
        for event in typed("hi\n") {
            tx.send(event).unwrap();
            let got = events.next().await.unwrap();
            assert!(shown(&got).starts_with("key "), "{}", shown(&got));
        }
        drop(tx);
        assert!(events.next().await.is_none());
    }

    /// The receiving half as a stream (as the app's tests feed keys).
    fn tokio_stream_of<T: Send + 'static>(
        mut rx: tokio::sync::mpsc::UnboundedReceiver<T>,
    ) -> impl Stream<Item = T> + Unpin {
        Box::pin(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)))
    }
}
