"""A swarm's manifest: the task mix every node of one swarm draws from and admits, announced by its relay.

Defined once here. The relay reads its swarms from TOML (``sapo-relay --swarms FILE``, relay/swarms.py),
checks each manifest at start, and sends it in ``Welcome`` (``manifest``, with ``manifest_digest``) to every
node that joins the swarm. A node (engine/tasks/swarm_mix.py) checks it again (``decode_manifest``: bounds,
digest, caps), draws its own questions from it and admits a peer's spec only within it (``spec_within``).

A task of the mix has fixed settings (``config``), and at most one way for nodes to differ:
- ``ranges``: setting -> [low, high]; each node picks its own value in the range (its own ``task_config``
  value where that lies inside, else ``low``) and admits a peer's spec with any value inside;
- ``levels``: [low, high] of the task's frontier ladder (reasoning-gym's curriculum above ``config``,
  engine/tasks/frontier.py); each node starts at its own level in it and moves only inside it.
Every value, and both ends of every range, stay within ``wire.task_caps.ANY_TASK_CAPS``: the size caps
that bound what generating and scoring one question can cost. A dataset without caps cannot be in a manifest.

``manifest_digest`` is the sha256 of the canonical encoding (keys sorted): a node records the digest it
joined with and shows a change instead of following it silently; an invite link can pin it (wire/invite.py).

An operator may sign the manifests with a key of the relay's (``sapo-relay --manifest-key``): ``sign_manifest``
covers the purpose ``manifest``, the swarm's name and the digest (``wire.identity``'s framing), so one signature
says "this key's holder set these rules for this swarm" and is valid for no other swarm or purpose. The digest
stands for the content (sha256 of the canonical bytes), so signing it is signing the manifest, and a node checks
a signature with the digest it has verified already. A signer is named by its raw public key as 64 hex
(``signer_hex``): the form an invite link pins and ``GET /swarms`` lists. A node records the signer beside the
digest; a manifest it joined signed, now signed by another key or no longer signed, is a change (``signer_changes``).

An operator replaces the key with a handover (``sign_handover``: the old key signs the new key's public half, for
the purpose ``manifest-key-handover``), served beside the manifest (``Welcome.manifest_handovers``). A node that
pins or joined with an earlier key of the chain (``handover_chain`` checks each link) follows the new key without a
change, records the keys it replaced, and refuses any of those from then on: a retired or leaked old key cannot
set that node's rules again. A handover is only as good as the old key: whoever holds a leaked key can hand over to
a key of their own, so after a leak the operator hands out new invites as well (docs/SECURITY.md).
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Any, Final

import msgspec

from wire import identity as ident
from wire.identity import Identity
from wire.protocol import (MAX_COMPLETIONS, MAX_CONFIG_ITEMS, MAX_FORMAT_BONUS, MAX_HANDOVERS, ConfigValue, KeyHandover,
                           Name, SwarmName)
from wire.task_caps import ANY_TASK_CAPS, config_within_caps

MANIFEST_VERSION: Final = 1
MAX_MANIFEST_TASKS: Final = 16
MAX_DESCRIPTION_CHARS: Final = 200
MAX_SUGGESTED_MODELS: Final = 8
MAX_LEVEL: Final = 64
MAX_WEIGHT: Final = 1000.0
MAX_MANIFEST_TOKENS: Final = 8192  # as NodeConfig's max_tokens
# The encoded manifest: it travels in the welcome frame, next to a few hundred bytes of limits.
MAX_MANIFEST_BYTES: Final = 16 * 1024
DIGEST_PATTERN: Final = r"\A[0-9a-f]{64}\Z"

Number = int | float
Pair = Annotated[list[int | float], msgspec.Meta(min_length=2, max_length=2)]
LevelPair = Annotated[list[Annotated[int, msgspec.Meta(ge=0, le=MAX_LEVEL)]], msgspec.Meta(min_length=2, max_length=2)]
Digest = Annotated[str, msgspec.Meta(pattern=DIGEST_PATTERN)]
SIGNER_PATTERN: Final = DIGEST_PATTERN  # an Ed25519 public key as 64 hex, like a digest
MANIFEST: Final = b"manifest"  # what a manifest signature is for (wire.identity: a purpose)
HANDOVER: Final = b"manifest-key-handover"  # an old manifest key naming its successor


class ManifestTask(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """One task of a swarm's mix: a reasoning-gym dataset, its draw weight, its settings."""

    dataset: Name
    weight: Annotated[float, msgspec.Meta(gt=0.0, le=MAX_WEIGHT)] = 1.0
    config: dict[str, ConfigValue] = {}
    ranges: dict[str, Pair] = {}
    levels: LevelPair | None = None

    def __post_init__(self) -> None:
        if len(self.config) + len(self.ranges) > MAX_CONFIG_ITEMS:
            raise ValueError(f"task {self.dataset}: more than {MAX_CONFIG_ITEMS} settings")
        if both := set(self.config) & set(self.ranges):
            raise ValueError(f"task {self.dataset}: {sorted(both)[0]} is both fixed and a range")
        for name, (low, high) in self.ranges.items():
            if type(low) is bool or type(high) is bool or not low <= high:
                raise ValueError(f"task {self.dataset}: range {name} must be [low, high] numbers with low <= high")
        if self.levels is not None and not self.levels[0] <= self.levels[1]:
            raise ValueError(f"task {self.dataset}: levels must be [low, high] with low <= high")
        if self.levels is not None and self.ranges:
            raise ValueError(f"task {self.dataset}: give setting ranges or a level range, not both")

    def config_at(self, chosen: dict[str, Any] | None = None) -> dict[str, Any]:
        """The fixed settings with each range at ``chosen``'s value where inside it, else at its low end."""
        chosen = chosen or {}
        out: dict[str, Any] = dict(self.config)
        for name, (low, high) in self.ranges.items():
            value = chosen.get(name)
            out[name] = value if type(value) in (int, float) and low <= value <= high else low
        return out


