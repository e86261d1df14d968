"""Running rounds: one node, its loop, and what it tells the outside.

Owns a node's round (``node``: one short method per stage of the paper's round), the model and
scorers a node runs on (``backbone``), the ``sapo-engine run`` loop from settings to stops
(``runner``), commands in and state out (``control``), the CPU-time limit (``throttle``), events out (``event_log``, ``progress``),
and held-out evaluation (``evaluate``). Stands on every stage below it.
"""
