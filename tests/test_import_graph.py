"""spectui's imports: no circle between modules or between its folders, none climbing the layers
(scripts/import_graph.py, run as README's test command runs the suite), and the script seeing
each kind of import on small packages written to break the rules."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "import_graph.py"


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("import_graph", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


graph = load_script()


def write_package(root: Path, files: dict[str, str]) -> Path:
    """A package named `spectui` (so the script's layers apply) with these files, and an empty
    `__init__.py` in every folder that has none."""
    package = root / "spectui"
    for name, text in {"__init__.py": "", **files}.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    for folder in [package, *(p for p in package.rglob("*") if p.is_dir())]:
        (folder / "__init__.py").touch()
    return package


def test_spectui_has_no_circle_and_no_upward_import():
    done = subprocess.run([sys.executable, str(SCRIPT)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 circles, 0 between folders, 0 upward" in done.stdout


def test_no_test_module_imports_another():
    """What several test modules share lives in a helper module (ARCHITECTURE, "Layers"): a test
    module imported by another would run its tests twice and tie the two together."""
    found = []
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            found += [f"{path.name} imports {name}" for name in names if name.split(".")[0].startswith("test_")]
    assert found == []


def test_every_unit_of_spectui_has_a_layer():
    built = graph.build_graph(ROOT / "spectui")
    units = {built.unit(name) for name in built.modules}
    assert {"engine", "session", "ui", "serve", "bench", "catalog", "chat", "cli", "paths"} <= units
    for unit in units:
        graph.layer_of(unit)  # raises for a unit in no layer


def test_a_circle_through_type_checking_and_a_function_local_import_is_found(tmp_path):
    package = write_package(tmp_path, {
        "engine/a.py": """\
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                from spectui.engine.b import B
            """,
        "engine/b.py": """\
            def use():
                from . import a
            """,
        "engine/c.py": "import spectui.engine.a\n",
    })
    report = graph.check(package)
    assert report.circles == [["spectui.engine.a", "spectui.engine.b", "spectui.engine.a"]]
    assert not report.upward and not report.unit_circles


def test_a_kind_module_importing_its_registry_back_through_importlib_is_a_circle(tmp_path):
    """The package's `__init__` is a module of its own; an f-string names every module of its package."""
    package = write_package(tmp_path, {
        "engine/drafters/__init__.py": """\
            import importlib
            KINDS = {"model": "model"}
            def build(kind):
                return importlib.import_module(f"spectui.engine.drafters.{KINDS[kind]}")
            """,
        "engine/drafters/model.py": "from spectui.engine.drafters import KINDS\n",
    })
    report = graph.check(package)
    assert report.circles == [["spectui.engine.drafters", "spectui.engine.drafters.model",
                               "spectui.engine.drafters"]]
    # Importing a submodule by `from package import name` is an edge to the submodule, not a circle.
    (package / "engine/drafters/model.py").write_text("from spectui.engine.drafters import base\n")
    (package / "engine/drafters/base.py").write_text("")
    assert graph.check(package).clean


def test_upward_imports_and_circles_between_folders_are_found(tmp_path):
    package = write_package(tmp_path, {
        "engine/gguf.py": "import importlib\nimportlib.import_module('spectui.catalog.origin')\n",
        "catalog/origin.py": "",
        "catalog/loader.py": "from spectui.session import doctor\n",
        "session/doctor.py": "",
        "session/reply.py": "from spectui.catalog import origin\n",
        "worker.py": "from spectui.cli import main\n",
        "cli.py": "def main():\n    from spectui import worker\n",
    })
    report = graph.check(package)
    assert [(e.source, e.target) for e in report.upward] == [
        ("spectui.catalog.loader", "spectui.session.doctor"),
        ("spectui.engine.gguf", "spectui.catalog.origin"),
        ("spectui.worker", "spectui.cli"),
    ]
    assert report.upward[1].where == "spectui/engine/gguf.py:2"
    assert report.circles == [["spectui.cli", "spectui.worker", "spectui.cli"]]
    assert sorted(report.unit_circles) == [["catalog", "session", "catalog"], ["cli", "worker", "cli"]]
    assert not report.clean


def test_a_unit_in_no_layer_is_reported(tmp_path):
    package = write_package(tmp_path, {"newthing/x.py": "", "cli.py": "import spectui.newthing.x\n"})
    report = graph.check(package)
    assert report.unplaced == ["newthing"] and not report.clean
    assert graph.main([str(package)]) == 1


def test_every_part_of_the_engine_has_a_layer_and_every_layer_a_part():
    built = graph.build_graph(ROOT / "spectui")
    parts = {part for name in built.modules if built.unit(name) == "engine" and (part := built.part(name))}
    assert parts == set().union(*(members for _, members in graph.ENGINE_LAYERS))


def test_an_engine_part_importing_a_higher_part_is_upward(tmp_path):
    """Inside the engine a part may import only its own layer and those below it (ENGINE_LAYERS)."""
    package = write_package(tmp_path, {
        "engine/llama/backend.py": "from spectui.engine.files import gguf_file\n",
        "engine/files/gguf_file.py": "from spectui.engine.llama import backend\n",
        "engine/step/tree.py": """\
            from typing import TYPE_CHECKING
            from spectui.engine.model.llama_model import LlamaModel
            if TYPE_CHECKING:
                from spectui.engine.generator import Generator
            """,
        "engine/model/llama_model.py": "",
        "engine/generator.py": "from spectui.engine.step import tree\n",
        "engine/newpart/x.py": "",
    })
    report = graph.check(package)
    assert [(e.source, e.target) for e in report.upward] == [
        ("spectui.engine.llama.backend", "spectui.engine.files.gguf_file"),
        ("spectui.engine.step.tree", "spectui.engine.generator"),
    ]
    assert report.unplaced == ["engine.newpart"]
    assert report.circles == [["spectui.engine.files.gguf_file", "spectui.engine.llama.backend",
                               "spectui.engine.files.gguf_file"],
                              ["spectui.engine.generator", "spectui.engine.step.tree", "spectui.engine.generator"]]
