//! Bounded YAML parsing into a plain tree that keeps duplicate keys and document order.
//!
//! Why not `serde_yaml::Value`: it stops at the first duplicate key with a document-level error,
//! but the policy contract wants every offending field path, duplicates included, so the tree
//! here keeps mappings as ordered `(key, value)` lists and the validator reports repeats where
//! they are. Why a node budget: serde_yaml bounds nesting (depth 128) and alias jumps (100 per
//! event), but one large anchored list referenced by many aliases still expands quadratically
//! within those limits. Every node built (aliases expanded) is counted against a fixed budget far
//! above what a Taskpack needs, and nesting is cut at half serde_yaml's depth to bound the stack.
//!
//! Public because the host validates its own configuration file (`kind: HostConfig`) with the
//! same reader, so that file gets the same guarantees: every duplicate key reported, bounded
//! time and memory.

use std::cell::Cell;
use std::fmt;

use serde::de::{self, DeserializeSeed, EnumAccess, MapAccess, SeqAccess, VariantAccess, Visitor};

/// A parsed YAML node. Mappings keep every entry, duplicates included, in document order.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Node {
    /// The whole document had no content.
    Empty,
    Null,
    Bool(bool),
    /// A number, kept as its canonical text (the engine needs no arithmetic on it).
    Number(String),
    String(String),
    Sequence(Vec<Node>),
    Mapping(Vec<(Node, Node)>),
    /// A node with a non-core tag such as `!foo` (kept without its `!`).
    Tagged(String, Box<Node>),
}

impl Node {
    /// What kind of node this is, for "expected …, found …" messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Node::Empty | Node::Null => "null",
            Node::Bool(_) => "a boolean",
            Node::Number(_) => "a number",
            Node::String(_) => "a string",
            Node::Sequence(_) => "a list",
            Node::Mapping(_) => "a mapping",
            Node::Tagged(..) => "a tagged value",
        }
    }
}

/// The most nodes a document may build, aliases expanded.
///
/// A real Taskpack has hundreds. The bound keeps the tree (and the time to build and walk it)
/// small whatever the input: without it, one anchored list of 200 000 items referenced by
/// 200 000 aliases fits in 1 MiB and would expand to 4·10¹⁰ nodes.
pub const MAX_NODES: usize = 100_000;

/// The deepest nesting of lists, mappings and tags accepted.
///
/// serde_yaml stops at 128, but 128 levels of its recursion need between 256 and 512 KiB of
/// stack in a debug build; half that keeps well inside a 1 MiB WebAssembly stack and a 2 MiB
/// test thread. A Taskpack needs a handful of levels.
pub const MAX_DEPTH: usize = 64;

/// Parses one YAML document into a [`Node`], or says why it cannot (one line).
pub fn parse(text: &str) -> Result<Node, String> {
    check_flow_depth(text)?;
    let budget = Cell::new(MAX_NODES);
    let deserializer = serde_yaml::Deserializer::from_str(text);
    NodeSeed {
        budget: &budget,
        depth: 0,
    }
    .deserialize(deserializer)
    .map_err(|error| crate::text::one_line(&error.to_string()))
}

