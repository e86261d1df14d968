"""A scripted stand-in for ``sapo-engine run`` in the app's window tests: says the event lines of a
JSON-lines file (argv[1]) on stdout, then follows pause, resume and stop commands on stdin as the real loop
does; an ``ask`` is answered by the next ``answer`` event of the JSON-lines file named by $SCRIPTED_ANSWERS (if
set), with the ask's id. The window's engine arguments follow argv[1] and are ignored.

Real Qt, a real child process and the real channel (events out, commands in); only the training is
left out, so the window's tests of what it shows take a second, not minutes of model loading.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> None:
    def say(line: str) -> None:
        sys.stdout.write(line.rstrip("\n") + "\n")
        sys.stdout.flush()

    with open(sys.argv[1], encoding="utf-8") as fh:
        script = [line for line in fh if line.strip()]
    answers = []
    if os.environ.get("SCRIPTED_ANSWERS"):
        with open(os.environ["SCRIPTED_ANSWERS"], encoding="utf-8") as fh:
            answers = [json.loads(line) for line in fh if line.strip()]
    rnd = 0
    for line in script:
        say(line)
        rnd = json.loads(line).get("round") or rnd
    for line in sys.stdin:
        command = json.loads(line)
        cmd = command.get("cmd")
        if cmd == "ask" and answers:
            say(json.dumps(answers.pop(0) | {"id": command["id"], "time": time.time()}))
        if cmd in ("pause", "resume"):  # at once (the real loop: at its next pause point), and without a round,
            # as the real loop's pause point says it
            say(json.dumps({"type": "state", "state": "paused" if cmd == "pause" else "running", "time": time.time()}))
        if cmd == "stop":
            say(json.dumps({"type": "state", "state": "stopping", "round": rnd, "time": time.time()}))
            say(json.dumps({"type": "stop", "round": rnd, "reason": "stop command", "time": time.time()}))
            return


if __name__ == "__main__":
    main()
