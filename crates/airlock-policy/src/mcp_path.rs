//! How an HTTP `mcp` rule's `path` glob covers a request path: the way the servers
//! behind it route, not byte for byte (docs/policy.md, "MCP tool rules").
//!
//! Common routers serve `/MCP`, `/mcp/`, `/mcp;jsessionid=1` and `/mcp/;x` as `/mcp`
//! (case-insensitive routing, an optional trailing slash, servlet path parameters). If
//! the rule matched the canonical path ([`crate::canonical::canonical_path`]: one
//! percent-decode, slashes merged, dot segments removed) exactly, each of those
//! spellings would carry `tools/call`s past the rule uninspected. So the rule's glob is
//! tried on several forms of the path ([`candidates`]) and matches if any matches:
//!
//! * the canonical path as it is (so nothing matched before stops matching);
//! * its *route form*: case-folded ([`fold`]), `;` parameters removed from every segment,
//!   empty and `.` segments dropped, `..` resolved, no trailing slash;
//! * the route form with a trailing slash (so `/mcp` is covered by a rule `/mcp/` or
//!   `/mcp/**`, as a server ignoring the trailing slash would route it);
//! * the same two without removing the parameters (a rule whose path names one).
//!
//! The glob is compiled as written and case-folded ([`glob_forms`]), both
//! case-insensitive. Matching more spellings only ever means inspecting more requests:
//! a body on a covered path that is not JSON-RPC is refused `body_uninspectable`, and an
//! Upgrade on it is refused, which is the fail-closed side.

/// `text` case-folded: every character upper-cased then lower-cased, so that the
/// spellings routers treat as one letter fold together (`M`/`m`, but also the long s
/// `ſ` with `s` and the Kelvin sign with `k`, which ASCII-only folding misses).
pub fn fold(text: &str) -> String {
    text.chars()
        .flat_map(char::to_uppercase)
        .flat_map(char::to_lowercase)
        .collect()
}

/// The glob texts compiled for an `mcp` rule's `path`: as written, then case-folded
/// when that differs (both are compiled case-insensitively; a folded form that does not
/// compile, such as a reversed range, is skipped by the caller).
pub fn glob_forms(glob: &str) -> Vec<String> {
    let folded = fold(glob);
    if folded == glob {
        vec![glob.to_owned()]
    } else {
        vec![glob.to_owned(), folded]
    }
}

/// The forms of the canonical request path `path` an `mcp` rule's glob is tried on (see
/// the module documentation), without repeats. A path that does not start with `/` (the
/// asterisk form `*`) is tried as it is only.
pub fn candidates(path: &str) -> Vec<String> {
    let mut out = vec![path.to_owned()];
    if !path.starts_with('/') {
        return out;
    }
    for strip_parameters in [true, false] {
        let form = route_form(path, strip_parameters);
        let slashed = format!("{form}/");
        for candidate in [form, slashed] {
            if candidate != "//" && !out.contains(&candidate) {
                out.push(candidate);
            }
        }
    }
    out
}

