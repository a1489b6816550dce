"""Regenerate every generated block of README.md and docs/*.md (and, on request, the figures).

A block is the text between ``<!-- generated: NAME -->`` and ``<!-- end generated -->``; NAME is a
key of :data:`BLOCKS`, whose function runs the tool (in process, through the same CLI a user runs)
and returns the block's markdown. Nothing in a block is written by hand, so no number in it can go
stale: ``tests/test_docs.py`` fails when a page differs from what this script writes.

    python docs/generate.py             # rewrite every block
    python docs/generate.py --check     # name each stale block, exit 1 if any
    python docs/generate.py --figures   # also redraw docs/img/*.png (needs matplotlib)
"""

from __future__ import annotations

import functools
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"(<!-- generated: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- end generated -->)", re.S)
#: wall-clock figures a command prints beside its answer: shown as measured once, not compared
VOLATILE = (re.compile(r"(layouts, [\d,]+ fit, in )\d+\.\d+ s"),)


def run(*argv: str) -> str:
    """What ``supercluster ARGV`` prints on stdout (it must succeed)."""
    from typer.testing import CliRunner

    from supercluster.cli import app

    r = CliRunner().invoke(app, list(argv), catch_exceptions=False)
    if r.exit_code != 0:
        raise RuntimeError(f"supercluster {' '.join(argv)} exited {r.exit_code}: {r.output}")
    out = r.stdout
    for pat in VOLATILE:
        out = pat.sub(r"\g<1>(seconds) s", out)
    return "\n".join(line.rstrip() for line in out.splitlines())


def shown(*argv: str) -> str:
    """A command and its output, as a terminal shows them."""
    return f"```text\n$ supercluster {' '.join(argv)}\n{run(*argv).strip()}\n```\n"


@functools.cache
def _json(*argv: str) -> object:
    """A command's --json answer, run once per generation (several blocks read the same validate run;
    callers only read it)."""
    return json.loads(run(*argv, "--json"))


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def accuracy() -> str:
    """The short accuracy table of the README: each shipped file, and the held-out file by kind."""
    pub, held = _json("validate"), _json("validate", "--runs", "heldout", "--by", "kind")
    lines = ["| published runs | rows priced | MAPE | worst row |", "|---|---|---|---|"]
    for name, d in (("shared public file (`supercluster validate`)", pub),
                    ("held-out file (`supercluster validate --runs heldout`)", held)):
        n = sum(1 for r in d["rows"] if r["supported"])
        lines.append(f"| {name} | {n} of {len(d['rows'])} | {_pct(d['mape'])} | {_pct(d['worst_abs_error'])} "
                     f"(`{d['worst_row']}`) |")
    for g in held["groups"]:
        lines.append(f"| held-out, {g['group']} | {g['rows']} | {_pct(g['mape'])} | "
                     f"{_pct(max(abs(g['min_error']), abs(g['max_error'])))} |")
    cut = _json("validate", "--runs", str(_shared_format_heldout()))
    n = sum(1 for r in cut["rows"] if r["supported"])
    lines.append(f"| held-out, cut to the shared format's columns and bare framework names | {n} of "
                 f"{len(cut['rows'])} | {_pct(cut['mape'])} | {_pct(cut['worst_abs_error'])} |")
    lines += ["", "| ranking (one job measured at several layouts) | jobs | predicted fastest is measured fastest "
              "| pairs in measured order | memory misses | traffic misses |", "|---|---|---|---|---|---|"]
    for name, d in (("shared public file", pub), ("held-out file", held)):
        rk = d["ranking"]
        pairwise = "-" if rk["pairwise"] is None else _pct(rk["pairwise"])
        lines.append(f"| {name} | {rk['groups']} | {rk['picks']} | {rk['pairs_in_order']} of {rk['pairs']} "
                     f"({pairwise}) | {d['memory_misses']} | {d['traffic_misses']} |")
    lines += ["", f"Measured steps within {100 * pub['ranking']['tie']:.0f} % of each other count as a tie; a memory "
              "miss is a run that ran but is predicted not to fit; a traffic miss, a run measured faster than the "
              "data-parallel traffic its row states can move on its network."]
    return "\n".join(lines) + "\n"


