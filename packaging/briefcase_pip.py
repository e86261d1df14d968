"""Print the pip command Briefcase runs to install the app's requirements, computed by Briefcase's own code.

    python packaging/briefcase_pip.py linux system     # one argument a line
    python packaging/briefcase_pip.py macOS app
    python packaging/briefcase_pip.py windows app

Needs Briefcase installed in the Python that runs it (0.4.1 is the version read and tried; the CI workflow pins
it). Briefcase parses pyproject.toml for that platform and format (merging [project].dependencies into `requires`),
and its create command's ``_install_app_requirements`` builds the pip call, which is captured here instead of run:
``python -u -X utf8 -m pip install --disable-pip-version-check --upgrade --no-user --target=APP_PACKAGES``, then
``requirement_installer_args`` (each ``./`` path made absolute from the project root when it exists), then the
requirements. The platform's own additions are not included: on macOS Briefcase's subclass adds
``--only-binary :all: --platform macosx_<min_os_version>_arm64`` before the requirements; on Linux its
subclass first rewrites requirements that are local paths (there are none). packaging/README.md ("Pins") runs the
printed command with ``--dry-run`` to check the Linux lock. Nothing is built or installed here.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APP = "sapo-swarm"


def pip_command(platform: str, output_format: str, app_packages: Path) -> list[str]:
    from briefcase.commands.create import CreateCommand
    from briefcase.console import Console
    from briefcase.platforms import get_output_formats

    with tempfile.TemporaryDirectory() as data:  # Briefcase's data folder (tools, support packages): unused here
        command = get_output_formats(platform)[output_format].create(
            console=Console(), base_path=ROOT, data_path=Path(data))
        command.parse_config(ROOT / "pyproject.toml", overrides={})
        app = command.apps[APP]
        captured: list[list[str]] = []

        class Capture:  # stands in for the app context (the host, or Docker) that would run pip
            def run(self, args, **kwargs):
                captured.append([str(a) for a in args])

        command.tools[app].app_context = Capture()
        # The generic implementation: the one Windows uses, and the one Linux's and macOS's call after their own steps.
        CreateCommand._install_app_requirements(command, app, requires=list(app.requires),
                                                app_packages_path=app_packages)
    (args,) = captured
    return args


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(sys.stderr):  # Briefcase's own messages
        args = pip_command(argv[0], argv[1], Path(tmp) / "app_packages")
    for arg in args:
        print(arg)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
