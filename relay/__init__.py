"""The self-hostable SAPO Swarm websocket relay: it serves the wire protocol defined in ``wire/protocol.py``."""