def _shared_format_heldout() -> Path:
    """The held-out file as another runs file would carry it: the shared format's columns only, each
    framework its name before any option (a temporary file)."""
    import csv
    import tempfile

    from supercluster.formats.runs import load_rows

    columns = (ROOT / "src/supercluster/data/public-runs.csv").read_text(encoding="utf-8").splitlines()[0]
    path = Path(tempfile.mkdtemp()) / "heldout-shared-format.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        out = csv.DictWriter(f, fieldnames=columns.split(","))
        out.writeheader()
        for r in load_rows("heldout"):
            out.writerow({**{c: r.get(c, "") for c in out.fieldnames}, "framework": r["framework"].split("+")[0]})
    return path


def cli_reference() -> str:
    """Every command's --help."""
    from typer.main import get_command

    from supercluster.cli import app

    names = sorted(get_command(app).commands)  # type: ignore[attr-defined]
    return "".join(f"### `supercluster {n}`\n\n```text\n{run(n, '--help').strip()}\n```\n\n" for n in names)


def stage_docs() -> str:
    """The cost model's stages, each with its docstring (its physics and sources)."""
    import importlib

    out = []
    for mod in ("columns", "compute", "gemm", "host", "comm", "pipeline", "sync", "memory", "spread", "step"):
        m = importlib.import_module(f"supercluster.perf.{mod}")
        out.append(f"### `supercluster.perf.{mod}`\n\n{(m.__doc__ or '').strip()}\n")
    return "\n".join(out)


#: collectives.md section 4 (STAS-NET): 8 x H200 all-reduce bus bandwidth by message size, GB/s
H200_ALL_REDUCE = [(32 * 2**10, 1.44), (2**20, 39.9), (16 * 2**20, 219.9), (128 * 2**20, 401.9), (2**30, 463.6)]


def collectives() -> str:
    """The cost model's all-reduce on one 8 x H200 node against the published measurement, by size."""
    from supercluster.hardware.specs import get_gpu
    from supercluster.job import default_network

    net = default_network(get_gpu("h200"), None, 8)
    rows = ["| message | measured busbw | priced busbw | priced / measured time |", "|---|---|---|---|"]
    for size, measured in H200_ALL_REDUCE:
        t = float(net.collective_time_s("all_reduce", size, 8, 1))
        bus = 2 * 7 / 8 * size / t / 1e9
        label = f"{size // 2**20} MiB" if size >= 2**20 else f"{size // 2**10} KiB"
        rows.append(f"| {label} | {measured:.1f} GB/s | {bus:.1f} GB/s | {measured / bus:.2f} |")
    return "\n".join(rows) + "\n"


#: the step the timeline page lays out: Llama 3 70B pipelined over 4 stages, 5 chunks each
TIMELINE = ["simulate", "--layout", "tp4-pp4-dp4-vpp5", "--global-batch", "64"]

def input_limits() -> str:
    """The bounds on what is read from a user's files, from the constants that enforce them."""
    from supercluster.errors import MAX_MESSAGE_CHARS
    from supercluster.files import MAX_INPUT_BYTES, MAX_NAME_BYTES, MAX_PATH_BYTES, MAX_SHELL_TEXT_CHARS
    from supercluster.formats.load import MAX_CONFIG_BYTES
    from supercluster.formats.megatron_args import EXPANSION_FACTOR, EXPANSION_SLACK
    from supercluster.formats.runs import MAX_RUNS_FILE_BYTES, MAX_RUNS_ROWS
    from supercluster.validation.validate import CHUNK_ROWS

    rows = [("a model file (`--model`: config.json, launch script)", f"{MAX_CONFIG_BYTES / 2**20:.0f} MiB"),
            ("any other configuration (`--config`, `--profile`, `--rates`, nccl-tests log)",
             f"{MAX_INPUT_BYTES / 2**20:.0f} MiB"),
            ("text read as shell words (a launch script filled in, a launch line)",
             f"{MAX_SHELL_TEXT_CHARS:,} characters"),
            ("a launch script's variables filled in", f"{EXPANSION_FACTOR}x the script + "
             f"{EXPANSION_SLACK:,} characters (and the line above)"),
            ("a runs CSV (`--runs`)", f"{MAX_RUNS_FILE_BYTES / 2**30:.0f} GiB, {MAX_RUNS_ROWS:,} rows, priced "
             f"{CHUNK_ROWS:,} rows at a time"),
            ("a path", f"{MAX_PATH_BYTES:,} bytes, {MAX_NAME_BYTES} a name"),
            ("a value echoed in an error", f"{MAX_MESSAGE_CHARS:,} characters of the message")]
    return "\n".join(["| read | at most |", "|---|---|", *(f"| {a} | {b} |" for a, b in rows)]) + "\n"


