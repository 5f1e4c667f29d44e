//! Scrubbing of the text a response from a secret's host carries outside its body
//! stream (docs/secrets.md, "Scrub"): every header value, the HTTP/1.1 status reason
//! phrase hyper keeps in the response's extensions, and the trailers that end a body.
//! The body itself is scrubbed as it streams ([`crate::body::ProxyBody`]).
//!
//! Whatever cannot be rebuilt once scrubbed (a replacement that is no valid header value
//! or reason phrase) is dropped rather than passed on as it came.

use std::borrow::Cow;

use airlock_credentials::Scrubber;
use http::{Extensions, HeaderMap, HeaderName, HeaderValue};
use hyper::ext::ReasonPhrase;

/// Scrubs a response head: its header values and its custom reason phrase.
pub(crate) fn scrub_head(scrubber: &Scrubber, parts: &mut http::response::Parts) {
    scrub_headers(scrubber, &mut parts.headers);
    scrub_reason(scrubber, &mut parts.extensions);
}

/// Replaces real secret values in header values (response headers or trailers) by their
/// surrogates; a value that is no valid header value once scrubbed is removed, and so is
/// a header whose (lower-case) name holds a real value.
pub(crate) fn scrub_headers(scrubber: &Scrubber, headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .keys()
        .filter(|name| matches!(scrubber.scrub(name.as_str().as_bytes()), Cow::Owned(_)))
        .cloned()
        .collect();
    for name in named {
        headers.remove(name);
    }
    let mut unfit = Vec::new();
    for (index, value) in headers.values_mut().enumerate() {
        if let Cow::Owned(clean) = scrubber.scrub(value.as_bytes()) {
            match HeaderValue::from_bytes(&clean) {
                Ok(clean) => *value = clean,
                Err(_) => unfit.push(index),
            }
        }
    }
    if !unfit.is_empty() {
        remove_values(headers, &unfit);
    }
}

/// Removes the values at `positions` (in [`HeaderMap::values_mut`] order, ascending).
fn remove_values(headers: &mut HeaderMap, positions: &[usize]) {
    let mut kept = HeaderMap::with_capacity(headers.len());
    let mut name = None;
    for (index, (next_name, value)) in std::mem::take(headers).into_iter().enumerate() {
        if let Some(next_name) = next_name {
            name = Some(next_name);
        }
        if let Some(name) = &name
            && positions.binary_search(&index).is_err()
        {
            kept.append(name.clone(), value);
        }
    }
    *headers = kept;
}

