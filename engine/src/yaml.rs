//! Bounded YAML parsing into a plain tree that keeps duplicate keys and document order.
//!
//! Why not `serde_yaml::Value`: it stops at the first duplicate key with a document-level error,
//! but the policy contract wants every offending field path, duplicates included, so the tree
//! here keeps mappings as ordered `(key, value)` lists and the validator reports repeats where
//! they are. Why a node budget: serde_yaml bounds nesting (depth 128) and alias jumps (100 per
//! event), but one large anchored list referenced by many aliases still expands quadratically
//! within those limits. Every node built (aliases expanded) is counted against a fixed budget far
//! above what a Taskpack needs, and nesting is cut at half serde_yaml's depth to bound the stack.
//! Why a pass before the parser ([`check_nesting`]): the parser loads every event before the walk
//! runs, and deep nesting makes that loading quadratic in time or huge in memory.
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

/// The deepest nesting accepted: the limit the count before the parser and the node walk
/// share, kept beside the count ([`crate::nesting`]) so that the two modules import one way.
pub use crate::nesting::MAX_DEPTH;

/// Parses one YAML document into a [`Node`], or says why it cannot (one line).
pub fn parse(text: &str) -> Result<Node, String> {
    check_nesting(text)?;
    let budget = Cell::new(MAX_NODES);
    let deserializer = serde_yaml::Deserializer::from_str(text);
    NodeSeed {
        budget: &budget,
        depth: 0,
    }
    .deserialize(deserializer)
    .map_err(|error| crate::text::one_line(&error.to_string()))
}

/// Refuses, in one linear pass before the parser sees the text, collections (flow or block)
/// nested deeper than [`MAX_DEPTH`]: deep nesting costs the parser time (flow) or memory (block)
/// before the node walk could say anything. See [`crate::nesting`].
pub fn check_nesting(text: &str) -> Result<(), String> {
    crate::nesting::check(text)
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

    /// Issue 16: 20 000 `[` (40 KB) ran the component out of fuel, half a million `? ` (1 MiB)
    /// out of memory. Every kind of nesting is refused by the linear pass: its message (with a
    /// line number) shows the parser never ran.
    #[test]
    fn deep_nesting_of_every_kind_is_refused_before_the_parser() {
        for levels in [20_000, 100_000] {
            for deep in [
                format!("a: {}{}\n", "[".repeat(levels), "]".repeat(levels)),
                format!("a: {}\n", "[".repeat(levels)),
                format!("a: {}x{}\n", "{b: ".repeat(levels), "}".repeat(levels)),
                format!("{}x\n", "- ".repeat(levels)),
                format!("{}x\n", "? ".repeat(levels)),
                format!("a: {}x\n", "- ? ".repeat(levels)),
                format!("a: {}x\n", "[b: ".repeat(levels)),
            ] {
                let error = parse(&deep).unwrap_err();
                assert!(
                    error.starts_with("collections nest deeper than 64 levels at line "),
                    "{error}"
                );
            }
        }
        // Indentation alone (one level per line) costs the square of the depth in bytes, so a
        // 1 MiB document holds about 1 400 levels.
        let deep: String = (0..1_400)
            .map(|n| format!("{}k:\n", " ".repeat(n)))
            .collect();
        assert!(
            parse(&deep)
                .unwrap_err()
                .contains("nest deeper than 64 levels at line 65")
        );
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
        // Collections are counted before parsing; tags nest in the tree too, and the walk
        // counts them against the same limit.
        let ok = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(parse(&ok).is_ok());
        let too_deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        assert!(
            parse(&too_deep)
                .unwrap_err()
                .contains("nest deeper than 64")
        );
        let ok = format!("{}x\n", "- ".repeat(MAX_DEPTH));
        assert!(parse(&ok).is_ok());
        let tagged = format!("{}x{}", "!t [".repeat(40), "]".repeat(40));
        assert!(check_nesting(&tagged).is_ok());
        let error = parse(&tagged).unwrap_err();
        assert!(
            error.contains("document nests deeper than 64 levels"),
            "{error}"
        );
    }
}