def memory_misses() -> str:
    """Every shipped row that ran and is predicted not to fit: its memory against the GPU's."""
    from supercluster.hardware.specs import get_gpu

    lines = ["| file | run | layout | predicted per GPU | the GPU holds |", "|---|---|---|---|---|"]
    for name, argv in (("public", ()), ("held-out", ("--runs", "heldout"))):
        for r in _json("validate", *argv)["rows"]:
            if r.get("fits") is False:
                need, holds = r["memory_per_gpu_bytes"] / 2**30, get_gpu(r["gpu"]).hbm_bytes / 2**30
                lines.append(f"| {name} | `{r['id']}` | `{r['layout_label']}` | {need:.1f} GiB | {holds:.0f} GiB |")
    return "\n".join(lines) + "\n"


def one_model_two_stacks() -> str:
    """Qwen3 30B-A3B on H100 as two stacks ran it: each held-out row's measured tokens a second per GPU
    (its global batch x sequence over its GPUs and measured step), its layout and the model's error."""
    from supercluster.formats.runs import load_rows

    shape = {r["id"]: r for r in load_rows("heldout")}
    lines = ["| run | framework | layout | measured tokens/s per GPU | predicted vs measured |",
             "|---|---|---|---|---|"]
    for r in _json("validate", "--runs", "heldout")["rows"]:
        if "QWEN3-30B-H100" not in r["id"] or r.get("error") is None:
            continue
        row = shape[r["id"]]
        tok = int(row["global_batch"]) * int(row["seq_len"]) / (int(row["num_gpus"]) * r["measured_step_time_s"])
        lines.append(f"| `{r['id']}` | {r['framework']} | `{r['layout_label']}` | {tok:,.0f} | "
                     f"{100 * r['error']:+.1f} % |")
    return "\n".join(lines) + "\n"


def _ep(row: dict) -> int:
    """A validated row's expert-parallel degree, from its layout label (1 without EP)."""
    m = re.search(r"-ep(\d+)-", row["layout_label"])
    return int(m.group(1)) if m else 1


def _megatron_moe(row: dict) -> bool:
    """An MoE row of NVIDIA's Megatron-Core stacks (Megatron-LM, NeMo / Megatron-Bridge) with a distributed
    optimizer (ZeRO 1; the fully sharded row is a traffic miss of its own), GPT-OSS aside."""
    return (row["kind"] == "moe" and row["framework"].split("+")[0] in ("megatron", "nemo-megatron")
            and "-z1-" in row["layout_label"] and "GPTOSS" not in row["id"])


