"""Checks the signed in-toto statements `palisade replay --export-in-toto` writes with a DSSE
implementation this project did not write: securesystemslib's (`Envelope.verify`), against the
public key file `palisade key init` wrote (read as securesystemslib's own key format).

    verify.py ENVELOPES PUBLIC_KEY           every envelope verifies; prints how many
    verify.py --tampered ENVELOPES PUBLIC_KEY each envelope, altered by one byte in its payload,
                                             in its payload type or in its signature, is rejected

Exits non-zero, naming the envelope, when any check does not hold.
"""

import base64
import copy
import json
import sys

from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import VerificationError
from securesystemslib.signer import SSlibKey

STATEMENT = "https://in-toto.io/Statement/v1"
PREDICATE = "https://loopwright.dev/palisade/decision-record/v1"


def load_key(path):
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    keyid = data.pop("keyid")
    return SSlibKey.from_dict(keyid, data)


def verified(envelope, key):
    try:
        accepted = envelope.verify([key], 1)
    except VerificationError:
        return False
    return key.keyid in accepted


def flip(text, index):
    """`text` (base64) with one byte of what it encodes changed."""
    raw = bytearray(base64.b64decode(text))
    raw[index % len(raw)] ^= 0x01
    return base64.b64encode(bytes(raw)).decode()


def main(argv):
    tampered = argv[:1] == ["--tampered"]
    if tampered:
        argv = argv[1:]
    if len(argv) != 2:
        sys.exit(__doc__)
    envelopes_path, key_path = argv
    key = load_key(key_path)
    with open(envelopes_path, encoding="utf-8") as f:
        lines = [line for line in f.read().splitlines() if line.strip()]
    if not lines:
        sys.exit(f"{envelopes_path}: no envelopes")
    for number, line in enumerate(lines, 1):
        data = json.loads(line)
        # from_dict takes the dictionary apart: give it a copy.
        envelope = Envelope.from_dict(copy.deepcopy(data))
        if not tampered:
            if not verified(envelope, key):
                sys.exit(f"envelope {number}: securesystemslib rejects it")
            statement = json.loads(envelope.pae().split(b" ", 4)[4])
            if statement["_type"] != STATEMENT or statement["predicateType"] != PREDICATE:
                sys.exit(f"envelope {number}: not a palisade decision statement")
            continue
        payload = base64.b64decode(data["payload"])
        for what, altered in (
            ("payload", {**data, "payload": flip(data["payload"], len(payload) // 2)}),
            ("payload type", {**data, "payloadType": data["payloadType"] + "x"}),
            (
                "signature",
                {**data, "signatures": [{**s, "sig": flip(s["sig"], 7)} for s in data["signatures"]]},
            ),
        ):
            if verified(Envelope.from_dict(copy.deepcopy(altered)), key):
                sys.exit(f"envelope {number}: securesystemslib accepts it with its {what} altered")
    print(
        f"securesystemslib: {len(lines)} envelopes "
        + ("rejected after every alteration" if tampered else "verify against the key")
    )


if __name__ == "__main__":
    main(sys.argv[1:])
