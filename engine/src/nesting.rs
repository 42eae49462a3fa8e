//! How deep a YAML document nests, measured in one linear pass before the parser sees it.
//!
//! Why: the parser (libyaml, through serde_yaml) loads a whole document's events before the node
//! walk can apply its own depth limit, and deep nesting is expensive to load: flow nesting costs
//! time with the square of its depth (20 000 `[`, 40 KB, ran the engine component out of fuel),
//! and block nesting costs memory (half a million `? ` or `- ` levels in 1 MiB outgrew the
//! component's 256 MiB). Either ended as an internal failure with no audit record. Refused here,
//! both are an invalid document at `document`, in time and memory linear in its length.
//!
//! How: the pass follows libyaml's scanner exactly as far as nesting goes — its block indentation
//! stack (pushed by `- `, `? ` and `key:` at increasing columns, popped by any token left of
//! them), its flow level, and where tokens start and end: quoted scalars (across lines), plain
//! scalars (and their continuation lines), block scalars (by libyaml's indentation rules),
//! comments, anchors, aliases and tags. Sequences that libyaml opens without a token of their own
//! (a `- ` list at its key's column, a `key: value` pair inside `[ ]`) are counted too. So are
//! the mappings libyaml opens *around* what it already read: a simple key is only known to be one
//! when its `:` arrives, later on the line, and the mapping then starts before the key, so a key
//! that is itself a collection (`[[…]]: x`, at any level) ends one level deeper than it looked
//! while it was read. Each level keeps its key candidate with the deepest point since it, as
//! libyaml keeps one candidate per flow level. The count is of collections open at once, which is
//! what the node walk limits; only where libyaml would stop with a syntax error may the count
//! differ, and there the parser stops anyway. The `yaml_nesting` fuzz target checks the count
//! against libyaml's own events.

/// The deepest nesting of lists, mappings and tags accepted, counted here before the parser
/// and again by the node walk (`crate::yaml`, which re-exports it).
///
/// serde_yaml stops at 128, but 128 levels of its recursion need between 256 and 512 KiB of
/// stack in a debug build; half that keeps well inside a 1 MiB WebAssembly stack and a 2 MiB
/// test thread. A Taskpack needs a handful of levels.
pub const MAX_DEPTH: usize = 64;

/// The longest distance, in characters, between a simple key and its `:` (libyaml's limit).
const MAX_SIMPLE_KEY_CHARS: usize = 1024;

/// Refuses `text` if its collections nest deeper than [`MAX_DEPTH`] anywhere; one line.
pub(crate) fn check(text: &str) -> Result<(), String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut scan = Scan::default();
    for (index, line) in Lines(text).enumerate() {
        let chars: Vec<char> = line.chars().collect();
        scan.line(&chars).map_err(|Deep| {
            format!(
                "collections nest deeper than {MAX_DEPTH} levels at line {}",
                index + 1
            )
        })?;
    }
    Ok(())
}

/// Nesting went past [`MAX_DEPTH`].
struct Deep;

/// The text's lines, split where libyaml breaks lines: LF, CR, CR LF, NEL, LS and PS.
struct Lines<'t>(&'t str);

impl<'t> Iterator for Lines<'t> {
    type Item = &'t str;

    fn next(&mut self) -> Option<&'t str> {
        if self.0.is_empty() {
            return None;
        }
        let text = self.0;
        match text.char_indices().find(|(_, c)| is_break(*c)) {
            None => {
                self.0 = "";
                Some(text)
            }
            Some((at, ch)) => {
                let mut rest = text.get(at + ch.len_utf8()..).unwrap_or("");
                if ch == '\r' {
                    rest = rest.strip_prefix('\n').unwrap_or(rest);
                }
                self.0 = rest;
                text.get(..at)
            }
        }
    }
}