class Manifest(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """What every node of a swarm runs: its task mix, L, answer length and format bonus."""

    swarm: SwarmName
    tasks: Annotated[list[ManifestTask], msgspec.Meta(min_length=1, max_length=MAX_MANIFEST_TASKS)]
    completions: Annotated[int, msgspec.Meta(ge=2, le=MAX_COMPLETIONS)]  # L
    max_tokens: Annotated[int, msgspec.Meta(ge=1, le=MAX_MANIFEST_TOKENS)]
    format_bonus: Annotated[float, msgspec.Meta(ge=0.0, le=MAX_FORMAT_BONUS)] = 0.0
    description: Annotated[str, msgspec.Meta(max_length=MAX_DESCRIPTION_CHARS)] = ""
    public: bool = True  # listed on GET /swarms and the status page
    models: Annotated[list[Annotated[str, msgspec.Meta(min_length=1, max_length=64)]],
                      msgspec.Meta(max_length=MAX_SUGGESTED_MODELS)] = []  # suggested, e.g. "smollm2-135m"
    version: Annotated[int, msgspec.Meta(ge=1, lt=2**16)] = MANIFEST_VERSION

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for task in self.tasks:
            if task.dataset in seen:
                raise ValueError(f"task {task.dataset} is listed twice")
            seen.add(task.dataset)
        if len(msgspec.json.encode(self)) > MAX_MANIFEST_BYTES:
            raise ValueError(f"manifest over {MAX_MANIFEST_BYTES} bytes")


def manifest_bytes(manifest: Manifest) -> bytes:
    """The canonical encoding (keys sorted, defaults left out, numbers as their declared types): what the digest
    covers. Converted once more so that a weight built as ``2`` and one decoded as ``2.0`` encode alike."""
    return msgspec.json.encode(msgspec.convert(msgspec.to_builtins(manifest), Manifest), order="sorted")


def manifest_digest(manifest: Manifest) -> str:
    return hashlib.sha256(manifest_bytes(manifest)).hexdigest()


def sign_manifest(identity: Identity, manifest: Manifest) -> bytes:
    """The operator's signature of ``manifest``: over its swarm's name and its digest, for the purpose ``manifest``."""
    return identity.sign(MANIFEST, *_signed_parts(manifest))


def manifest_signature_ok(public_key: bytes, signature: bytes, manifest: Manifest) -> bool:
    """True when ``signature`` is ``public_key``'s holder signing this manifest for its swarm (``sign_manifest``)."""
    return ident.verify(public_key, signature, MANIFEST, *_signed_parts(manifest))


def _signed_parts(manifest: Manifest) -> tuple[bytes, bytes]:
    return manifest.swarm.encode(), bytes.fromhex(manifest_digest(manifest))


def sign_handover(old: Identity, new_public_key: bytes) -> KeyHandover:
    """``old`` hands the operator's manifest signing over to ``new_public_key``."""
    return KeyHandover(old=old.public_key, signature=old.sign(HANDOVER, bytes(new_public_key)))


def handover_chain(handovers: list[KeyHandover] | Any, signer: bytes | None) -> tuple[bytes, ...]:
    """The earlier keys the chain hands over from, oldest first, each link checked: link i's ``old`` signed link
    i+1's ``old``, the last one ``signer``. () for no handovers (None, [], or a welcome's unset field); ValueError (one line) for a chain that does not
    hold, is too long, repeats a key, or comes without a signer."""
    if not isinstance(handovers, list) or not handovers:
        return ()
    if signer is None:
        raise ValueError("the relay sent manifest key handovers for an unsigned manifest")
    if len(handovers) > MAX_HANDOVERS:
        raise ValueError(f"{len(handovers)} manifest key handovers (at most {MAX_HANDOVERS})")
    keys = [bytes(h.old) for h in handovers] + [bytes(signer)]
    if len(set(keys)) != len(keys):
        raise ValueError("a manifest key handover chain names one key twice")
    for i, h in enumerate(handovers):
        if not ident.verify(keys[i], h.signature, HANDOVER, keys[i + 1]):
            raise ValueError(f"manifest key {signer_hex(keys[i])[:12]}'s handover to {signer_hex(keys[i + 1])[:12]} "
                             f"does not verify")
    return tuple(keys[:-1])


def signer_hex(public_key: bytes | None) -> str:
    """A signer as people and links name it: its raw public key as 64 lowercase hex ("" for an unsigned manifest)."""
    return bytes(public_key).hex() if public_key is not None else ""


def signer_changes(joined: bytes | None, announced: bytes | None, handed_over_from: tuple[bytes, ...] = ()) -> list[str]:
    """How the signer of a manifest differs from the one a node joined with, in short words: [] when it does not
    count as a change. A manifest joined unsigned and now signed (same digest) is no change: the rules are the same,
    and a node may take the signer then (engine/run/joining.py); nor is one signed by a key the joined key handed
    over to (``handed_over_from``, checked by ``handover_chain``)."""
    if joined is None or joined == announced or (announced is not None and bytes(joined) in handed_over_from):
        return []
    return ["no longer signed"] if announced is None else [f"signed by another key ({signer_hex(announced)[:12]})"]


def manifest_problem(manifest: Manifest) -> str | None:
    """Why a manifest's tasks are outside the size caps (``ANY_TASK_CAPS``), in one line naming task and field;
    or None. Bounds and shapes are already checked by decoding; reasoning-gym's own checks are the caller's."""
    if manifest.version != MANIFEST_VERSION:
        return f"version {manifest.version} is not supported (this build reads version {MANIFEST_VERSION})"
    for task in manifest.tasks:
        caps = ANY_TASK_CAPS.get(task.dataset)
        where = f"tasks.{task.dataset}"
        if caps is None:
            return f"{where}: {task.dataset!r} is not a task a swarm can share (one of: {', '.join(sorted(ANY_TASK_CAPS))})"
        for name in (*task.config, *task.ranges):
            if name not in caps:
                return f"{where}: setting {name!r} is not one a swarm may set (allowed: {', '.join(sorted(caps))})"
        for name, value in task.config.items():
            if not config_within_caps(task.dataset, {name: value}):
                return f"{where}.config.{name}: {value!r} is outside the size caps (at most {caps[name]})"
        for name, (low, high) in task.ranges.items():
            if caps[name] is None:
                return f"{where}.ranges.{name}: a range needs a numeric setting"
            if not (config_within_caps(task.dataset, {name: low}) and config_within_caps(task.dataset, {name: high})):
                return f"{where}.ranges.{name}: [{low}, {high}] is outside the size caps (0..{caps[name]})"
        for end in ("low", "high"):
            config = task.config_at({n: r[0 if end == "low" else 1] for n, r in task.ranges.items()})
            if not config_within_caps(task.dataset, config):
                return f"{where}: the settings at the {end} ends of its ranges never make a question ({config})"
    return None


_decoder = msgspec.json.Decoder(Manifest)


def decode_manifest(data: bytes | str | dict[str, Any], digest: str | None) -> Manifest:
    """A manifest as a node receives it, checked: shape and bounds, caps, and (given) the digest.

    ``data``: JSON, or the object a welcome frame carried. Raises ValueError with one line saying what is wrong.
    """
    try:
        if isinstance(data, dict):
            manifest = msgspec.convert(data, Manifest)
        else:
            if len(data) > MAX_MANIFEST_BYTES:
                raise ValueError(f"manifest over {MAX_MANIFEST_BYTES} bytes")
            manifest = _decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise ValueError(f"manifest is invalid: {exc}") from None
    except msgspec.DecodeError as exc:
        raise ValueError(f"manifest is not JSON: {exc}") from None
    problem = manifest_problem(manifest)
    if problem is not None:
        raise ValueError(f"manifest of swarm {manifest.swarm}: {problem}")
    if digest is not None and manifest_digest(manifest) != digest:
        raise ValueError(f"manifest digest does not match: announced {digest[:12]}..., "
                         f"content is {manifest_digest(manifest)[:12]}...")
    return manifest


def spec_within(task: ManifestTask, dataset: str, config: dict[str, Any]) -> bool:
    """True if a spec's settings are the task's fixed ones with each range's value inside it (pure).

    A task with a level range is admitted by the engine (which knows the ladder), not here."""
    if dataset != task.dataset or set(config) != set(task.config) | set(task.ranges):
        return False
    if any(msgspec.json.encode(config[k]) != msgspec.json.encode(v) for k, v in task.config.items()):
        return False
    return all(type(config[k]) in (int, float) and low <= config[k] <= high for k, (low, high) in task.ranges.items())


def mix_summary(manifest: Manifest) -> list[str]:
    """The mix in short words, one per task, e.g. ``basic_arithmetic x2 max_digits 1..3`` (for events and pages)."""
    out = []
    for task in manifest.tasks:
        words = [task.dataset] + ([f"x{task.weight:g}"] if task.weight != 1.0 else [])
        words += [f"{k} {lo:g}..{hi:g}" for k, (lo, hi) in task.ranges.items()]
        if task.levels is not None:
            words.append(f"levels {task.levels[0]}..{task.levels[1]}")
        out.append(" ".join(words))
    return out


def manifest_changes(old: Manifest, new: Manifest) -> list[str]:
    """What differs between two manifests, field by field (tasks by dataset), in short words."""
    changes = [name for name in ("completions", "max_tokens", "format_bonus", "description", "public", "models",
                                 "version") if getattr(old, name) != getattr(new, name)]
    before, after = {t.dataset: t for t in old.tasks}, {t.dataset: t for t in new.tasks}
    changes += [f"task {d} added" for d in after if d not in before]
    changes += [f"task {d} removed" for d in before if d not in after]
    changes += [f"task {d} changed" for d in before if d in after and before[d] != after[d]]
    return changes
