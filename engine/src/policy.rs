//! The Taskpack document: its shape (`apiVersion`, `kind`, `metadata`, `spec`) and the
//! mapping walk shared by every level of validation.
//!
//! Why a hand-written walk instead of `#[derive(Deserialize)]`: serde stops at the first error,
//! while the contract is to report every offending field path at once (duplicates at each later
//! repeat, unknown names at their index). The walk records problems in an [`Errors`] list and
//! keeps going; the document is accepted only when that list stays empty. What belongs to
//! `spec.sandbox` itself is in `sandbox.rs`.

use std::collections::BTreeSet;

use crate::budgets;
use crate::model::HostFacts;
use crate::output::Budgets;
use crate::reader::{each_entry, expect_exact, expect_str, unknown_field};
use crate::sandbox::{self, SandboxSpec};
use crate::text::{self, Errors};
use crate::yaml::{self, Node};

/// The only accepted `apiVersion`.
pub(crate) const API_VERSION: &str = "loopwright.dev/v1alpha1";

/// The only accepted `kind`.
pub(crate) const KIND: &str = "Taskpack";

/// The spec section this engine reads.
const SANDBOX: &str = "sandbox";

/// A valid Taskpack, reduced to what the decision needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Taskpack {
    /// `metadata.name`.
    pub(crate) name: String,
    /// Other `spec` sections, sorted: they belong to the rest of the Taskpack.
    pub(crate) ignored_spec_sections: Vec<String>,
    /// `spec.sandbox`, when present.
    pub(crate) sandbox: Option<SandboxSpec>,
    /// `spec.budgets` (all unset when absent).
    pub(crate) budgets: Budgets,
}

/// Parses and validates a Taskpack document against the (already valid) host facts.
pub(crate) fn parse_taskpack(document: &str, host: &HostFacts) -> Result<Taskpack, Errors> {
    let mut errors = Errors::default();
    let root =
        parse_bounded(document, "document", &mut errors).ok_or_else(|| errors_now(&mut errors))?;
    let walked = walk_document(&root, "", KIND, &mut errors, |node, path, errors| {
        walk_spec(node, path, host, errors)
    });
    match walked {
        Some((name, spec)) if errors.is_empty() => {
            let (ignored_spec_sections, sandbox, budgets) = spec.unwrap_or_default();
            Ok(Taskpack {
                name,
                ignored_spec_sections,
                sandbox,
                budgets,
            })
        }
        _ => Err(errors),
    }
}

/// A valid TaskContract, reduced to its budgets envelope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TaskContract {
    /// `metadata.name`.
    pub(crate) name: String,
    /// `spec.budgets`: the envelope the taskpack and the flags may only tighten within.
    pub(crate) budgets: Budgets,
}

/// The `kind` of the task contract document.
pub(crate) const CONTRACT_KIND: &str = "TaskContract";

/// Parses and validates a TaskContract document; every problem is reported below `at`
/// (`taskContract.spec.budgets.memoryMiB`). Only `spec.budgets` is read; other sections belong
/// to the rest of the contract.
pub(crate) fn parse_task_contract(document: &str, at: &str) -> Result<TaskContract, Errors> {
    let mut errors = Errors::default();
    let root = parse_bounded(document, at, &mut errors).ok_or_else(|| errors_now(&mut errors))?;
    let walked = walk_document(
        &root,
        at,
        CONTRACT_KIND,
        &mut errors,
        |node, path, errors| {
            if !matches!(node, Node::Mapping(_)) {
                errors.push(path, format!("expected a mapping, found {}", node.kind()));
                return None;
            }
            let mut contract_budgets = Budgets::default();
            each_entry(node, path, errors, |key, child, value, errors| {
                if key == budgets::SECTION {
                    contract_budgets = budgets::walk(value, &child, errors).0;
                } else if text::within_edits(key, budgets::SECTION, 2) {
                    errors.push(
                        child,
                        format!(
                            "unknown section {}; did you mean `{}`?",
                            text::quote(key),
                            budgets::SECTION
                        ),
                    );
                } else {
                    check_duplicates(value, &child, errors);
                }
            });
            Some(contract_budgets)
        },
    );
    match walked {
        Some((name, budgets)) if errors.is_empty() => Ok(TaskContract {
            name,
            budgets: budgets.unwrap_or_default(),
        }),
        _ => Err(errors),
    }
}

/// The errors so far, leaving an empty list behind (for an early return).
fn errors_now(errors: &mut Errors) -> Errors {
    std::mem::take(errors)
}

/// The document's YAML tree, bounded in size; problems are reported at `at` (or `document`).
fn parse_bounded(document: &str, at: &str, errors: &mut Errors) -> Option<Node> {
    let here = if at.is_empty() { "document" } else { at };
    // No exact size: the host hands over only the first bytes past the limit of a larger file
    // (so the component never holds the rest), and this message must be true of both.
    if document.len() > crate::MAX_DOCUMENT_BYTES {
        errors.push(
            here,
            format!(
                "document is larger than {} bytes",
                crate::MAX_DOCUMENT_BYTES
            ),
        );
        return None;
    }
    match yaml::parse(document) {
        Ok(root) => Some(root),
        Err(message) => {
            errors.push(here, format!("invalid yaml: {message}"));
            None
        }
    }
}

