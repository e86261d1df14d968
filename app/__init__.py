"""SAPO Swarm desktop app (PySide6). Talks to the engine only through its event/command channel."""
