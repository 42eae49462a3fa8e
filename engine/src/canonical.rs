//! Canonical JSON written straight from `Serialize`: every object's keys sorted by their UTF-8
//! bytes, no whitespace, strings escaped as serde_json escapes them.
//!
//! Why not `serde_json::to_value` and then `to_string` (what the engine did before): that builds
//! a tree with a heap string per key and a node per value, then walks it again; on the
//! component's hot path it cost more than the decision's own logic. Here each object's members
//! are written in the order `Serialize` gives them, with their extents noted; an object whose
//! keys did not arrive sorted has its members moved into order once, when it closes. The bytes
//! are exactly those of the `Value` route (a property test holds the two together), so digests of
//! earlier records still verify.

use serde::ser::{self, Error as _, Impossible, Serialize};

type Error = serde_json::Error;
type Result<T> = std::result::Result<T, Error>;

/// Canonical JSON of `value`: sorted keys, no whitespace.
///
/// Errors as `serde_json::to_value` would: a map key that is not a string, a number, a bool or
/// a unit variant, or a `Serialize` impl that fails.
pub fn to_string<T: Serialize + ?Sized>(value: &T) -> Result<String> {
    let mut writer = Writer {
        out: Vec::with_capacity(4096),
    };
    value.serialize(&mut writer)?;
    // Only `serde_json`'s escaping and our ASCII punctuation ever reach the buffer.
    String::from_utf8(writer.out).map_err(Error::custom)
}

struct Writer {
    out: Vec<u8>,
}

impl Writer {
    fn string(&mut self, text: &str) -> Result<()> {
        serde_json::to_writer(&mut self.out, text)
    }

    /// Opens an object; its members are added with [`Object::member`].
    fn open_object(&mut self) -> Object {
        self.out.push(b'{');
        Object {
            body_start: self.out.len(),
            members: Vec::new(),
        }
    }
}

/// One member of an object being written: its key and where `"key":value` lies in the buffer.
struct Member {
    key: String,
    start: usize,
    end: usize,
}

/// An object whose members are being written.
struct Object {
    /// Where the first member starts (just after `{`).
    body_start: usize,
    members: Vec<Member>,
}

impl Object {
    fn member<T: Serialize + ?Sized>(
        &mut self,
        writer: &mut Writer,
        key: String,
        value: &T,
    ) -> Result<()> {
        if !self.members.is_empty() {
            writer.out.push(b',');
        }
        let start = writer.out.len();
        writer.string(&key)?;
        writer.out.push(b':');
        value.serialize(&mut *writer)?;
        self.members.push(Member {
            key,
            start,
            end: writer.out.len(),
        });
        Ok(())
    }

    /// Closes the object, moving its members into key order if they did not arrive in it. A
    /// key given twice keeps its last value, as a map built from the members would.
    fn close(mut self, writer: &mut Writer) {
        let in_order = self
            .members
            .windows(2)
            .all(|pair| matches!(pair, [a, b] if a.key < b.key));
        if !in_order {
            let body = writer.out.split_off(self.body_start);
            // Stable, so among equal keys the last given stays last.
            self.members.sort_by(|a, b| a.key.cmp(&b.key));
            let mut first = true;
            for (index, member) in self.members.iter().enumerate() {
                let superseded = self
                    .members
                    .get(index + 1)
                    .is_some_and(|next| next.key == member.key);
                if superseded {
                    continue;
                }
                if !first {
                    writer.out.push(b',');
                }
                first = false;
                let extent = member.start - self.body_start..member.end - self.body_start;
                // Always inside `body`: the extents were taken from the buffer it was split off.
                writer
                    .out
                    .extend_from_slice(body.get(extent).unwrap_or_default());
            }
        }
        writer.out.push(b'}');
    }
}

impl<'a> ser::Serializer for &'a mut Writer {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Seq<'a>;
    type SerializeTuple = Seq<'a>;
    type SerializeTupleStruct = Seq<'a>;
    type SerializeTupleVariant = VariantSeq<'a>;
    type SerializeMap = Map<'a>;
    type SerializeStruct = Map<'a>;
    type SerializeStructVariant = VariantMap<'a>;

