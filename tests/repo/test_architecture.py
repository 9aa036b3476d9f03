"""The package's import arrows (docs/architecture.md): read from the source, not imported.

Every ``import`` and ``from ... import`` in ``bbb_gluon/`` (function-local ones too) is
resolved to the module it names; an arrow the architecture forbids fails the test with the
file and line, so a new one is caught in review, not found later as an import cycle.
"""

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "bbb_gluon"

# Small helpers every layer may use: they import nothing of the package.
HELPERS = ("bbb_gluon._checks", "bbb_gluon._files")

# Arrows that exist today although the rules forbid them, each with the reason; the test
# also fails when one of them disappears, so that this list only ever shrinks.
KNOWN = {}  # arrows against the rules, each with its reason; the list can only shrink


def _module_name(path):
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports():
    """(importer, imported module, file, line) for every import of a package module."""
    arrows = []
    for path in sorted(PACKAGE.rglob("*.py")):
        importer = _module_name(path)
        package = importer if path.name == "__init__.py" else importer.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[:len(base) - node.level + 1]
                    stem = ".".join([*base, node.module] if node.module else base)
                else:
                    stem = node.module
                # ``from .x import f`` imports x (its __init__ for a package), and x.f too
                # where f is a module: ``from . import fused``.
                targets = [stem] + [f"{stem}.{a.name}" for a in node.names
                                    if _is_module(f"{stem}.{a.name}")]
            else:
                continue
            arrows += [(importer, t, path.relative_to(PACKAGE.parent), node.lineno)
                       for t in targets if t == "bbb_gluon" or t.startswith("bbb_gluon.")]
    return arrows


def _is_module(name):
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.is_dir() or path.with_suffix(".py").exists()


def _within(name, prefix):
    return name == prefix or name.startswith(prefix + ".")


def _why_forbidden(importer, imported):
    """The rule an arrow breaks, or None."""
    if _within(importer, "bbb_gluon.core"):
        allowed = ("bbb_gluon.core", "bbb_gluon._kernels", *HELPERS)
        if not any(_within(imported, a) for a in allowed):
            return "the core imports nothing above it"
    if _within(importer, "bbb_gluon._kernels") \
            and not any(_within(imported, a) for a in ("bbb_gluon._kernels", *HELPERS)):
        return "the kernels are the ground floor: they import nothing of the package above"
    if _within(importer, "bbb_gluon.prediction") and _within(imported, "bbb_gluon.training"):
        return "prediction never needs training"
    if _within(imported, "bbb_gluon.cli") and importer != "bbb_gluon.__main__" \
            and not _within(importer, "bbb_gluon.cli"):
        return "nothing imports the command line"
    # The distributed package's __init__ is the launcher's lazy door (loaded on first use).
    if _within(imported, "bbb_gluon.distributed.launcher") \
            and not _within(importer, "bbb_gluon.cli") \
            and importer not in ("bbb_gluon.distributed", "bbb_gluon.distributed.launcher"):
        return "only the command line starts processes"
    return None


def test_the_import_reader_sees_the_package():
    arrows = _imports()
    importers = {a[0] for a in arrows}
    # A reader that silently found nothing would pass every rule below.
    assert "bbb_gluon.core.step" in importers and "bbb_gluon" in importers
    pairs = {a[:2] for a in arrows}
    assert ("bbb_gluon.core.estimator_forward", "bbb_gluon.core.sampling") in pairs
    assert ("bbb_gluon.__main__", "bbb_gluon.cli") in {a[:2] for a in arrows}
    assert ("bbb_gluon.__main__", "bbb_gluon.cli.main") in {a[:2] for a in arrows}


@pytest.mark.parametrize("importer, imported, rule", [
    ("bbb_gluon.core.loss", "bbb_gluon.training", "the core imports nothing above it"),
    ("bbb_gluon.core.posterior", "bbb_gluon.prediction", "the core imports nothing above it"),
    ("bbb_gluon._kernels.fused", "bbb_gluon.core.sampling", "the kernels are the ground"),
    ("bbb_gluon._kernels.fused", "bbb_gluon.core.priors", "the kernels are the ground"),
    ("bbb_gluon.prediction", "bbb_gluon.training.loop", "prediction never needs training"),
    ("bbb_gluon.training", "bbb_gluon.cli", "nothing imports the command line"),
    ("bbb_gluon.training.loop", "bbb_gluon.distributed.launcher", "only the command line"),
])
def test_each_rule_catches_its_arrow(importer, imported, rule):
    assert _why_forbidden(importer, imported).startswith(rule)


