//! A small reader of git's configuration files, for the filesystem confinement
//! (docs/security.md, "What the command can read and write"): which directory
//! `core.hooksPath` names and which files `include.path` / `includeIf.*.path` pull in (both
//! become write-protected paths when they lie in a writable directory), and whether a
//! configuration created during a run holds a key that makes git run a program (then it is
//! quarantined). Pure: the caller reads the files.
//!
//! The syntax is git's (`git help config`, "CONFIGURATION FILE"): `[section]`,
//! `[section "subsection"]`, the old `[section.subsection]`, `name = value` or a bare `name`,
//! quoted values with `\"`, `\\`, `\n`, `\t`, `\b` escapes, `#` and `;` comments, and a
//! trailing `\` continuing a value on the next line. Section and key names are compared
//! without regard to case; a subsection keeps its case. Anything this reader cannot parse
//! is an error, and the callers treat an error as the dangerous answer.

use std::path::{Path, PathBuf};

/// Keys of a new repository's configuration that run nothing (what `git init`, `git clone`,
/// `git remote add`, `git branch -u` and `git config user.*` write). Any other key in a
/// configuration created during a run sends it to quarantine.
const INERT_KEYS: &[&str] = &[
    "core.repositoryformatversion",
    "core.filemode",
    "core.bare",
    "core.logallrefupdates",
    "core.ignorecase",
    "core.precomposeunicode",
    "core.symlinks",
    "core.autocrlf",
    "core.eol",
    "core.safecrlf",
    "core.quotepath",
    "core.abbrev",
    "core.compression",
    "core.sharedrepository",
    "extensions.objectformat",
    "extensions.refstorage",
    "init.defaultbranch",
    "user.name",
    "user.email",
    "author.name",
    "author.email",
    "committer.name",
    "committer.email",
    "commit.gpgsign",
    "tag.gpgsign",
    "pull.rebase",
    "pull.ff",
    "push.default",
    "push.autosetupremote",
    "fetch.prune",
    "gc.auto",
    "advice.detachedhead",
    "color.ui",
];

/// Keys of a remote (`remote.NAME.KEY`) or a branch (`branch.NAME.KEY`) that run nothing.
const INERT_SUBSECTION_KEYS: &[(&str, &str)] = &[
    ("remote", "url"),
    ("remote", "pushurl"),
    ("remote", "fetch"),
    ("remote", "push"),
    ("remote", "tagopt"),
    ("remote", "prune"),
    ("remote", "promisor"),
    ("remote", "partialclonefilter"),
    ("branch", "remote"),
    ("branch", "merge"),
    ("branch", "rebase"),
    ("branch", "pushremote"),
    ("branch", "description"),
];

/// One `name = value` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigEntry {
    /// The section, lower-cased (`core`, `includeif`).
    pub section: String,
    /// The subsection as written (`gitdir:~/work/`), if any.
    pub subsection: Option<String>,
    /// The key, lower-cased (`hookspath`).
    pub key: String,
    /// The value; `None` for a bare `name` (boolean true).
    pub value: Option<String>,
}

impl ConfigEntry {
    /// `section.key` or `section.subsection.key`, the section and key lower-cased.
    pub fn name(&self) -> String {
        match &self.subsection {
            Some(sub) => format!("{}.{sub}.{}", self.section, self.key),
            None => format!("{}.{}", self.section, self.key),
        }
    }

    /// Whether this key runs nothing (see [`INERT_KEYS`]): `false` for everything git
    /// might execute, and for every key this list does not know.
    pub fn is_inert(&self) -> bool {
        match &self.subsection {
            None => INERT_KEYS.contains(&format!("{}.{}", self.section, self.key).as_str()),
            Some(_) => INERT_SUBSECTION_KEYS
                .iter()
                .any(|(section, key)| self.section == *section && self.key == *key),
        }
    }
}

/// Parses one configuration file; `Err` names the first line it cannot read.
pub fn parse(text: &str) -> Result<Vec<ConfigEntry>, String> {
    let mut entries = Vec::new();
    let mut section: Option<(String, Option<String>)> = None;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.lines().enumerate();
    while let Some((index, line)) = lines.next() {
        let mut rest = line.trim_start();
        if rest.starts_with('[') {
            let (header, after) = parse_header(rest).map_err(|e| at(index, &e))?;
            section = Some(header);
            rest = after.trim_start();
        }
        if rest.is_empty() || rest.starts_with('#') || rest.starts_with(';') {
            continue;
        }
        let Some((name, sub)) = section.clone() else {
            return Err(at(index, "a key outside any section"));
        };
        let key_end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .unwrap_or(rest.len());
        let key = &rest[..key_end];
        if key.is_empty() || !key.starts_with(|c: char| c.is_ascii_alphabetic()) {
            return Err(at(index, "not a key"));
        }
        let after_key = rest[key_end..].trim_start();
        let value = if let Some(raw) = after_key.strip_prefix('=') {
            let mut raw = raw.to_owned();
            // A value continued on the next lines (an odd number of trailing backslashes).
            while ends_in_escape(&raw) {
                raw.pop();
                match lines.next() {
                    Some((_, next)) => raw.push_str(next),
                    None => return Err(at(index, "a value continued past the end")),
                }
            }
            Some(parse_value(&raw).map_err(|e| at(index, &e))?)
        } else if after_key.is_empty() || after_key.starts_with(['#', ';']) {
            None
        } else {
            return Err(at(index, "a key followed by something other than `=`"));
        };
        entries.push(ConfigEntry {
            section: name,
            subsection: sub,
            key: key.to_ascii_lowercase(),
            value,
        });
    }
    Ok(entries)
}

