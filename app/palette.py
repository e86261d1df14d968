"""Every colour the app shows, named by the role it plays, in one place.

Charts and the icon use the Okabe-Ito hues (told apart with the common kinds of colour blindness);
text and panels a few greys and warm tones on the system's light background. Plain "#rrggbb" strings,
which Qt stylesheets, ``QColor`` and pyqtgraph all read. Imports nothing, so any module may use it.
"""

from __future__ import annotations

from typing import Final

# The Okabe-Ito hues, named once; the roles below say what each colours.
_BLUE, _ORANGE, _GREEN, _PURPLE = "#0072B2", "#E69F00", "#009E73", "#CC79A7"
_GREY, _VERMILION, _SKY = "#999999", "#D55E00", "#56B4E9"

# --- text and panels (stylesheets) ------------------------------------------------------------
MUTED_TEXT: Final = "#555"  # secondary lines: hints under choices, status messages, timing estimates
ERROR_TEXT: Final = "#b00020"  # why a form cannot be accepted yet
CAUTION_TEXT: Final = "#8a4b00"  # the terms a model comes with
PROBLEM_BANNER: Final = "#fff3e0"  # the dashboard's banner when something went wrong

# --- charts -----------------------------------------------------------------------------------
CHART_BACKGROUND: Final = "#ffffff"
CHART_TEXT: Final = "#333"  # axes, ticks and titles
REWARD: Final = _BLUE  # reward per round and its average
ACCURACY: Final = _ORANGE  # correct answers per round and its average
PRACTICE_TEST: Final = _GREEN  # held-out test results (dots)
DOT_EDGE: Final = CHART_BACKGROUND  # a ring around each dot, so dots stand off the lines
# where a round's time goes
TIME_WRITING: Final = _BLUE
TIME_CHECKING: Final = _SKY
TIME_LEARNING: Final = _ORANGE
TIME_LOADING: Final = _GREEN
TIME_TESTING: Final = _PURPLE
TIME_OTHER: Final = _GREY
# groups per round
GROUPS_OWN: Final = _BLUE
GROUPS_FROM_SWARM: Final = _GREEN
GROUPS_REFUSED: Final = _VERMILION
GROUPS_UNUSED_MARK: Final = "#222"  # the x over groups that taught nothing

# --- the icon: the training's state at a glance (tray and window) -----------------------------
STATE_IDLE: Final = _BLUE  # not started, or a state without a colour of its own
STATE_RUNNING: Final = _GREEN
STATE_PAUSED: Final = _ORANGE
STATE_CRASHED: Final = _VERMILION
