"""The README's example runs as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
CI_SCRIPT = ROOT / ".ci" / "run"


def quick_start_commands() -> list[str]:
    """The commands of the README's quick start, without their trailing comments."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Quick start") :]
    block = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert block, "the quick start has no sh block"
    return [re.sub(r"\s+#.*$", "", line) for line in block.group(1).splitlines() if line]


def test_readme_python_example_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    assert blocks, "README has no python example"
    result = subprocess.run(
        [sys.executable, "-c", blocks[0]], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "Refund policy?" in result.stdout, "the first turn should be in the summary"


def test_quick_start_is_two_commands_that_stay_in_the_clone() -> None:
    commands = quick_start_commands()
    assert len(commands) == 2, commands
    suite, tests = commands
    assert "pytest --stm-backend=reference" in suite
    # The suite runs from an empty directory in a subshell: the shell stays in the clone.
    assert re.search(r'\(cd "\$\(mktemp -d\)" && pytest [^)]*\)', suite), suite
    assert tests.endswith("nox -s tests lint typecheck"), tests


def test_ci_runs_the_readme_quick_start_verbatim() -> None:
    lines = CI_SCRIPT.read_text(encoding="utf-8").splitlines()
    for command in quick_start_commands():
        assert command in lines, f".ci/run does not run the README's {command!r}"
