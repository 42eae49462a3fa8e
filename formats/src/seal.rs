//! Seals: with a signing key, every line Palisade appends to an audit file (a decision record or
//! a run's outcome) is followed by a seal line that signs it — a DSSE envelope
//! (<https://github.com/secure-systems-lab/dsse>) whose payload is the in-toto statement for
//! the line it follows ([`crate::statement`]), carried without its payload, which the line
//! before gives back byte for byte.
//!
//! Why this shape: the statement embeds the sealed line verbatim, chain link included, so one
//! signature vouches for that line and, through the chain, for every line before it; no one
//! without the key can insert, change, remove or reorder a line and keep the seals valid. The
//! payload is left out of the file (it is the line before, wrapped) so a signed file is not twice
//! its size; `palisade replay --export-in-toto` writes the whole envelope back for any DSSE
//! verifier.
//!
//! What a seal cannot prove: that the key's holder did not sign something false (the key signs
//! whatever Palisade on that host writes), or that the file was not cut after its last seal (a
//! checkpoint kept elsewhere shows that).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use palisade_engine::output::sha256_hex;
use serde::{Deserialize, Serialize};

use crate::audit::{self, AuditLine};
use crate::chain::ChainLink;
use crate::keys::{PublicKey, Signer};
use crate::statement;

/// The seal line's format.
pub const SEAL_SCHEMA_VERSION: &str = "palisade.seal/v1";

/// DSSE's payload type for an in-toto statement.
pub const PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";

/// One seal line.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SealLine {
    pub schema_version: String,
    /// The envelope's payload type ([`PAYLOAD_TYPE`]).
    pub payload_type: String,
    /// Lower-case hex SHA-256 of the payload: the statement for the line before.
    pub payload_sha256: String,
    /// The envelope's signatures.
    pub signatures: Vec<EnvelopeSignature>,
    /// Where this line stands in the file's hash chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain: Option<ChainLink>,
}

/// A DSSE signature: the key's id and the base64 Ed25519 signature over the PAE.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvelopeSignature {
    pub keyid: String,
    pub sig: String,
}

impl crate::audit::Chained for SealLine {
    fn set_chain(&mut self, link: ChainLink) {
        self.chain = Some(link);
    }
}

/// DSSE's pre-authentication encoding: what is really signed.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {payload_type} {} ",
        payload_type.len(),
        payload.len()
    )
    .into_bytes();
    out.extend_from_slice(payload);
    out
}

/// The payload a seal signs for an audit line: the in-toto statement of a decision record or
/// of a run's outcome. A seal, or a line that is neither, is not sealed.
pub fn payload_for(line_text: &str) -> Result<String, String> {
    match audit::parse_line(line_text) {
        AuditLine::Decision(record) => match *record {
            Ok(record) => statement::statement_for(line_text, &record),
            Err(reason) => Err(format!("the line is not a record: {reason}")),
        },
        AuditLine::Outcome(outcome) => statement::outcome_statement_for(line_text, &outcome),
        AuditLine::Seal(_) => Err(String::from("a seal does not seal a seal")),
    }
}

/// The seal for `line_text` (its chain link is set when it is appended).
pub fn seal(signer: &Signer, line_text: &str) -> Result<SealLine, String> {
    Ok(seal_payload(signer, &payload_for(line_text)?))
}

/// The seal over a payload already made: [`payload_for`] the line it follows, or the same
/// statement made from the typed line ([`crate::audit::Sealable`]).
pub fn seal_payload(signer: &Signer, payload: &str) -> SealLine {
    let signature = signer.sign(&pae(PAYLOAD_TYPE, payload.as_bytes()));
    SealLine {
        schema_version: SEAL_SCHEMA_VERSION.to_owned(),
        payload_type: PAYLOAD_TYPE.to_owned(),
        payload_sha256: sha256_hex(payload.as_bytes()),
        signatures: vec![EnvelopeSignature {
            keyid: signer.keyid().to_owned(),
            sig: STANDARD.encode(signature),
        }],
        chain: None,
    }
}

/// A whole DSSE envelope (`payload`, `payloadType`, `signatures`), as any DSSE verifier reads
/// one: the payload given back to the seal.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Envelope {
    pub payload: String,
    pub payload_type: String,
    pub signatures: Vec<EnvelopeSignature>,
}

impl Envelope {
    /// The envelope a seal and its payload make.
    pub fn of(seal: &SealLine, payload: &str) -> Envelope {
        Envelope {
            payload: STANDARD.encode(payload.as_bytes()),
            payload_type: seal.payload_type.clone(),
            signatures: seal.signatures.clone(),
        }
    }

