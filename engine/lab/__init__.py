"""``sapo-engine experiment``: does sharing pay? N agents on one machine, and the report.

Owns the multi-agent runner (``experiment``: agents sharing one model's memory, taking turns,
resumable), its relay (``relay_child``: a real ``sapo-relay`` started as a child process on
127.0.0.1, so the engine never imports the relay) and the paper-style report (``report``).
"""
