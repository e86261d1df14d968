"""Render packaging/icons/sapo-swarm.svg to the icon files Briefcase wants.

    python packaging/render_icons.py

Writes, next to the SVG: sapo-swarm-{16..512}.png (Linux), sapo-swarm.ico (Windows) and
sapo-swarm.icns (macOS). The SVG is drawn with Qt's SVG renderer (PySide6, already an app
dependency) and the .ico/.icns are assembled by Pillow, so no image tool outside Python is needed.
The outputs are committed: a build machine needs neither Qt nor Pillow to package the app.
"""

from __future__ import annotations

import sys
from io import BytesIO
from pathlib import Path

ICONS = Path(__file__).resolve().parent / "icons"
SOURCE = ICONS / "sapo-swarm.svg"
PNG_SIZES = (16, 32, 64, 128, 256, 512)  # what Briefcase's Linux templates install under hicolor/
ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)
ICNS_SIZES = (16, 32, 64, 128, 256, 512, 1024)


def render(svg: Path, size: int):
    """One square RGBA Pillow image of the SVG at ``size`` pixels, antialiased."""
    from PIL import Image
    from PySide6.QtCore import QByteArray, QBuffer, QIODevice
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise SystemExit(f"render_icons: error: {svg} is not a valid SVG")
    image = QImage(size, size, QImage.Format.Format_ARGB32)
    image.fill(0)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    renderer.render(painter)
    painter.end()
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, "PNG")
    buffer.close()
    return Image.open(BytesIO(bytes(data))).convert("RGBA")


def main() -> int:
    from PySide6.QtGui import QGuiApplication

    app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])  # QPainter needs one, kept alive
    largest = render(SOURCE, max(ICNS_SIZES))
    for size in PNG_SIZES:
        out = ICONS / f"sapo-swarm-{size}.png"
        render(SOURCE, size).save(out, optimize=True)
        print(out)
    # Each size rendered from the SVG, not scaled down from one bitmap: small sizes stay sharp.
    ico = ICONS / "sapo-swarm.ico"
    largest.save(ico, sizes=[(s, s) for s in ICO_SIZES],
                 append_images=[render(SOURCE, s) for s in ICO_SIZES])
    print(ico)
    icns = ICONS / "sapo-swarm.icns"
    largest.save(icns, append_images=[render(SOURCE, s) for s in ICNS_SIZES if s != max(ICNS_SIZES)])
    print(icns)
    app.quit()
    return 0


if __name__ == "__main__":
    sys.exit(main())