    /// The decoded payload, as text.
    pub fn payload_text(&self) -> Result<String, String> {
        let bytes = STANDARD
            .decode(&self.payload)
            .map_err(|e| format!("the payload is not base64: {e}"))?;
        String::from_utf8(bytes).map_err(|_| String::from("the payload is not UTF-8"))
    }
}

/// What a seal says about the line it follows, checked against the keys the reader trusts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SealVerdict {
    /// Signed by this trusted key, over exactly the line before.
    Verified { keyid: String },
    /// No trusted key was given: signed by these key ids, not checked.
    Unchecked { keyids: Vec<String> },
    /// Signed only by keys the reader does not trust.
    OtherKey { keyids: Vec<String> },
    /// A trusted key's signature does not verify: the seal or the line was changed.
    BadSignature { keyid: String },
    /// The line before is not the one this seal was made for.
    NotTheLine,
}

/// Checks `seal` against the line it follows (`sealed_text`) and the trusted keys.
pub fn verify(seal: &SealLine, sealed_text: &str, trusted: &[PublicKey]) -> SealVerdict {
    let Ok(payload) = payload_for(sealed_text) else {
        return SealVerdict::NotTheLine;
    };
    if sha256_hex(payload.as_bytes()) != seal.payload_sha256 || seal.payload_type != PAYLOAD_TYPE {
        return SealVerdict::NotTheLine;
    }
    verify_envelope(&seal.signatures, &seal.payload_type, &payload, trusted)
}

/// Checks an envelope's signatures over `payload`: a verdict on the first trusted key's.
pub fn verify_envelope(
    signatures: &[EnvelopeSignature],
    payload_type: &str,
    payload: &str,
    trusted: &[PublicKey],
) -> SealVerdict {
    let keyids: Vec<String> = signatures.iter().map(|s| s.keyid.clone()).collect();
    if trusted.is_empty() {
        return SealVerdict::Unchecked { keyids };
    }
    let message = pae(payload_type, payload.as_bytes());
    for signature in signatures {
        let Some(key) = trusted.iter().find(|k| k.keyid() == signature.keyid) else {
            continue;
        };
        let good = STANDARD
            .decode(&signature.sig)
            .is_ok_and(|bytes| key.verifies(&message, &bytes));
        return if good {
            SealVerdict::Verified {
                keyid: signature.keyid.clone(),
            }
        } else {
            SealVerdict::BadSignature {
                keyid: signature.keyid.clone(),
            }
        };
    }
    SealVerdict::OtherKey { keyids }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
    use super::*;

    const OUTCOME: &str = r#"{"schemaVersion":"palisade.run-outcome/v1","runId":"r1","decisionDigest":"ab","time":"2026-12-07T00:00:00Z","outcome":{"exit":0},"chain":{"seq":2,"prev":"00"}}"#;

    #[test]
    fn pae_is_dsses() {
        // The example in the DSSE protocol document.
        assert_eq!(
            pae("http://example.com/HelloWorld", b"hello world"),
            b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
        );
    }

    #[test]
    fn a_seal_verifies_its_line_only_with_its_key() {
        let signer = Signer::from_seed([3; 32]);
        let seal = seal(&signer, OUTCOME).unwrap();
        let key = signer.public();
        assert_eq!(
            verify(&seal, OUTCOME, std::slice::from_ref(&key)),
            SealVerdict::Verified {
                keyid: key.keyid().to_owned()
            }
        );
        let changed = OUTCOME.replace("\"exit\":0", "\"exit\":1");
        assert_eq!(
            verify(&seal, &changed, std::slice::from_ref(&key)),
            SealVerdict::NotTheLine
        );
        let other = Signer::from_seed([4; 32]).public();
        assert!(matches!(
            verify(&seal, OUTCOME, &[other]),
            SealVerdict::OtherKey { .. }
        ));
        let mut forged = seal.clone();
        forged.signatures[0].sig = STANDARD.encode([0u8; 64]);
        assert!(matches!(
            verify(&forged, OUTCOME, &[key]),
            SealVerdict::BadSignature { .. }
        ));
        assert!(matches!(
            verify(&seal, OUTCOME, &[]),
            SealVerdict::Unchecked { .. }
        ));
    }

    #[test]
    fn the_envelope_carries_the_statement_for_the_line() {
        let signer = Signer::from_seed([3; 32]);
        let seal = seal(&signer, OUTCOME).unwrap();
        let payload = payload_for(OUTCOME).unwrap();
        let envelope = Envelope::of(&seal, &payload);
        assert_eq!(envelope.payload_text().unwrap(), payload);
        assert!(payload.contains(statement::OUTCOME_PREDICATE_TYPE));
        assert!(payload.contains(OUTCOME));
    }
}