    fn serialize_bool(self, v: bool) -> Result<()> {
        self.out
            .extend_from_slice(if v { b"true" } else { b"false" });
        Ok(())
    }
    fn serialize_i8(self, v: i8) -> Result<()> {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i16(self, v: i16) -> Result<()> {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i32(self, v: i32) -> Result<()> {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i64(self, v: i64) -> Result<()> {
        serde_json::to_writer(&mut self.out, &v)
    }
    fn serialize_i128(self, v: i128) -> Result<()> {
        // `Value` holds only what fits 64 bits; so does this.
        match (i64::try_from(v), u64::try_from(v)) {
            (Ok(small), _) => self.serialize_i64(small),
            (_, Ok(large)) => self.serialize_u64(large),
            _ => Err(Error::custom("number out of range")),
        }
    }
    fn serialize_u8(self, v: u8) -> Result<()> {
        self.serialize_u64(u64::from(v))
    }
    fn serialize_u16(self, v: u16) -> Result<()> {
        self.serialize_u64(u64::from(v))
    }
    fn serialize_u32(self, v: u32) -> Result<()> {
        self.serialize_u64(u64::from(v))
    }
    fn serialize_u64(self, v: u64) -> Result<()> {
        serde_json::to_writer(&mut self.out, &v)
    }
    fn serialize_u128(self, v: u128) -> Result<()> {
        match u64::try_from(v) {
            Ok(small) => self.serialize_u64(small),
            Err(_) => Err(Error::custom("number out of range")),
        }
    }
    fn serialize_f32(self, v: f32) -> Result<()> {
        // `Value` widens an f32 to f64 before it is written.
        self.serialize_f64(f64::from(v))
    }
    fn serialize_f64(self, v: f64) -> Result<()> {
        if v.is_finite() {
            serde_json::to_writer(&mut self.out, &v)
        } else {
            self.serialize_unit()
        }
    }
    fn serialize_char(self, v: char) -> Result<()> {
        self.string(v.encode_utf8(&mut [0; 4]))
    }
    fn serialize_str(self, v: &str) -> Result<()> {
        self.string(v)
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<()> {
        v.serialize(self)
    }
    fn serialize_none(self) -> Result<()> {
        self.serialize_unit()
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<()> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<()> {
        self.out.extend_from_slice(b"null");
        Ok(())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<()> {
        self.serialize_unit()
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<()> {
        self.string(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<()> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<()> {
        let mut object = self.open_object();
        object.member(self, variant.to_owned(), value)?;
        object.close(self);
        Ok(())
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Seq<'a>> {
        self.out.push(b'[');
        Ok(Seq {
            writer: self,
            first: true,
        })
    }
    fn serialize_tuple(self, len: usize) -> Result<Seq<'a>> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(self, _name: &'static str, len: usize) -> Result<Seq<'a>> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<VariantSeq<'a>> {
        // `{"variant":[…]}`: one member, so already in order.
        self.out.push(b'{');
        self.string(variant)?;
        self.out.extend_from_slice(b":[");
        Ok(VariantSeq {
            seq: Seq {
                writer: self,
                first: true,
            },
        })
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Map<'a>> {
        let object = self.open_object();
        Ok(Map {
            writer: self,
            object,
            pending_key: None,
        })
    }
    fn serialize_struct(self, _name: &'static str, len: usize) -> Result<Map<'a>> {
        self.serialize_map(Some(len))
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<VariantMap<'a>> {
        self.out.push(b'{');
        self.string(variant)?;
        self.out.push(b':');
        Ok(VariantMap {
            map: self.serialize_map(Some(len))?,
        })
    }
}

/// An array being written.
struct Seq<'a> {
    writer: &'a mut Writer,
    first: bool,
}

impl Seq<'_> {
    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        if !self.first {
            self.writer.out.push(b',');
        }
        self.first = false;
        value.serialize(&mut *self.writer)
    }

    fn close(self) {
        self.writer.out.push(b']');
    }
}

impl ser::SerializeSeq for Seq<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        self.element(value)
    }
    fn end(self) -> Result<()> {
        self.close();
        Ok(())
    }
}

impl ser::SerializeTuple for Seq<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        self.element(value)
    }
    fn end(self) -> Result<()> {
        self.close();
        Ok(())
    }
}

impl ser::SerializeTupleStruct for Seq<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        self.element(value)
    }
    fn end(self) -> Result<()> {
        self.close();
        Ok(())
    }
}

/// `{"variant":[…]}` being written.
struct VariantSeq<'a> {
    seq: Seq<'a>,
}

impl ser::SerializeTupleVariant for VariantSeq<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        self.seq.element(value)
    }
    fn end(self) -> Result<()> {
        let writer = self.seq.writer;
        writer.out.extend_from_slice(b"]}");
        Ok(())
    }
}

/// An object (a map or a struct) being written.
struct Map<'a> {
    writer: &'a mut Writer,
    object: Object,
    /// A map's key, between `serialize_key` and `serialize_value`.
    pending_key: Option<String>,
}

impl Map<'_> {
    fn close(self) {
        self.object.close(self.writer);
    }
}

