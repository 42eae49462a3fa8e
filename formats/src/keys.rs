//! Palisade's audit-signing keys as files: the private half (`palisade.signing-key/v1`, kept
//! 0600 in Palisade's configuration directory and denied in every sandbox) and the public half,
//! written in the key format of securesystemslib (`keytype`, `scheme`, `keyval.public`), so an
//! outside DSSE verifier reads the same file `palisade replay --trusted-key` does.
//!
//! A key's id is the lower-case hex SHA-256 of its 32 public-key bytes: the same key always has
//! the same id, whoever computes it.

use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};
use palisade_engine::output::sha256_hex;
use serde::{Deserialize, Serialize};

/// The private key file's format.
pub const SIGNING_KEY_SCHEMA_VERSION: &str = "palisade.signing-key/v1";

/// The one key type and scheme: Ed25519 (RFC 8032), as securesystemslib names it.
pub const KEY_TYPE: &str = "ed25519";

/// Why a key file could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyError {
    #[error("not a key file: {0}")]
    Malformed(String),
    #[error("key type `{0}` is not `ed25519`")]
    Type(String),
    #[error("the key is not 32 bytes of lower-case hex")]
    Bytes,
    #[error("the key id `{recorded}` is not the key's (`{actual}`)")]
    KeyId { recorded: String, actual: String },
}

/// The private key file.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SigningKeyFile {
    schema_version: String,
    keytype: String,
    keyid: String,
    /// The 32-byte Ed25519 seed, lower-case hex.
    seed: String,
}

/// The public key file (securesystemslib's key dictionary, with its id beside it).
#[derive(Debug, Serialize, Deserialize)]
struct PublicKeyFile {
    keytype: String,
    scheme: String,
    keyid: String,
    keyval: KeyVal,
}

#[derive(Debug, Serialize, Deserialize)]
struct KeyVal {
    /// The 32 public-key bytes, lower-case hex.
    public: String,
}

/// A key that signs: the private half, with its id.
pub struct Signer {
    key: SigningKey,
    keyid: String,
}

impl std::fmt::Debug for Signer {
    // Never the seed, in a log or a panic message.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("keyid", &self.keyid)
            .finish()
    }
}

/// A key that verifies: the public half, with its id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublicKey {
    key: VerifyingKey,
    keyid: String,
}

/// The id of a public key: hex SHA-256 of its bytes.
fn keyid_of(key: &VerifyingKey) -> String {
    sha256_hex(key.as_bytes())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex32(text: &str) -> Result<[u8; 32], KeyError> {
    let bytes = text.as_bytes();
    if bytes.len() != 64 {
        return Err(KeyError::Bytes);
    }
    let mut out = [0u8; 32];
    for (slot, pair) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        let digit = |c: u8| match c {
            b'0'..=b'9' => Ok(c - b'0'),
            b'a'..=b'f' => Ok(c - b'a' + 10),
            _ => Err(KeyError::Bytes),
        };
        let (Some(&high), Some(&low)) = (pair.first(), pair.get(1)) else {
            return Err(KeyError::Bytes);
        };
        *slot = digit(high)? << 4 | digit(low)?;
    }
    Ok(out)
}

impl Signer {
    /// The key made from a 32-byte seed (from the system's random source, by `key init`).
    pub fn from_seed(seed: [u8; 32]) -> Signer {
        let key = SigningKey::from_bytes(&seed);
        let keyid = keyid_of(&key.verifying_key());
        Signer { key, keyid }
    }

    /// Reads a private key file.
    pub fn parse(text: &str) -> Result<Signer, KeyError> {
        let file: SigningKeyFile = serde_json::from_str(text)
            .map_err(|e| KeyError::Malformed(palisade_engine::reader::one_line(&e.to_string())))?;
        if file.schema_version != SIGNING_KEY_SCHEMA_VERSION {
            return Err(KeyError::Malformed(format!(
                "schemaVersion is not `{SIGNING_KEY_SCHEMA_VERSION}`"
            )));
        }
        if file.keytype != KEY_TYPE {
            return Err(KeyError::Type(file.keytype));
        }
        let signer = Signer::from_seed(unhex32(&file.seed)?);
        if signer.keyid != file.keyid {
            return Err(KeyError::KeyId {
                recorded: file.keyid,
                actual: signer.keyid,
            });
        }
        Ok(signer)
    }

