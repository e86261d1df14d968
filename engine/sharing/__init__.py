"""Sharing (stage 3 of a round): the swarm, and what a node accepts from it.

Owns the relay client (``swarm_client``: challenge, signed publish and report, sample, backoff),
the node's Ed25519 key file in its data dir (``keyfile``), a receiver's admission rules for peers'
groups (``admission``: regenerate, compare, re-score in the sandbox, bounds, replays, token share),
and the pure choice of which verified external groups to train (``selection``). Stands on
``tasks`` and ``sandbox``; the wire format itself is ``wire.protocol``'s.
"""
