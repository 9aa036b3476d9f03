"""The committed notebooks, read as JSON (nothing is executed).

Each notebook ends with a summary of the numbers its full run measured. Every such number
(one written with a decimal point or a % sign, outside LaTeX and inline code) must appear in
the committed text outputs of that notebook's code cells, allowing for equivalent formatting
(1.84% against 0.0184, 2.34 s against 2343.2 ms, 1.39 million against 1,385,693) and for
rounding to the summary's number of decimals. The exceptions are listed below, each with its
reason. And every notebook must check its own training in a cell that nbval compares.
"""

import ast
import json
import re
from pathlib import Path

import pytest

NOTEBOOK_DIR = Path(__file__).resolve().parents[2] / "notebooks"
NOTEBOOKS = sorted(p.stem for p in NOTEBOOK_DIR.glob("*.ipynb"))

# Summary numbers that no output prints, per notebook: the number as written -> why.
NOT_FROM_OUTPUTS = {
    "01_bbb_from_scratch": {},
    "02_bbb_with_gluon": {},
    "03_comparing_plain_and_dropout": {},
    "04_pruning": {},
    "05_uncertainty": {},
    "06_toy_problems": {},
    "07_fashion_mnist": {
    },
    "08_convolutional_bbb": {},
    "09_mushroom_bandit": {},
    "10_your_own_network": {},
    "11_lower_variance_gradients": {},
    "12_regression_with_error_bars": {},
    "13_your_own_regression_data": {},
    "14_ivon_natural_gradients": {},
}

# Summary numbers that are differences of two numbers in the outputs, in points of error:
# the number as written -> (larger, smaller), each of which must itself be in the outputs.
DIFFERENCES = {}  # none since issue 62: a summary quotes both numbers, not their gap

CHECK_MARK = "# NBVAL_CHECK_OUTPUT"

_NUMBER = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
_SUPERSCRIPTS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹", "0123456789")
# A number in a summary, with what may follow it: %, a scale, or a unit of time.
_SUMMARY_NUMBER = re.compile(
    rf"(?<![\w.,])(?P<num>{_NUMBER})(?![\w])"
    r"(?P<after>\s*(?:%|million\b|·10[⁰¹²³⁴⁵⁶⁷⁸⁹]+|ms\b|s\b))?"
)
# "1.39 to 1.30 million": the scale after a range is the first number's too.
_RANGE_SCALE = re.compile(rf"\s*(?:to|-|–)\s*{_NUMBER}\s*million\b")
# A number in an output, with an optional exponent and an optional unit or suffix.
_OUTPUT_NUMBER = re.compile(
    rf"(?<![\w.])(?P<num>{_NUMBER}(?:[eE][+-]?\d+)?)(?P<unit>%|m(?![\w])|k(?![\w])|\s*ms\b)?"
)


def _load(name):
    return json.loads((NOTEBOOK_DIR / f"{name}.ipynb").read_text(encoding="utf-8"))


def _source(cell):
    return "".join(cell["source"])


def _summary(nb):
    """The text of the summary cell(s), up to the next heading (the exercises)."""
    parts = []
    for cell in nb["cells"]:
        text = _source(cell)
        if cell["cell_type"] == "markdown" and text.lstrip().startswith("## Summary"):
            parts.append(re.split(r"\n##\s", text.lstrip()[len("## Summary"):])[0])
    return "\n".join(parts)


def _output_text(nb):
    """All text the code cells printed: streams and text/plain data."""
    texts = []
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        for out in cell.get("outputs", []):
            if out["output_type"] == "stream":
                texts.append("".join(out["text"]))
            elif "text/plain" in out.get("data", {}):
                texts.append("".join(out["data"]["text/plain"]))
    return "\n".join(texts)