@pytest.mark.parametrize("importer, imported", [
    ("bbb_gluon.core.engines", "bbb_gluon._kernels.fused"),
    ("bbb_gluon.core.posterior", "bbb_gluon._files"),
    ("bbb_gluon.training", "bbb_gluon.core.step"),
    ("bbb_gluon.cli", "bbb_gluon.distributed.launcher"),
    ("bbb_gluon.__main__", "bbb_gluon.cli"),
])
def test_allowed_arrows_pass(importer, imported):
    assert _why_forbidden(importer, imported) is None


def test_no_forbidden_import_arrow():
    found, broken = set(), []
    for importer, imported, path, line in _imports():
        rule = _why_forbidden(importer, imported)
        if rule is None:
            continue
        found.add((importer, imported))
        if (importer, imported) not in KNOWN:
            broken.append(f"{path}:{line}: {importer} imports {imported}: {rule}")
    assert not broken, "\n".join(broken)
    gone = set(KNOWN) - found
    assert not gone, f"no longer there, remove from KNOWN: {sorted(gone)}"


def test_importing_the_package_compiles_nothing_and_runs_no_operator(tmp_path):
    # An empty kernel cache: an import that built the kernels would write a library there
    # and say so on stderr; one that ran an operator would have loaded them.
    import subprocess
    import sys

    script = (
        "import sys\n"
        "import bbb_gluon, bbb_gluon.training, bbb_gluon.bandit, bbb_gluon.threads\n"
        "from bbb_gluon._kernels import fused\n"
        "flat = [m for m in ('fused', 'loss', 'posterior', 'priors', 'sampling', 'step', "
        "'noise', 'ops') if 'bbb_gluon.' + m in sys.modules]\n"
        "print(fused._state['loaded'], fused._state['reason'], flat)\n")
    env = {**__import__("os").environ, "BBB_GLUON_CACHE": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "None", "[]"]
    assert "compiling" not in done.stderr
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())


def test_importing_training_does_not_load_the_launcher():
    import subprocess
    import sys

    code = ("import sys, bbb_gluon.training, bbb_gluon.distributed as d;"
            "print('bbb_gluon.distributed.launcher' in sys.modules);"
            "d.launch; print('bbb_gluon.distributed.launcher' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "True"]


def test_importing_the_package_loads_no_module_until_a_name_is_used():
    import subprocess
    import sys

    code = ("import sys, bbb_gluon as bbb\n"
            "def loaded(): return sorted(m for m in sys.modules if m == 'mxnet' or "
            "m.startswith('bbb_gluon.'))\n"
            "print(loaded())\n"
            "bbb.BBBStep; print('mxnet' in sys.modules, 'bbb_gluon.training' in sys.modules)\n"
            "print(bbb.GaussianPrior.__module__, bbb.fit.__module__)\n"
            "names = {}; exec('from bbb_gluon import *', names)\n"
            "print(sorted(set(bbb.__all__) - set(names)), 'make_prior' in dir(bbb))\n"
            "try:\n    bbb.no_such_name\nexcept AttributeError as e:\n    print(e)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    # _kernels.op_cache: a finder for MXNet's import, which it does not load
    assert out == ["['bbb_gluon._kernels', 'bbb_gluon._kernels.op_cache', "
                   "'bbb_gluon._mxnet_build']", "True False",
                   "bbb_gluon.core.priors bbb_gluon.training.loop", "[] True",
                   "module 'bbb_gluon' has no attribute 'no_such_name'"]


def test_static_tools_see_every_lazy_name_of_the_package():
    # The TYPE_CHECKING block of bbb_gluon/__init__.py imports exactly the names that
    # __getattr__ loads (_HOME), each from the module _HOME names.
    import ast

    import bbb_gluon

    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    block = next(node for node in tree.body if isinstance(node, ast.If)
                 and "TYPE_CHECKING" in ast.unparse(node.test))
    imported = {alias.name: "." * node.level + (node.module or "")
                for node in block.body for alias in node.names if alias.name != "*"}
    assert imported == bbb_gluon._HOME


@pytest.mark.parametrize("argv", [["--help"], ["launch", "--help"],
                                  ["launch", "--print-commands", "--", "train"]])
def test_the_command_line_loads_no_mxnet_for_help_or_launch(argv):
    # The launcher only starts processes; MXNet's import would delay every worker it starts.
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "bbb_gluon", *argv],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()
              if line.startswith("import time:")]
    assert "bbb_gluon.cli.launch" in loaded
    assert not [m for m in loaded if m.split(".")[0] in ("mxnet", "numpy", "matplotlib")]