fn at(index: usize, why: &str) -> String {
    format!("line {}: {why}", index + 1)
}

/// Whether `raw` ends in an unescaped backslash outside a comment: git continues such a
/// value on the next line, but a backslash inside a `;` or `#` comment is only text.
fn ends_in_escape(raw: &str) -> bool {
    let (mut quoted, mut escaped) = (false, false);
    for byte in raw.bytes() {
        if escaped {
            escaped = false;
            continue;
        }
        match byte {
            b'\\' => escaped = true,
            b'"' => quoted = !quoted,
            b';' | b'#' if !quoted => return false,
            _ => {}
        }
    }
    escaped
}

/// `[section]`, `[section "sub"]` or `[section.sub]`; returns the header and what follows.
fn parse_header(line: &str) -> Result<((String, Option<String>), &str), String> {
    let inner = &line[1..];
    let name_end = inner
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '.'))
        .ok_or("an unterminated section header")?;
    let name = &inner[..name_end];
    let after = &inner[name_end..];
    if let Some(rest) = after.strip_prefix(']') {
        return Ok(match name.split_once('.') {
            Some((section, sub)) => ((section.to_ascii_lowercase(), Some(sub.to_owned())), rest),
            None => ((name.to_ascii_lowercase(), None), rest),
        });
    }
    let quoted = after
        .trim_start()
        .strip_prefix('"')
        .ok_or("a section header that is neither `[name]` nor `[name \"sub\"]`")?;
    let mut sub = String::new();
    let mut chars = quoted.char_indices();
    while let Some((position, c)) = chars.next() {
        match c {
            '\\' => sub.push(chars.next().ok_or("an unterminated subsection")?.1),
            '"' => {
                let rest = quoted[position + 1..]
                    .strip_prefix(']')
                    .ok_or("a subsection not followed by `]`")?;
                return Ok(((name.to_ascii_lowercase(), Some(sub)), rest));
            }
            _ => sub.push(c),
        }
    }
    Err("an unterminated subsection".into())
}

/// A value after `=`: quotes removed, escapes resolved, a trailing comment dropped, the
/// surrounding white space trimmed (white space inside quotes kept).
fn parse_value(raw: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut quoted = false;
    // Unquoted white space is kept only when something follows it.
    let mut pending_space = String::new();
    let mut chars = raw.trim_start().chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                out.push_str(&std::mem::take(&mut pending_space));
                quoted = !quoted;
            }
            '\\' => {
                out.push_str(&std::mem::take(&mut pending_space));
                match chars.next() {
                    Some('n') => out.push('\n'),
                    Some('t') => out.push('\t'),
                    Some('b') => {
                        out.pop();
                    }
                    Some(c @ ('"' | '\\')) => out.push(c),
                    _ => return Err("an unknown escape in a value".into()),
                }
            }
            '#' | ';' if !quoted => break,
            c if c.is_whitespace() && !quoted => pending_space.push(c),
            c => {
                out.push_str(&std::mem::take(&mut pending_space));
                out.push(c);
            }
        }
    }
    if quoted {
        return Err("an unterminated quoted value".into());
    }
    Ok(out)
}

/// The last `core.hooksPath` value, if any.
pub fn hooks_path(entries: &[ConfigEntry]) -> Option<&str> {
    entries
        .iter()
        .rev()
        .find(|e| e.section == "core" && e.subsection.is_none() && e.key == "hookspath")
        .and_then(|e| e.value.as_deref())
}

/// For a file [`parse`] rejects (git rejects most of them too, but a reader must not miss
/// what git might accept): every value of a line whose key is `hooksPath` (first list) or
/// `path` (second list), whatever the section, read leniently.
pub fn scan_paths(text: &str) -> (Vec<String>, Vec<String>) {
    let (mut hooks, mut includes) = (Vec::new(), Vec::new());
    for line in text.lines() {
        let Some((key, raw)) = line.split_once('=') else {
            continue;
        };
        let key = key
            .trim_end()
            .rsplit(|c: char| c.is_whitespace() || c == ']')
            .next();
        let key = key.unwrap_or_default().trim().to_ascii_lowercase();
        let value = parse_value(raw).unwrap_or_else(|_| raw.trim().to_owned());
        match key.as_str() {
            "hookspath" => hooks.push(value),
            "path" => includes.push(value),
            _ => {}
        }
    }
    (hooks, includes)
}

