"""A comment that counts a function's parameters ("# Nine parameters: ...", written where a
long signature is kept on purpose) counts them right: the function after it, ``self`` and
``**kwargs`` left out."""

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "bbb_gluon"
WORDS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen twenty".split())}
COUNT = re.compile(r"#\s*([A-Za-z]+) parameters\b")


def _counted(path):
    """(line, the count written, the function's name, its parameters) per such comment."""
    source = path.read_text()
    functions = sorted((node.lineno, node) for node in ast.walk(ast.parse(source))
                       if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef))
    for number, line in enumerate(source.splitlines(), start=1):
        m = COUNT.search(line)
        if not m or m[1].lower() not in WORDS:
            continue
        node = next(n for lineno, n in functions if lineno > number)
        a = node.args
        names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
        names = [n for n in names if n not in ("self", "cls")] + (
            [a.vararg.arg] if a.vararg else [])
        yield number, WORDS[m[1].lower()], node.name, names


def test_every_parameter_count_in_a_comment_matches_its_signature():
    found, wrong = 0, []
    for path in sorted(PACKAGE.rglob("*.py")):
        for line, written, name, names in _counted(path):
            found += 1
            if written != len(names):
                wrong.append(f"{path.relative_to(PACKAGE.parent)}:{line}: says {written}, "
                             f"{name} has {len(names)} ({', '.join(names)})")
    assert found > 0  # the rule reads something
    assert not wrong, "\n".join(wrong)