impl ser::SerializeMap for Map<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<()> {
        self.pending_key = Some(key.serialize(KeyWriter)?);
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        let key = self
            .pending_key
            .take()
            .ok_or_else(|| Error::custom("a map value without its key"))?;
        self.object.member(self.writer, key, value)
    }
    fn end(self) -> Result<()> {
        self.close();
        Ok(())
    }
}

impl ser::SerializeStruct for Map<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<()> {
        self.object.member(self.writer, key.to_owned(), value)
    }
    fn end(self) -> Result<()> {
        self.close();
        Ok(())
    }
}

/// `{"variant":{…}}` being written.
struct VariantMap<'a> {
    map: Map<'a>,
}

impl ser::SerializeStructVariant for VariantMap<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<()> {
        ser::SerializeStruct::serialize_field(&mut self.map, key, value)
    }
    fn end(self) -> Result<()> {
        let VariantMap { map } = self;
        let writer = map.writer;
        map.object.close(writer);
        writer.out.push(b'}');
        Ok(())
    }
}

/// A map key, as `serde_json`'s `Value` turns one into a string.
struct KeyWriter;

fn key_must_be_a_string() -> Error {
    Error::custom("key must be a string")
}

impl ser::Serializer for KeyWriter {
    type Ok = String;
    type Error = Error;
    type SerializeSeq = Impossible<String, Error>;
    type SerializeTuple = Impossible<String, Error>;
    type SerializeTupleStruct = Impossible<String, Error>;
    type SerializeTupleVariant = Impossible<String, Error>;
    type SerializeMap = Impossible<String, Error>;
    type SerializeStruct = Impossible<String, Error>;
    type SerializeStructVariant = Impossible<String, Error>;

