//! Small text helpers shared by every validation step: quoting user values, field paths, plurals
//! and "did you mean" hints. Public through [`crate::reader`].
//!
//! Why a module of its own: every message the engine emits is hashed into the decision digest,
//! so the rules that make messages one line, bounded and deterministic live in one place instead
//! of being re-invented (slightly differently) by each validator.

use crate::output::FieldError;

/// The longest user value quoted in a message, in characters; longer values are cut with `…`.
const MAX_QUOTED_CHARS: usize = 80;

/// The most field errors a report lists; the message still counts every problem.
///
/// A 1 MiB document can hold hundreds of thousands of bad list items. Listing them all would
/// make the report (and the component's memory) grow with the attack, not with the policy.
pub const MAX_LISTED_ERRORS: usize = 100;

/// A user value in backticks, on one line: control characters escaped, long values cut.
pub fn quote(value: &str) -> String {
    let mut out = String::from("`");
    for (count, ch) in value.chars().enumerate() {
        if count >= MAX_QUOTED_CHARS {
            out.push('…');
            break;
        }
        if ch.is_control() {
            out.extend(ch.escape_default());
        } else {
            out.push(ch);
        }
    }
    out.push('`');
    out
}

/// Text with every control character (newlines included) replaced by a space, so that it can
/// sit inside a one-line message.
pub fn one_line(text: &str) -> String {
    text.chars()
        .map(|ch| if ch.is_control() { ' ' } else { ch })
        .collect()
}

/// `1 problem`, `2 problems`.
pub fn count(n: usize, singular: &str, plural: &str) -> String {
    if n == 1 {
        format!("{n} {singular}")
    } else {
        format!("{n} {plural}")
    }
}

/// The path of a mapping entry below `parent`: `spec.sandbox` for simple keys, `spec["a.b"]`
/// for keys that would make the dotted form ambiguous.
pub fn child_path(parent: &str, key: &str) -> String {
    let simple = !key.is_empty()
        && key
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == '-');
    if simple {
        if parent.is_empty() {
            key.to_owned()
        } else {
            format!("{parent}.{key}")
        }
    } else {
        let escaped = match serde_json::to_string(key) {
            Ok(text) => text,
            Err(_) => String::from("\"?\""),
        };
        format!("{parent}[{escaped}]")
    }
}

/// The path of a list item below `parent`: `spec.sandbox.preferredBackends[3]`.
pub fn index_path(parent: &str, index: usize) -> String {
    format!("{parent}[{index}]")
}

/// Whether two names are at most `max` edits apart (insertions, deletions, substitutions),
/// comparing case-insensitively. Cheap for long inputs: a length gap larger than `max` answers
/// at once.
pub fn within_edits(a: &str, b: &str, max: usize) -> bool {
    edits(a, b, max).is_some()
}

/// The edit distance between two names when it is at most `max` (case-insensitive, as
/// [`within_edits`]).
fn edits(a: &str, b: &str, max: usize) -> Option<usize> {
    let a: Vec<char> = a.chars().flat_map(char::to_lowercase).take(64).collect();
    let b: Vec<char> = b.chars().flat_map(char::to_lowercase).take(64).collect();
    if a.len().abs_diff(b.len()) > max {
        return None;
    }
    // Classic two-row Levenshtein.
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut current = Vec::with_capacity(b.len() + 1);
        current.push(i + 1);
        for (j, cb) in b.iter().enumerate() {
            let substitute = previous.get(j).copied().unwrap_or(usize::MAX);
            let delete = previous.get(j + 1).copied().unwrap_or(usize::MAX);
            let insert = current.get(j).copied().unwrap_or(usize::MAX);
            let cost = usize::from(ca != cb);
            let best = substitute
                .saturating_add(cost)
                .min(delete.saturating_add(1))
                .min(insert.saturating_add(1));
            current.push(best);
        }
        previous = current;
    }
    previous.last().copied().filter(|&distance| distance <= max)
}

