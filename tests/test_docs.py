"""The README's Python examples run as written.

Each ```python block of README.md runs in a fresh interpreter from the repository root, as a
reader would paste it; a block that fails names itself by its first line.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BLOCKS = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), re.S)


def test_the_readme_has_examples():
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("block", BLOCKS, ids=[block.splitlines()[0][:40] for block in BLOCKS])
def test_each_readme_example_runs(block, tmp_path):
    script = tmp_path / "example.py"
    script.write_text(block)
    result = subprocess.run([sys.executable, "-W", "always::DeprecationWarning", str(script)],
                            cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "moved to amazons." not in result.stderr, "the example uses an old import path"