fn is_break(ch: char) -> bool {
    matches!(ch, '\n' | '\r' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

fn is_blank(ch: char) -> bool {
    ch == ' ' || ch == '\t'
}

/// One entry of libyaml's block indentation stack.
#[derive(Clone, Copy)]
struct Indent {
    column: usize,
    /// Opened by `- ` (a sequence) rather than by a key (a mapping).
    sequence: bool,
    /// A `- ` list at this mapping's own column is open: a sequence with no indentation level
    /// of its own.
    indentless: bool,
}

/// One open flow collection.
#[derive(Clone, Copy)]
struct Flow {
    sequence: bool,
    /// A `key: value` pair inside `[ ]` is open: a mapping with no bracket of its own.
    pair: bool,
    /// The simple key candidate directly inside this collection (libyaml's per-level one).
    key: Option<KeyCandidate>,
    /// The deepest this collection went, counting the mappings that keys inside it opened
    /// around what was read before their `:`.
    deepest: usize,
}

/// A token that becomes a simple key if a `:` follows on its line: libyaml then opens the
/// mapping (block, or a flow pair inside `[ ]`) before the token, around everything read since.
#[derive(Clone, Copy)]
struct KeyCandidate {
    /// Its column.
    start: usize,
    /// The deepest nesting read since it started (itself included).
    deepest: usize,
}

/// A block scalar (`|`, `>`) whose content lines are being skipped.
#[derive(Clone, Copy)]
struct BlockScalar {
    /// The content's indentation, once known (given by the header, or by the first non-empty
    /// line, libyaml's rule).
    indent: Option<usize>,
    /// The least indentation the content may have: one more than the enclosing block's.
    least: usize,
    /// The most spaces on the empty lines before the first content line.
    leading: usize,
}

#[derive(Default)]
struct Scan {
    indents: Vec<Indent>,
    flows: Vec<Flow>,
    /// Collections open with no token of their own (indentless sequences, flow pairs).
    implicit: usize,
    /// Inside a quoted scalar continuing on the next line: its quote character.
    quote: Option<char>,
    /// Inside a plain scalar that may continue on the next line.
    plain: bool,
    block: Option<BlockScalar>,
    /// libyaml's `simple_key_allowed`: whether the next token may begin a simple key.
    key_allowed: bool,
}

impl Scan {
    fn depth(&self) -> usize {
        self.indents.len() + self.flows.len() + self.implicit
    }

    fn check(&self) -> Result<(), Deep> {
        if self.depth() > MAX_DEPTH {
            Err(Deep)
        } else {
            Ok(())
        }
    }

    /// The enclosing block's column, or -1 at the top level (libyaml's `parser->indent`).
    fn top(&self) -> isize {
        self.indents
            .last()
            .map_or(-1, |i| isize::try_from(i.column).unwrap_or(isize::MAX))
    }

    /// libyaml's `unroll_indent`: a token at `column` closes the blocks right of it.
    fn unroll(&mut self, column: usize) {
        while let Some(top) = self.indents.last() {
            if top.column <= column {
                break;
            }
            if top.indentless {
                self.implicit -= 1;
            }
            self.indents.pop();
        }
    }

    /// libyaml's `roll_indent`: a block collection opens at `column` if it is right of the
    /// enclosing one. Whether it opened one.
    fn roll(&mut self, column: usize, sequence: bool) -> Result<bool, Deep> {
        let right = isize::try_from(column).is_ok_and(|c| c > self.top());
        if right {
            self.indents.push(Indent {
                column,
                sequence,
                indentless: false,
            });
        } else if sequence
            && let Some(top) = self.indents.last_mut()
            && top.column == column
            && !top.sequence
            && !top.indentless
        {
            top.indentless = true;
            self.implicit += 1;
        }
        self.check()?;
        Ok(right)
    }

    /// A token other than `- ` at the column of an indentless sequence ends it.
    fn end_indentless(&mut self, column: usize) {
        if let Some(top) = self.indents.last_mut()
            && top.column == column
            && top.indentless
        {
            top.indentless = false;
            self.implicit -= 1;
        }
    }

    /// libyaml's `save_simple_key`: the token starting at `column` is the current level's key
    /// candidate if a simple key may start here; otherwise the earlier candidate stays.
    fn save_key(&mut self, block_key: &mut Option<KeyCandidate>, column: usize) {
        if !self.key_allowed {
            return;
        }
        let candidate = Some(KeyCandidate {
            start: column,
            deepest: self.depth(),
        });
        match self.flows.last_mut() {
            Some(flow) => flow.key = candidate,
            None => *block_key = candidate,
        }
    }

    fn open_flow(&mut self, sequence: bool) -> Result<(), Deep> {
        self.flows.push(Flow {
            sequence,
            pair: false,
            key: None,
            deepest: 0,
        });
        let depth = self.depth();
        if let Some(flow) = self.flows.last_mut() {
            flow.deepest = depth;
        }
        self.check()
    }

    /// `]` or `}`: the collection's deepest point now lies inside the enclosing level's key
    /// candidate, if it has one.
    fn close_flow(&mut self, block_key: &mut Option<KeyCandidate>) {
        self.end_pair();
        let Some(closed) = self.flows.pop() else {
            return;
        };
        let enclosing_key = match self.flows.last_mut() {
            Some(flow) => {
                flow.deepest = flow.deepest.max(closed.deepest);
                &mut flow.key
            }
            None => block_key,
        };
        if let Some(key) = enclosing_key {
            key.deepest = key.deepest.max(closed.deepest);
        }
    }

    /// `?` or `:` directly inside `[ ]` opens a single-pair mapping. After a simple key (`key`,
    /// the candidate a `:` used) it opens before the key, so all read since is one level deeper.
    fn open_pair(&mut self, key: Option<KeyCandidate>) -> Result<(), Deep> {
        let mut deepest = self.depth();
        if let Some(flow) = self.flows.last_mut()
            && flow.sequence
            && !flow.pair
        {
            flow.pair = true;
            self.implicit += 1;
            deepest = deepest.max(key.map_or(0, |key| key.deepest)) + 1;
        }
        if let Some(flow) = self.flows.last_mut() {
            flow.deepest = flow.deepest.max(deepest);
        }
        if deepest > MAX_DEPTH {
            Err(Deep)
        } else {
            self.check()
        }
    }

    fn end_pair(&mut self) {
        if let Some(flow) = self.flows.last_mut()
            && flow.pair
        {
            flow.pair = false;
            self.implicit -= 1;
        }
    }

    fn line(&mut self, chars: &[char]) -> Result<(), Deep> {
        let mut at = 0;
        if let Some(block) = &mut self.block {
            let spaces = chars.iter().take_while(|c| **c == ' ').count();
            if chars.iter().all(|c| is_blank(*c)) {
                block.leading = block.leading.max(spaces);
                return Ok(());
            }
            let indent = *block
                .indent
                .get_or_insert(spaces.max(block.leading).max(block.least).max(1));
            if spaces >= indent {
                return Ok(());
            }
            self.block = None;
        }
        if self.flows.is_empty() {
            self.key_allowed = true;
        }
        // A simple key ends on its line: every level's candidate goes stale here.
        for flow in &mut self.flows {
            flow.key = None;
        }
        if let Some(quote) = self.quote {
            match end_of_quote(chars, 0, quote) {
                Some(end) => {
                    self.quote = None;
                    self.key_allowed = false;
                    at = end;
                }
                None => return Ok(()),
            }
        }
        // A plain scalar goes on while the next non-empty line is indented right of the
        // enclosing block (any indentation inside flow) and is no comment or document marker.
        let mut plain = false;
        if self.plain {
            let Some(first) = chars.iter().position(|c| !is_blank(*c)) else {
                return Ok(());
            };
            let indented = !self.flows.is_empty()
                || isize::try_from(first).is_ok_and(|column| column > self.top());
            plain = indented
                && chars.get(first) != Some(&'#')
                && !(first == 0 && document_marker(chars));
            if plain {
                at = first;
            }
            self.plain = false;
        }
        // This line's simple key candidate at flow level 0; those inside flow collections are
        // kept with them. It goes stale at the end of the line.
        let mut key: Option<KeyCandidate> = None;
        let mut blank_before = true;
        // libyaml skips a byte order mark at the start of any line before a token, and counts
        // it as a column: the line's tokens start at column 1.
        if !plain && at == 0 && chars.first() == Some(&'\u{feff}') {
            at = 1;
        }
        while let Some(&ch) = chars.get(at) {
            let next = chars.get(at + 1).copied();
            let blankz_next = next.is_none_or(is_blank);
            if plain {
                if is_blank(ch) {
                    blank_before = true;
                    at += 1;
                    continue;
                }
                let ends = (blank_before && ch == '#')
                    || (ch == ':' && blankz_next)
                    || (!self.flows.is_empty() && matches!(ch, ',' | '[' | ']' | '{' | '}'));
                if !ends {
                    blank_before = false;
                    at += 1;
                    continue;
                }
                plain = false;
            }
            if is_blank(ch) {
                blank_before = true;
                at += 1;
                continue;
            }
            if ch == '#' {
                // A comment, wherever a token could start (libyaml's rule).
                return Ok(());
            }
            blank_before = false;
            let block_context = self.flows.is_empty();
            let entry = ch == '-' && blankz_next;
            if block_context {
                self.unroll(at);
                if !entry {
                    self.end_indentless(at);
                }
            }
            match ch {
                '%' if at == 0 => return Ok(()),
                '-' | '.' if at == 0 && block_context && document_marker(chars) => {
                    self.unroll_all();
                    key = None;
                    self.key_allowed = false;
                    at += 3;
                }
                '[' | '{' => {
                    self.save_key(&mut key, at);
                    self.open_flow(ch == '[')?;
                    self.key_allowed = true;
                    at += 1;
                }
                ']' | '}' => {
                    self.close_flow(&mut key);
                    self.key_allowed = false;
                    at += 1;
                }
                ',' => {
                    self.end_pair();
                    self.remove_key(&mut key);
                    self.key_allowed = true;
                    at += 1;
                }
                '-' if entry => {
                    if block_context {
                        self.roll(at, true)?;
                    }
                    self.remove_key(&mut key);
                    self.key_allowed = true;
                    at += 1;
                }
                '?' if !block_context || blankz_next => {
                    self.remove_key(&mut key);
                    if block_context {
                        self.roll(at, false)?;
                    } else {
                        self.open_pair(None)?;
                    }
                    self.key_allowed = block_context;
                    at += 1;
                }
                ':' if !block_context || blankz_next => {
                    // libyaml's `stale_simple_keys`: a candidate too far back is no key.
                    let used = self
                        .take_key(&mut key)
                        .filter(|key| at - key.start <= MAX_SIMPLE_KEY_CHARS);
                    if block_context {
                        let column = used.map_or(at, |key| key.start);
                        // A block mapping opened at the key holds what was read since it.
                        if self.roll(column, false)?
                            && used.is_some_and(|key| key.deepest + 1 > MAX_DEPTH)
                        {
                            return Err(Deep);
                        }
                    } else {
                        self.open_pair(used)?;
                    }
                    self.key_allowed = block_context;
                    at += 1;
                }
                '|' | '>' if block_context => {
                    // The rest of the line is the header; the content follows.
                    if let Some(increment) = block_header(chars.get(at + 1..).unwrap_or(&[])) {
                        let base = usize::try_from(self.top()).unwrap_or(0);
                        self.block = Some(BlockScalar {
                            indent: increment.map(|n| if self.top() >= 0 { base + n } else { n }),
                            least: usize::try_from(self.top() + 1).unwrap_or(0),
                            leading: 0,
                        });
                        self.key_allowed = true;
                    }
                    return Ok(());
                }
                '\'' | '"' => {
                    self.save_key(&mut key, at);
                    self.key_allowed = false;
                    match end_of_quote(chars, at + 1, ch) {
                        Some(end) => at = end,
                        None => {
                            self.quote = Some(ch);
                            return Ok(());
                        }
                    }
                }
                '&' | '*' => {
                    self.save_key(&mut key, at);
                    self.key_allowed = false;
                    at += 1;
                    while chars
                        .get(at)
                        .is_some_and(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
                    {
                        at += 1;
                    }
                }
                '!' => {
                    self.save_key(&mut key, at);
                    self.key_allowed = false;
                    at += 1;
                    if chars.get(at) == Some(&'<') {
                        // A verbatim tag may hold `[`, `]` and `,`: it ends at `>`.
                        while chars.get(at).is_some_and(|c| *c != '>') {
                            at += 1;
                        }
                        at += 1;
                    } else {
                        // Shorthand tags hold no flow indicator (libyaml refuses one after them
                        // but a `,` in flow); stopping at any is the safe side.
                        while chars.get(at).is_some_and(|c| {
                            !is_blank(*c) && !matches!(c, ',' | '[' | ']' | '{' | '}')
                        }) {
                            at += 1;
                        }
                    }
                }
                _ => {
                    self.save_key(&mut key, at);
                    self.key_allowed = false;
                    plain = true;
                    at += 1;
                }
            }
        }
        self.plain = plain;
        Ok(())
    }

    /// The current level's key candidate, taken (used by a `:`, or removed by a token that
    /// cannot follow a key).
    fn take_key(&mut self, block_key: &mut Option<KeyCandidate>) -> Option<KeyCandidate> {
        match self.flows.last_mut() {
            Some(flow) => flow.key.take(),
            None => block_key.take(),
        }
    }

    fn remove_key(&mut self, block_key: &mut Option<KeyCandidate>) {
        self.take_key(block_key);
    }

    /// `---` or `...`: every block closes.
    fn unroll_all(&mut self) {
        self.indents.clear();
        self.implicit = self.flows.iter().filter(|f| f.pair).count();
    }
}

/// `---` or `...` at the start of a line, followed by a blank or the line's end.
fn document_marker(chars: &[char]) -> bool {
    let marker = |c: char| {
        chars
            .get(..3)
            .is_some_and(|head| head.iter().all(|h| *h == c))
    };
    (marker('-') || marker('.')) && chars.get(3).is_none_or(|c| is_blank(*c))
}

/// Where a quoted scalar opened before `from` ends on this line (just after its closing quote),
/// or `None` if it goes on to the next line.
fn end_of_quote(chars: &[char], from: usize, quote: char) -> Option<usize> {
    let mut at = from;
    while let Some(&ch) = chars.get(at) {
        if quote == '"' && ch == '\\' {
            at += 2;
            continue;
        }
        if ch == quote {
            if quote == '\'' && chars.get(at + 1) == Some(&'\'') {
                at += 2;
                continue;
            }
            return Some(at + 1);
        }
        at += 1;
    }
    None
}

/// A block scalar header after `|` or `>`: chomping and indentation indicators in either order,
/// then blanks and an optional comment. `Some(increment)` when well-formed (libyaml refuses the
/// rest).
fn block_header(rest: &[char]) -> Option<Option<usize>> {
    let mut increment = None;
    let mut chomping = false;
    let mut at = 0;
    while let Some(&ch) = rest.get(at) {
        match ch {
            '+' | '-' if !chomping => chomping = true,
            '1'..='9' if increment.is_none() => increment = ch.to_digit(10).map(|d| d as usize),
            _ => break,
        }
        at += 1;
    }
    let tail = rest.get(at..).unwrap_or(&[]);
    match tail.iter().find(|c| !is_blank(**c)) {
        None | Some('#') => Some(increment),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    fn depth_ok(text: &str) -> bool {
        check(text).is_ok()
    }

    fn nested(unit: &str, levels: usize, tail: &str) -> String {
        format!("{}{tail}", unit.repeat(levels))
    }

    #[test]
    fn every_kind_of_nesting_is_counted() {
        // Each unit opens `levels` collections.
        for (unit, levels, tail) in [
            ("[", 1, ""),
            ("{a: ", 1, "x"),
            ("- ", 1, "x"),
            ("? ", 1, "x"),
            ("- ? ", 2, "x"),
            ("[a: ", 2, "x"),
            ("!t [", 1, "x"),
            ("&a [", 1, "x"),
        ] {
            let most = MAX_DEPTH / levels;
            assert!(depth_ok(&nested(unit, most, tail)), "{unit}");
            let deep = nested(unit, most + 1, tail);
            assert!(!depth_ok(&deep), "{unit}");
            let deep = nested(unit, 20_000, tail);
            assert!(check(&deep).unwrap_err().contains("line 1"), "{unit}");
        }
        // Block nesting by indentation alone, and keys on their own lines.
        let mut text = String::new();
        for level in 0..=MAX_DEPTH {
            text.push_str(&format!("{}k{level}:\n", " ".repeat(level)));
        }
        assert!(check(&text).unwrap_err().contains("line 65"));
        let mut text = String::new();
        for level in 0..=MAX_DEPTH {
            text.push_str(&format!("{}-\n", " ".repeat(level)));
        }
        assert!(!depth_ok(&text));
        // A `- ` list at its key's column nests one level more than its indentation says.
        let mut text = String::new();
        for level in 0..=MAX_DEPTH / 2 {
            text.push_str(&format!(
                "{}k:\n{}- ",
                " ".repeat(level * 2),
                " ".repeat(level * 2)
            ));
            text.push('\n');
        }
        assert!(!depth_ok(&text));
    }

    #[test]
    fn what_is_not_structure_is_not_counted() {
        let many = "[".repeat(100);
        let deep = "- ".repeat(100);
        for text in [
            format!("a: \"{many}\"\n"),
            format!("a: '{many}'\n"),
            format!("a: \"x\n  {many} {deep}\"\n"),
            format!("a: 'it''s\n  {many}'\n"),
            format!("a: x{many}\n"),
            format!("a: x {many}\n  {deep}\n"),
            format!("a: 1 # {many}\n"),
            format!("#{many}\n"),
            format!(
                "script: |\n  if [[ -f x ]]; then echo {many}; fi\n  {many}\n\n  {deep}\nb: [1, [2]]\n"
            ),
            format!("- >-\n  {many}\n"),
            format!("a: !<tag:x,[{many}> y\n"),
            format!("s: |# comment\n  {many}\n"),
        ] {
            assert!(depth_ok(&text), "{text}");
        }
        // Real nesting still counts after each of those ends.
        let closing = format!("{}{}", "[".repeat(65), "]".repeat(65));
        for text in [
            format!("s: |\n  x\nb: {closing}\n"),
            format!("s: \"x\n y\"\nb: {closing}\n"),
            format!("s: x\n  y\nb: {closing}\n"),
            format!("s: |2\n    x\nb: {closing}\n"),
        ] {
            assert!(!depth_ok(&text), "{text}");
        }
    }

    #[test]
    fn a_key_that_is_a_collection_nests_one_level_deeper_once_its_colon_arrives() {
        // libyaml opens the mapping before the key when the `:` arrives, around all it read.
        let most = MAX_DEPTH - 1;
        let key = |levels: usize| format!("{}{}", "[".repeat(levels), "]".repeat(levels));
        // At the top level: a block mapping.
        assert!(depth_ok(&format!("{}: x\n", key(most))));
        assert!(!depth_ok(&format!("{}: x\n", key(most + 1))));
        // Inside `[ ]`: a single-pair mapping, even with a scalar between the key and `:`
        // (a token that cannot start a key leaves the candidate in place).
        assert!(depth_ok(&format!("[{}: x]\n", key(most - 1))));
        assert!(!depth_ok(&format!("[{}: x]\n", key(most))));
        assert!(!depth_ok(&format!("[{} y: x]\n", key(most))));
        // Nested keys add up: the fuzzer's find (libyaml 65 deep, counted 63 before).
        let found = include_str!("../tests/nesting/fuzz-nested-flow-keys.yaml");
        assert!(!depth_ok(found));
        // The key goes stale at the end of its line, and after 1024 characters.
        assert!(depth_ok(&format!("[{}\n: x]\n", key(most))));
        let far = " ".repeat(MAX_SIMPLE_KEY_CHARS);
        assert!(depth_ok(&format!("[{}{far}: x]\n", key(most))));
        // A `,` ends the candidate; a new one is a scalar.
        assert!(depth_ok(&format!("[{}, y: x]\n", key(most))));
    }

    #[test]
    fn a_byte_order_mark_starting_a_line_is_skipped() {
        // The fuzzer's find: `- ? ` pairs after a mark on the second line, read as text before.
        let found = include_str!("../tests/nesting/fuzz-byte-order-mark-line.yaml");
        assert!(!depth_ok(found));
        let deep = format!("a:\n\u{feff}{}x\n", "- ".repeat(MAX_DEPTH));
        assert!(!depth_ok(&deep));
        let shallow = format!("a:\n\u{feff}{}x\n", "- ".repeat(MAX_DEPTH - 1));
        assert!(depth_ok(&shallow));
        // Inside a plain scalar's continuation it is text.
        let text = format!("b\n\u{feff}{}x\n", "- ".repeat(MAX_DEPTH + 1));
        assert!(depth_ok(&text));
    }

    #[test]
    fn libyaml_line_breaks_split_lines() {
        // U+2028 is a line break to libyaml: the second line's `- ` are tokens, not text.
        let text = format!("a:\u{2028}{}x\n", "- ".repeat(70));
        assert!(!depth_ok(&text));
        let text = format!("a:\r{}x\r\n", "- ".repeat(70));
        assert!(!depth_ok(&text));
    }

    #[test]
    fn the_example_taskpack_passes() {
        let text = include_str!("../../tests/fixtures/taskpack.yaml");
        assert!(depth_ok(text));
    }
}
