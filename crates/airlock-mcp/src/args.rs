//! Argument guards on a `tools/call` (`mcp[].tools.args`): the value at each guarded
//! argument of `params.arguments` must be a string the guard allows
//! ([`airlock_policy::mcp_args`]). A missing, non-string or ambiguous argument is refused.
//!
//! Ambiguous means: the object holding it has another key equal to it under case folding
//! (`Path` next to `path`), because some servers read keys case-insensitively (Go's
//! `encoding/json` takes the last such key). `arguments` itself in `params` is held to
//! the same rule. Objects read on the way must have unique keys (else the body is
//! [`Uninspectable`]), and keys and values are compared decoded (`\u` escapes resolved).

use airlock_policy::mcp_args::{ArgGuard, fold};
use airlock_policy::model::ToolRules;
use serde_json::value::RawValue;

use crate::Uninspectable;
use crate::json::{self, Object};

/// The first guarded argument of `tool` (as named in the guard) whose value in `params`
/// the rule refuses, or `None` when every guard of the tool passes (or it has none).
pub(crate) fn refused_argument(
    params: &Object<'_>,
    rule: &(impl ToolRules + ?Sized),
    tool: &str,
) -> Result<Option<String>, Uninspectable> {
    let mut guards = rule
        .arg_guards()
        .iter()
        .filter(|g| g.applies_to(tool))
        .peekable();
    let Some(first) = guards.peek() else {
        return Ok(None);
    };
    let arguments = match member(params, "arguments") {
        Some(raw) => Object::parse(raw).map(Some).or_else(not_an_object)?,
        None => None,
    };
    let Some(arguments) = arguments else {
        return Ok(Some(first.argument.text.clone()));
    };
    for guard in guards {
        if !passes(&arguments, guard)? {
            return Ok(Some(guard.argument.text.clone()));
        }
    }
    Ok(None)
}

/// Whether the value the guard addresses in `arguments` is a string it allows.
fn passes(arguments: &Object<'_>, guard: &ArgGuard) -> Result<bool, Uninspectable> {
    let Some((last, outer)) = guard.argument.keys.split_last() else {
        return Ok(false);
    };
    let mut nested: Option<Object<'_>> = None;
    for key in outer {
        let holder = nested.as_ref().unwrap_or(arguments);
        let Some(raw) = member(holder, key) else {
            return Ok(false);
        };
        match Object::parse(raw).map(Some).or_else(not_an_object)? {
            Some(object) => nested = Some(object),
            None => return Ok(false),
        }
    }
    let holder = nested.as_ref().unwrap_or(arguments);
    Ok(member(holder, last)
        .and_then(|raw| json::parse_as::<String>(raw).ok())
        .is_some_and(|value| guard.allows(&value)))
}

/// The value of `key` in `object`, unless it is missing or another key folds alike.
fn member<'a>(object: &Object<'a>, key: &str) -> Option<&'a RawValue> {
    let folded = fold(key);
    let ambiguous = object.keys().any(|k| k != key && fold(k) == folded);
    if ambiguous { None } else { object.get(key) }
}

/// A value that is not an object is no error here (the argument is refused); duplicate
/// keys and broken JSON stay errors.
fn not_an_object<T>(error: Uninspectable) -> Result<Option<T>, Uninspectable> {
    match error {
        Uninspectable::NotAMessage => Ok(None),
        other => Err(other),
    }
}