/// Walks a Loopwright document's top level (`apiVersion`, `kind` = `kind`, `metadata`, `spec`)
/// below the field path `at`, handing `spec` to `walk_spec`. Returns `metadata.name` and what
/// `walk_spec` made of `spec` (none when `spec` is absent), when the header is valid.
fn walk_document<S>(
    root: &Node,
    at: &str,
    kind: &str,
    errors: &mut Errors,
    mut walk_spec: impl FnMut(&Node, &str, &mut Errors) -> Option<S>,
) -> Option<(String, Option<S>)> {
    let here = if at.is_empty() { "document" } else { at };
    match root {
        Node::Mapping(_) => {}
        Node::Empty => {
            errors.push(here, "document is empty");
            return None;
        }
        other => {
            errors.push(
                here,
                format!("the top level must be a mapping, found {}", other.kind()),
            );
            return None;
        }
    }
    let (mut api_version, mut kind_seen, mut metadata) = (false, false, false);
    let mut name = None;
    let mut spec = None;
    each_entry(root, at, errors, |key, path, value, errors| match key {
        "apiVersion" => {
            api_version = true;
            expect_exact(value, &path, API_VERSION, errors);
        }
        "kind" => {
            kind_seen = true;
            expect_exact(value, &path, kind, errors);
        }
        "metadata" => {
            metadata = true;
            name = walk_metadata(value, &path, errors);
        }
        "spec" => spec = walk_spec(value, &path, errors),
        other => errors.push(
            path,
            unknown_field(other, &["apiVersion", "kind", "metadata", "spec"]),
        ),
    });
    if !api_version {
        errors.push(
            text::child_path(at, "apiVersion"),
            format!("is required; expected `{API_VERSION}`"),
        );
    }
    if !kind_seen {
        errors.push(
            text::child_path(at, "kind"),
            format!("is required; expected `{kind}`"),
        );
    }
    if !metadata {
        errors.push(
            text::child_path(at, "metadata"),
            "is required, with a `name`",
        );
    }
    Some((name?, spec))
}

/// Walks `metadata`, returning `metadata.name` when it is valid.
fn walk_metadata(node: &Node, path: &str, errors: &mut Errors) -> Option<String> {
    if !matches!(node, Node::Mapping(_)) {
        errors.push(path, format!("expected a mapping, found {}", node.kind()));
        return None;
    }
    let mut name = None;
    let mut name_seen = false;
    each_entry(node, path, errors, |key, child, value, errors| match key {
        "name" => {
            name_seen = true;
            match expect_str(value, &child, errors) {
                Some("") => errors.push(child, "must not be empty"),
                Some(text) => name = Some(text.to_owned()),
                None => {}
            }
        }
        "labels" | "annotations" => walk_string_map(value, &child, errors),
        other => errors.push(
            child,
            unknown_field(other, &["name", "labels", "annotations"]),
        ),
    });
    if !name_seen {
        errors.push(text::child_path(path, "name"), "is required");
    }
    name
}

/// Walks `spec`: `sandbox` is validated, look-alikes of it are errors, the rest is ignored.
fn walk_spec(
    node: &Node,
    path: &str,
    host: &HostFacts,
    errors: &mut Errors,
) -> Option<(Vec<String>, Option<SandboxSpec>, Budgets)> {
    if !matches!(node, Node::Mapping(_)) {
        errors.push(path, format!("expected a mapping, found {}", node.kind()));
        return None;
    }
    let mut ignored = BTreeSet::new();
    let mut sandbox = None;
    let mut task_budgets = Budgets::default();
    each_entry(node, path, errors, |key, child, value, errors| {
        if key == SANDBOX {
            sandbox = sandbox::walk(value, &child, host, errors);
        } else if key == budgets::SECTION {
            let (walked, not_ours) = budgets::walk(value, &child, errors);
            task_budgets = walked;
            ignored.extend(not_ours);
        } else if text::within_edits(key, SANDBOX, 2) {
            // Under Actions a misspelt section would silently select the weakest backend.
            errors.push(
                child,
                format!(
                    "unknown section {}; did you mean `{SANDBOX}`?",
                    text::quote(key)
                ),
            );
        } else {
            ignored.insert(key.to_owned());
            check_duplicates(value, &child, errors);
        }
    });
    Some((ignored.into_iter().collect(), sandbox, task_budgets))
}

/// Walks a `string → string` map such as `metadata.labels`.
fn walk_string_map(node: &Node, path: &str, errors: &mut Errors) {
    if !matches!(node, Node::Mapping(_)) {
        errors.push(
            path,
            format!("expected a mapping of strings, found {}", node.kind()),
        );
        return;
    }
    each_entry(node, path, errors, |_, child, value, errors| {
        expect_str(value, &child, errors);
    });
}

