//! OS strings and paths as Palisade writes them down (the init spec, Landlock plans): UTF-8 as
//! a JSON string, anything else as an array of its bytes, so every value can be written down
//! and read back. For `#[serde(with = "crate::wire::…")]`.
//!
//! Read with a visitor that takes either form, not an untagged enum: serde reads an untagged
//! value into a buffer first and then tries each variant on it, which was most of the cost of
//! reading a Landlock plan with a rule for each of hundreds of entries (palisade-init reads
//! one per run).

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use serde::de::{self, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One OS string to write.
struct Out<'a>(&'a OsStr);

impl Serialize for Out<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0.to_str() {
            Some(text) => serializer.serialize_str(text),
            None => serializer.collect_seq(self.0.as_bytes()),
        }
    }
}

/// One OS string read back.
struct In(OsString);

impl<'de> Deserialize<'de> for In {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<In, D::Error> {
        deserializer.deserialize_any(InVisitor)
    }
}

struct InVisitor;

impl<'de> Visitor<'de> for InVisitor {
    type Value = In;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a string, or an array of bytes")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<In, E> {
        Ok(In(OsString::from(text)))
    }

    fn visit_string<E: de::Error>(self, text: String) -> Result<In, E> {
        Ok(In(OsString::from(text)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<In, A::Error> {
        let mut bytes = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(byte) = seq.next_element::<u8>()? {
            bytes.push(byte);
        }
        Ok(In(OsString::from_vec(bytes)))
    }
}

/// A path.
pub mod path {
    use std::path::{Path, PathBuf};

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::{In, Out};

    pub fn serialize<S: Serializer>(path: &Path, serializer: S) -> Result<S::Ok, S::Error> {
        Out(path.as_os_str()).serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<PathBuf, D::Error> {
        Ok(PathBuf::from(In::deserialize(deserializer)?.0))
    }
}

/// A list of OS strings (a command line).
pub mod list {
    use std::ffi::OsString;

    use serde::{Deserialize, Deserializer, Serializer};

    use super::{In, Out};

    pub fn serialize<S: Serializer>(list: &[OsString], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(list.iter().map(|item| Out(item)))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<OsString>, D::Error> {
        Ok(Vec::<In>::deserialize(deserializer)?
            .into_iter()
            .map(|item| item.0)
            .collect())
    }
}

/// Pairs of OS strings (an environment).
pub mod pairs {
    use std::ffi::OsString;

    use serde::{Deserialize, Deserializer, Serializer};

    use super::{In, Out};

    pub fn serialize<S: Serializer>(
        pairs: &[(OsString, OsString)],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(pairs.iter().map(|(key, value)| (Out(key), Out(value))))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<(OsString, OsString)>, D::Error> {
        Ok(Vec::<(In, In)>::deserialize(deserializer)?
            .into_iter()
            .map(|(key, value)| (key.0, value.0))
            .collect())
    }
}
