"""What the integration tests of the `raykafka` CLI share: the CLI run in this
process, and a wait for a cluster to reach some state."""
from __future__ import annotations

import contextlib
import dataclasses
import io
import time


@dataclasses.dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str


def run_cli(args: list[str], expect: int | None = 0) -> CliResult:
    """`raykafka ARGS` in this process (cli.main.main, what the console script
    calls); `expect` is the exit status it must end with."""
    from cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(args)
        except SystemExit as exc:
            code = exc.code
    result = CliResult(code, out.getvalue(), err.getvalue())
    if expect is not None:
        assert result.returncode == expect, f"exit {result.returncode}:\n{result.stderr}{result.stdout}"
    return result


def wait_for(condition, timeout_s: float, what: str, poll_s: float = 0.5):
    """condition()'s first true value, asked every poll_s until timeout_s."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(poll_s)
    raise AssertionError(f"timed out waiting for {what}; last: {last}")
