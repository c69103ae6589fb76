//! Progress bars on stderr, shown only to a person watching a terminal.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// What a bar shows: `   migrating [=====>     ] 1,200/4,000 (310/s, eta 9s)`.
const TEMPLATE: &str = "{msg:>12} [{bar:32}] {human_pos}/{human_len} ({per_sec}, eta {eta})";

/// A bar of `len` steps labelled `message`; hidden with `--json` or when stderr is not a
/// terminal, so logs and pipes get no control characters.
pub fn bar(len: u64, message: impl Into<String>, json: bool) -> ProgressBar {
    if json || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template(TEMPLATE)
        .map(|s| s.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_message(message.into());
    bar
}

/// A status line on stderr (a spinner with a message), shown only to a person watching a
/// terminal, as [`bar`].
pub fn status(json: bool) -> ProgressBar {
    if json || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let line = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(STATUS) {
        line.set_style(style);
    }
    line.enable_steady_tick(std::time::Duration::from_millis(200));
    line
}

/// What a status line shows: `⠋ following reviews: 1,200 events, …`.
const STATUS: &str = "{spinner} {msg}";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_template_parses() {
        assert!(ProgressStyle::with_template(TEMPLATE).is_ok());
        assert!(ProgressStyle::with_template(STATUS).is_ok());
    }
}