/// Refuses, in one linear pass before the parser sees the text, flow collections (`[`, `{`)
/// nested deeper than [`MAX_DEPTH`].
///
/// Why before parsing: the YAML parser's time grows with the square of flow nesting, so 20 000
/// `[` (40 KB) took seconds and ran the engine component out of fuel (an internal failure with no
/// record) before the node walk's own depth limit could say anything. Block nesting costs the
/// parser nothing comparable (its depth is paid for in indentation), and the walk bounds it.
///
/// The pass knows just enough YAML not to count brackets that are not flow indicators: quoted
/// scalars, comments, block scalar content (`|`, `>`) and brackets inside plain words
/// (`a[0]`) are skipped. It may over-count only on malformed text, which the parser refuses
/// anyway.
fn check_flow_depth(text: &str) -> Result<(), String> {
    // The indentation of the line that opened a block scalar, while inside one.
    let mut block_scalar: Option<usize> = None;
    let mut depth = 0usize;
    for (number, line) in text.lines().enumerate() {
        let indent = line.len() - line.trim_start_matches(' ').len();
        if let Some(parent) = block_scalar {
            if line.trim().is_empty() || indent > parent {
                continue;
            }
            block_scalar = None;
        }
        // The character before the current one on this line, outside quotes: a token starts
        // after one of `[{,:-?`, whitespace, or at the start of the line.
        let mut previous: Option<char> = None;
        let mut quote: Option<char> = None;
        // Inside a plain word (`a[0]`, `x[[`), which brackets do not open.
        let mut plain = false;
        let mut chars = line.chars().peekable();
        while let Some(ch) = chars.next() {
            if plain {
                let ends = ch == ' ' || ch == '\t' || (depth > 0 && matches!(ch, ',' | ']' | '}'));
                if !ends {
                    previous = Some(ch);
                    continue;
                }
                plain = false;
            }
            if let Some(open) = quote {
                // `\x` in a double-quoted scalar, `''` in a single-quoted one: not the end.
                let escaped = (open == '"' && ch == '\\')
                    || (open == '\'' && ch == '\'' && chars.peek() == Some(&'\''));
                if escaped {
                    chars.next();
                } else if ch == open {
                    quote = None;
                    previous = Some(ch);
                }
                continue;
            }
            let token_start = previous
                .is_none_or(|p| matches!(p, '[' | '{' | ',' | ':' | '-' | '?' | ' ' | '\t'));
            match ch {
                '#' if previous.is_none_or(|p| p == ' ' || p == '\t') => break,
                '"' | '\'' if token_start => quote = Some(ch),
                '[' | '{' if token_start => {
                    depth += 1;
                    if depth > MAX_DEPTH {
                        return Err(format!(
                            "flow collections nest deeper than {MAX_DEPTH} levels at line {}",
                            number + 1
                        ));
                    }
                }
                ']' | '}' => depth = depth.saturating_sub(1),
                ' ' | '\t' | ',' | ':' | '-' | '?' => {}
                _ if token_start => plain = true,
                _ => {}
            }
            previous = Some(ch);
        }
        // A block scalar header ends its line outside flow: `key: |`, `- >-`, `|2`.
        if depth == 0 && quote.is_none() {
            let content = line.split(" #").next().unwrap_or(line).trim_end();
            let last = content.rsplit(' ').next().unwrap_or(content);
            let mut header = last.chars();
            if matches!(header.next(), Some('|' | '>'))
                && header.all(|c| matches!(c, '-' | '+' | '1'..='9'))
            {
                block_scalar = Some(indent);
            }
        }
    }
    Ok(())
}

/// Builds [`Node`]s, charging each against the shared budget.
#[derive(Clone, Copy)]
struct NodeSeed<'b> {
    budget: &'b Cell<usize>,
    /// How many lists, mappings and tags enclose the node being built.
    depth: usize,
}

impl<'b> NodeSeed<'b> {
    /// The seed for a child of a collection, failing past [`MAX_DEPTH`].
    fn nested<E: de::Error>(self) -> Result<NodeSeed<'b>, E> {
        if self.depth >= MAX_DEPTH {
            return Err(E::custom(format_args!(
                "document nests deeper than {MAX_DEPTH} levels"
            )));
        }
        Ok(NodeSeed {
            budget: self.budget,
            depth: self.depth + 1,
        })
    }

    /// Charges one node, failing once the budget is spent.
    fn charge<E: de::Error>(self) -> Result<(), E> {
        match self.budget.get().checked_sub(1) {
            Some(left) => {
                self.budget.set(left);
                Ok(())
            }
            None => Err(E::custom(format_args!(
                "document has more than {MAX_NODES} nodes (aliases expanded)"
            ))),
        }
    }
}

