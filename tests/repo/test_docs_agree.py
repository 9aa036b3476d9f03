"""Figures that README, docs and notebooks state in more than one place agree with each
other and with the file they come from, so that changing one cannot quietly contradict
another (the contradictions issue 26 listed were all of this kind)."""

import csv
import json
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
WORDS = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten "
                                    "eleven twelve thirteen fourteen fifteen sixteen".split())}


def text(path):
    return (ROOT / path).read_text(encoding="utf-8")


def notebook_sources(name):
    return "\n".join(c.source for c in nbformat.read(ROOT / "notebooks" / name, 4).cells)


def notebook_outputs(name):
    out = []
    for cell in nbformat.read(ROOT / "notebooks" / name, 4).cells:
        for o in cell.get("outputs", []):
            out.append(o.get("text", "") or o.get("data", {}).get("text/plain", ""))
    return "\n".join(out)


def percent(value):
    return f"{100 * value:.2f}%"


def pruning_error(folder, fraction):
    with open(ROOT / "results" / folder / "pruning.csv", newline="") as f:
        row = next(r for r in csv.DictReader(f) if float(r["fraction"]) == fraction)
    return float(row["error_by_snr"])


def metrics(folder):
    return json.loads(text(f"results/{folder}/metrics.json"))


RECIPE_S1 = "mnist-bbb-lever-sigma1-e1-400"   # the recipe with sigma1 = e^-1, 2x400
WIDE_SPIKE = "mnist-bbb-lever-sigma2-e6-400"  # the recipe with sigma2 = e^-6, 2x400


def claims():
    """(document, the sentence as it must read, with the committed numbers put in)."""
    m = metrics(RECIPE_S1)
    unpruned, removed95, removed98 = (percent(pruning_error(WIDE_SPIKE, f))
                                      for f in (0.0, 0.95, 0.98))
    bandit = metrics("bandit-round2")["agents"]
    bbb, greedy1 = bandit["bayes-by-backprop"], bandit["1%-greedy"]
    return [
        ("README.md", f"ends at {percent(m['test_error_means'])} against the paper's 1.36%"),
        ("README.md", f"{unpruned} unpruned, {removed95} with 95% of the"),
        ("docs/RESULTS.md", f"**{percent(m['test_error_means'])}** (100 samples: "
                            f"{percent(m['test_error_mc'])}; the paper: 1.36%)"),
        ("docs/RESULTS.md", f"{unpruned} unpruned, {removed95} with 95% of the weights "
                            f"removed, {removed98} with 98%"),
        ("docs/RESULTS.md", f"**{bbb['cumulative_regret']:,.0f} ± "
                            f"{bbb['cumulative_regret_std']:,.0f}**"),
        ("docs/RESULTS.md", f"({bbb['cumulative_regret']:,.0f} against "
                            f"{greedy1['cumulative_regret']:,.0f} for 1%-greedy"),
    ]


@pytest.mark.parametrize("document, sentence", claims(),
                         ids=[f"{d}:{s[:30]}" for d, s in claims()])
def test_stated_results_are_the_committed_ones(document, sentence):
    flat = " ".join(text(document).split())  # a sentence may be wrapped anywhere
    assert sentence in flat, f"{document} should say: {sentence}"


def test_the_demo_reads_the_same_everywhere():
    """The demo's accuracy (docs/command-line.md, from a run) is the one notebook 06 prints
    for the same configuration and seed, and README and the command's help give it the
    same time."""
    pattern = r"test accuracy:? (\d+\.\d)% \(500-sample predictive\), (\d+\.\d)% with the means"
    documented = re.search(pattern, text("docs/command-line.md"))
    printed = re.search(pattern, notebook_outputs("06_toy_problems.ipynb"))
    assert documented and printed
    assert documented.groups() == printed.groups()
    readme = re.search(r"make demo .*?~(\d+) s", text("README.md"))
    help_text = re.search(r'^HELP = "[^"]*about (\d+) s', text("bbb_gluon/cli/demo.py"), re.M)
    assert readme and help_text and readme.group(1) == help_text.group(1)


def test_the_kernels_operator_count():
    registered = re.findall(r"^REGISTER_OP\((\w+)\)", text("bbb_gluon/_kernels/fused.cc"),
                            re.MULTILINE)
    said = re.search(r"behind (\w+) operators", " ".join(text("docs/speed.md").split()))
    assert said and WORDS[said.group(1)] == len(registered), (said.group(1), registered)


def documents():
    yield "README.md", text("README.md")
    for page in sorted((ROOT / "docs").glob("*.md")):
        yield f"docs/{page.name}", page.read_text(encoding="utf-8")
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        yield f"notebooks/{nb.name}", notebook_sources(nb.name)


def test_every_cited_results_path_exists():
    missing = []
    for name, body in documents():
        # results/ and the benchmarks' benchmarks/results/; a glob must match
        for path in re.findall(r"(?<![\w/])((?:benchmarks/)?results/[\w.\-/*]*[\w*])", body):
            if not ((ROOT / path).exists() or ("*" in path and list(ROOT.glob(path)))):
                missing.append(f"{name}: {path}")
    assert not missing, missing


def test_a_changed_number_is_caught():
    """Not vacuous: README with another number for the same result no longer matches."""
    document, sentence = claims()[0]
    stated = percent(metrics(RECIPE_S1)["test_error_means"])
    changed = " ".join(text(document).replace(stated, "9.99%").split())
    assert sentence not in changed


_DOC_REFERENCE = re.compile(r":(?:mod|func|class|meth|attr|data|exc):`~?(bbb_gluon(?:\.\w+)+)`")


def _resolves(target):
    """Whether a dotted name names a module of the package or something in one."""
    import importlib

    parts = target.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def test_every_docstring_reference_names_a_real_object():
    # a reference to a module or function that moved or never existed renders as plain
    # text in the site, without a warning: read them all here
    broken = [f"{path.relative_to(ROOT)}:{n}: {target}"
              for path in sorted((ROOT / "bbb_gluon").rglob("*.py"))
              for n, line in enumerate(path.read_text().splitlines(), 1)
              for target in _DOC_REFERENCE.findall(line) if not _resolves(target)]
    assert not broken, "\n".join(broken)
    assert not _resolves("bbb_gluon.fused") and _resolves("bbb_gluon.core.engines.forward_with")