#: the groups of rows "Reading the misses" (docs/validation.md) discusses: (file, what the group is,
#: which of its validate --json rows belong to it)
MISS_GROUPS: list[tuple[str, str, Callable[[dict], bool]]] = [
    ("public", "NVIDIA's dense recipes on H100", lambda r: r["kind"] == "dense" and r["gpu"] == "h100-sxm"
     and r["framework"].startswith("nemo-megatron")),
    ("both", "NVIDIA's dense recipes on B200 and GB200", lambda r: r["kind"] == "dense"
     and r["gpu"] in ("b200", "gb200") and r["framework"].startswith("nemo-megatron")),
    ("both", "NVIDIA's dense recipes on GB300", lambda r: r["kind"] == "dense" and r["gpu"] == "gb300"),
    ("both", "NVIDIA's dense recipes on H100 in FP8 current scaling", lambda r: r["kind"] == "dense"
     and r["gpu"] == "h100-sxm" and "fp8-current" in r["framework"]),
    ("public", "DeepSpeed ZeRO-3 of 2021 (Narayanan et al. Table 2)", lambda r: r["id"].startswith("NAR-T2-ZeRO3")),
    ("public", "... its 530B model", lambda r: r["id"].startswith("NAR-T2-ZeRO3-530B")),
    ("held-out", "DeepSpeed's pipeline engine (MT-NLG 530B, BLOOM 176B)",
     lambda r: r["id"].startswith(("MTNLG-", "BLOOM-"))),
    ("both", "torchtitan's context-parallel table at CP 4 and CP 8",
     lambda r: r["id"].startswith("TT-H100") and re.search(r"-cp[48]-", r["layout_label"]) is not None),
    ("held-out", "Qwen3 30B-A3B, dropless, micro-batch 1 - 2", lambda r: "QWEN3-30B" in r["id"]
     and re.search(r"-mb[12]-", r["layout_label"]) is not None and "capacity" not in r["framework"]),
    ("held-out", "GPT-OSS", lambda r: "GPTOSS" in r["id"]),
    ("held-out", "Megatron-Core MoE at EP 8 on x86 hosts (H100, B200, B300), GPT-OSS aside",
     lambda r: _megatron_moe(r) and _ep(r) == 8 and r["gpu"] in ("h100-sxm", "b200", "b300")),
    ("held-out", "Megatron-Core MoE at EP 16 - 128, GPT-OSS aside", lambda r: _megatron_moe(r) and _ep(r) >= 16),
    ("held-out", "Nemotron-H 56B on H100, NeMo 25.04.01's table",
     lambda r: r["id"].startswith("DGXC-NEMOTRONH-56B-fp8-") and not r["id"].endswith("-r2")),
    ("held-out", "... one of its layouts in a later revision", lambda r: r["id"] == "DGXC-NEMOTRONH-56B-fp8-128-r2"),
]


def miss_groups() -> str:
    """Each group of rows "Reading the misses" discusses: how many, and their errors' range and median."""
    import statistics

    files = {"public": _json("validate")["rows"], "held-out": _json("validate", "--runs", "heldout")["rows"]}
    lines = ["| rows | file | count | error range | median |", "|---|---|---|---|---|"]
    for where, name, keep in MISS_GROUPS:
        pool = [r for f, rows in files.items() if where in (f, "both") for r in rows]
        errs = sorted(100 * r["error"] for r in pool if r.get("error") is not None and keep(r))
        lines.append(f"| {name} | {where} | {len(errs)} | {errs[0]:+.1f} … {errs[-1]:+.1f} % | "
                     f"{statistics.median(errs):+.1f} % |")
    return "\n".join(lines) + "\n"


