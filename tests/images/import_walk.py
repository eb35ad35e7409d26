"""Imports every module of the installed ``agents`` package, then every module any of them
imports anywhere — at the top, inside functions, under ``TYPE_CHECKING`` or ``try`` — in the
Python it runs with (the agent image's: tests/images runs it there). Standard library only.

Prints one line per import that fails (``module: error``, naming the file that imports it)
and exits 1 when any does, 0 when all import. A library the agent needs only inside a
function (optuna in the Bayes search) fails here, in CI, instead of in a pod mid-run."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pkgutil
import sys
from pathlib import Path


def _imported_by(path: Path, module: str, is_package: bool) -> set[str]:
    """Every absolute module name ``path`` imports, relative imports resolved."""
    names = set()
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = importlib.util.resolve_name("." * node.level + base, package)
            names.add(base)
            # ``from package import submodule`` imports a module, not only a name.
            names |= {f"{base}.{alias.name}" for alias in node.names if alias.name != "*"}
    return names


def _importable(name: str) -> str | None:
    """None when ``name`` imports; else why not. A ``from x import y`` where y is a name in x,
    not a module, is fine: x imported."""
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as error:
        parent = name.rpartition(".")[0]
        if parent and error.name == name and _importable(parent) is None:
            return None
        return f"{type(error).__name__}: {error}"
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    return None


def main() -> int:
    import agents

    failures = []
    imports: dict[str, str] = {}
    modules = [("agents", Path(agents.__file__), True)]
    for info in pkgutil.walk_packages(agents.__path__, "agents."):
        spec = importlib.util.find_spec(info.name)
        modules.append((info.name, Path(spec.origin), info.ispkg))
    for module, path, is_package in modules:
        # Importing a ``__main__`` runs its command; what it imports is still walked.
        if not module.endswith(".__main__") and (why := _importable(module)) is not None:
            failures.append(f"{module}: {why}")
        for name in _imported_by(path, module, is_package):
            imports.setdefault(name, module)
    missing: set[str] = set()  # a library that failed: its submodules are not listed again
    for name, importer in sorted(imports.items()):
        if name.endswith(".__main__") or name.split(".")[0] in missing:
            continue
        if (why := _importable(name)) is not None:
            failures.append(f"{name} (imported by {importer}): {why}")
            if name.split(".")[0] != "agents":
                missing.add(name.split(".")[0])
    for line in failures:
        print(line)
    where = Path(agents.__file__).parent
    print(f"{len(modules)} modules of {where}, {len(imports)} imports: {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