def summary_numbers(text):
    """(as written, value, decimals, percent, scale, unit) for each number with a decimal
    point or a % sign, outside $...$ math and `code`."""
    text = re.sub(r"\$\$.*?\$\$|\$[^$]*\$|`[^`]*`", " ", text, flags=re.S)
    numbers = []
    for m in _SUMMARY_NUMBER.finditer(text):
        num, after = m["num"], (m["after"] or "").strip()
        if not after and _RANGE_SCALE.match(text, m.end()):
            after = "million"
        percent = after == "%"
        if "." not in num and not percent:
            continue
        scale, unit = 1.0, None
        if after.endswith("million"):
            scale = 1e6
        elif after.startswith("·10"):
            scale = 10.0 ** int(after[3:].translate(_SUPERSCRIPTS))
        elif after in ("s", "ms"):
            unit = after
        decimals = len(num.split(".")[1]) if "." in num else 0
        written = num + ("%" if percent else "")
        numbers.append((written, float(num.replace(",", "")), decimals, percent, scale, unit))
    return numbers


def output_numbers(text):
    """Every number in the outputs as (absolute value, unit), with 2.4m read as 2.4e6."""
    numbers = []
    for m in _OUTPUT_NUMBER.finditer(text):
        value = abs(float(m["num"].replace(",", "")))
        unit = (m["unit"] or "").strip()
        value *= {"m": 1e6, "k": 1e3}.get(unit, 1.0)
        numbers.append((value, unit))
    return numbers


def _close(value, target, decimals):
    return abs(value - target) <= 0.5 * 10.0 ** -decimals + 1e-9 * max(1.0, abs(target))


def found(number, outputs):
    """Whether a summary number is an output number, formatted or rounded differently."""
    _, value, decimals, percent, scale, unit = number
    for out, out_unit in outputs:
        candidates = [out]
        if percent and out_unit != "%":
            candidates.append(100 * out)          # 1.84% printed as 0.0184
        if unit == "s" and out_unit == "ms":
            candidates.append(out / 1000)         # 2.34 s printed as 2343.2 ms
        if any(_close(c / scale, value, decimals) for c in candidates):
            return True
    return False


def _as_number(written):
    return summary_numbers(written)[0]


@pytest.fixture(scope="module", params=NOTEBOOKS)
def notebook(request):
    return request.param, _load(request.param)


def test_notebooks_found():
    assert len(NOTEBOOKS) == 14, NOTEBOOKS
    assert set(NOT_FROM_OUTPUTS) == set(NOTEBOOKS)


def test_summary_numbers_are_in_the_outputs(notebook):
    name, nb = notebook
    summary = _summary(nb)
    assert summary, f"{name}: no '## Summary' cell"
    numbers = summary_numbers(summary)
    assert len(numbers) >= 5, f"{name}: only {numbers} found in the summary"
    outputs = output_numbers(_output_text(nb))
    exempt = set(NOT_FROM_OUTPUTS[name]) | set(DIFFERENCES.get(name, {}))
    missing = [n[0] for n in numbers if n[0] not in exempt and not found(n, outputs)]
    assert not missing, f"{name}: summary numbers not in any output: {missing}"


def test_differences_are_of_output_numbers(notebook):
    name, nb = notebook
    outputs = output_numbers(_output_text(nb))
    for written, (a, b) in DIFFERENCES.get(name, {}).items():
        for operand in (a, b):
            assert found(_as_number(operand + "%"), outputs), f"{name}: {operand} not in outputs"
        _, value, decimals, *_ = _as_number(written)
        assert _close(float(a) - float(b), value, decimals), f"{name}: {written} != {a} - {b}"


def test_exceptions_are_still_in_the_summary(notebook):
    """An exception whose number left the summary must leave the lists too."""
    name, nb = notebook
    written = {n[0] for n in summary_numbers(_summary(nb))}
    stale = (set(NOT_FROM_OUTPUTS[name]) | set(DIFFERENCES.get(name, {}))) - written
    assert not stale, f"{name}: listed but not in the summary: {sorted(stale)}"


# Short cells (issue 62): a summary a learner reads in a minute (the exercises in a cell of
# their own), no wall of markdown, no code cell longer than a screen. Words: text.split().
MAX_SUMMARY_WORDS = 160
MAX_MARKDOWN_WORDS = 210
MAX_CODE_LINES = 40


