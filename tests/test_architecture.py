"""The package keeps its layers (tools/architecture.py), and the documentation's Python runs.

The layer rule is checked over every module of the package, lazy imports included: no arrow
upward, no cycle, no module outside the layers, and the picture in docs/ARCHITECTURE.md drawn
from the code as it is. The checker itself is shown to catch an arrow upward and a cycle, so a
green run means the package keeps the rule, not that the check saw nothing.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

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
    graph = {"amazons.board": {"amazons.matches.arena"}, "amazons.matches.arena": {"amazons.board"},
             "amazons.engine": set(), "amazons.elsewhere": set()}
    problems = architecture.violations(graph)
    assert any("amazons.board (game) imports amazons.matches.arena (matches): an arrow upward" in p
               for p in problems)
    assert any(p.startswith("import cycle: amazons.board -> amazons.matches.arena -> "
                            "amazons.board") for p in problems)
    assert "amazons.elsewhere is in no layer of tools/architecture.py LAYERS" in problems
    assert architecture.violations({"amazons.matches.arena": {"amazons.board"},
                                    "amazons.board": set()}) == []


def test_a_lazy_import_inside_a_function_is_an_arrow_too(tmp_path):
    source = tmp_path / "amazons" / "board.py"
    source.parent.mkdir()
    source.write_text("def f():\n    from amazons.matches.arena import run_arena\n"
                      "    return run_arena\n")
    found = architecture.imports_of(source, {"amazons.matches.arena", "amazons.board"},
                                    root=tmp_path)
    assert found == {"amazons.matches.arena"}


def test_an_import_of_a_module_that_is_gone_is_caught(tmp_path):
    source = tmp_path / "amazons" / "board.py"
    source.parent.mkdir()
    source.write_text("import amazons.gone\nfrom amazons.also_gone import x\n"
                      "from amazons import engine\n")
    unknown: set[str] = set()
    architecture.imports_of(source, {"amazons", "amazons.board", "amazons.engine"}, root=tmp_path,
                            unknown=unknown)
    assert unknown == {"amazons.gone", "amazons.also_gone"}


def write_tree(root: Path, sources: dict[str, str]) -> None:
    """A fixture tree: each `amazons/...` or `benchmarks/...` path with its source."""
    for relative, source in sources.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)


def test_a_name_imported_from_a_module_that_has_no_such_name_is_caught(tmp_path):
    # `from amazons.players import gone` runs only where the module is imported; the rule reads
    # every module's names (its lazy tables' too) and reports the one that neither defines nor
    # holds as a submodule.
    write_tree(tmp_path, {
        "amazons/__init__.py": "",
        "amazons/players/__init__.py": "_PLAYER_NAMES = frozenset({'MCTSPlayer'})\n",
        "amazons/players/player.py": "class MCTSPlayer:\n    pass\n",
        "amazons/players/records.py": "",
        "amazons/botzone/__init__.py": "",
        "amazons/botzone/bot.py": ("from amazons.players.player import MCTSPlayer, limits\n"
                                   "from amazons.players import MCTSPlayer, records, gone\n")})
    unknown: dict[str, set[str]] = {}
    architecture.import_graph(unknown, root=tmp_path)
    assert unknown == {"amazons.botzone.bot": {"amazons.players.player.limits",
                                               "amazons.players.gone"}}


def test_the_check_catches_a_folder_that_spans_two_layers(tmp_path, monkeypatch):
    # The house before this rule: Botzone's limits (base) in amazons/botzone/ beside the bot
    # (commands), and a base module at the top beside the game. No arrow points upward, yet the
    # folders no longer show the layers.
    write_tree(tmp_path, {"amazons/__init__.py": "", "amazons/board.py": "",
                          "amazons/_atomic.py": "",
                          "amazons/botzone/__init__.py": "", "amazons/botzone/limits.py": "",
                          "amazons/botzone/bot.py": "from amazons.botzone import limits\n"})
    monkeypatch.setattr(architecture, "LAYERS", [
        ("base", "", ("amazons._atomic", "amazons.botzone.limits")),
        ("game", "", ("amazons.board", "amazons")),
        ("search", "", ()),
        ("commands", "", ("amazons.botzone", "amazons.botzone.*"))])
    folders = architecture.module_folders(tmp_path)
    assert architecture.violations(architecture.import_graph(root=tmp_path)) == []
    assert architecture.folder_violations(folders) == [
        "amazons/ holds the game and the search only, not amazons._atomic (base)",
        "amazons/botzone/ spans 2 layers: commands: amazons.botzone, amazons.botzone.bot; "
        "base: amazons.botzone.limits"]


def test_every_folder_holds_one_layer():
    assert architecture.folder_violations(architecture.module_folders()) == []


def test_a_module_named_by_a_string_is_an_import(tmp_path):
    # A preload list, an `importlib.import_module("...")` and `module:function` name modules as
    # surely as an import statement; a docstring that names one does not.
    write_tree(tmp_path, {
        "amazons/__init__.py": "", "amazons/mcts.py": "", "amazons/board.py": "",
        "amazons/core/__init__.py": "",
        "amazons/core/processes.py": ('"""Names amazons.board in prose only."""\n'
                                      'PRELOAD = ("amazons.train.selfplay",'
                                      ' "amazons.mcts:warm_up")\n'
                                      "import importlib\n"
                                      "def f():\n"
                                      '    return importlib.import_module("amazons.board")\n'),
        "amazons/train/__init__.py": "", "amazons/train/selfplay.py": ""})
    graph = architecture.import_graph(root=tmp_path)
    assert graph["amazons.core.processes"] == {"amazons.train.selfplay", "amazons.mcts",
                                               "amazons.board"}
    assert any(problem == "amazons.core.processes (base) imports amazons.train.selfplay "
                          "(training): an arrow upward" for problem in
               architecture.violations(graph))


def test_an_import_by_a_name_computed_at_run_time_is_refused(tmp_path):
    # The rule cannot read `import_module(name)`: it fails, but in the modules that say why
    # their strings name every module they import so (COMPUTED_IMPORTS).
    source = ("import importlib\n"
              "NAMES = {'Run': 'amazons.train.run'}\n"
              "def load(name):\n"
              "    return importlib.import_module(NAMES[name])\n"
              "def load_any(name):\n"
              "    return __import__(name)\n")
    write_tree(tmp_path, {"amazons/__init__.py": "", "amazons/board.py": source,
                          "amazons/train/__init__.py": source,
                          "amazons/train/run.py": ""})
    computed: dict[str, list[int]] = {}
    architecture.import_graph(computed=computed, root=tmp_path)
    assert computed == {"amazons.board": [4, 6], "amazons.train": [4, 6]}
    problems = architecture.computed_violations(computed)
    assert len(problems) == 1 and problems[0].startswith(
        "amazons.board imports a module by a name computed at run time (line 4, 6)")
    computed = {}
    architecture.import_graph(computed=computed)
    assert architecture.computed_violations(computed) == []


def test_the_benchmarks_keep_the_rule_too():
    graph = architecture.import_graph()
    assert "benchmarks.suite_train" in graph["benchmarks.run"]
    assert "benchmarks.replay_window" in graph["benchmarks.profile_learner"]
    assert architecture.layer_of("benchmarks.suite_train") == len(architecture.LAYERS) - 1


def test_the_package_keeps_no_old_import_path_past_0_3():
    # 0.3.0 dropped the finder that kept the paths of 0.2's moves (the README's changelog lists
    # the new paths): an old path is an ImportError, not a module under a second name.
    code = ("import importlib, amazons\n"
            "for old in ('amazons.net', 'amazons.inference', 'amazons.player_factory'):\n"
            "    try:\n"
            "        importlib.import_module(old)\n"
            "    except ImportError:\n"
            "        print('gone', old)\n"
            "print(amazons.__version__)\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    version = re.search(r'^version = "([^"]+)"', (REPO / "pyproject.toml").read_text(),
                        re.MULTILINE).group(1)
    assert result.stdout.split() == ["gone", "amazons.net", "gone", "amazons.inference", "gone",
                                     "amazons.player_factory", version]


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
            "print(Bot.__module__, Run.__module__, main.__module__)\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    missing, modules = result.stdout.splitlines()
    assert missing == "module 'amazons.botzone' has no attribute 'nothing'"
    assert modules.split() == ["amazons.botzone.bot", "amazons.train.run", "amazons.train.command"]


def test_the_re_exported_names_are_the_modules_public_names():
    # The packages name them (a lookup must not import the module to learn them: `from
    # amazons.botzone import limits` asks the package first); they must stay the modules' own.
    import importlib

    import amazons.botzone
    import amazons.botzone.bot
    import amazons.players
    import amazons.players.player
    import amazons.train

    assert amazons.botzone._BOT_NAMES == set(amazons.botzone.bot.__all__)
    assert amazons.players._PLAYER_NAMES == set(amazons.players.player.__all__)
    for name, module in amazons.train._RUN_NAMES.items():
        assert hasattr(importlib.import_module(module), name), (name, module)
