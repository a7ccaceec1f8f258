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


def wait_for(condition, timeout_s: float, what: str, poll_s: float = 0.5, retry_errors: bool = False):
    """condition()'s first true value, asked every poll_s until timeout_s, with
    a last look at the deadline. Not faster at first: many conditions make a
    Kafka client or read the broker's process tree, at nice 0 beside brokers
    at nice 15; early polls at 50 ms doubling were tried and bought nothing
    measurable (docs/test-suite-durations.md). ``retry_errors``: an exception
    from condition() counts as "not yet" (brokers coming and going)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            last = condition()
        except Exception as exc:
            if not retry_errors:
                raise
            last = exc
        if last and not isinstance(last, Exception):
            return last
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}; last: {last!r}")
        time.sleep(min(poll_s, left))