def _words(text):
    return len(text.split())


def test_summaries_are_short(notebook):
    name, nb = notebook
    summaries = [_source(c).lstrip() for c in nb["cells"]
                 if c["cell_type"] == "markdown" and _source(c).lstrip().startswith("## Summary")]
    assert summaries, f"{name}: no '## Summary' cell"
    for text in summaries:
        words = _words(text[len("## Summary"):])   # the whole cell but its heading
        assert words <= MAX_SUMMARY_WORDS, f"{name}: a summary of {words} words"


def test_markdown_cells_are_short(notebook):
    name, nb = notebook
    long_ = [(c.get("id", i), _words(_source(c))) for i, c in enumerate(nb["cells"])
             if c["cell_type"] == "markdown" and _words(_source(c)) > MAX_MARKDOWN_WORDS]
    assert not long_, f"{name}: markdown cells (id, words) over {MAX_MARKDOWN_WORDS}: {long_}"


def test_code_cells_are_short(notebook):
    name, nb = notebook
    long_ = [(c.get("id", i), len(_source(c).splitlines())) for i, c in enumerate(nb["cells"])
             if c["cell_type"] == "code" and len(_source(c).splitlines()) > MAX_CODE_LINES]
    assert not long_, f"{name}: code cells (id, lines) over {MAX_CODE_LINES}: {long_}"


def test_each_notebook_asserts_in_a_checked_cell(notebook):
    name, nb = notebook
    checked = [c for c in nb["cells"] if c["cell_type"] == "code" and CHECK_MARK in _source(c)]
    asserting = [c for c in checked
                 if any(isinstance(node, ast.Assert) for node in ast.walk(ast.parse(_source(c))))]
    assert asserting, f"{name}: no checked cell with an assert statement"
    for cell in asserting:
        # nbval compares what the cell printed: one fixed line, committed as such.
        outputs = cell["outputs"]
        assert cell["execution_count"] is not None, f"{name}: {cell['id']} has no count"
        assert len(outputs) == 1 and outputs[0]["output_type"] == "stream", name
        assert outputs[0]["name"] == "stdout", name
        text = "".join(outputs[0]["text"])
        assert text.endswith("\n") and text.count("\n") == 1, f"{name}: {text!r}"
        assert not re.search(r"\d", text), f"{name}: the check prints numbers: {text!r}"


def test_notebooks_import_only_public_names(notebook):
    name, nb = notebook
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        tree = ast.parse(_source(cell))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("bbb_gluon"):
                private = [a.name for a in node.names if a.name.startswith("_")]
                private += [p for p in node.module.split(".") if p.startswith("_")]
                assert not private, f"{name}: imports {private} from {node.module}"
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                if node.value.id in ("bbb", "bbb_gluon") and node.attr.startswith("_"):
                    raise AssertionError(f"{name}: uses {node.value.id}.{node.attr}")


@pytest.mark.parametrize("written, output, expected", [
    ("1.84%", "best 1.84% (epoch 27)", True),
    ("1.84%", "error 0.0184", True),
    ("1.84%", "error 1.85%", False),
    ("0.41", "max 0.409", True),
    ("0.225", "0.2245", True),
    ("2.34 s", "2343.2 ms", True),
    ("2.34 s", "2343.2", False),
    ("1.39 to 1.30 million", "1,385,693 and 1,296,792", True),
    ("9.13·10⁵", "9.134e+05", True),
    ("2.4 million", "(2.4m)", True),
    ("−16.8", "[-16.8  -9.4]", True),
])
def test_matching_rules(written, output, expected):
    numbers = summary_numbers(written)
    outputs = output_numbers(output)
    assert numbers
    assert all(found(n, outputs) for n in numbers) == expected