/// Reports repeated keys anywhere below `node` (for sections that are otherwise ignored).
fn check_duplicates(node: &Node, path: &str, errors: &mut Errors) {
    match node {
        Node::Mapping(pairs) => {
            let mut seen = BTreeSet::new();
            for (key, value) in pairs {
                let child = match key {
                    Node::String(key) => text::child_path(path, key),
                    _ => path.to_owned(),
                };
                if !seen.insert(key) {
                    let shown = match key {
                        Node::String(key) => text::quote(key),
                        other => other.kind().to_owned(),
                    };
                    errors.push(child, format!("duplicate key {shown}"));
                    continue;
                }
                check_duplicates(value, &child, errors);
            }
        }
        Node::Sequence(items) => {
            for (index, item) in items.iter().enumerate() {
                check_duplicates(item, &text::index_path(path, index), errors);
            }
        }
        Node::Tagged(_, inner) => check_duplicates(inner, path, errors),
        Node::Empty | Node::Null | Node::Bool(_) | Node::Number(_) | Node::String(_) => {}
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
    use super::*;
    use crate::output::FieldError;

    fn host() -> HostFacts {
        HostFacts {
            writable_roots: vec!["/tmp/task".into()],
            ..HostFacts::linux_cli("/home/u", "/home/u/proj")
        }
    }

    fn errors_of(document: &str) -> Vec<FieldError> {
        parse_taskpack(document, &host()).unwrap_err().into_listed()
    }

    fn paths_of(document: &str) -> Vec<String> {
        errors_of(document).into_iter().map(|e| e.path).collect()
    }

    const HEAD: &str =
        "apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\nmetadata:\n  name: t\n";

    #[test]
    fn minimal_document_has_no_sandbox() {
        let taskpack = parse_taskpack(HEAD, &host()).unwrap();
        assert_eq!(taskpack.name, "t");
        assert_eq!(taskpack.sandbox, None);
        assert!(taskpack.ignored_spec_sections.is_empty());
    }

    #[test]
    fn other_spec_sections_are_ignored_and_sorted() {
        let doc = format!("{HEAD}spec:\n  steps: [a]\n  budgets: {{cpuSeconds: 1}}\n");
        let taskpack = parse_taskpack(&doc, &host()).unwrap();
        assert_eq!(taskpack.ignored_spec_sections, ["steps"]);
    }

    #[test]
    fn missing_header_fields_are_each_reported() {
        assert_eq!(paths_of("spec: {}\n"), ["apiVersion", "kind", "metadata"]);
        assert_eq!(
            paths_of("apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\nmetadata: {}\n"),
            ["metadata.name"]
        );
    }

    #[test]
    fn header_values_are_exact() {
        let doc = "apiVersion: loopwright.dev/v1\nkind: taskpack\nmetadata:\n  name: ''\n";
        assert_eq!(paths_of(doc), ["apiVersion", "kind", "metadata.name"]);
    }

    #[test]
    fn unknown_top_level_and_metadata_keys_are_invalid() {
        let doc = format!("{HEAD}  owner: me\nstatus: {{}}\n");
        assert_eq!(paths_of(&doc), ["metadata.owner", "status"]);
    }

    #[test]
    fn labels_must_map_strings_to_strings() {
        let doc = format!("{HEAD}  labels:\n    a: b\n    c: 1\n  annotations: [x]\n");
        assert_eq!(
            paths_of(&doc),
            ["metadata.labels.c", "metadata.annotations"]
        );
    }

    #[test]
    fn sandbox_lookalikes_are_invalid_with_a_hint() {
        for key in ["Sandbox", "SANDBOX", "sandbx", "sand_box", "sandboxes"] {
            let doc = format!("{HEAD}spec:\n  {key}: {{}}\n");
            let errors = errors_of(&doc);
            assert_eq!(errors.len(), 1, "{key}");
            assert_eq!(errors[0].path, format!("spec.{key}"));
            assert!(errors[0].message.contains("did you mean `sandbox`?"));
        }
    }

    #[test]
    fn duplicate_keys_are_reported_at_each_repeat() {
        let doc =
            format!("{HEAD}kind: Taskpack\nspec:\n  steps:\n    a: 1\n    a: 2\n  steps: {{}}\n");
        assert_eq!(paths_of(&doc), ["kind", "spec.steps.a", "spec.steps"]);
    }

    #[test]
    fn non_string_keys_are_invalid() {
        let doc = format!("{HEAD}spec:\n  1: x\n");
        let errors = errors_of(&doc);
        assert_eq!(errors[0].path, "spec");
        assert!(errors[0].message.contains("keys must be strings"));
    }

    #[test]
    fn document_level_problems() {
        assert_eq!(errors_of("")[0].message, "document is empty");
        assert_eq!(paths_of("[1]"), ["document"]);
        assert_eq!(paths_of("a: [1"), ["document"]);
        let big = "#".repeat(crate::MAX_DOCUMENT_BYTES + 1);
        assert_eq!(
            errors_of(&big)[0].message,
            "document is larger than 1048576 bytes"
        );
    }
}