def test_only_the_trainer_adapter_reads_the_trainers_private_attributes():
    import re

    private = re.compile(r"\._(optimizer|updaters|kv_initialized|init_kvstore|params_to_init|"
                         r"init_params|param2idx|update_count|index_update_count|get_lr|"
                         r"get_wd|scale|kvstore)\b")
    found = [f"{path.relative_to(PACKAGE.parent)}:{n}"
             for path in sorted(PACKAGE.rglob("*.py")) if path.name != "trainer.py"
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if private.search(line) and not line.lstrip().startswith("#")]
    assert found == []


def test_the_trainer_adapter_refuses_another_mxnet_version():
    from bbb_gluon._kernels import trainer

    trainer.check_version("1.9.1")
    with pytest.raises(RuntimeError, match="MXNet 2.0.0 is installed"):
        trainer.check_version("2.0.0")


def test_no_module_reads_the_posteriors_private_attributes():
    import re

    private = re.compile(r"\b(posterior|post|self\.posterior)\._(mu|rho)\b")
    found = [f"{path.relative_to(PACKAGE.parent)}:{n}"
             for path in sorted(PACKAGE.rglob("*.py")) if path.name != "posterior.py"
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if private.search(line)]
    assert found == []


def _mxnet_private_names():
    """Every underscore name MXNet's Python code defines: its functions, classes, module
    names and the attributes it assigns (``self._data = ...``), read from the installed
    package itself, so the list cannot fall behind what the package uses."""
    import mxnet

    names = set()
    for path in Path(mxnet.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_bytes(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                name = node.name
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                name = node.attr
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                name = node.id
            else:
                continue
            if name.startswith("_") and not name.startswith("__"):
                names.add(name)
    return names


def _own_attributes(tree):
    """The attributes the classes of a module define themselves: their methods and what
    they assign on ``self`` (a base class may call a method its subclasses define)."""
    own = set()
    for cls in ast.walk(tree):
        if isinstance(cls, ast.ClassDef):
            own |= {n.attr for n in ast.walk(cls) if isinstance(n, ast.Attribute)
                    and isinstance(n.ctx, ast.Store) and isinstance(n.value, ast.Name)
                    and n.value.id == "self"}
            own |= {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}
    return own


def _mxnet_private_uses(tree, mxnet_names):
    """(line, name) of every use of an MXNet private name in ``tree``: ``x._name`` (where
    ``x`` is not ``self`` of a class that assigns ``self._name`` itself), ``getattr(x,
    "_name")`` and its kin, and ``from mxnet... import _name``."""
    own = _own_attributes(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in mxnet_names:
            is_self = isinstance(node.value, ast.Name) and node.value.id == "self"
            if not (is_self and node.attr in own):
                found.append((node.lineno, node.attr))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("getattr", "hasattr", "setattr", "delattr") \
                and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) \
                and node.args[1].value in mxnet_names:
            found.append((node.lineno, node.args[1].value))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mxnet"):
            found += [(node.lineno, a.name) for a in node.names
                      if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def test_mxnet_private_attributes_are_used_only_behind_the_kernels_door():
    # bbb_gluon/_kernels (private.py, trainer.py) is the one door to MXNet's private
    # attributes, so that a version that renamed one fails there and nowhere else.
    mxnet_names = _mxnet_private_names()
    assert {"_data", "_children", "_collect_params_with_prefix", "_apply_weighting"} \
        <= mxnet_names  # the reading of MXNet's code works
    found = [f"{path.relative_to(PACKAGE.parent)}:{line}: {name}"
             for path in sorted(PACKAGE.rglob("*.py")) if "_kernels" not in path.parts
             for line, name in _mxnet_private_uses(ast.parse(path.read_text()), mxnet_names)]
    assert not found, "\n".join(found)


def test_the_door_test_sees_each_kind_of_use():
    names = {"_data", "_weight", "_apply_weighting", "_apply"}
    code = """
from mxnet.gluon.loss import _apply_weighting
class Mine:
    def __init__(self):
        self._data = 1
    def _apply(self):
        return self._apply
    def f(self, p):
        return self._data, p._data, getattr(p, "_weight"), self._weight, self._apply()
"""
    found = sorted(name for _, name in _mxnet_private_uses(ast.parse(code), names))
    assert found == ["_apply_weighting", "_data", "_weight", "_weight"]



def _underscore_imports(tree):
    """(line, name) of every ``from .module import _name`` of the package's own modules:
    a function, class or constant another module needs is public in its module. A private
    module itself (``from .. import _files``) may be imported: it is a module of helpers."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            for alias in node.names:
                name = alias.name
                is_module = node.module is None or (PACKAGE / Path(*node.module.split("."))
                                                    / f"{name}.py").exists()
                if name.startswith("_") and not name.startswith("__") and not is_module:
                    found.append((node.lineno, name))
    return found


def test_no_module_imports_an_underscore_name_from_another():
    found = [f"{path.relative_to(PACKAGE.parent)}:{line}: {name}"
             for path in sorted(PACKAGE.rglob("*.py"))
             for line, name in _underscore_imports(ast.parse(path.read_text()))]
    assert not found, "\n".join(found)


def test_the_underscore_import_scan_sees_one():
    code = "from .common import _checked, shown\nfrom .. import _files\nfrom . import x\n"
    assert _underscore_imports(ast.parse(code)) == [(1, "_checked")]


def test_every_file_where_to_add_things_names_exists():
    """docs/architecture.md's "Where to add things" names, for each kind of addition, the
    files it touches: each must exist (under bbb_gluon/, else from the repository root)."""
    text = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    section = text.split("## Where to add things", 1)[1].split("\n## ", 1)[0]
    named = [t for t in re.findall(r"`([^`\s]+)`", section)
             if "/" in t or t.endswith((".py", ".cc", ".h", ".md"))]
    assert len(named) >= 15  # the section still names files
    missing = [t for t in named
               if not (PACKAGE / t).exists() and not (PACKAGE.parent / t).exists()]
    assert not missing, missing


_COUNT_WORDS = {w: n for n, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen".split())}
_PARAMETERS_COMMENT = re.compile(r"#\s*(\w+) parameters\b", re.I)


def _parameter_comments():
    """(file, line, the number a "# N parameters" comment says, the next function, its
    named parameters but self, cls, *args and **kwargs) for every such comment."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        functions = sorted((node.lineno, node) for node in ast.walk(ast.parse(text))
                           if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef))
        for line, source in enumerate(text.splitlines(), 1):
            match = _PARAMETERS_COMMENT.search(source)
            if match is None or match.group(1).lower() not in _COUNT_WORDS:
                continue
            function = next(node for start, node in functions if start > line)
            a = function.args
            named = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs
                     if p.arg not in ("self", "cls")]
            found.append((path.relative_to(PACKAGE.parent), line,
                          _COUNT_WORDS[match.group(1).lower()], function.name, len(named)))
    return found


def test_every_parameter_count_in_a_comment_matches_its_signature():
    found = _parameter_comments()
    assert len(found) >= 3  # the scan still sees the comments it checks
    wrong = [f"{path}:{line}: says {said}, {name}() has {has}"
             for path, line, said, name, has in found if said != has]
    assert not wrong, "\n".join(wrong)
