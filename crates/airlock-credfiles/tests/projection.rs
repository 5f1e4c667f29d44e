//! Projection of every store: no real token survives, the shape is kept, each token
//! becomes a secret scoped to its hosts, and files that cannot be projected are refused.

use airlock_credfiles::{ProjectError, Store, project};
use airlock_policy::model::{HostPattern, SecretSource};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use proptest::prelude::*;

const ACCESS: &str = "sk-ant-oat01-REALaccessCANARY0123456789abcdefghijklmnopqrstuvwxyzABCDEFG";
const REFRESH: &str = "sk-ant-ort01-REALrefreshCANARY0123456789abcdefghijklmnopqrstuvwxyzABCDE";

fn jwt(sub: &str) -> String {
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"RS256","typ":"JWT"}"#);
    let payload = URL_SAFE_NO_PAD.encode(format!(r#"{{"sub":"{sub}","exp":1900000000}}"#));
    format!("{header}.{payload}.REALsignatureCANARY0123456789abcdefghij")
}

/// The projected text, after checking that none of `reals` is left and that the file
/// keeps its length (surrogates are format-preserving).
fn projected(store: Store, text: &str, reals: &[&str]) -> (String, airlock_credfiles::Projection) {
    let projection = project(store, text.as_bytes()).expect("projected");
    let out = String::from_utf8(projection.bytes.clone()).expect("utf-8");
    for real in reals {
        assert!(!out.contains(real), "{store}: a real value survived");
    }
    assert_eq!(projection.secrets.len(), projection.tokens.len());
    for (secret, token) in projection.secrets.iter().zip(&projection.tokens) {
        assert_eq!(secret.name, token.secret);
        assert!(secret.name.starts_with("file:"));
        assert_eq!(secret.source, SecretSource::Value(token.real.clone()));
        assert_eq!(secret.surrogate.as_deref(), Some(token.surrogate.as_str()));
        assert!(!secret.hosts.is_empty());
    }
    (out, projection)
}

fn hosts(projection: &airlock_credfiles::Projection, name: &str) -> Vec<String> {
    let secret = projection
        .secrets
        .iter()
        .find(|secret| secret.name == name)
        .unwrap_or_else(|| panic!("no secret {name}: {:?}", projection.secrets));
    secret.hosts.iter().map(HostPattern::to_string).collect()
}

#[test]
fn claude_keeps_its_shape_and_scopes_each_token() {
    let text = format!(
        "{{\n  \"claudeAiOauth\": {{\n    \"accessToken\": \"{ACCESS}\",\n    \"refreshToken\": \"{REFRESH}\",\n    \"expiresAt\": 4102444800000,\n    \"scopes\": [\"user:inference\", \"user:profile\"],\n    \"subscriptionType\": \"max\"\n  }}\n}}\n"
    );
    let (out, projection) = projected(Store::Claude, &text, &[ACCESS, REFRESH]);
    assert_eq!(out.len(), text.len());
    let value: serde_json::Value = serde_json::from_str(&out).expect("json");
    let access = value["claudeAiOauth"]["accessToken"]
        .as_str()
        .expect("access");
    assert!(access.starts_with("sk-ant-") && access.len() == ACCESS.len());
    assert_eq!(value["claudeAiOauth"]["expiresAt"], 4102444800000u64);
    assert_eq!(
        hosts(&projection, "file:claude:accessToken"),
        ["api.anthropic.com"]
    );
    let refresh = &projection.secrets[1];
    assert_eq!(refresh.name, "file:claude:refreshToken");
    assert!(refresh.body);
    assert_eq!(refresh.headers.as_deref(), Some(&[][..]));
    assert!(
        hosts(&projection, "file:claude:refreshToken").contains(&"platform.claude.com".to_owned())
    );
    let access_secret = &projection.secrets[0];
    assert_eq!(
        access_secret.headers.as_deref(),
        Some(&["authorization".to_owned()][..])
    );
    assert!(!access_secret.body);
}

#[test]
fn codex_jwts_keep_their_claims() {
    let id = jwt("id");
    let access = jwt("access");
    let text = format!(
        r#"{{"auth_mode":"chatgpt","OPENAI_API_KEY":null,"tokens":{{"id_token":"{id}","access_token":"{access}","refresh_token":"rt_REALrefreshCANARY0123456789","account_id":"acc-1"}},"last_refresh":"2026-11-27T00:00:00Z"}}"#
    );
    let (out, projection) = projected(
        Store::Codex,
        &text,
        &[&id, &access, "rt_REALrefreshCANARY0123456789"],
    );
    let value: serde_json::Value = serde_json::from_str(&out).expect("json");
    let shown = value["tokens"]["access_token"].as_str().expect("access");
    assert_eq!(
        shown.rsplit_once('.').map(|(h, _)| h),
        access.rsplit_once('.').map(|(h, _)| h)
    );
    assert_eq!(value["tokens"]["account_id"], "acc-1");
    assert_eq!(
        hosts(&projection, "file:codex:access_token"),
        ["chatgpt.com", "api.openai.com"]
    );
    assert_eq!(
        hosts(&projection, "file:codex:refresh_token"),
        ["auth.openai.com"]
    );
}

/// rereview35 G7: Codex's `id_token` is shown as a surrogate (claims kept) but no secret
/// is made of it, with or without a refresh token: it is never swapped to any host.
#[test]
fn codex_id_tokens_are_inert_surrogates() {
    let id = jwt("id");
    let access = jwt("access");
    for refresh in [",\"refresh_token\":\"rt_REALrefreshCANARY0123456789\"", ""] {
        let text =
            format!(r#"{{"tokens":{{"id_token":"{id}","access_token":"{access}"{refresh}}}}}"#);
        let (out, projection) = projected(Store::Codex, &text, &[&id, &access]);
        let value: serde_json::Value = serde_json::from_str(&out).expect("json");
        let shown = value["tokens"]["id_token"].as_str().expect("id");
        assert_ne!(shown, id);
        assert_eq!(
            shown.rsplit_once('.').map(|(h, _)| h),
            id.rsplit_once('.').map(|(h, _)| h)
        );
        assert!(
            !projection
                .secrets
                .iter()
                .any(|secret| secret.name.contains("id_token")),
            "{:?}",
            projection.secrets
        );
    }
}

#[test]
fn gh_tokens_go_to_their_host_and_its_api() {
    let token = "gho_REALghCANARY0123456789abcdefghijkl";
    let text = format!(
        "github.com:\n    users:\n        octocat:\n            oauth_token: {token}\n    git_protocol: https\n    oauth_token: {token}\n    user: octocat\nghe.example.com:\n    oauth_token: gho_REALotherCANARY0123456789abcdefgh\n    user: me\n"
    );
    let (out, projection) = projected(Store::Gh, &text, &[token]);
    assert_eq!(out.lines().count(), text.lines().count());
    assert_eq!(
        projection.secrets.len(),
        2,
        "the same token twice is one secret"
    );
    assert_eq!(
        hosts(&projection, "file:gh:oauth_token:github.com"),
        ["api.github.com", "github.com"]
    );
    assert_eq!(
        hosts(&projection, "file:gh:oauth_token:ghe.example.com"),
        ["api.ghe.example.com", "ghe.example.com"]
    );
}

#[test]
fn git_credentials_per_host_percent_encoding_kept() {
    let text = "https://alice:ghp_REALgitCANARY0123456789abcd@github.com\nhttps://bob:pa%2Fss%40REALword99@git.example.com:8443/repo\n";
    let (out, projection) = projected(
        Store::Git,
        text,
        &[
            "ghp_REALgitCANARY0123456789abcd",
            "pa%2Fss%40REALword99",
            "REALword99",
        ],
    );
    let second = out.lines().nth(1).expect("line");
    assert!(second.starts_with("https://bob:"), "{second}");
    assert!(second.contains("%2F") && second.contains("%40"), "{second}");
    assert!(second.ends_with("@git.example.com:8443/repo"));
    assert_eq!(
        hosts(&projection, "file:git:password:git.example.com"),
        ["git.example.com"]
    );
    assert_eq!(projection.tokens[1].real, "pa/ss@REALword99");
}

#[test]
fn docker_auth_keeps_the_user_and_hides_the_password() {
    let auth = STANDARD.encode("me:dckr_pat_REALdockerCANARY0123456789");
    let text = format!(
        r#"{{"auths":{{"https://index.docker.io/v1/":{{"auth":"{auth}"}},"ghcr.io":{{"auth":"{}","identitytoken":"REALidentityCANARY0123456789"}}}},"credsStore":""}}"#,
        STANDARD.encode("bob:ghp_REALghcrCANARY0123456789abcd")
    );
    let (out, projection) = projected(
        Store::Docker,
        &text,
        &[
            &auth,
            "dckr_pat_REALdockerCANARY0123456789",
            "REALidentityCANARY0123456789",
        ],
    );
    let value: serde_json::Value = serde_json::from_str(&out).expect("json");
    let shown = value["auths"]["https://index.docker.io/v1/"]["auth"]
        .as_str()
        .expect("auth");
    let decoded = String::from_utf8(STANDARD.decode(shown).expect("base64")).expect("utf-8");
    assert!(
        decoded.starts_with("me:")
            && decoded.len() == "me:dckr_pat_REALdockerCANARY0123456789".len()
    );
    assert!(
        hosts(&projection, "file:docker:auth:index.docker.io")
            .contains(&"registry-1.docker.io".to_owned())
    );
    assert!(
        !projection
            .secrets
            .iter()
            .any(|secret| secret.name.contains("identitytoken")),
        "an identity token is never swapped back"
    );
}

#[test]
fn npm_pypi_netrc() {
    let npm = "registry=https://registry.npmjs.org/\n//registry.npmjs.org/:_authToken=npm_REALnpmCANARY0123456789abcdefgh\n//npm.example.com/x/:_authToken=${NPM_TOKEN}\n";
    let (_, projection) = projected(Store::Npm, npm, &["npm_REALnpmCANARY0123456789abcdefgh"]);
    assert_eq!(
        hosts(&projection, "file:npm:_authToken:registry.npmjs.org"),
        ["registry.npmjs.org"]
    );
    assert_eq!(projection.secrets.len(), 1);

    let pypi = "[distutils]\nindex-servers =\n    pypi\n    private\n\n[pypi]\nusername = __token__\npassword = pypi-REALpypiCANARY0123456789\n\n[private]\nrepository = https://pkgs.example.com/simple/\nusername = me\npassword = REALprivateCANARY99\n";
    let (_, projection) = projected(
        Store::Pypi,
        pypi,
        &["pypi-REALpypiCANARY0123456789", "REALprivateCANARY99"],
    );
    assert_eq!(
        hosts(&projection, "file:pypi:password:pypi"),
        ["upload.pypi.org"]
    );
    assert_eq!(
        hosts(&projection, "file:pypi:password:private"),
        ["pkgs.example.com"]
    );

    let netrc = "machine api.example.com\n  login me\n  password REALnetrcCANARY0123\nmachine other.example.com login you password REALotherNETRC456\nmacdef init\ncd /\n\n";
    let (out, projection) = projected(
        Store::Netrc,
        netrc,
        &["REALnetrcCANARY0123", "REALotherNETRC456"],
    );
    assert!(out.contains("macdef init\ncd /\n"));
    assert_eq!(
        hosts(&projection, "file:netrc:password:other.example.com"),
        ["other.example.com"]
    );
}

#[test]
fn files_that_cannot_be_projected_are_refused() {
    let cases: &[(Store, &str)] = &[
        (Store::Claude, "{not json"),
        (
            Store::Claude,
            r#"{"claudeAiOauth":{"accessToken":"short"}}"#,
        ),
        (
            Store::Claude,
            r#"{"other":{"clientSecret":"REALsecretCANARY0123456"}}"#,
        ),
        (
            Store::Codex,
            r#"{"tokens":{"access_token":"abc\/defREALescapedCANARY"}}"#,
        ),
        (Store::Npm, "_auth=bWU6UkVBTHBhc3N3b3JkQ0FOQVJZ\n"),
        (
            Store::Pypi,
            "[mine]\nusername = me\npassword = REALpasswordCANARY\n",
        ),
        (
            Store::Netrc,
            "default login me password REALdefaultCANARY\n",
        ),
        (Store::Gh, "github.com: [unclosed\n"),
        (
            Store::Docker,
            r#"{"auths":{"x.io":{"auth":"not base64!"}}}"#,
        ),
        (Store::Git, "https://me:\u{0}@\n"),
    ];
    for (store, text) in cases {
        let result = project(*store, text.as_bytes());
        assert!(result.is_err(), "{store}: {text}");
        let message = result.expect_err("error").to_string();
        assert!(!message.contains("REAL"), "{message}");
    }
    assert!(matches!(
        project(Store::Claude, b"\xff"),
        Err(ProjectError::Parse(_))
    ));
}

#[test]
fn files_without_tokens_are_shown_as_they_are() {
    for store in Store::ALL {
        let projection = project(store, b"").expect("empty");
        assert!(projection.bytes.is_empty() && projection.secrets.is_empty());
    }
    let text = b"{\"auths\":{},\"credsStore\":\"desktop\"}";
    assert_eq!(project(Store::Docker, text).expect("docker").bytes, text);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever the tokens, no real one survives and every line keeps its length.
    #[test]
    fn no_real_token_survives(
        access in "[A-Za-z0-9_-]{20,80}",
        refresh in "[A-Za-z0-9_-]{20,80}",
        password in "[A-Za-z0-9]{8,40}",
    ) {
        prop_assume!(access != refresh && !access.contains(&refresh) && !refresh.contains(&access));
        let claude = format!(
            "{{\"claudeAiOauth\":{{\"accessToken\":\"REAL{access}\",\"refreshToken\":\"REAL{refresh}\",\"expiresAt\":1}}}}"
        );
        let projection = project(Store::Claude, claude.as_bytes()).expect("claude");
        let out = String::from_utf8(projection.bytes).expect("utf-8");
        let (real_access, real_refresh) = (format!("REAL{access}"), format!("REAL{refresh}"));
        prop_assert!(!out.contains(&real_access));
        prop_assert!(!out.contains(&real_refresh));
        prop_assert_eq!(out.len(), claude.len());
        let netrc = format!("machine h.example.com login me password P{password}\n");
        let projection = project(Store::Netrc, netrc.as_bytes()).expect("netrc");
        let out = String::from_utf8(projection.bytes).expect("utf-8");
        let real_password = format!("P{password}");
        prop_assert!(!out.contains(&real_password));
        prop_assert_eq!(out.len(), netrc.len());
    }
}

/// Review 35, F7: a real value the parser does not place (commented out, the first of
/// two equal JSON keys, a line the parser skips) hides the file: never shown raw.
#[test]
fn raw_values_outside_the_parsed_fields_hide_the_file() {
    let docker_first = STANDARD.encode("me:ghp_FIRSTdupREALcanary0123456789abcd");
    let docker_second = STANDARD.encode("me:ghp_SECONDdupREALcanary0123456789ab");
    let cases: Vec<(Store, String)> = vec![
        (
            Store::Npm,
            "; //registry.npmjs.org/:_authToken=npm_COMMENTEDrealCANARY0123456789abc\n//registry.npmjs.org/:_authToken=npm_REALnpmCANARY0123456789abcdefgh\n".to_owned(),
        ),
        (Store::Npm, "# _authToken=hunter22\n".to_owned()),
        (
            Store::Pypi,
            "[pypi]\nusername = __token__\n# password = pypi-COMMENTEDrealCANARY0123456789\npassword = pypi-REALpypiCANARY0123456789\n".to_owned(),
        ),
        (
            Store::Pypi,
            "[pypi]\n;password = pypi-SEMICOLONrealCANARY0123456789\n".to_owned(),
        ),
        (Store::Pypi, "[pypi]\n    password = hunter22\n".to_owned()),
        (
            Store::Netrc,
            "# old: machine api.example.com password COMMENTEDnetrcREAL012345\nmachine api.example.com login me password REALnetrcCANARY0123\n".to_owned(),
        ),
        (
            Store::Netrc,
            "machine h.example.com login me password REALnetrcCANARY0123 # was password hunter2\n".to_owned(),
        ),
        (
            Store::Claude,
            format!(
                r#"{{"claudeAiOauth":{{"accessToken":"sk-ant-oat01-FIRSTdupREALcanary0123456789abcdef","accessToken":"{ACCESS}","refreshToken":"{REFRESH}"}}}}"#
            ),
        ),
        (
            Store::Claude,
            format!(
                r#"{{"claudeAiOauth":{{"accessToken":"{ACCESS}","acc\u0065ssToken":"{REFRESH}"}}}}"#
            ),
        ),
        (
            Store::Docker,
            format!(
                r#"{{"auths":{{"ghcr.io":{{"auth":"{docker_first}","auth":"{docker_second}"}}}}}}"#
            ),
        ),
        (
            Store::Gh,
            "# oauth_token: gho_OLDcommentedREALcanary0123456789\ngithub.com:\n    oauth_token: gho_REALghCANARY0123456789abcdefghijkl\n".to_owned(),
        ),
        (
            Store::Git,
            "https://ghp_USERNAMEisREALtoken0123456789abcd@github.com\n".to_owned(),
        ),
        (
            Store::Gh,
            "github.com:\n    # oauth_token: hunter22\n    oauth_token: gho_REALghCANARY0123456789abcdefghijkl\n".to_owned(),
        ),
        (
            Store::Codex,
            format!(
                r#"{{"tokens":{{"access_token":"{}","notes":"sk-proj-STRAYrealKEYcanary0123456789"}}}}"#,
                jwt("access")
            ),
        ),
    ];
    for (store, text) in &cases {
        let result = project(*store, text.as_bytes());
        assert!(result.is_err(), "{store} shown: {text}");
        let message = result.expect_err("error").to_string();
        assert!(
            !message.contains("REAL") && !message.contains("hunter"),
            "{message}"
        );
    }
}

/// Comments and lines without credentials keep a file projected.
#[test]
fn harmless_comments_are_kept() {
    let npm = "# work registry\n; see the wiki\n@scope:registry=https://npm.example.com/\n//registry.npmjs.org/:_authToken=npm_REALnpmCANARY0123456789abcdefgh\n# //npm.example.com/:_authToken=${NPM_TOKEN}\n";
    let (out, _) = projected(Store::Npm, npm, &["npm_REALnpmCANARY0123456789abcdefgh"]);
    assert!(out.starts_with("# work registry\n"));
    let netrc = "# my hosts\nmachine api.example.com login me password REALnetrcCANARY0123\n";
    projected(Store::Netrc, netrc, &["REALnetrcCANARY0123"]);
    let codex = format!(
        r#"{{"auth_mode":"chatgpt","tokens":{{"access_token":"{}","refresh_token":"rt_REALrefreshCANARY0123456789","account_id":"4f1e2d3c-5b6a-4789-9abc-def012345678"}},"last_refresh":"2026-11-27T00:00:00.123456Z"}}"#,
        jwt("access")
    );
    projected(Store::Codex, &codex, &["rt_REALrefreshCANARY0123456789"]);
}

/// fixB's request: an MCP refresh token and a Docker identity token are shown as a
/// surrogate but never swapped back (no refresh watch covers their answers).
#[test]
fn unwatched_refresh_tokens_are_inert_surrogates() {
    let mcp_refresh = "mcpREALrefreshCANARY0123456789abcdef";
    let mcp_access = "mcpREALaccessCANARY0123456789abcdefg";
    let text = format!(
        r#"{{"claudeAiOauth":{{"accessToken":"{ACCESS}","refreshToken":"{REFRESH}"}},"mcpOAuth":{{"srv|0123abcd":{{"serverUrl":"https://mcp.example.com/mcp","clientId":"AbCdEfGhIjKlMnOp0123456789","accessToken":"{mcp_access}","refreshToken":"{mcp_refresh}"}}}}}}"#
    );
    let (out, projection) = projected(
        Store::Claude,
        &text,
        &[ACCESS, REFRESH, mcp_refresh, mcp_access],
    );
    assert!(
        out.contains("AbCdEfGhIjKlMnOp0123456789"),
        "a client id is public"
    );
    let names: Vec<&str> = projection.secrets.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "file:claude:accessToken",
            "file:claude:refreshToken",
            "file:claude:mcpAccessToken:mcp.example.com"
        ]
    );
    let identity = "REALidentityCANARY0123456789";
    let docker = format!(r#"{{"auths":{{"ghcr.io":{{"identitytoken":"{identity}"}}}}}}"#);
    let (out, projection) = projected(Store::Docker, &docker, &[identity]);
    assert!(projection.secrets.is_empty());
    assert!(out.contains("identitytoken"));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A real value in a comment, or under the first of two equal JSON keys, is never
    /// shown: the file is hidden (review 35, F7).
    #[test]
    fn commented_and_duplicate_values_are_never_shown(
        secret in "[A-Za-z]{2}[0-9]{2}[A-Za-z0-9_-]{16,60}",
        style in 0usize..5,
    ) {
        let (store, text) = match style {
            0 => (Store::Npm, format!("; //r.example.com/:_authToken={secret}\n//r.example.com/:_authToken=npm_REALnpmCANARY0123456789abcdefgh\n")),
            1 => (Store::Npm, format!("# old token {secret}\n")),
            2 => (Store::Pypi, format!("[pypi]\n# password = {secret}\npassword = pypi-REALpypiCANARY0123456789\n")),
            3 => (Store::Netrc, format!("machine h.example.com login me password REALnetrcCANARY0123 # {secret}\n")),
            _ => (Store::Claude, format!(r#"{{"claudeAiOauth":{{"accessToken":"{secret}","accessToken":"{ACCESS}"}}}}"#)),
        };
        match project(store, text.as_bytes()) {
            Err(_) => {}
            Ok(projection) => {
                let out = String::from_utf8_lossy(&projection.bytes).into_owned();
                prop_assert!(!out.contains(&secret), "{}: shown: {}", store, out);
            }
        }
    }
}
