"""SER-002 broken: ``from_dict`` Unicode-normalises (NFC) the text of the turns it loads.

"Normalise stored text so that equal-looking turns compare equal": the reader of stored
turns applies NFC to each message and answer. Text already in NFC (most typed text)
round-trips unchanged, but a message with decomposed characters (``"e\\u0301"``, as macOS
file names and some keyboards produce) comes back precomposed: the view after
``from_dict(to_dict())`` differs from the view before it, and so may the token count.
Spec, SER-002: "``from_dict(to_dict())`` into a fresh memory of the same configuration MUST
be observably identical: same view, ``health``, ``estimate_tokens()``."
"""

from __future__ import annotations

import unicodedata
from typing import Any

from reference_impl import schema

from . import mutant_provider
from ._util import own_loads_only

BREAKS = "SER-002"
COLLATERAL: dict[str, str] = {}

_read = schema.read_plain_turn


def _nfc(text: Any) -> Any:
    return unicodedata.normalize("NFC", text) if isinstance(text, str) else text


def _read_plain_turn(raw: Any) -> Any:
    if type(raw) is dict:
        raw = {  # MUTATION: the loaded text is normalised
            **raw,
            "user_message": _nfc(raw.get("user_message")),
            "assistant_response": _nfc(raw.get("assistant_response")),
        }
    return _read(raw)


NfcLoadMemory = own_loads_only(schema, "read_plain_turn", _read_plain_turn)

provider = mutant_provider("ser002-loaded-text-nfc-normalised", NfcLoadMemory)