/// `path` case-folded, its segments without `;` parameters (when `strip_parameters`),
/// empty and `.` segments dropped, `..` resolved (never above the root), joined with
/// `/` from the root and without a trailing slash (`/` for the root itself).
pub fn route_form(path: &str, strip_parameters: bool) -> String {
    let folded = fold(path);
    let mut kept: Vec<&str> = Vec::new();
    for segment in folded.split('/') {
        let segment = match segment.split_once(';') {
            Some((before, _)) if strip_parameters => before,
            _ => segment,
        };
        match segment {
            "" | "." => {}
            ".." => {
                kept.pop();
            }
            other => kept.push(other),
        }
    }
    format!("/{}", kept.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::{Host, canonical_path};
    use crate::matcher::CompiledPolicy;
    use proptest::prelude::*;

    fn compiled(paths: &[&str]) -> CompiledPolicy {
        let mut text = String::from("version: 1\nmcp:\n");
        for path in paths {
            text.push_str(&format!(
                "  - host: mcp.test\n    path: \"{path}\"\n    tools: {{deny: [exec]}}\n"
            ));
        }
        let policy = crate::load::load_str("p.yaml", &text).expect("policy");
        CompiledPolicy::compile(&policy).expect("compiles")
    }

    /// The id of the rule covering the request target `target`, after canonicalisation.
    fn covering(policy: &CompiledPolicy, target: &str) -> Option<String> {
        let path = canonical_path(target).0.ok()?;
        let host = Host::Name("mcp.test".into());
        policy.mcp_rule(&host, &path).map(|rule| rule.id.clone())
    }

    #[test]
    fn the_route_form_drops_case_parameters_dots_and_the_trailing_slash() {
        assert_eq!(route_form("/MCP/", true), "/mcp");
        assert_eq!(route_form("/mcp;x=1/;y/./v1;z", true), "/mcp/v1");
        assert_eq!(route_form("/mcp;x=1", false), "/mcp;x=1");
        assert_eq!(route_form("/a/../..//mcp", true), "/mcp");
        assert_eq!(route_form("/", true), "/");
        assert_eq!(route_form("/\u{17f}se/\u{212a}", true), "/sse/k");
        assert_eq!(candidates("/"), ["/"]);
        assert_eq!(candidates("*"), ["*"]);
        assert_eq!(candidates("/Mcp/"), ["/Mcp/", "/mcp", "/mcp/"]);
    }

    #[test]
    fn every_spelling_a_router_serves_as_the_rule_path_is_covered() {
        let policy = compiled(&["/mcp"]);
        for target in [
            "/mcp",
            "/MCP",
            "/Mcp",
            "/mcp/",
            "/MCP/",
            "/mcp/.",
            "/mcp//",
            "/./mcp",
            "//mcp",
            "/mcp;x",
            "/mcp;jsessionid=1/",
            "/mcp/;x",
            "/;x/mcp",
            "/%6Dcp",
            "/%4dCP",
            "/mcp%3Bx",
            "/x/../mcp",
            "/mcp/./",
            "/mcp?x=1",
            "/mcp#f",
        ] {
            assert_eq!(
                covering(&policy, target).as_deref(),
                Some("mcp[0]"),
                "{target}"
            );
        }
        for target in ["/mcp/x", "/mcpx", "/mc", "/", "/other/mcp", "/mcp/../x"] {
            assert_eq!(covering(&policy, target), None, "{target}");
        }
    }

    #[test]
    fn rule_paths_with_slashes_globs_and_capitals_match_the_same_way() {
        let policy = compiled(&["/API/V1/", "/tools/*/mcp", "/sse/**"]);
        for (target, rule) in [
            ("/api/v1", "mcp[0]"),
            ("/Api/V1/", "mcp[0]"),
            ("/api;a/v1;b", "mcp[0]"),
            ("/TOOLS/x/MCP/", "mcp[1]"),
            ("/tools/x;p/mcp", "mcp[1]"),
            ("/sse", "mcp[2]"),
            ("/SSE/messages;x/", "mcp[2]"),
        ] {
            assert_eq!(covering(&policy, target).as_deref(), Some(rule), "{target}");
        }
        assert_eq!(covering(&policy, "/tools/x/y/mcp"), None);
    }

    #[test]
    fn an_unreadable_path_on_a_host_with_an_mcp_rule_is_refused_path_unsafe() {
        let text = "version: 1\nnetwork:\n  allow: [{host: mcp.test}, {host: other.test}]\n\
                    mcp:\n  - host: mcp.test\n    path: /mcp\n    tools: {deny: [exec]}\n";
        let policy =
            CompiledPolicy::compile(&crate::load::load_str("p.yaml", text).unwrap()).unwrap();
        let decide = |host: &str, target: &str| {
            let request =
                crate::CanonicalRequest::new("POST", Host::Name(host.into()), 443, target);
            policy.decide(&request)
        };
        for target in [
            "/x/..;/mcp",
            "/mcp%2F",
            "/a//../mcp",
            "/mcp%5C",
            "/x/%252e%252e/mcp",
        ] {
            let decision = decide("mcp.test", target);
            assert_eq!(decision.reason, Some(crate::Reason::PathUnsafe), "{target}");
            assert!(decide("other.test", target).is_allow(), "{target}");
        }
        assert!(decide("mcp.test", "/MCP;x").is_allow());
    }

    /// A spelling of `segments` a router would serve as the same path: letters in either
    /// case, characters percent-encoded, `;` parameters, doubled slashes, `.` and `x/..`
    /// segments, a trailing slash. `choices` drives every choice.
    fn spell(segments: &[String], choices: &[u8]) -> String {
        let mut choice = choices.iter().cycle().copied();
        let mut next = move || choice.next().unwrap_or(0);
        let mut out = String::new();
        for segment in segments {
            out.push('/');
            match next() % 5 {
                0 => out.push_str("./"),
                1 => out.push_str("zz/../"),
                2 => out.push('/'),
                _ => {}
            }
            for c in segment.chars() {
                match next() % 4 {
                    0 => out.push_str(&format!("%{:02X}", u32::from(c))),
                    1 => out.push_str(&format!("%{:02x}", u32::from(c))),
                    2 => out.push(c.to_ascii_uppercase()),
                    _ => out.push(c),
                }
            }
            if next() % 3 == 0 {
                out.push_str(";p=1");
            }
        }
        match next() % 4 {
            0 => out.push('/'),
            1 => out.push_str("/."),
            2 => out.push_str("/;q"),
            _ => {}
        }
        out
    }

    proptest! {
        /// Any spelling variant of a rule path is covered by the rule.
        #[test]
        fn any_spelling_of_the_rule_path_is_covered(
            segments in proptest::collection::vec("[a-z0-9_.-]{1,6}", 1..4),
            choices in proptest::collection::vec(any::<u8>(), 1..40),
        ) {
            prop_assume!(segments.iter().all(|s| s != "." && s != ".."));
            let rule_path = format!("/{}", segments.join("/"));
            let policy = compiled(&[&rule_path]);
            let target = spell(&segments, &choices);
            let covered = covering(&policy, &target);
            prop_assert_eq!(covered.as_deref(), Some("mcp[0]"), "{}", target);
            let beside = format!("{rule_path}x/y");
            prop_assert_eq!(covering(&policy, &beside), None);
        }

        /// The candidates always include the path itself and are all absolute and
        /// case-folded apart from it; the route form is stable.
        #[test]
        fn the_route_form_is_idempotent(path in "/[a-zA-Z0-9;/.=\u{17f}\u{212a}]{0,24}") {
            let once = route_form(&path, true);
            prop_assert_eq!(route_form(&once, true), once.clone());
            let all = candidates(&path);
            prop_assert_eq!(&all[0], &path);
            prop_assert!(all.iter().all(|c| c.starts_with('/')));
        }
    }
}
