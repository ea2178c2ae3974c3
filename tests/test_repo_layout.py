"""The monorepo's rules: lockstep versions, import directions, CLIs only in pipelines/."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"kg_data": "kg_data", "tinykg_kernels": "tinykg_kernels", "tinykg_train": "tinykg_train"}
# Modules allowed to be run as `python -m ...` although they are not in pipelines/.
CLI_ALLOWLIST = {"tinykg_kernels/bench.py"}  # the kernels install alone, so their bench ships with them


def _modules(package: str) -> list[Path]:
    return sorted((ROOT / "packages" / package / "src" / package).rglob("*.py"))


def _imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_versions_move_in_lockstep():
    versions = {}
    for package in PACKAGES:
        meta = tomllib.loads((ROOT / "packages" / package / "pyproject.toml").read_text())
        versions[package] = meta["project"]["version"]
        init = (ROOT / "packages" / package / "src" / package / "__init__.py").read_text()
        assert f'__version__ = "{versions[package]}"' in init, f"{package}: __version__ differs from pyproject"
    assert len(set(versions.values())) == 1, f"package versions differ: {versions}"


def test_the_pipelines_install_as_the_root_project_in_lockstep():
    root = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = root["project"]
    version = tomllib.loads((ROOT / "packages" / "kg_data" / "pyproject.toml").read_text())
    version = version["project"]["version"]
    assert project["version"] == version, "the root project's version differs from the packages'"
    assert project["scripts"] == {"tinykg": "pipelines.cli:main"}
    assert root["tool"]["setuptools"]["packages"] == ["pipelines"]  # nothing else installed
    pins = {dep.split("[")[0].split("=")[0]: dep.split("==")[-1] for dep in project["dependencies"]}
    assert pins == {"kg-data": version, "tinykg-kernels": version, "tinykg-train": version}
    assert "-e ." in (ROOT / "requirements.txt").read_text().splitlines()


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("tinykg_kernels", {"kg_data", "tinykg_train", "pipelines", "polars", "mlflow", "ray"}),
        ("kg_data", {"tinykg_kernels", "tinykg_train", "pipelines", "mlflow", "ray"}),
        ("tinykg_train", {"pipelines"}),
    ],
)
def test_imports_point_down(package: str, forbidden: set[str]):
    offenders = {
        str(p.relative_to(ROOT)): sorted(_imported_roots(p) & forbidden)
        for p in _modules(package)
        if _imported_roots(p) & forbidden
    }
    assert not offenders, f"{package} imports what it must not: {offenders}"


def test_kg_data_imports_no_torch_at_import_time():
    modules = [
        ".".join(p.relative_to(ROOT / "packages" / "kg_data" / "src").with_suffix("").parts)
        for p in _modules("kg_data")
    ]
    modules = [m.removesuffix(".__init__") for m in modules]
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'torch', 'triton'})\n"
        "assert not bad, bad[:5]\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]


def test_clis_live_only_in_pipelines():
    offenders = []
    for package in PACKAGES:
        base = ROOT / "packages" / package / "src"
        meta = tomllib.loads((ROOT / "packages" / package / "pyproject.toml").read_text())
        assert "scripts" not in meta["project"], f"{package} declares console scripts; CLIs live in pipelines/"
        for path in _modules(package):
            rel = str(path.relative_to(base))
            text = path.read_text()
            if rel in CLI_ALLOWLIST:
                continue
            if path.name == "__main__.py" or "__main__" in text or "argparse" in _imported_roots(path):
                offenders.append(rel)
    assert not offenders, f"CLI code outside pipelines/: {offenders}"


def test_every_pipeline_has_help():
    names = sorted(p.stem for p in (ROOT / "pipelines").glob("*.py") if not p.stem.startswith("_"))
    for name in names:
        result = subprocess.run(
            [sys.executable, "-m", f"pipelines.{name}", "--help"], cwd=ROOT, capture_output=True, text=True
        )
        assert result.returncode == 0, f"pipelines.{name} --help failed: {result.stderr[-1000:]}"
        assert "usage:" in result.stdout, f"pipelines.{name} --help printed no usage"


def test_generated_outputs_are_ignored():
    ignored = (ROOT / ".gitignore").read_text().split()
    for entry in ["mlruns/", "mlflow.db", "data/", "runs/", "ray_results/"]:
        assert entry in ignored, f".gitignore lacks {entry}"


def _module_name(path: Path, src: Path) -> str:
    return ".".join(path.relative_to(src).with_suffix("").parts).removesuffix(".__init__")


def _top_level_imports(path: Path, name: str, known: set[str]) -> set[str]:
    """The package's own modules that `path` imports at module level (also inside top-level try/if
    blocks, `if TYPE_CHECKING:` included: a circle of type hints is still a circle), not imports
    inside functions."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(statements) -> None:
        for node in statements:
            if isinstance(node, ast.If):
                visit(node.body + node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body + node.orelse + node.finalbody)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{parent}.{base}" if base else parent
                found.add(base)
                found.update(f"{base}.{alias.name}" for alias in node.names)

    visit(ast.parse(path.read_text(), filename=str(path)).body)
    return found & known


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_no_import_cycles_between_modules_of_a_package(package: str):
    """Module-level imports between a package's modules form no cycle (a package's `__init__`
    re-exports its modules, so imports of a package itself are left out)."""
    src = ROOT / "packages" / package / "src"
    paths = {_module_name(p, src): p for p in _modules(package)}
    modules = {name for name, p in paths.items() if p.name != "__init__.py"}
    graph = {
        name: _top_level_imports(paths[name], name, set(paths)) & modules - {name}
        for name in modules
    }
    cycles, state = [], {}

    def walk(name: str, trail: list[str]) -> None:
        state[name] = "open"
        for target in sorted(graph[name]):
            if state.get(target) == "open":
                cycles.append(" -> ".join([*trail[trail.index(target) :], target]))
            elif target not in state:
                walk(target, [*trail, target])
        state[name] = "done"

    for name in sorted(modules):
        if name not in state:
            walk(name, [name])
    assert not cycles, f"import cycles in {package}: {cycles}"