# Lab notes belong in docs/RESULTS.md, not in a notebook (issue 26): a notebook cites no
# experiment or benchmark script, reads at most one committed results/ folder (for one
# figure, and the run's metrics.json, so that a claim about the figure rests on printed
# numbers: issue 62), and says nothing about what else was running on the machine.
RESULTS_DIR = NOTEBOOK_DIR.parent / "results"
_SCRIPT_CITATION = re.compile(r"(?<![\w./-])(?:experiments|benchmarks)/")
_MACHINE_LOAD = re.compile(
    r"\bshar(?:ed|ing)\s+(?:\w+\s+){0,3}?(?:cores?|CPUs?|machine)\b"
    r"|\b(?:cores?|CPUs?|machine)\s+(?:was\s+|were\s+)?shared\b"
    r"|\b(?:quiet|busy|loaded|idle|contended|uncontended)\s+(?:\w+\s+)?(?:machine|cores?|CPUs?)\b"
    r"|\botherwise\s+idle\b"
    r"|\b(?:other|another)\s+(?:\w+\s+)?(?:runs?|jobs?|notebooks?|processes)\s+"
    r"(?:\w+\s+)?(?:shar|running|ran\b|on\s+the\s+(?:cores|machine))",
    re.I)


def results_folders(code):
    """The committed results/ folders a notebook's code names, as string constants."""
    names = {p.name for p in RESULTS_DIR.iterdir() if p.is_dir()} if RESULTS_DIR.is_dir() else set()
    found_ = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            parts = re.split(r"[/\\]", node.value)
            if "results" in parts[:-1]:
                found_.add(parts[parts.index("results") + 1])
            found_.update(p for p in parts if p in names)
    return found_


def lab_notes(nb):
    """What in a notebook's sources is a lab note, as readable strings (empty: none)."""
    notes = []
    code = "\n".join(_source(c) for c in nb["cells"] if c["cell_type"] == "code")
    code = "\n".join(line for line in code.splitlines() if not line.lstrip().startswith("%"))
    for cell in nb["cells"]:
        text = _source(cell)
        notes += [f"cites {m.group(0)}..." for m in _SCRIPT_CITATION.finditer(text)]
        notes += [f"remarks on the machine's load: {m.group(0)!r}"
                  for m in _MACHINE_LOAD.finditer(" ".join(text.split()))]
    folders = results_folders(code)
    if len(folders) > 1:
        notes.append(f"reads {len(folders)} results/ folders: {sorted(folders)}")
    tables = {name for name in _string_constants(code)
              if name.endswith((".csv", ".csv.gz", ".json")) and name != "metrics.json"}
    if folders and (tables or re.search(r"\bcsv\.", code)):
        notes.append(f"reads tables, not only a figure and its metrics.json, beside "
                     f"results/{sorted(folders)[0]}")
    return notes


def _string_constants(code):
    return {node.value.replace("\\", "/").rsplit("/", 1)[-1] for node in ast.walk(ast.parse(code))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)}


# The machine is not the learner's business (issue 62): threads, cores, OpenMP, CUDA builds
# and the lab's words for its experiments stay in docs/speed.md and docs/RESULTS.md.
_MACHINE_WORDS = re.compile(
    r"\bthreads\b|\bOpenMP\b|\bCPU cores\b|\bcompute capability\b|\bHopper\b"
    r"|\bCUDA\b|\bmxnet-cu\d+|\bprobes?\b|(?<![\w-])round\s?\d\b",
    re.I)
_LAB_FOLDER = re.compile(r"-round\d")  # a committed folder's name: in prose, not in a path


def _machine_words_of(cell):
    text = " ".join(_source(cell).split())
    found = [m.group(0) for m in _MACHINE_WORDS.finditer(text)]
    if cell["cell_type"] == "markdown":
        found += [m.group(0) for m in _LAB_FOLDER.finditer(text)]
    return found


def _is_guard(cell):
    return cell["cell_type"] == "code" and CHECK_MARK in _source(cell)


