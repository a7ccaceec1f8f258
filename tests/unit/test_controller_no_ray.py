"""The controller's logic and its unit-test harness import no Ray (cluster/ never does):
the fake-channel tests run without it."""
from __future__ import annotations

import subprocess
import sys

from metadata.testing import REPO_ROOT


def test_the_controller_logic_and_its_harness_import_no_ray():
    code = ("import sys\n"
            "import cluster.controller.controller, cluster.controller.channel, cluster.controller.zk\n"
            "import tests.unit.controller_harness\n"
            "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
