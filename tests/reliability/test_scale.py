"""100,000 turns in one memory, measured in a process of its own: every turn summarized,
bounded memory, no task left."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

#: Turns taken by one memory.
BIG_TURNS = 100_000
#: Peak RSS the run may add to the interpreter's (MiB): it keeps 5 turns and a summary.
RSS_GROWTH_MIB = 40
SCRIPT = Path(__file__).parent / "big_memory.py"


def test_one_memory_takes_a_hundred_thousand_turns() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(BIG_TURNS)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    figures = json.loads(done.stdout)
    print(f"\n{figures}")
    assert figures["healthy"] and figures["dropped"] == 0
    # Every turn is summarized or kept; the summary covers all but the window.
    assert figures["summarized_through"] + figures["kept"] == BIG_TURNS
    assert figures["kept"] == 5
    assert figures["tasks_left"] == 0
    assert figures["rss_peak_mib"] - figures["rss_baseline_mib"] < RSS_GROWTH_MIB, figures