def machine_words(nb):
    """The words of the machine or the lab in a notebook's sources (markdown and code)."""
    return sorted({w for cell in nb["cells"] if not _is_guard(cell)
                   for w in _machine_words_of(cell)})


def test_notebooks_keep_the_machine_off_the_learners_path(notebook):
    name, nb = notebook
    assert not machine_words(nb), f"{name}: {machine_words(nb)} (docs/speed.md has them)"


@pytest.mark.parametrize("text, found", [
    ("from bbb_gluon import threads\nthreads.claim()", ["threads"]),
    ("measured on 2 CPU cores; OpenMP threads: 1", ["CPU cores", "OpenMP", "threads"]),
    ("the CUDA wheels cover compute capability 8.6", ["CUDA", "compute capability"]),
    ("600 probe steps", ["probe"]),
    ("the figure in results/bandit-round2/", ["-round2"]),
    ("the network rounds 2.5 to 3; Times depend on the machine", []),
])
def test_machine_word_rules(text, found):
    nb = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": text}]}
    assert machine_words(nb) == sorted(found)
    code = {"cells": [{"cell_type": "code", "metadata": {}, "source": "RESULTS / 'bandit-round2'"}]}
    assert machine_words(code) == []


def test_notebooks_carry_no_lab_notes(notebook):
    name, nb = notebook
    assert not lab_notes(nb), f"{name}: {lab_notes(nb)} (lab notes go to docs/RESULTS.md)"


@pytest.mark.parametrize("text, is_note", [
    ("the 2x400 run (`experiments/spike_kick.py --optimizer adam`)", True),
    ("python benchmarks/bench_epoch.py", True),
    ("`docs/benchmarks.md` has the timings", False),
    ("Timings on 2 CPU cores shared with two other runs.", True),
    ("while two training runs shared the\nmachine's 2 cores", True),
    ("measured on a quiet machine", True),
    ("this machine's 2 CPU cores, otherwise idle", True),
    ("Another notebook was running on them at the same time", True),
    ("Loaded into a fresh network it predicts the same class", False),
    ("the weights shared by every layer", False),
    ("Times are from the full run on 2 CPU cores, fused engine, 2 threads.", False),
])
def test_lab_note_rules(text, is_note):
    nb = {"cells": [{"cell_type": "markdown", "source": text}]}
    assert bool(lab_notes(nb)) == is_note


def test_lab_note_rules_on_code():
    one = "plt.imread(os.path.join('..', 'results', 'mnist-bbb-mixture-1200', 'snr_cdf.png'))"
    two = one + "\nfolder = RESULTS / 'mnist-plain-400'"
    tables = one + "\nrows = list(csv.DictReader(open('pruning.csv')))"
    other = one + "\nsteps = json.loads(open('history.json').read())"
    metrics = one + "\nrun = json.loads(open(os.path.join('x', 'metrics.json')).read())"
    for code, is_note in ((one, False), (two, True), (tables, True), (other, True),
                          (metrics, False)):
        nb = {"cells": [{"cell_type": "code", "source": code}]}
        assert bool(lab_notes(nb)) == is_note, code


# A notebook whose data are missing stops in its first code cell, saying where to put them.
_LOADERS = re.compile(r"\b(?:load_dataset|load_raw|load_mushroom|load_uci)\(")


def test_notebooks_check_their_data_first(notebook):
    name, nb = notebook
    code_cells = [_source(c) for c in nb["cells"] if c["cell_type"] == "code"]
    code = "\n".join(code_cells)
    if not _LOADERS.search(code):
        return
    needed = {s for s in ("mnist", "fashion-mnist") if re.search(rf"['\"]{s}['\"]", code)}
    if "load_mushroom(" in code:
        needed.add("mushroom")
    if "load_uci(" in code:
        needed.add("uci")
    calls = [node for node in ast.walk(ast.parse(code_cells[0]))
             if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "require_datasets"]
    assert calls, f"{name}: its first code cell does not call require_datasets"
    named = {a.value for call in calls for a in call.args if isinstance(a, ast.Constant)}
    assert needed <= named, f"{name}: require_datasets{tuple(sorted(named))} lacks {needed - named}"


