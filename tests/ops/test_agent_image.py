"""What the agent image installs — docker/agent.pyproject.toml over copies of agents/ and the
pure figures/ — works without Django: its entrypoint module imports and `benchsite-agent run`
reads its job from the environment with the site's packages made unimportable."""

from __future__ import annotations

import ast
import importlib.metadata
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from setuptools import find_packages

ROOT = Path(__file__).resolve().parents[2]
AGENT_PYPROJECT = tomllib.loads((ROOT / "docker" / "agent.pyproject.toml").read_text())
AGENT_PROJECT = AGENT_PYPROJECT["project"]
# What the agent's wheel holds: the agent, and the pure rules its protocol names figures by.
AGENT_PACKAGES = ("agents", "figures")
SITE_PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
FORBIDDEN = [
    "django",
    "rest_framework",
    "celery",
    "channels",
    "runs",
    "benchsite",
    "frontend",
    "runpod",
    "kombu",
    "daphne",
    "psycopg",
]
# Imported only inside the function that needs them, and shipped by the vLLM image (vllm
# itself: the flag tables' generator reads its version). tests/images checks that they import
# there, on CI's stand-in of that image.
LAZY_OPTIONAL = {"uvloop", "tokenizers", "transformers", "vllm"}

BLOCKER = textwrap.dedent(
    """
    import sys
    FORBIDDEN = {forbidden!r}

    class Blocker:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in FORBIDDEN:
                raise ImportError(f"{{name}} is not installed in the agent image")
            return None

    sys.meta_path.insert(0, Blocker())
    """
)


@pytest.fixture
def agent_only(tmp_path):
    """A folder holding what the agent's wheel holds and a sitecustomize that makes the site
    unimportable."""
    for package in AGENT_PACKAGES:
        shutil.copytree(
            ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    (tmp_path / "sitecustomize.py").write_text(BLOCKER.format(forbidden=FORBIDDEN))
    return tmp_path


def _python(folder: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    # -I: no PYTHONPATH, no user site, no current folder; the folder is put first by hand.
    bootstrap = (
        f"import sys; sys.path.insert(0, {str(folder)!r}); import sitecustomize; "
        "import runpy; sys.argv = sys.argv[1:]; "
        "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)"
    )
    return subprocess.run(
        [sys.executable, "-I", "-c", bootstrap, *args],
        cwd=folder,
        env=env or {"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.slow
def test_it_imports_the_entrypoint_module_without_django(agent_only):
    probe = agent_only / "probe.py"
    probe.write_text(
        "import sys, agents.cli\n"
        f"loaded = sorted({{m.split('.')[0] for m in sys.modules}} & {set(FORBIDDEN)!r})\n"
        "print('loaded:', loaded)\n"
    )
    result = _python(agent_only, "probe")
    assert result.returncode == 0, result.stderr
    assert "loaded: []" in result.stdout


def test_it_would_notice_the_agent_importing_django(agent_only):
    # The blocker is not a rubber stamp: an import of Django fails under it.
    (agent_only / "agents" / "leak.py").write_text("import django\n")
    result = _python(agent_only, "agents.leak")
    assert result.returncode != 0
    assert "django is not installed in the agent image" in result.stderr


@pytest.mark.slow
def test_it_runs_the_entrypoint_reading_the_job_from_the_environment(agent_only):
    # `benchsite-agent run` with no BENCHSITE_JOB: exit 2 and one line naming the variable.
    result = _python(agent_only, "agents.cli", "run", env={"PATH": "/usr/bin:/bin"})
    assert result.returncode == 2, result.stderr
    assert "BENCHSITE_JOB" in result.stderr
    assert "Traceback" not in result.stderr


def test_it_packages_the_agent_alone_with_its_console_script():
    include = AGENT_PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = find_packages(where=str(ROOT), include=include)
    assert {name.split(".")[0] for name in packages} == set(AGENT_PACKAGES)
    assert AGENT_PROJECT["scripts"] == {"benchsite-agent": "agents.cli:main"}
    assert SITE_PROJECT["scripts"]["benchsite-agent"] == "agents.cli:main"
    assert AGENT_PROJECT["version"] == SITE_PROJECT["version"]


def test_it_declares_the_same_lower_bounds_as_the_site():
    site = {Requirement(r).name: Requirement(r) for r in SITE_PROJECT["dependencies"]}
    for raw in AGENT_PROJECT["dependencies"]:
        requirement = Requirement(raw)
        assert requirement.name in site, f"{requirement.name} is not a dependency of the site"
        assert requirement.specifier == site[requirement.name].specifier, requirement.name
        assert requirement.name.lower() not in FORBIDDEN


def _imports() -> set[str]:
    """Top-level names the agent's packages import anywhere: at module level and inside
    functions (a function's import runs in the pod as surely as a module's, only later)."""
    names = set()
    for path in (path for package in AGENT_PACKAGES for path in (ROOT / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


@pytest.mark.slow
def test_it_declares_every_library_the_agent_imports():
    declared = {Requirement(r).name.lower() for r in AGENT_PROJECT["dependencies"]}
    # A declared library brings its own requirements (pydantic brings pydantic-core).
    for name in list(declared):
        for raw in importlib.metadata.requires(name) or []:
            requirement = Requirement(raw)
            if requirement.marker is None:
                declared.add(requirement.name.lower())
    providers = importlib.metadata.packages_distributions()
    third_party = _imports() - set(sys.stdlib_module_names) - set(AGENT_PACKAGES)
    for module in sorted(third_party - LAZY_OPTIONAL):
        distributions = {d.lower().replace("_", "-") for d in providers.get(module, [module])}
        assert distributions & declared, f"agents imports {module}; declare it in agent.pyproject"
