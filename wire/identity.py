"""Who a node is: an Ed25519 key pair, the node id derived from its public key, its display name.

The one place for the id rules. A node id is the first 16 bytes of BLAKE2b-256 of the raw
32-byte public key, as 32 lowercase hex characters: short enough for logs and leaderboards,
long enough (128 bits) that nobody can find a second key with the same id. Whoever holds
the private key is that node; nobody else can sign as it.

Signatures are domain-separated: every signed message starts with ``DOMAIN`` and a purpose
(``hello``, ``group``, ``report``), then length-prefixed parts, so a signature made for one
purpose (or one swarm) is never valid for another. Which parts each message signs is decided
by ``wire.protocol``; this module only knows keys and bytes.

Hand-written: only the framing of signed messages (a few lines); the cryptography is
``cryptography``'s Ed25519 (OpenSSL).
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

PUBLIC_KEY_BYTES: Final = 32
SIGNATURE_BYTES: Final = 64
NONCE_BYTES: Final = 32
NODE_ID_CHARS: Final = 32
# `\A...\Z`, not `^...$`: `$` would let a trailing newline through.
NODE_ID_PATTERN: Final = r"\A[0-9a-f]{32}\Z"
DOMAIN: Final = b"sapo-swarm/2"

_NODE_ID_RE: Final = re.compile(NODE_ID_PATTERN)


def is_node_id(text: object) -> bool:
    return isinstance(text, str) and _NODE_ID_RE.match(text) is not None


def node_id_for(public_key: bytes) -> str:
    """The node id of a raw Ed25519 public key."""
    return hashlib.blake2b(bytes(public_key), digest_size=32).digest()[:16].hex()


# --- keys ------------------------------------------------------------------------


class Identity:
    """A node's private key, and what follows from it. Never leaves the node."""

    __slots__ = ("_key", "public_key", "node_id")

    def __init__(self, key: Ed25519PrivateKey) -> None:
        self._key = key
        self.public_key: bytes = key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        self.node_id: str = node_id_for(self.public_key)

    @classmethod
    def generate(cls) -> Identity:
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_seed(cls, seed: bytes) -> Identity:
        """From 32 raw private-key bytes (tests and simulations want reproducible ids)."""
        return cls(Ed25519PrivateKey.from_private_bytes(seed))

    @classmethod
    def from_pem(cls, pem: bytes) -> Identity:
        """From a PKCS#8 PEM file's bytes; ValueError if it is not an Ed25519 private key."""
        try:
            key = serialization.load_pem_private_key(pem, password=None)
        except (ValueError, TypeError):
            raise ValueError("not a PEM private key") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise ValueError("not an Ed25519 private key")
        return cls(key)

    def to_pem(self) -> bytes:
        return self._key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    def sign(self, purpose: bytes, *parts: bytes) -> bytes:
        return self._key.sign(signed_message(purpose, *parts))

    def __repr__(self) -> str:  # never print key material
        return f"Identity({self.node_id})"


def signed_message(purpose: bytes, *parts: bytes) -> bytes:
    """What is actually signed: domain, purpose, then each part with its length in front."""
    out = [DOMAIN, b"/", purpose, b"\n"]
    for part in parts:
        out.append(len(part).to_bytes(8, "big"))
        out.append(part)
    return b"".join(out)


def verify(public_key: bytes, signature: bytes, purpose: bytes, *parts: bytes) -> bool:
    """True when ``signature`` is the holder of ``public_key`` signing these parts for this purpose."""
    if len(public_key) != PUBLIC_KEY_BYTES or len(signature) != SIGNATURE_BYTES:
        return False
    try:
        Ed25519PublicKey.from_public_bytes(bytes(public_key)).verify(bytes(signature), signed_message(purpose, *parts))
    except (InvalidSignature, ValueError):
        return False
    return True


# --- display names -------------------------------------------------------------------

_ADJECTIVES: Final = tuple(
    """
    amber bold brave bright brisk calm clever cosmic crisp curious daring dusty eager early fancy
    fierce gentle giant golden grand happy hidden humble icy jolly keen kind lively lucky mellow
    mighty misty modest noble nimble odd patient plucky polite proud quick quiet rapid rare rosy
    rustic shiny silent silver sleepy sly smooth snowy solar spry steady stormy sunny swift tidy
    vivid wandering wild witty
    """.split()
)
_ANIMALS: Final = tuple(
    """
    albatross badger bat bear beaver bison camel cheetah cobra crane crow deer dingo dolphin eagle
    eel falcon ferret finch fox gazelle gecko gibbon goose hare hawk heron hippo ibis jackal jaguar
    koala lemur leopard lion llama lynx magpie marmot mole moose newt octopus okapi orca otter owl
    panda panther parrot pelican penguin puffin quail raven salmon seal shark sloth swan tapir tiger
    walrus wombat
    """.split()
)


def display_name(node_id: str) -> str:
    """A stable human name for a node id, e.g. ``"swift-otter-42"``; whoever shows a node computes it.

    Names are never sent or chosen: only ids travel. Names can collide (about 400,000 of them);
    the id is the identity, the name only a friendly handle.
    """
    h = int.from_bytes(hashlib.blake2b(node_id.encode(), digest_size=8).digest(), "big")
    adjective = _ADJECTIVES[h % len(_ADJECTIVES)]
    animal = _ANIMALS[(h >> 16) % len(_ANIMALS)]
    return f"{adjective}-{animal}-{(h >> 32) % 100:02d}"