/// Replaces real secret values in a custom reason phrase (`HTTP/1.1 200 <reason>`, kept
/// by hyper's client and written again by its server); one that is no valid reason phrase
/// once scrubbed is dropped (the status's canonical reason is written instead).
fn scrub_reason(scrubber: &Scrubber, extensions: &mut Extensions) {
    let Some(reason) = extensions.get::<ReasonPhrase>() else {
        return;
    };
    if let Cow::Owned(clean) = scrubber.scrub(reason.as_bytes()) {
        match ReasonPhrase::try_from(clean) {
            Ok(clean) => {
                extensions.insert(clean);
            }
            Err(_) => {
                extensions.remove::<ReasonPhrase>();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_credentials::Credentials;
    use airlock_policy::model::{Secret, SecretSource};

    const REAL: &str = "sk-unit-REAL-0123456789abcdef";
    const LOWER_REAL: &str = "sk-unit-lower-0123456789abcdef";
    const SURROGATE: &str = "surrogate-unit-0123456789abcd";

    fn scrubber() -> Scrubber {
        let secret = Secret {
            surrogate: Some(SURROGATE.to_owned()),
            ..Secret::new("KEY", SecretSource::Env("KEY".to_owned()))
        };
        let lower = Secret::new("LOWER", SecretSource::Env("LOWER".to_owned()));
        Credentials::new(vec![
            (secret, REAL.to_owned()),
            (lower, LOWER_REAL.to_owned()),
        ])
        .expect("credentials")
        .scrubber()
    }

    #[test]
    fn a_header_named_after_a_real_value_is_removed() {
        let mut headers = HeaderMap::new();
        headers.insert(
            HeaderName::from_bytes(format!("x-{LOWER_REAL}").as_bytes()).unwrap(),
            HeaderValue::from_static("1"),
        );
        headers.insert("x-kept", HeaderValue::from_static("2"));
        scrub_headers(&scrubber(), &mut headers);
        assert_eq!(headers.len(), 1);
        assert_eq!(headers["x-kept"], "2");
    }

    #[test]
    fn reason_phrase_and_every_header_value_are_scrubbed() {
        let mut response = http::Response::new(());
        let headers = response.headers_mut();
        headers.append("x-echo", HeaderValue::from_static("plain"));
        headers.append(
            "x-echo",
            HeaderValue::from_str(&format!("Bearer {REAL}")).unwrap(),
        );
        headers.insert(
            "link",
            HeaderValue::from_str(&format!("</{REAL}>")).unwrap(),
        );
        let reason = ReasonPhrase::try_from(format!("Echo {REAL}")).unwrap();
        response.extensions_mut().insert(reason);
        let (mut parts, ()) = response.into_parts();
        scrub_head(&scrubber(), &mut parts);
        let echoed: Vec<&[u8]> = parts
            .headers
            .get_all("x-echo")
            .iter()
            .map(HeaderValue::as_bytes)
            .collect();
        let expected = format!("Bearer {SURROGATE}");
        assert_eq!(echoed, [b"plain".as_slice(), expected.as_bytes()]);
        assert_eq!(parts.headers["link"], format!("</{SURROGATE}>").as_str());
        let reason = parts.extensions.get::<ReasonPhrase>().expect("reason kept");
        assert_eq!(reason.as_bytes(), format!("Echo {SURROGATE}").as_bytes());
    }

    #[test]
    fn a_clean_head_is_left_as_it_is() {
        let mut response = http::Response::new(());
        response
            .headers_mut()
            .insert("x-clean", HeaderValue::from_static("nothing here"));
        response
            .extensions_mut()
            .insert(ReasonPhrase::from_static(b"Fine"));
        let (mut parts, ()) = response.into_parts();
        scrub_head(&scrubber(), &mut parts);
        assert_eq!(parts.headers["x-clean"], "nothing here");
        let reason = parts.extensions.get::<ReasonPhrase>().expect("reason kept");
        assert_eq!(reason.as_bytes(), b"Fine");
    }

    #[test]
    fn unfit_values_are_removed_and_the_rest_kept_in_order() {
        let mut headers = HeaderMap::new();
        for (name, value) in [("a", "1"), ("b", "2"), ("a", "3"), ("c", "4"), ("a", "5")] {
            headers.append(name, HeaderValue::from_static(value));
        }
        // values_mut order: a=1, a=3, a=5, b=2, c=4
        remove_values(&mut headers, &[1, 3]);
        let a: Vec<&str> = headers
            .get_all("a")
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect();
        assert_eq!(a, ["1", "5"]);
        assert!(!headers.contains_key("b"));
        assert_eq!(headers["c"], "4");
    }

    #[test]
    fn trailers_are_scrubbed_every_occurrence_and_every_value() {
        let mut trailers = HeaderMap::new();
        trailers.append("grpc-message", HeaderValue::from_str(REAL).unwrap());
        let twice = format!("{REAL},{REAL}");
        trailers.append("grpc-message", HeaderValue::from_str(&twice).unwrap());
        trailers.insert("grpc-status", HeaderValue::from_static("0"));
        let lower = format!("k={LOWER_REAL}");
        trailers.insert("x-lower", HeaderValue::from_str(&lower).unwrap());
        scrub_headers(&scrubber(), &mut trailers);
        let messages: Vec<String> = trailers
            .get_all("grpc-message")
            .iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            messages,
            [SURROGATE.to_owned(), format!("{SURROGATE},{SURROGATE}")]
        );
        assert_eq!(trailers["grpc-status"], "0");
        let lower = trailers["x-lower"].to_str().unwrap();
        assert!(
            lower.starts_with("k=") && !lower.contains(LOWER_REAL),
            "{lower}"
        );
        assert_eq!(trailers.len(), 4, "no value lost");
    }
}