# One route to each public name (issue 43): what the package exports at its top is reached
# as `bbb.NAME` after `import bbb_gluon as bbb`, the rest from the submodules docs/api/
# documents; so no name comes by two routes, within a notebook or across them.
API_DIR = NOTEBOOK_DIR.parent / "docs" / "api"


def top_level_names():
    # the package's own __all__ (it takes every prior's name from core.priors.__all__)
    import bbb_gluon

    return set(bbb_gluon.__all__)


def documented_submodules():
    text = " ".join(p.read_text(encoding="utf-8") for p in API_DIR.glob("*.rst"))
    return set(re.findall(r"automodule:: bbb_gluon\.(\w+)", text))


def second_routes(nb, top, submodules):
    """Each import in a notebook's code that reaches a public name by another route than
    the one route, as readable strings (empty: none)."""
    found_ = []
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        for node in ast.walk(ast.parse(_source(cell))):
            if isinstance(node, ast.Import):
                for a in node.names:
                    parts = a.name.split(".")
                    if a.name == "bbb_gluon" and a.asname != "bbb":
                        found_.append(f"import bbb_gluon as {a.asname}: the notebooks say bbb")
                    elif parts[0] == "bbb_gluon" and len(parts) > 1 and (
                            len(parts) > 2 or parts[1] not in submodules):
                        found_.append(f"import {a.name}: not a documented submodule")
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                parts = node.module.split(".")
                if parts[0] != "bbb_gluon":
                    continue
                if len(parts) > 2 or (len(parts) == 2 and parts[1] not in submodules):
                    found_.append(f"from {node.module} import ...: not a documented submodule")
                    continue
                for a in node.names:
                    if a.name in top:
                        found_.append(f"from {node.module} import {a.name}: use bbb.{a.name}")
                    elif len(parts) == 1 and a.name not in submodules:
                        found_.append(f"from bbb_gluon import {a.name}: not a documented "
                                      f"submodule")
    return found_


def test_notebooks_reach_each_public_name_by_one_route(notebook):
    name, nb = notebook
    routes = second_routes(nb, top_level_names(), documented_submodules())
    assert not routes, f"{name}: {routes}"


@pytest.mark.parametrize("code, ok", [
    ("import bbb_gluon as bbb\nbbb.fit", True),
    ("from bbb_gluon import plotting, threads", True),
    ("from bbb_gluon.data import load_dataset", True),
    ("from bbb_gluon.training import fit", False),        # bbb.fit is the route
    ("from bbb_gluon import use_weights", False),         # the same
    ("from bbb_gluon.core.step import BBBStep", False),   # not a documented submodule
    ("import bbb_gluon.training", True),
    ("import bbb_gluon as bg", False),
])
def test_one_route_rules(code, ok):
    nb = {"cells": [{"cell_type": "code", "source": code}]}
    top, submodules = top_level_names(), documented_submodules()
    assert {"fit", "use_weights", "BBBStep"} <= top and {"data", "training"} <= submodules
    assert (not second_routes(nb, top, submodules)) == ok, code


def test_the_guard_cells_are_hidden_from_a_reader(notebook):
    """The cells that check a run for nbval (``# NBVAL_CHECK_OUTPUT``, printing "checks
    passed") run in CI and in Jupyter but are no part of the lesson: the docs site drops
    them (myst-nb's ``remove-cell`` tag) and JupyterLab shows them collapsed."""
    name, nb = notebook
    guards = [c for c in nb["cells"] if c["cell_type"] == "code" and CHECK_MARK in _source(c)
              and "".join("".join(o.get("text", "")) for o in c.get("outputs", []))
              .startswith("checks passed")]
    assert guards, f"{name} has no guard cell"
    for cell in guards:
        meta = cell.get("metadata", {})
        assert "remove-cell" in meta.get("tags", []), name
        assert meta.get("jupyter", {}).get("source_hidden") is True, name
