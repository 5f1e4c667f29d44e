//! The encodings a secret value may take in output (docs/secrets.md "What happens to a
//! request"): base64 (standard and URL-safe, with and without padding, and the part of it
//! that survives inside a larger encoded text such as `user:VALUE` in Basic auth),
//! percent-encoding and JSON string escaping. Written out here, independently of the
//! proxy's code, so that the leak tests do not share the implementation they check.

const STANDARD: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const URL_SAFE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Base64 of `bytes`; `url_safe` picks the `-_` alphabet, `pad` adds `=` padding.
pub fn base64(bytes: &[u8], url_safe: bool, pad: bool) -> String {
    let alphabet = if url_safe { URL_SAFE } else { STANDARD };
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let chars = chunk.len() + 1;
        for i in 0..4 {
            if i < chars {
                out.push(char::from(alphabet[((n >> (18 - 6 * i)) & 63) as usize]));
            } else if pad {
                out.push('=');
            }
        }
    }
    out
}

/// Percent-encodes every byte outside the URL unreserved set (`A-Za-z0-9-._~`), with
/// upper- or lower-case hex digits.
pub fn percent(text: &str, upper: bool) -> String {
    let mut out = String::new();
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else if upper {
            out.push_str(&format!("%{byte:02X}"));
        } else {
            out.push_str(&format!("%{byte:02x}"));
        }
    }
    out
}

/// `text` as the inside of a JSON string (serde_json's escaping, quotes removed).
pub fn json_escaped(text: &str) -> String {
    let quoted = serde_json::to_string(text).expect("JSON string");
    quoted[1..quoted.len() - 1].to_string()
}

/// The base64 characters that depend only on `bytes` when they sit `offset` (0, 1 or 2)
/// bytes after a 3-byte boundary inside a larger encoded text; `None` when fewer than 8
/// such characters exist.
pub fn base64_inner(bytes: &[u8], offset: usize, url_safe: bool) -> Option<String> {
    let mut shifted = vec![0u8; offset];
    shifted.extend_from_slice(bytes);
    let encoded = base64(&shifted, url_safe, false);
    let first = (offset * 8).div_ceil(6);
    let end = shifted.len() * 8 / 6;
    (end >= first + 8).then(|| encoded[first..end].to_string())
}

/// Every form of `value` a leak check looks for, each with a name for messages.
pub fn leak_forms(value: &str) -> Vec<(String, String)> {
    let bytes = value.as_bytes();
    let mut forms = vec![
        ("raw".to_string(), value.to_string()),
        ("base64".to_string(), base64(bytes, false, true)),
        ("base64 unpadded".to_string(), base64(bytes, false, false)),
        ("base64url".to_string(), base64(bytes, true, true)),
        ("base64url unpadded".to_string(), base64(bytes, true, false)),
        ("percent-encoded".to_string(), percent(value, true)),
        (
            "percent-encoded (lower-case hex)".to_string(),
            percent(value, false),
        ),
        ("JSON-escaped".to_string(), json_escaped(value)),
        (
            "JSON-escaped with \\/".to_string(),
            json_escaped(value).replace('/', "\\/"),
        ),
    ];
    for offset in 0..3 {
        for url_safe in [false, true] {
            if let Some(inner) = base64_inner(bytes, offset, url_safe) {
                let alphabet = if url_safe { "base64url" } else { "base64" };
                forms.push((
                    format!("{alphabet} inside a larger encoded text (byte offset {offset} mod 3)"),
                    inner,
                ));
            }
        }
    }
    forms
}

/// The document the upstream's `/reflect` endpoint answers for a received value: one
/// `name=form` line per encoding.
pub fn reflect_document(value: &str) -> String {
    let bytes = value.as_bytes();
    let basic = format!("x-access-token:{value}");
    [
        ("raw", value.to_string()),
        ("base64", base64(bytes, false, true)),
        ("base64-unpadded", base64(bytes, false, false)),
        ("base64url", base64(bytes, true, true)),
        ("base64url-unpadded", base64(bytes, true, false)),
        ("percent", percent(value, true)),
        ("percent-lower", percent(value, false)),
        ("json", format!("\"{}\"", json_escaped(value))),
        ("basic", base64(basic.as_bytes(), false, true)),
    ]
    .iter()
    .map(|(name, form)| format!("{name}={form}\n"))
    .collect()
}
