#!/usr/bin/env bash
# System programs some tests start for real: redis-server (relay replicas), chromium (the relay's status page in a
# headless browser), Xvfb and Qt's X libraries (an X server for idle detection and screenshots), libXss/libXtst and dbus-daemon (idle detection), haproxy and nginx (config checks). Installed with apt when missing and we are
# root on a Debian-like system; otherwise says which are missing (those tests then skip with the reason shown).
set -uo pipefail
need=()
command -v redis-server >/dev/null || need+=(redis-server)
command -v chromium >/dev/null || need+=(chromium)
command -v Xvfb >/dev/null || need+=(xvfb)
# idle detection (tests/test_app_idle.py): X11's XScreenSaver and XTest libraries, a private D-Bus session bus
ldconfig -p 2>/dev/null | grep -q 'libXss\.so\.1' || need+=(libxss1)
ldconfig -p 2>/dev/null | grep -q 'libXtst\.so\.6' || need+=(libxtst6)
command -v dbus-daemon >/dev/null || need+=(dbus-daemon)
# the screenshot scripts (scripts/*screenshots.py under xvfb-run): Qt's xcb platform plugin needs these X libraries,
# which PySide6's wheels do not bundle (the same list as the Linux installer's, pyproject.toml)
xcb=(libxkbcommon-x11-0 libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 libxcb-shape0 libxcb-xinerama0 libxcb-randr0
     libxcb-render-util0 libxcb-image0)
for lib in xkbcommon-x11.so.0 xcb-cursor.so.0 xcb-icccm.so.4 xcb-keysyms.so.1 xcb-shape.so.0 xcb-xinerama.so.0 \
           xcb-randr.so.0 xcb-render-util.so.0 xcb-image.so.0; do
    ldconfig -p 2>/dev/null | grep -q "lib${lib//./\\.}" || { need+=("${xcb[@]}"); break; }
done
# the scoring workers' seccomp filter (engine/sandbox/jail.py; tests/test_jail.py): libseccomp, usually there already
ldconfig -p 2>/dev/null | grep -q 'libseccomp\.so\.2' || need+=(libseccomp2)
# the app's login entry is checked by the desktop's own validator (tests/test_app_autostart.py)
command -v desktop-file-validate >/dev/null || need+=(desktop-file-utils)
# the deploy guide's sample configs are checked by the real programs (haproxy -c, nginx -t)
command -v haproxy >/dev/null || need+=(haproxy)
command -v nginx >/dev/null || need+=(nginx-light)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing system packages: ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null && exit 0
    echo "apt-get could not install: ${need[*]}" >&2
    exit 1
fi
echo "not installed (tests that need them will skip): ${need[*]}" >&2