BLOCKS: dict[str, Callable[[], str]] = {
    "quickstart": lambda: shown("estimate"),
    "accuracy": accuracy,
    "stages": stage_docs,
    "collectives": collectives,
    "input-limits": input_limits,
    "memory-misses": memory_misses,
    "miss-groups": miss_groups,
    "one-model-two-stacks": one_model_two_stacks,
    "estimate-70b": lambda: shown("estimate", "--model", "llama3-70b", "--gpus", "64", "--tp", "4", "--pp", "4",
                                  "--cp", "2", "--vpp", "5", "--global-batch", "128", "--no-evidence"),
    "sensitivity": lambda: shown("estimate", "--sensitivity", "--no-evidence"),
    "placement": lambda: shown("estimate", "--placement", "--oversubscription", "4", "--no-evidence"),
    "validate-public": lambda: shown("validate", "--by", "kind"),
    "validate-heldout": lambda: shown("validate", "--runs", "heldout", "--by", "kind"),
    "plan-405b": lambda: shown("plan", "--top", "5", "--no-evidence"),
    "export-megatron": lambda: shown("plan", "--model", "llama3-8b", "--gpus", "64", "--global-batch", "256",
                                     "--export", "megatron"),
    "export-megatron-launch": lambda: shown("plan", "--model", "llama3-70b", "--gpus", "64", "--global-batch", "128",
                                            "--export", "megatron-launch"),
    "export-torchtitan": lambda: shown("plan", "--model", "llama3-8b", "--gpus", "64", "--global-batch", "256",
                                       "--export", "torchtitan"),
    "export-deepspeed": lambda: shown("plan", "--model", "llama3-8b", "--gpus", "64", "--global-batch", "256",
                                      "--export", "deepspeed"),
    "export-maxtext": lambda: shown("plan", "--model", "llama2-70b", "--gpus", "2048", "--global-batch", "4096",
                                    "--seq-len", "4096", "--export", "maxtext"),
    "compare": lambda: shown("compare", "--gpus", "1024", "--gpu-types", "h100-sxm,h200,b200,gb200"),
    "simulate": lambda: shown(*TIMELINE),
    "fabric-1m": lambda: shown("fabric", "--gpus", "1048576", "--gpu", "gb200"),
    "fabric-compare": lambda: shown("fabric", "--gpus", "16384", "--compare"),
    "goodput": lambda: shown("goodput", "--trials", "2000"),
    "train": lambda: shown("train", "--trials", "2000"),
    "scale": lambda: shown("scale", "--max-gpus", "65536", "--trials", "500"),
    "cli": cli_reference,
}

#: figure -> the command that draws it (``--plot``); shown by the pages, redrawn by --figures
FIGURES: dict[str, list[str]] = {
    "ledger-llama3-405b.png": ["estimate"],
    "plan-llama3-405b.png": ["plan"],
    "validation-public.png": ["validate"],
    "validation-heldout.png": ["validate", "--runs", "heldout"],
    "timeline-llama3-70b.png": TIMELINE,
    "goodput-llama3-405b.png": ["goodput"],
    "run-ledger-llama3-405b.png": ["train"],
    "compare-llama3-70b.png": ["compare"],
    "scale-llama3-8b-gb200.png": ["scale"],
    "fabric-1m-gb300.png": ["fabric", "--gpus", "1048576", "--gpu", "gb300", "--compare"],
}


def render(text: str, cache: dict[str, str]) -> str:
    """``text`` with every generated block regenerated (``cache``: blocks already made)."""
    def body(m: re.Match[str]) -> str:
        name = m.group("name")
        if name not in BLOCKS:
            raise KeyError(f"unknown generated block {name!r}; known: {', '.join(sorted(BLOCKS))}")
        if name not in cache:
            cache[name] = BLOCKS[name]().rstrip("\n") + "\n"
        return m.group(1) + cache[name] + m.group(4)
    return BLOCK.sub(body, text)


def stale_blocks() -> list[str]:
    """``page: block`` for every block that differs from what :func:`render` writes."""
    cache: dict[str, str] = {}
    out = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        fresh = render(text, cache)
        old = {m.group("name"): m.group("body") for m in BLOCK.finditer(text)}
        new = {m.group("name"): m.group("body") for m in BLOCK.finditer(fresh)}
        out += [f"{page.relative_to(ROOT)}: {n}" for n in old if old[n] != new[n]]
    return out


def main(argv: list[str]) -> int:
    if "--check" in argv:
        stale = stale_blocks()
        print("\n".join(f"stale: {s}" for s in stale) or "every generated block is fresh")
        return 1 if stale else 0
    cache: dict[str, str] = {}
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        fresh = render(text, cache)
        if fresh != text:
            page.write_text(fresh, encoding="utf-8")
            print("wrote", page.relative_to(ROOT))
    if "--figures" in argv:
        for name, argv_ in FIGURES.items():
            extra = ["--json"] if argv_[0] != "fabric" else []
            run(*argv_, "--plot", str(ROOT / "docs" / "img" / name), "--force", *extra)
            print("drew", name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
