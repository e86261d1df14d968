"""The self-hostable SAPO Swarm websocket relay, and the wire protocol it shares with the engine."""
