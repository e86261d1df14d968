"""The app's icon, drawn in code (no image files to ship with the module): dots of a swarm, coloured by state."""

from __future__ import annotations

from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QColor, QIcon, QPainter, QPixmap

from app import palette

STATE_COLORS = {"running": palette.STATE_RUNNING, "finishing": palette.STATE_RUNNING, "paused": palette.STATE_PAUSED,
                "crashed": palette.STATE_CRASHED}


def app_icon(state: str = "") -> QIcon:
    icon = QIcon()
    for size in (16, 32, 64, 128):
        icon.addPixmap(_draw(size, STATE_COLORS.get(state, palette.STATE_IDLE)))
    return icon


def _draw(size: int, color: str) -> QPixmap:
    pix = QPixmap(size, size)
    pix.fill(Qt.GlobalColor.transparent)
    p = QPainter(pix)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    p.setPen(Qt.PenStyle.NoPen)
    p.setBrush(QColor(color))
    s = size / 16
    for x, y, r in ((8, 8, 3.2), (3.5, 4, 1.8), (12.5, 4, 1.8), (3.5, 12, 1.8), (12.5, 12, 1.8)):
        p.drawEllipse(QPointF(x * s, y * s), r * s, r * s)
    p.end()
    return pix
