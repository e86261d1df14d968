"""Size caps on task settings: defined once in ``wire.task_caps`` (the relay checks swarm manifests with them
too); re-exported here for the engine's task code."""

from wire.task_caps import ANY_TASK_CAPS, ANY_TASK_RULES, MAX_LIST_ITEMS, MAX_WORD_CHARS, config_within_caps

__all__ = ["ANY_TASK_CAPS", "ANY_TASK_RULES", "MAX_LIST_ITEMS", "MAX_WORD_CHARS", "config_within_caps"]