/// `; did you mean `x`?` naming the closest known name within two edits (the first of equally
/// close ones), else empty.
pub fn did_you_mean<'a>(value: &str, known: impl IntoIterator<Item = &'a str>) -> String {
    let closest = known
        .into_iter()
        .filter_map(|name| edits(value, name, 2).map(|distance| (distance, name)))
        .min_by_key(|(distance, _)| *distance);
    match closest {
        Some((_, name)) => format!("; did you mean `{name}`?"),
        None => String::new(),
    }
}

/// `` `a`, `b`, `c` `` for a list of known names.
pub fn list_names<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    names
        .into_iter()
        .map(|name| format!("`{name}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Field errors as they are collected: the first [`MAX_LISTED_ERRORS`] are kept, all are counted.
#[derive(Debug, Default)]
pub struct Errors {
    listed: Vec<FieldError>,
    total: usize,
}

impl Errors {
    /// Records one problem at `path`.
    pub fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.total += 1;
        if self.listed.len() < MAX_LISTED_ERRORS {
            self.listed.push(FieldError {
                path: path.into(),
                message: message.into(),
            });
        }
    }

    /// Whether no problem was recorded.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// How many problems were recorded, listed or not.
    pub fn total(&self) -> usize {
        self.total
    }

    /// The listed problems, in the order they were found.
    pub fn into_listed(self) -> Vec<FieldError> {
        self.listed
    }

    /// `N problems; first: <path>: <message>`, with `(first 100 listed)` when some were cut.
    pub fn summary(&self) -> String {
        let mut text = count(self.total, "problem", "problems");
        if self.total > self.listed.len() {
            text.push_str(&format!(" ({} listed)", self.listed.len()));
        }
        if let Some(first) = self.listed.first() {
            // Paths repeat user keys verbatim; cut them here so the summary stays short.
            let path: String = first.path.chars().take(MAX_QUOTED_CHARS).collect();
            let cut = if path.len() < first.path.len() {
                "…"
            } else {
                ""
            };
            text.push_str(&format!("; first: {path}{cut}: {}", first.message));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quote_escapes_control_characters_and_cuts_long_values() {
        assert_eq!(quote("a\nb\0"), "`a\\nb\\u{0}`");
        let long = "x".repeat(200);
        let quoted = quote(&long);
        assert_eq!(quoted.chars().count(), MAX_QUOTED_CHARS + 3);
        assert!(quoted.ends_with("…`"));
    }

    #[test]
    fn child_paths_are_dotted_or_bracketed() {
        assert_eq!(child_path("", "spec"), "spec");
        assert_eq!(child_path("spec", "sandbox"), "spec.sandbox");
        assert_eq!(child_path("spec", "a.b"), "spec[\"a.b\"]");
        assert_eq!(child_path("spec", ""), "spec[\"\"]");
        assert_eq!(index_path("x", 3), "x[3]");
    }

    #[test]
    fn edit_distance_is_case_insensitive_and_bounded() {
        assert!(within_edits("Sandbox", "sandbox", 0));
        assert!(within_edits("sandbx", "sandbox", 2));
        assert!(within_edits("sanbdox", "sandbox", 2));
        assert!(!within_edits("budgets", "sandbox", 2));
        assert!(!within_edits(&"s".repeat(100_000), "sandbox", 2));
    }

    #[test]
    fn the_closest_name_is_suggested() {
        let known = ["name", "image", "imageId"];
        assert_eq!(did_you_mean("imageID", known), "; did you mean `imageId`?");
        assert_eq!(did_you_mean("imag", known), "; did you mean `image`?");
        assert_eq!(did_you_mean("tokens", known), "");
    }

    #[test]
    fn errors_count_beyond_the_listed_cap() {
        let mut errors = Errors::default();
        for i in 0..(MAX_LISTED_ERRORS + 5) {
            errors.push(format!("p{i}"), "bad");
        }
        assert_eq!(errors.total(), MAX_LISTED_ERRORS + 5);
        assert!(
            errors
                .summary()
                .starts_with("105 problems (100 listed); first: p0: bad")
        );
        assert_eq!(errors.into_listed().len(), MAX_LISTED_ERRORS);
    }

    #[test]
    fn one_line_replaces_newlines() {
        assert_eq!(one_line("a\nb\r\tc"), "a b  c");
    }
}
