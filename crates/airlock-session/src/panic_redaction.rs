//! Panics pass through the secrets' redactor too: a panic message that somehow carries a
//! real value is printed with `[REDACTED:NAME]` in its place, like every audit line.

use airlock_proxy::Proxy;

/// Replaces the panic hook with one that redacts the message with the current secrets of
/// `proxy` (rotations included) before printing it.
pub fn install(proxy: &Proxy) {
    let credentials = proxy.credentials().clone();
    std::panic::set_hook(Box::new(move |info| {
        let text = info.to_string();
        let redacted = credentials.load().redactor().redact(&text).into_owned();
        eprintln!("airlock: internal error: {redacted}");
    }));
}