/// Every `include.path` and `includeIf.CONDITION.path` value (every condition counts:
/// whether it holds is not worked out here).
pub fn include_paths(entries: &[ConfigEntry]) -> Vec<&str> {
    entries
        .iter()
        .filter(|e| {
            e.key == "path"
                && ((e.section == "include" && e.subsection.is_none())
                    || (e.section == "includeif" && e.subsection.is_some()))
        })
        .filter_map(|e| e.value.as_deref())
        .collect()
}

/// The entries that may make git run a program (every key not known to be inert).
pub fn active_keys(entries: &[ConfigEntry]) -> Vec<String> {
    entries
        .iter()
        .filter(|e| !e.is_inert())
        .map(ConfigEntry::name)
        .collect()
}

/// A path as git reads it from a configuration: `~/` against `home`, a relative path
/// against `base` (the configuration file's directory for an include, the work tree for
/// `core.hooksPath`), `.` and `..` removed. `None` for `~user/` forms and empty values.
pub fn resolve_path(value: &str, base: &Path, home: &Path) -> Option<PathBuf> {
    let joined = if value.is_empty() || (value.starts_with('~') && !value.starts_with("~/")) {
        return None;
    } else if let Some(rest) = value.strip_prefix("~/") {
        home.join(rest)
    } else {
        base.join(value)
    };
    Some(crate::filesystem::normalise(&joined))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_keys_and_values_are_read_as_git_reads_them() {
        let text = "[core]\n\trepositoryformatversion = 0\n\tbare\n\
                    [Core]  HooksPath = \" .husky/_ \" # husky\n\
                    [includeIf \"gitdir:~/Work/\"]\n path = ../.evil ; comment\n\
                    [include]\n\tpath = a\\\\b\\\n c\n\
                    [remote.origin]\n url = \"x;y\"\n";
        let entries = parse(text).expect("parses");
        assert_eq!(hooks_path(&entries), Some(" .husky/_ "));
        assert_eq!(include_paths(&entries), vec!["../.evil", "a\\b c"]);
        assert_eq!(entries[1].value, None);
        assert_eq!(entries[3].subsection.as_deref(), Some("gitdir:~/Work/"));
        assert_eq!(entries[5].name(), "remote.origin.url");
        assert_eq!(entries[5].value.as_deref(), Some("x;y"));
    }

    #[test]
    fn keys_that_run_programs_are_active_and_a_fresh_repository_is_inert() {
        let fresh = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\
                     \tlogallrefupdates = true\n[remote \"origin\"]\n\turl = https://x/y.git\n\
                     \tfetch = +refs/heads/*:refs/remotes/origin/*\n[branch \"main\"]\n\
                     \tremote = origin\n\tmerge = refs/heads/main\n[user]\n\tname = A\n";
        assert!(active_keys(&parse(fresh).expect("fresh")).is_empty());
        for key in [
            "[core]\nfsmonitor = ./x",
            "[core]\nhooksPath = h",
            "[core]\nsshCommand = x",
            "[core]\npager = x",
            "[alias]\nst = !x",
            "[filter \"a\"]\nclean = x",
            "[diff \"a\"]\ntextconv = x",
            "[credential]\nhelper = x",
            "[remote \"o\"]\nuploadpack = x",
            "[include]\npath = x",
            "[extensions]\nworktreeConfig = true",
            "[unknown]\nkey = x",
        ] {
            let entries = parse(key).expect(key);
            assert_eq!(active_keys(&entries).len(), 1, "{key}");
        }
    }

    #[test]
    fn what_cannot_be_read_is_an_error() {
        for text in [
            "key = outside",
            "[core\nx = 1",
            "[core \"sub]\n",
            "[core]\nx = \"open",
            "[core]\nx y",
            "[core]\nx = a\\q",
        ] {
            assert!(parse(text).is_err(), "{text}");
        }
    }

    #[test]
    fn a_file_the_reader_rejects_is_scanned_for_paths() {
        let text = "CANARY\n[core] hooksPath = .hooks\n\tpath = \"../x\" # c\n";
        assert!(parse(text).is_err());
        let (hooks, includes) = scan_paths(text);
        assert_eq!(hooks, vec![".hooks"]);
        assert_eq!(includes, vec!["../x"]);
    }

    #[test]
    fn paths_resolve_against_home_and_base() {
        let home = Path::new("/home/u");
        let base = Path::new("/home/u/proj/.git");
        assert_eq!(
            resolve_path("../.evil", base, home),
            Some(PathBuf::from("/home/u/proj/.evil"))
        );
        assert_eq!(
            resolve_path("~/x", base, home),
            Some(PathBuf::from("/home/u/x"))
        );
        assert_eq!(
            resolve_path("/abs", base, home),
            Some(PathBuf::from("/abs"))
        );
        assert_eq!(resolve_path("~other/x", base, home), None);
        assert_eq!(resolve_path("", base, home), None);
    }

    #[test]
    fn a_backslash_inside_a_comment_continues_nothing() {
        let text = "[core]\n\trepositoryformatversion = 0 ;\\\n\tfsmonitor = \"echo x\"\n";
        let entries = parse(text).expect("parsed");
        assert!(
            entries.iter().any(|e| e.key == "fsmonitor"),
            "git reads the next line as a key: {entries:?}"
        );
        assert!(!active_keys(&entries).is_empty());
    }
}
