//! The reader every Palisade document goes through: the bounded YAML tree ([`Node`], [`parse`])
//! and the validation vocabulary — field paths, quoting, "unknown field, did you mean", bounded
//! numbers and lists, absolute paths, and [`Errors`], which lists every problem with its path.
//!
//! Key design decision: one reader for every file Palisade trusts. The engine walks Taskpacks
//! with it, and the host walks its own files (the host configuration, runtime profiles) with
//! the same helpers, so each of them bounds its input, reports every offending field (not the
//! first), and words its errors the same way. Nothing here does I/O.

use std::collections::BTreeSet;

pub use crate::paths::check_host_path as check_absolute_path;
pub use crate::text::{
    Errors, MAX_LISTED_ERRORS, child_path, count, did_you_mean, index_path, list_names, one_line,
    quote, within_edits,
};
pub use crate::yaml::{MAX_NODES, Node, parse};

/// Visits the string-keyed entries of a mapping in document order, each with its path.
///
/// Non-string keys are reported at the mapping's path, repeated keys at the repeat's path, both
/// where they occur; neither is visited, so `visit` sees each key once. Does nothing for a
/// non-mapping.
pub fn each_entry<'n>(
    node: &'n Node,
    path: &str,
    errors: &mut Errors,
    mut visit: impl FnMut(&'n str, String, &'n Node, &mut Errors),
) {
    let Node::Mapping(pairs) = node else {
        return;
    };
    let here = if path.is_empty() { "document" } else { path };
    let mut seen = BTreeSet::new();
    for (key, value) in pairs {
        let Node::String(key) = key else {
            errors.push(
                here,
                format!("mapping keys must be strings, found {}", key.kind()),
            );
            continue;
        };
        let child = child_path(path, key);
        if seen.insert(key.as_str()) {
            visit(key.as_str(), child, value, errors);
        } else {
            errors.push(child, format!("duplicate key {}", quote(key)));
        }
    }
}

/// The node's text if it is a string; otherwise reports the type at `path`.
pub fn expect_str<'n>(node: &'n Node, path: &str, errors: &mut Errors) -> Option<&'n str> {
    match node {
        Node::String(text) => Some(text),
        other => {
            errors.push(path, format!("expected a string, found {}", other.kind()));
            None
        }
    }
}

/// Checks that the node is exactly the string `expected` (case included).
pub fn expect_exact(node: &Node, path: &str, expected: &str, errors: &mut Errors) {
    if let Some(found) = expect_str(node, path, errors)
        && found != expected
    {
        errors.push(
            path,
            format!("unsupported value {}; expected `{expected}`", quote(found)),
        );
    }
}

/// "unknown field `x`; expected one of …", with a hint when a known name is close.
pub fn unknown_field(key: &str, known: &[&str]) -> String {
    format!(
        "unknown field {}; expected one of {}{}",
        quote(key),
        list_names(known.iter().copied()),
        did_you_mean(key, known.iter().copied()),
    )
}

/// Whether `raw` is spelled as a `deniedReadPaths` entry must be: absolute or `~/`-relative,
/// no NUL, no `..` component, not `~` alone or `~user`.
pub fn check_denied_path(raw: &str) -> Result<(), String> {
    crate::paths::resolve_denied(raw, "/").map(|_| ())
}

/// `true` or `false`; otherwise reports the type at `path`.
pub fn expect_bool(node: &Node, path: &str, errors: &mut Errors) -> Option<bool> {
    match node {
        Node::Bool(value) => Some(*value),
        other => {
            errors.push(
                path,
                format!("expected `true` or `false`, found {}", other.kind()),
            );
            None
        }
    }
}

/// A list of at most `max` items; otherwise reports the type or the length at `path`.
pub fn expect_list<'n>(
    node: &'n Node,
    path: &str,
    max: usize,
    errors: &mut Errors,
) -> Option<&'n [Node]> {
    match node {
        Node::Sequence(items) if items.len() > max => {
            errors.push(path, format!("has {} entries; at most {max}", items.len()));
            None
        }
        Node::Sequence(items) => Some(items.as_slice()),
        other => {
            errors.push(path, format!("expected a list, found {}", other.kind()));
            None
        }
    }
}

/// A mapping; otherwise reports the type at `path`. Walk it with [`each_entry`].
pub fn expect_mapping(node: &Node, path: &str, errors: &mut Errors) -> bool {
    let mapping = matches!(node, Node::Mapping(_));
    if !mapping {
        errors.push(path, format!("expected a mapping, found {}", node.kind()));
    }
    mapping
}

/// A whole number in `1..=max`, written as a plain YAML integer.
pub fn bounded_integer(node: &Node, max: u64) -> Result<u64, String> {
    let Node::Number(text) = node else {
        return Err(format!("expected a whole number, found {}", node.kind()));
    };
    let number: u64 = text.parse().map_err(|_| {
        format!(
            "expected a whole number from 1 to {max}, found {}",
            quote(text)
        )
    })?;
    if number == 0 || number > max {
        return Err(format!("{number} is out of bounds; expected 1 to {max}"));
    }
    Ok(number)
}