impl<'de> DeserializeSeed<'de> for NodeSeed<'_> {
    type Value = Node;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Node, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for NodeSeed<'_> {
    type Value = Node;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("any yaml value")
    }

    fn visit_none<E: de::Error>(self) -> Result<Node, E> {
        self.charge()?;
        Ok(Node::Empty)
    }

    fn visit_some<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Node, D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Node, E> {
        self.charge()?;
        Ok(Node::Null)
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<Node, E> {
        self.charge()?;
        Ok(Node::Bool(value))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Node, E> {
        self.charge()?;
        Ok(Node::Number(value.to_string()))
    }

    fn visit_i128<E: de::Error>(self, value: i128) -> Result<Node, E> {
        self.charge()?;
        Ok(Node::Number(value.to_string()))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Node, E> {
        self.charge()?;
        Ok(Node::Number(value.to_string()))
    }

    fn visit_u128<E: de::Error>(self, value: u128) -> Result<Node, E> {
        self.charge()?;
        Ok(Node::Number(value.to_string()))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Node, E> {
        self.charge()?;
        Ok(Node::Number(value.to_string()))
    }

    fn visit_char<E: de::Error>(self, value: char) -> Result<Node, E> {
        self.charge()?;
        Ok(Node::String(value.to_string()))
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Node, E> {
        self.charge()?;
        Ok(Node::String(value.to_owned()))
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<Node, E> {
        self.charge()?;
        Ok(Node::String(value))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        self.charge()?;
        let child = self.nested()?;
        // No capacity from `size_hint`: it comes from the untrusted document.
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(child)? {
            items.push(item);
        }
        Ok(Node::Sequence(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        self.charge()?;
        let child = self.nested()?;
        let mut entries = Vec::new();
        while let Some(key) = map.next_key_seed(child)? {
            let value = map.next_value_seed(child)?;
            entries.push((key, value));
        }
        Ok(Node::Mapping(entries))
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<Node, A::Error> {
        self.charge()?;
        let (tag, variant) = data.variant::<String>()?;
        let inner = variant.newtype_variant_seed(self.nested()?)?;
        Ok(Node::Tagged(tag, Box::new(inner)))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
    use super::*;

    fn s(text: &str) -> Node {
        Node::String(text.to_owned())
    }

    #[test]
    fn deep_flow_nesting_is_refused_before_the_parser_and_fast() {
        let deep = format!("a: {}{}\n", "[".repeat(20_000), "]".repeat(20_000));
        let started = std::time::Instant::now();
        let error = parse(&deep).unwrap_err();
        assert!(
            error.contains("flow collections nest deeper than 64 levels"),
            "{error}"
        );
        // Linear: far below the seconds the parser took (not a timing assertion on the
        // result, only a generous guard against the quadratic path coming back).
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        let deep = format!("a: {}\n", "{b: ".repeat(100));
        assert!(parse(&deep).unwrap_err().contains("nest deeper"));
    }

    #[test]
    fn brackets_that_are_not_flow_collections_are_not_counted() {
        let many = "[".repeat(100);
        for text in [
            format!("a: \"{many}\"\n"),
            format!("a: '{many}'\n"),
            format!("a: x{many}\n"),
            format!("a: 1 # {many}\n"),
            format!("script: |\n  if [[ -f x ]]; then echo {many}; fi\n  {many}\nb: [1, [2]]\n"),
            format!("- >-\n  {many}\n"),
        ] {
            assert!(check_flow_depth(&text).is_ok(), "{text}");
        }
        // Real nesting still counts after a block scalar ends.
        let text = format!("s: |\n  x\nb: {}{}\n", "[".repeat(65), "]".repeat(65));
        assert!(check_flow_depth(&text).is_err());
        // Up to the limit is fine.
        let text = format!("b: {}{}\n", "[".repeat(64), "]".repeat(64));
        assert!(check_flow_depth(&text).is_ok());
    }

    #[test]
    fn keeps_duplicate_keys_in_order() {
        let node = parse("a: 1\nb: x\na: true\n").unwrap();
        assert_eq!(
            node,
            Node::Mapping(vec![
                (s("a"), Node::Number("1".into())),
                (s("b"), s("x")),
                (s("a"), Node::Bool(true)),
            ])
        );
    }

    #[test]
    fn empty_and_null_documents_differ() {
        assert_eq!(parse("").unwrap(), Node::Empty);
        assert_eq!(parse("# only a comment\n").unwrap(), Node::Empty);
        assert_eq!(parse("null").unwrap(), Node::Null);
    }

    #[test]
    fn tags_are_kept() {
        let node = parse("!foo bar").unwrap();
        assert_eq!(node, Node::Tagged("foo".into(), Box::new(s("bar"))));
    }

    #[test]
    fn syntax_errors_are_one_line() {
        let error = parse("a: [1, 2\nb: 3").unwrap_err();
        assert!(!error.contains('\n'), "{error}");
    }

    #[test]
    fn quadratic_alias_expansion_is_cut() {
        let mut text = String::from("a: &a [");
        text.push_str(&"x,".repeat(400));
        text.push_str("x]\nb: [");
        text.push_str(&"*a,".repeat(400));
        text.push_str("*a]\n");
        let error = parse(&text).unwrap_err();
        assert!(error.contains("more than 100000 nodes"), "{error}");
    }

    #[test]
    fn deep_nesting_hits_the_recursion_limit() {
        // Flow nesting is refused by the pre-scan, block nesting by the walk: the same limit.
        let text = "[".repeat(10_000);
        let error = parse(&text).unwrap_err();
        assert!(error.contains("nest deeper than 64 levels"), "{error}");
        let text = format!("{}x\n", "- ".repeat(10_000));
        let error = parse(&text).unwrap_err();
        assert!(error.contains("nests deeper than 64 levels"), "{error}");
        let ok = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(parse(&ok).is_ok());
        let too_deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        assert!(parse(&too_deep).is_err());
    }
}
