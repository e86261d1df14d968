"""``sapo-engine experiment``: does sharing pay? N agents on one machine, and the report.

Owns the multi-agent runner (``experiment``: agents sharing one model's memory, taking turns,
resumable), its in-process relay and the paper-style report (``report``).
"""