    fn serialize_bool(self, v: bool) -> Result<String> {
        Ok(v.to_string())
    }
    fn serialize_i8(self, v: i8) -> Result<String> {
        Ok(v.to_string())
    }
    fn serialize_i16(self, v: i16) -> Result<String> {
        Ok(v.to_string())
    }
    fn serialize_i32(self, v: i32) -> Result<String> {
        Ok(v.to_string())
    }
    fn serialize_i64(self, v: i64) -> Result<String> {
        Ok(v.to_string())
    }
    fn serialize_i128(self, v: i128) -> Result<String> {
        Ok(v.to_string())
    }
    fn serialize_u8(self, v: u8) -> Result<String> {
        Ok(v.to_string())
    }
    fn serialize_u16(self, v: u16) -> Result<String> {
        Ok(v.to_string())
    }
    fn serialize_u32(self, v: u32) -> Result<String> {
        Ok(v.to_string())
    }
    fn serialize_u64(self, v: u64) -> Result<String> {
        Ok(v.to_string())
    }
    fn serialize_u128(self, v: u128) -> Result<String> {
        Ok(v.to_string())
    }
    fn serialize_f32(self, _v: f32) -> Result<String> {
        Err(key_must_be_a_string())
    }
    fn serialize_f64(self, _v: f64) -> Result<String> {
        Err(key_must_be_a_string())
    }
    fn serialize_char(self, v: char) -> Result<String> {
        Ok(v.to_string())
    }
    fn serialize_str(self, v: &str) -> Result<String> {
        Ok(v.to_owned())
    }
    fn serialize_bytes(self, _v: &[u8]) -> Result<String> {
        Err(key_must_be_a_string())
    }
    fn serialize_none(self) -> Result<String> {
        Err(key_must_be_a_string())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, _value: &T) -> Result<String> {
        Err(key_must_be_a_string())
    }
    fn serialize_unit(self) -> Result<String> {
        Err(key_must_be_a_string())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<String> {
        Err(key_must_be_a_string())
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<String> {
        Ok(variant.to_owned())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<String> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _value: &T,
    ) -> Result<String> {
        Err(key_must_be_a_string())
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Self::SerializeSeq> {
        Err(key_must_be_a_string())
    }
    fn serialize_tuple(self, _len: usize) -> Result<Self::SerializeTuple> {
        Err(key_must_be_a_string())
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleStruct> {
        Err(key_must_be_a_string())
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleVariant> {
        Err(key_must_be_a_string())
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Self::SerializeMap> {
        Err(key_must_be_a_string())
    }
    fn serialize_struct(self, _name: &'static str, _len: usize) -> Result<Self::SerializeStruct> {
        Err(key_must_be_a_string())
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStructVariant> {
        Err(key_must_be_a_string())
    }
}

#[cfg(test)]
mod tests {
    //! The `Value` route is the definition of canonical here: these tests hold the direct
    //! writer to its bytes.
    use std::collections::BTreeMap;

    use proptest::prelude::*;
    use serde::Serialize;
    use serde::ser::{SerializeMap, SerializeSeq};
    use serde_json::Value;

    fn through_value<T: Serialize>(value: &T) -> String {
        serde_json::to_value(value)
            .and_then(|v| serde_json::to_string(&v))
            .unwrap_or_else(|e| format!("error: {e}"))
    }

    fn direct<T: Serialize>(value: &T) -> String {
        super::to_string(value).unwrap_or_else(|e| format!("error: {e}"))
    }

    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Unsorted {
        zeta: u32,
        alpha: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        skipped: Option<u8>,
        middle: Vec<Inner>,
        #[serde(rename = "Ünïcode key \"quoted\"")]
        unicode: char,
        neg: i64,
        float: f32,
        not_a_number: f64,
        kinds: Vec<Kind>,
        map: BTreeMap<u16, bool>,
        bytes: serde_bytes_like::Bytes,
        unit: (),
    }

    #[derive(Serialize)]
    struct Inner {
        b: &'static str,
        a: [u8; 2],
        #[serde(flatten)]
        rest: BTreeMap<String, u8>,
    }

    #[derive(Serialize)]
    #[serde(rename_all = "kebab-case")]
    enum Kind {
        UnitCase,
        Newtype(Inner),
        Tuple(u8, &'static str),
        Struct { y: u8, x: u8 },
    }

    mod serde_bytes_like {
        pub struct Bytes(pub Vec<u8>);
        impl serde::Serialize for Bytes {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_bytes(&self.0)
            }
        }
    }

    #[test]
    fn every_serde_shape_gives_the_bytes_of_the_value_route() {
        let inner = || Inner {
            b: "tab\there, newline\n, nul \u{0}, emoji 🦀",
            a: [0, 255],
            rest: BTreeMap::from([("c".to_owned(), 1), ("a0".to_owned(), 2)]),
        };
        let value = Unsorted {
            zeta: u32::MAX,
            alpha: None,
            skipped: None,
            middle: vec![inner(), inner()],
            unicode: '\u{7f}',
            neg: i64::MIN,
            float: 1.1,
            not_a_number: f64::NAN,
            kinds: vec![
                Kind::UnitCase,
                Kind::Newtype(inner()),
                Kind::Tuple(7, "seven"),
                Kind::Struct { y: 2, x: 1 },
            ],
            map: BTreeMap::from([(10, true), (9, false)]),
            bytes: serde_bytes_like::Bytes(vec![1, 2, 3]),
            unit: (),
        };
        let expected = through_value(&value);
        assert!(!expected.starts_with("error"), "{expected}");
        assert_eq!(direct(&value), expected);
    }

    #[test]
    fn a_key_given_twice_keeps_its_last_value_as_a_map_would() {
        struct Duplicate;
        impl Serialize for Duplicate {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut map = s.serialize_map(None)?;
                map.serialize_entry("b", &1)?;
                map.serialize_entry("a", &2)?;
                map.serialize_entry("b", &3)?;
                map.end()
            }
        }
        assert_eq!(direct(&Duplicate), r#"{"a":2,"b":3}"#);
        assert_eq!(direct(&Duplicate), through_value(&Duplicate));
    }

    #[test]
    fn keys_that_value_refuses_are_refused() {
        let list_keys = BTreeMap::from([(vec![1_u8], 1)]);
        assert!(super::to_string(&list_keys).is_err());
        assert!(serde_json::to_value(&list_keys).is_err());
    }

    /// Serializes a `Value` with every object's keys in reverse order (and arrays as given), so
    /// the writer has to reorder at every level.
    struct Reversed<'a>(&'a Value);

    impl Serialize for Reversed<'_> {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            match self.0 {
                Value::Object(map) => {
                    let mut out = s.serialize_map(Some(map.len()))?;
                    for (key, value) in map.iter().rev() {
                        out.serialize_entry(key, &Reversed(value))?;
                    }
                    out.end()
                }
                Value::Array(items) => {
                    let mut out = s.serialize_seq(Some(items.len()))?;
                    for item in items {
                        out.serialize_element(&Reversed(item))?;
                    }
                    out.end()
                }
                other => other.serialize(s),
            }
        }
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<String>().prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map(any::<String>(), inner, 0..6)
                    .prop_map(|map| Value::Object(map.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn any_json_in_any_key_order_gives_the_bytes_of_the_value_route(value in json_value()) {
            prop_assert_eq!(direct(&Reversed(&value)), through_value(&Reversed(&value)));
            prop_assert_eq!(direct(&value), serde_json::to_string(&value).unwrap_or_default());
        }
    }
}
