//! Surrogates for tokens found in credential files: format-preserving, and for a JWT
//! (`header.payload.signature`, as Codex's and many OAuth servers' tokens are) only the
//! signature is replaced, so a client that reads the claims locally (account id, expiry)
//! still can, while the surrogate is worth nothing anywhere (its signature is random).

use airlock_credentials::generate_surrogate;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// A surrogate for `real`, from the operating system's CSPRNG; `None` when the value has
/// nothing to randomise (the caller hides such a file rather than show it raw).
pub fn token_surrogate(real: &str) -> Option<String> {
    // rand's thread-local generator: a CSPRNG seeded from the operating system.
    let mut rng = rand::rng();
    match jwt_parts(real) {
        Some((head, signature)) => {
            let signature = generate_surrogate(signature, &mut rng)?;
            Some(format!("{head}.{signature}"))
        }
        None => {
            let prefix = type_prefix(real);
            let rest = generate_surrogate(&real[prefix.len()..], &mut rng)?;
            Some(format!("{prefix}{rest}"))
        }
    }
}

/// The token's type prefix, kept as it is (`sk-ant-oat01-`, `gho_`, `npm_`, `pypi-`,
/// `dckr_pat_`): leading segments of lower-case letters and digits each ending in `-` or
/// `_`, at most 16 characters, leaving at least 16 characters to randomise. Clients and
/// the outbound guard tell a token's kind by it.
fn type_prefix(real: &str) -> &str {
    let mut end = 0;
    for (index, c) in real.char_indices() {
        if index >= 16 {
            break;
        }
        match c {
            '-' | '_' if index > 0 => end = index + 1,
            'a'..='z' | '0'..='9' => {}
            _ => break,
        }
    }
    if real.len().saturating_sub(end) < 16 {
        return "";
    }
    &real[..end]
}

/// `(header.payload, signature)` when `value` is a JWS in compact form whose header
/// decodes to a JSON object and whose signature has at least 16 characters.
fn jwt_parts(value: &str) -> Option<(&str, &str)> {
    let (head, signature) = value.rsplit_once('.')?;
    let (header, payload) = head.split_once('.')?;
    if payload.contains('.') || signature.len() < 16 {
        return None;
    }
    let decoded = URL_SAFE_NO_PAD.decode(header).ok()?;
    let is_object =
        serde_json::from_slice::<serde_json::Value>(&decoded).is_ok_and(|value| value.is_object());
    is_object.then_some((head, signature))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_prefixes_are_kept() {
        assert_eq!(type_prefix("gho_abcdefghijklmnopqrstuvwxyz"), "gho_");
        assert_eq!(type_prefix("dckr_pat_ABCDEFGHIJKLMNOPQRSTUV"), "dckr_pat_");
        assert_eq!(type_prefix("pypi-AgEIcHlwaS5vcmcCJGExYjI"), "pypi-");
        assert_eq!(type_prefix("Abc-defghijklmnopqrstuvwxyz"), "");
        assert_eq!(type_prefix("abc_short"), "");
    }

    #[test]
    fn a_jwt_keeps_its_claims_and_changes_its_signature() {
        let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"RS256","typ":"JWT"}"#);
        let payload = URL_SAFE_NO_PAD.encode(br#"{"sub":"user","exp":1900000000}"#);
        let real = format!("{header}.{payload}.abcdefghijklmnopqrstuvwxyz0123456789");
        let surrogate = token_surrogate(&real).expect("surrogate");
        assert_eq!(surrogate.len(), real.len());
        assert!(surrogate.starts_with(&format!("{header}.{payload}.")));
        assert_ne!(surrogate, real);
    }

    #[test]
    fn an_opaque_token_keeps_its_prefix_and_length() {
        let real = "sk-ant-oat01-abcdefghijklmnopqrstuvwxyzABCDEFGH0123456789";
        let surrogate = token_surrogate(real).expect("surrogate");
        assert_eq!(surrogate.len(), real.len());
        assert!(surrogate.starts_with("sk-ant-oat01-"), "{surrogate}");
        assert_ne!(surrogate, real);
    }
}
