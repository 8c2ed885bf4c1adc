"""The package keeps its layers (tools/architecture.py), and the documentation's Python runs.

The layer rule is checked over every module of the package, lazy imports included: no arrow
upward, no cycle, no module outside the layers, and the picture in docs/ARCHITECTURE.md drawn
from the code as it is. The checker itself is shown to catch an arrow upward and a cycle, so a
green run means the package keeps the rule, not that the check saw nothing.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("architecture", REPO / "tools" / "architecture.py")
architecture = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(architecture)


def test_every_module_keeps_the_layers_and_the_imports_have_no_cycle():
    unknown: dict[str, set[str]] = {}
    graph = architecture.import_graph(unknown)
    assert "amazons.neural.model" in graph and "amazons.botzone.bot" in graph
    assert architecture.violations(graph) == []
    assert unknown == {}, "imports of modules that do not exist"


def test_the_picture_in_the_docs_is_drawn_from_the_code_as_it_is():
    text = architecture.DOC.read_text()
    assert architecture.current_block(text) == architecture.generated_block(
        architecture.import_graph())


def test_the_check_catches_an_arrow_upward_a_cycle_and_a_module_in_no_layer():
    graph = {"amazons.board": {"amazons.arena"}, "amazons.arena": {"amazons.board"},
             "amazons.engine": set(), "amazons.elsewhere": set()}
    problems = architecture.violations(graph)
    assert any("amazons.board (game) imports amazons.arena (matches): an arrow upward" in p
               for p in problems)
    assert any(p.startswith("import cycle: amazons.arena -> amazons.board -> amazons.arena")
               for p in problems)
    assert "amazons.elsewhere is in no layer of tools/architecture.py LAYERS" in problems
    assert architecture.violations({"amazons.arena": {"amazons.board"},
                                    "amazons.board": set()}) == []


def test_a_lazy_import_inside_a_function_is_an_arrow_too(tmp_path):
    source = tmp_path / "amazons" / "board.py"
    source.parent.mkdir()
    source.write_text("def f():\n    from amazons.arena import run_arena\n    return run_arena\n")
    found = architecture.imports_of(source, {"amazons.arena", "amazons.board"}, root=tmp_path)
    assert found == {"amazons.arena"}


def test_an_import_of_a_module_that_is_gone_is_caught(tmp_path):
    source = tmp_path / "amazons" / "board.py"
    source.parent.mkdir()
    source.write_text("import amazons.gone\nfrom amazons.also_gone import x\n"
                      "from amazons import engine\n")
    unknown: set[str] = set()
    architecture.imports_of(source, {"amazons", "amazons.board", "amazons.engine"}, root=tmp_path,
                            unknown=unknown)
    assert unknown == {"amazons.gone", "amazons.also_gone"}


@pytest.mark.parametrize("old, new", [("amazons.net", "amazons.neural.model"),
                                      ("amazons.npnet", "amazons.neural.numpy_net"),
                                      ("amazons.botzone_limits", "amazons.botzone.limits"),
                                      ("amazons.train_config", "amazons.train.config")])
def test_an_old_import_path_still_works_for_one_release_and_warns(old, new):
    code = ("import importlib, warnings\n"
            "with warnings.catch_warnings(record=True) as caught:\n"
            "    warnings.simplefilter('always')\n"
            f"    old = importlib.import_module({old!r})\n"
            f"new = importlib.import_module({new!r})\n"
            "assert old is new and new.__spec__.name == new.__name__, (old, new.__spec__)\n"
            "print([str(w.message) for w in caught if w.category is DeprecationWarning])\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert f"{old} moved to {new}" in result.stdout


def test_the_packages_re_export_their_commands_public_names_on_first_use():
    # The first import of each package happens here, in a fresh interpreter, under a filter that
    # makes any warning an error: in this process they may be imported already, and a cached
    # import warns nothing whatever its module does.
    code = ("import sys, warnings\n"
            "with warnings.catch_warnings():\n"
            "    warnings.simplefilter('error')\n"
            "    import amazons.botzone, amazons.train\n"
            "assert 'amazons.botzone.bot' not in sys.modules"
            " and 'amazons.train.run' not in sys.modules\n"
            "try:\n"
            "    amazons.botzone.nothing\n"
            "except AttributeError as error:\n"
            "    print(error)\n"
            "from amazons.botzone import Bot, parse_json\n"
            "from amazons.train import Run, main\n"
            "print(Bot.__module__, Run.__module__)\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    missing, modules = result.stdout.splitlines()
    assert missing == "module 'amazons.botzone' has no attribute 'nothing'"
    assert modules.split() == ["amazons.botzone.bot", "amazons.train.run"]


def test_the_re_exported_names_are_the_modules_public_names():
    # The packages name them (a lookup must not import the module to learn them: `from
    # amazons.botzone import limits` asks the package first); they must stay the modules' own.
    import amazons.botzone
    import amazons.botzone.bot
    import amazons.train
    import amazons.train.run

    assert amazons.botzone._BOT_NAMES == set(amazons.botzone.bot.__all__)
    assert all(hasattr(amazons.train.run, name) for name in amazons.train._RUN_NAMES)
