//! One network rule in matching form ([`CompiledRule`]): its ports, methods, programs,
//! path globs and regexes compiled once, and the per-decision view of a request path.

use globset::{Candidate, GlobBuilder, GlobSet, GlobSetBuilder};
use regex::{RegexSet, RegexSetBuilder};

use super::CompileError;
use crate::canonical::{CanonicalRequest, PathUnsafe};
use crate::mcp_path;
use crate::model::Rule;
use crate::programs::{self, Caller};

/// Largest compiled program of one rule's regex set, in bytes.
pub(super) const REGEX_SIZE_LIMIT: usize = 4 << 20;
/// Largest lazy DFA cache of one rule's regex set, in bytes.
pub(super) const REGEX_DFA_SIZE_LIMIT: usize = 2 << 20;

/// One network rule in matching form.
#[derive(Clone, Debug)]
pub(super) struct CompiledRule {
    /// Ports it applies to; `None` = every port (deny rules without `ports`).
    ports: Option<Vec<u16>>,
    /// Methods it applies to; `None` = every method.
    methods: Option<Vec<String>>,
    /// Path globs, if the rule has any.
    globs: Option<GlobSet>,
    /// Anchored path regexes, if the rule has any.
    regexes: Option<RegexSet>,
    /// The programs it is about (`process`); `None` = every program.
    pub(super) process: Option<Vec<String>>,
}

impl CompiledRule {
    /// Compile `rule`; `every_port_by_default` is set for deny rules.
    pub(super) fn compile(rule: &Rule, every_port_by_default: bool) -> Result<Self, CompileError> {
        let ports = match (&rule.ports, every_port_by_default) {
            (Some(ports), _) => Some(ports.clone()),
            (None, true) => None,
            (None, false) => Some(rule.effective_ports().to_vec()),
        };
        let globs = if rule.paths.is_empty() {
            None
        } else {
            Some(compile_globs(&rule.id, &rule.paths)?)
        };
        let regexes = if rule.path_regex.is_empty() {
            None
        } else {
            let anchored = rule.path_regex.iter().map(|re| format!("^(?:{re})$"));
            let set = RegexSetBuilder::new(anchored)
                .size_limit(REGEX_SIZE_LIMIT)
                .dfa_size_limit(REGEX_DFA_SIZE_LIMIT)
                .build()
                .map_err(|err| CompileError::Regex {
                    rule: rule.id.clone(),
                    message: err.to_string(),
                })?;
            Some(set)
        };
        Ok(CompiledRule {
            ports,
            methods: rule.methods.clone(),
            globs,
            regexes,
            process: rule.process.clone(),
        })
    }

    /// Whether the rule applies to `port`.
    pub(super) fn applies_to_port(&self, port: u16) -> bool {
        self.ports
            .as_ref()
            .is_none_or(|ports| ports.contains(&port))
    }

    /// Whether the rule applies to the program behind the connection (`deny`: the rule
    /// is a deny rule, which unknown programs fail closed to).
    pub(super) fn applies_to_caller(&self, caller: Caller<'_>, deny: bool) -> bool {
        programs::applies(self.process.as_deref(), caller, deny)
    }

    /// Whether the rule applies to `method`.
    pub(super) fn applies_to_method(&self, method: &str) -> bool {
        self.methods
            .as_ref()
            .is_none_or(|methods| methods.iter().any(|m| m == method))
    }

    /// Whether the rule constrains paths.
    pub(super) fn has_path_constraints(&self) -> bool {
        self.globs.is_some() || self.regexes.is_some()
    }

    /// Whether the rule has neither methods nor path constraints.
    pub(super) fn is_destination_only(&self) -> bool {
        self.methods.is_none() && !self.has_path_constraints()
    }

    /// Whether a safe canonical path matches (true for a rule without path constraints).
    pub(super) fn matches_path(&self, path: &PathView<'_>) -> bool {
        if !self.has_path_constraints() {
            return true;
        }
        self.globs
            .as_ref()
            .is_some_and(|globs| globs.is_match_candidate(&path.candidate))
            || self
                .regexes
                .as_ref()
                .is_some_and(|regexes| regexes.is_match(path.with_query()))
    }
}

/// Compile path globs with `*` kept inside a segment.
pub(super) fn compile_globs(rule: &str, globs: &[String]) -> Result<GlobSet, CompileError> {
    let mut builder = GlobSetBuilder::new();
    for glob in globs {
        let compiled = GlobBuilder::new(glob)
            .literal_separator(true)
            .build()
            .map_err(|err| CompileError::Glob {
                rule: rule.to_owned(),
                glob: glob.clone(),
                message: err.kind().to_string(),
            })?;
        builder.add(compiled);
    }
    builder.build().map_err(|err| CompileError::Glob {
        rule: rule.to_owned(),
        glob: err.glob().unwrap_or_default().to_owned(),
        message: err.kind().to_string(),
    })
}

/// An `mcp` rule's path glob, compiled case-insensitively as written and case-folded
/// ([`mcp_path::glob_forms`]; a folded form that does not compile is left out).
pub(super) fn compile_mcp_glob(rule: &str, glob: &str) -> Result<GlobSet, CompileError> {
    let error = |glob: &str, message: String| CompileError::Glob {
        rule: rule.to_owned(),
        glob: glob.to_owned(),
        message,
    };
    let mut builder = GlobSetBuilder::new();
    for (index, form) in mcp_path::glob_forms(glob).iter().enumerate() {
        let compiled = GlobBuilder::new(form)
            .literal_separator(true)
            .case_insensitive(true)
            .build();
        match compiled {
            Ok(compiled) => {
                builder.add(compiled);
            }
            Err(err) if index == 0 => return Err(error(glob, err.kind().to_string())),
            Err(_) => {}
        }
    }
    builder
        .build()
        .map_err(|err| error(err.glob().unwrap_or_default(), err.kind().to_string()))
}

/// A safe canonical path prepared once per decision for every rule.
pub(super) struct PathView<'a> {
    /// The path for glob matching.
    candidate: Candidate<'a>,
    /// The path alone.
    path: &'a str,
    /// The query, if any.
    query: Option<&'a str>,
    /// `path?query`, built on first use by a regex.
    joined: std::cell::OnceCell<String>,
}

impl<'a> PathView<'a> {
    pub(super) fn new(path: &'a str, query: Option<&'a str>) -> Self {
        PathView {
            candidate: Candidate::from_bytes(path.as_bytes()),
            path,
            query,
            joined: std::cell::OnceCell::new(),
        }
    }

    /// The path plus `?query` when there is a query.
    pub(super) fn with_query(&self) -> &str {
        match self.query {
            None => self.path,
            Some(query) => self.joined.get_or_init(|| format!("{}?{query}", self.path)),
        }
    }
}

/// The path of `req` as the rules match it, or why it is unsafe.
pub(super) fn path_view(req: &CanonicalRequest) -> Result<PathView<'_>, PathUnsafe> {
    match &req.path {
        Ok(path) => Ok(PathView::new(path, req.query.as_deref())),
        Err(unsafe_path) => Err(*unsafe_path),
    }
}
