//! The terminal loop: puts the terminal in raw mode on the alternate screen, then redraws
//! the [`Model`] whenever an audit line (the run's backlog first), a pending list (polled
//! every half second) or a key arrives, and sends the answers keys ask for. `NO_COLOR`
//! turns colours off. The terminal is restored on every way
//! out, a panic included (ratatui's `init` installs that hook).

use std::time::Duration;

use ratatui::DefaultTerminal;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use tokio::sync::mpsc;

use crate::WatchError;
use crate::client::{Client, ClientError};
use crate::model::{Action, Key, MAX_ROWS, Model};
use crate::view;

/// How often the pending asks are asked for.
const POLL: Duration = Duration::from_millis(500);
/// The most audit lines taken in before a redraw.
const BATCH: usize = 512;

/// Runs the full-screen view until `q` (or Ctrl-C).
pub async fn run(client: Client) -> Result<(), WatchError> {
    let mut terminal = ratatui::init();
    let result = event_loop(&mut terminal, client).await;
    ratatui::restore();
    result
}

async fn event_loop(terminal: &mut DefaultTerminal, client: Client) -> Result<(), WatchError> {
    let (line_sender, mut lines) = mpsc::channel::<String>(4096);
    let streaming = client.clone();
    let mut stream = tokio::spawn(async move { streaming.events(MAX_ROWS, line_sender).await });
    let mut keys = read_keys();
    let mut poll = tokio::time::interval(POLL);
    let mut asks_supported = true;
    let mut model = Model::new(client.describe());
    model.color = colour_wanted(std::env::var_os("NO_COLOR").as_deref());
    loop {
        terminal
            .draw(|frame| view::draw(frame, &model))
            .map_err(WatchError::Terminal)?;
        tokio::select! {
            Some(line) = lines.recv() => {
                model.push_line(&line);
                for _ in 0..BATCH {
                    let Ok(line) = lines.try_recv() else { break };
                    model.push_line(&line);
                }
            }
            ended = &mut stream, if !stream.is_finished() => {
                let ended = match ended {
                    Ok(Ok(())) => "the run ended (event stream closed)".to_owned(),
                    Ok(Err(error)) => error.to_string(),
                    Err(_) => "the event stream stopped".to_owned(),
                };
                // The last answer stays readable beside the end; nothing is left to poll.
                model.status = if model.status.starts_with("answered ") {
                    format!("{}; {ended}", model.status)
                } else {
                    ended
                };
                asks_supported = false;
            }
            _ = poll.tick(), if asks_supported => match client.pending().await {
                Ok(pending) => model.set_pending(pending),
                Err(ClientError::Status { status, .. }) if status == http::StatusCode::NOT_FOUND => {
                    asks_supported = false;
                }
                Err(error) => model.status = error.to_string(),
            },
            key = keys.recv() => {
                let Some(key) = key else { return Ok(()) };
                match model.on_key(key) {
                    Action::Quit => return Ok(()),
                    Action::None => {}
                    Action::Answer { id, allow, scope } => {
                        model.status = match client.answer(&id, allow, scope).await {
                            Ok(()) if allow => format!("answered {id}: allow {}", scope.as_str()),
                            Ok(()) => format!("answered {id}: deny"),
                            Err(error) => error.to_string(),
                        };
                        if let Ok(pending) = client.pending().await {
                            model.set_pending(pending);
                        }
                    }
                }
            }
        }
    }
}

/// Whether to draw colours: not when `NO_COLOR` is set to anything but the empty string
/// (no-color.org).
pub fn colour_wanted(no_color: Option<&std::ffi::OsStr>) -> bool {
    no_color.is_none_or(std::ffi::OsStr::is_empty)
}

/// Reads terminal key events on a thread of their own (crossterm's reader blocks) and
/// hands them over as [`Key`]s; a resize wakes the loop with a key it ignores. Ctrl-C
/// reads as `q`.
fn read_keys() -> mpsc::Receiver<Key> {
    let (sender, receiver) = mpsc::channel(64);
    std::thread::spawn(move || {
        while let Ok(event) = event::read() {
            let key = match event {
                Event::Key(key) if key.kind == KeyEventKind::Press => {
                    if key.modifiers.contains(KeyModifiers::CONTROL)
                        && key.code == KeyCode::Char('c')
                    {
                        Some(Key::Char('q'))
                    } else {
                        map_key(key.code)
                    }
                }
                Event::Resize(..) => Some(Key::Char('\0')),
                _ => None,
            };
            if let Some(key) = key
                && sender.blocking_send(key).is_err()
            {
                return;
            }
        }
    });
    receiver
}

fn map_key(code: KeyCode) -> Option<Key> {
    Some(match code {
        KeyCode::Char(c) => Key::Char(c),
        KeyCode::Enter => Key::Enter,
        KeyCode::Esc => Key::Esc,
        KeyCode::Backspace => Key::Backspace,
        KeyCode::Up => Key::Up,
        KeyCode::Down => Key::Down,
        _ => return None,
    })
}

/// `--json`: prints each audit line of the event stream (the backlog first) on its own
/// line until the stream ends.
pub async fn print_json(client: Client) -> Result<(), WatchError> {
    use tokio::io::AsyncWriteExt;
    let (sender, mut lines) = mpsc::channel::<String>(4096);
    let streaming = client.clone();
    let stream = tokio::spawn(async move { streaming.events(MAX_ROWS, sender).await });
    let mut out = tokio::io::stdout();
    while let Some(line) = lines.recv().await {
        let written = async {
            out.write_all(line.as_bytes()).await?;
            out.write_all(b"\n").await?;
            out.flush().await
        };
        if written.await.is_err() {
            return Ok(()); // stdout closed (a pipe's reader left): nothing more to do
        }
    }
    match stream.await {
        Ok(result) => result.map_err(WatchError::Client),
        Err(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_color_set_to_anything_but_empty_turns_colours_off() {
        assert!(colour_wanted(None));
        assert!(colour_wanted(Some(std::ffi::OsStr::new(""))));
        assert!(!colour_wanted(Some(std::ffi::OsStr::new("1"))));
    }
}