    /// The private key file's text (one JSON line and a newline).
    pub fn to_file(&self) -> String {
        let file = SigningKeyFile {
            schema_version: SIGNING_KEY_SCHEMA_VERSION.to_owned(),
            keytype: KEY_TYPE.to_owned(),
            keyid: self.keyid.clone(),
            seed: hex(self.key.as_bytes()),
        };
        format!("{}\n", serde_json::to_string(&file).unwrap_or_default())
    }

    pub fn keyid(&self) -> &str {
        &self.keyid
    }

    /// The public half.
    pub fn public(&self) -> PublicKey {
        PublicKey {
            key: self.key.verifying_key(),
            keyid: self.keyid.clone(),
        }
    }

    /// The Ed25519 signature of `message` (64 bytes).
    pub fn sign(&self, message: &[u8]) -> [u8; 64] {
        self.key.sign(message).to_bytes()
    }
}

impl PublicKey {
    /// Reads a public key file.
    pub fn parse(text: &str) -> Result<PublicKey, KeyError> {
        let file: PublicKeyFile = serde_json::from_str(text)
            .map_err(|e| KeyError::Malformed(palisade_engine::reader::one_line(&e.to_string())))?;
        if file.keytype != KEY_TYPE || file.scheme != KEY_TYPE {
            return Err(KeyError::Type(format!("{}/{}", file.keytype, file.scheme)));
        }
        let key = VerifyingKey::from_bytes(&unhex32(&file.keyval.public)?)
            .map_err(|_| KeyError::Bytes)?;
        let keyid = keyid_of(&key);
        if keyid != file.keyid {
            return Err(KeyError::KeyId {
                recorded: file.keyid,
                actual: keyid,
            });
        }
        Ok(PublicKey { key, keyid })
    }

    /// The public key file's text (one JSON line and a newline).
    pub fn to_file(&self) -> String {
        let file = PublicKeyFile {
            keytype: KEY_TYPE.to_owned(),
            scheme: KEY_TYPE.to_owned(),
            keyid: self.keyid.clone(),
            keyval: KeyVal {
                public: hex(self.key.as_bytes()),
            },
        };
        format!("{}\n", serde_json::to_string(&file).unwrap_or_default())
    }

    pub fn keyid(&self) -> &str {
        &self.keyid
    }

    /// Whether `signature` is this key's over `message` (strict: no malleable encodings).
    pub fn verifies(&self, message: &[u8], signature: &[u8]) -> bool {
        let Ok(signature) = Signature::from_slice(signature) else {
            return false;
        };
        self.key.verify_strict(message, &signature).is_ok()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn key_files_read_back_and_sign_what_they_verify() {
        let signer = Signer::from_seed([7; 32]);
        let again = Signer::parse(&signer.to_file()).unwrap();
        assert_eq!(again.keyid(), signer.keyid());
        let public = PublicKey::parse(&signer.public().to_file()).unwrap();
        let signature = again.sign(b"line");
        assert!(public.verifies(b"line", &signature));
        assert!(!public.verifies(b"line!", &signature));
        assert!(
            !Signer::from_seed([8; 32])
                .public()
                .verifies(b"line", &signature)
        );
        assert!(!public.verifies(b"line", &signature[..63]));
    }

    #[test]
    fn a_key_file_with_another_keys_id_is_refused() {
        let file = Signer::from_seed([7; 32]).public().to_file();
        let other = Signer::from_seed([9; 32]).public();
        let forged = file.replace(&Signer::from_seed([7; 32]).public().keyid, other.keyid());
        assert!(matches!(
            PublicKey::parse(&forged),
            Err(KeyError::KeyId { .. })
        ));
        let bad_seed = Signer::from_seed([1; 32])
            .to_file()
            .replace("\"seed\":\"", "\"seed\":\"zz");
        assert!(matches!(Signer::parse(&bad_seed), Err(KeyError::Bytes)));
    }
}
