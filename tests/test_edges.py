"""Honest at the edges: input that would print nonsense is refused by name, work that would explode
is bounded, and JSON stays JSON."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from supercluster.cli import app
from supercluster.errors import InputError
from supercluster.network.fabric import check_gpu_count, largest_fabric
from supercluster.planner.search import _divisors

runner = CliRunner()


@pytest.mark.parametrize("args, field", [
    (["fabric", "--pue", "-1"], "pue"),
    (["fabric", "--gpus", "4096", "--compare", "--pue", "0.5"], "pue"),
    (["plan", "--model", "llama3-8b", "--gpus", "64", "--objective", "cost", "--gpu-hour-usd", "-1"], "gpu_hour_usd"),
    (["plan", "--model", "llama3-8b", "--gpus", "64", "--top", "1000000"], "top"),
    (["scale", "--model", "llama3-8b", "--seed", "-1"], "seed"),
    (["simulate", "--global-batch", "2147483648"], "global_batch"),
    (["scale", "--model", "llama3-8b", "--trials", "2147483648"], "trials"),  # (a MemoryError before)
    (["goodput", "--seed", "-1"], "seed"),
    (["simulate", "--seed", "-1"], "seed"),  # (numpy's ValueError before)
    (["sweep", "--db", ":memory:", "--sizes", "8"], "db"),  # (it priced the grid, then could not read it back)
    (["sweep", "--db", "DB", "--sizes", "8", "--workers", "2147483648"], "workers"),
    (["compare", "--model", "llama3-8b", "--gpu-types", "h100-sxm", "--global-batch", "99999999999999999999"],
     "global_batch"),
    (["estimate", "--model", "llama3-8b", "--gpus", "8", "--tp", "8", "--pp", "1",
      "--global-batch", "99999999999999999999"], "global_batch"),
    (["verify", "--profile", "PROFILE", "--steps", "99999999999999999999"], "steps"),
    (["calibrate", "--kind", "all_reduce", "--quick"], "kind"),
    (["calibrate", "--nccl-tests", "NCCL", "--kind", "x", "--gpu", "h100-sxm"], "kind"),
])
def test_nonsense_is_refused_naming_the_field(args, field, tmp_path):
    fixture = str(Path(__file__).parent / "fixtures" / "all_reduce_perf_h100x8.txt")
    if "PROFILE" in args:  # (verify checks its own options after reading the profile)
        runner.invoke(app, ["calibrate", "--nccl-tests", fixture, "--gpu", "h100-sxm", "--out",
                            str(tmp_path / "p.toml")])
    args = [{"PROFILE": str(tmp_path / "p.toml"), "NCCL": fixture, "DB": str(tmp_path / "s.duckdb")}.get(a, a)
            for a in args]
    r = runner.invoke(app, [*args, *(["--out", str(tmp_path / "o.toml")] if args[0] == "calibrate" else [])])
    assert r.exit_code != 0 and isinstance(r.exception, InputError) and r.exception.field == field, r.output


@pytest.mark.parametrize("command", ["goodput", "simulate", "plan", "estimate"])
def test_a_gpu_count_past_any_fabric_is_an_error_in_a_second_not_a_hang(command):
    """2^31 GPUs: the planner's divisor search is O(sqrt n) (it was O(n): minutes), and the job is
    refused with the reason."""
    r = runner.invoke(app, [command, "--gpus", "2147483648"])
    assert r.exit_code != 0 and isinstance(r.exception, InputError), r.output


@pytest.mark.parametrize("command", ["goodput", "simulate", "plan", "estimate", "compare", "train", "report",
                                     "fabric"])
def test_a_gpu_count_past_what_any_fabric_builds_is_refused_where_it_enters(command):
    """10^20 GPUs (past a 64-bit column): refused by the option itself, naming the range, before any
    divisor search or column is sized by it (plan and compare hung, then overflowed, on such a count)."""
    r = runner.invoke(app, [command, "--gpus", str(10**20)])
    assert isinstance(r.exception, InputError) and r.exception.field == "gpus", r.output
    most, _ = largest_fabric()
    assert f"1 to {most:,}" in str(r.exception)


def test_the_planner_finds_pipeline_degrees_up_to_the_layers_only():
    assert _divisors(12) == [1, 2, 3, 4, 6, 12] and _divisors(36, 6) == [1, 2, 3, 4, 6]
    # a count whose square root is 10^9: only the candidates up to the bound are tried
    assert _divisors(10**18, 10) == [1, 2, 4, 5, 8, 10]
    with pytest.raises(InputError, match="gpus"):
        check_gpu_count(largest_fabric()[0] + 1)
    assert check_gpu_count(largest_fabric()[0]) == largest_fabric()[0]
    assert check_gpu_count(np.int64(64)) == 64  # (a count computed with numpy is a count)
    for odd in (True, 64.0, 0):
        with pytest.raises(InputError, match="gpus"):
            check_gpu_count(odd)


def test_a_runs_file_without_scored_rows_is_an_error_not_a_perfect_score(tmp_path):
    header = resources.files("supercluster").joinpath("data/public-runs.csv").read_text("utf-8").splitlines()[0]
    (tmp_path / "empty.csv").write_text(header + "\n", encoding="utf-8")
    r = runner.invoke(app, ["validate", "--runs", str(tmp_path / "empty.csv")])
    assert isinstance(r.exception, InputError) and "no scored rows" in str(r.exception)


def test_a_runs_row_without_a_usable_measured_time_is_shown_not_a_crash(tmp_path):
    """A row whose step time is blank (priced, no error) or not a number (unsupported): the table shows
    "-" where there is no figure (it raised a TypeError formatting None)."""
    import csv
    import io

    text = resources.files("supercluster").joinpath("data/public-runs.csv").read_text("utf-8")
    rows = list(csv.DictReader(io.StringIO(text)))[:3]
    rows[1]["step_time_s"], rows[2]["step_time_s"] = "", "abc"
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
    (tmp_path / "runs.csv").write_text(out.getvalue(), encoding="utf-8")
    r = runner.invoke(app, ["validate", "--runs", str(tmp_path / "runs.csv")])
    assert r.exit_code == 0 and r.exception is None, r.output
    assert rows[1]["id"] in r.output and "unsupported" in r.output and "not a positive number" in r.output


def test_a_runs_file_with_a_byte_order_mark_reads_as_without(tmp_path):
    text = resources.files("supercluster").joinpath("data/public-runs.csv").read_text("utf-8")
    (tmp_path / "bom.csv").write_text(text, encoding="utf-8-sig")
    with_bom = json.loads(runner.invoke(app, ["validate", "--runs", str(tmp_path / "bom.csv"), "--json"]).stdout)
    plain = json.loads(runner.invoke(app, ["validate", "--json"]).stdout)
    assert with_bom["mape"] == plain["mape"] and len(with_bom["rows"]) == len(plain["rows"])


def test_json_has_no_infinity_when_nothing_fails(tmp_path):
    rates = tmp_path / "zero.toml"
    rates.write_text('[zero]\nname = "none"\nplanned_per_day = 0.0\nsources = "test"\n[zero.components]\n'
                     'all = { per_node_hour = 0.0, hardware = true }\n', encoding="utf-8")
    r = runner.invoke(app, ["goodput", "--rates", str(rates), "--trials", "50", "--json"])
    assert r.exit_code == 0, r.output
    assert "Infinity" not in r.stdout and "NaN" not in r.stdout
    s = json.loads(r.stdout)
    assert s["job_mtbf_h"] is None and s["ettr_mean"] == pytest.approx(1.0, abs=1e-3)


def test_an_output_that_exists_is_not_overwritten_unless_forced(tmp_path):
    plot = tmp_path / "ledger.png"
    plot.write_bytes(b"mine")
    r = runner.invoke(app, ["estimate", "--plot", str(plot)])
    assert isinstance(r.exception, InputError) and "exists; give --force" in str(r.exception)
    assert plot.read_bytes() == b"mine"
    r = runner.invoke(app, ["estimate", "--plot", str(plot), "--force"])
    assert r.exit_code == 0 and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(tmp_path.glob(".*.tmp"))  # written whole, through a temporary file renamed into place


def test_an_output_is_checked_before_the_work_and_never_an_input_or_a_link(tmp_path):
    prof = tmp_path / "profile.toml"
    prof.write_text("mine", encoding="utf-8")
    r = runner.invoke(app, ["calibrate", "--out", str(prof)])  # refused before anything is measured
    assert r.exception.field == "out" and prof.read_text(encoding="utf-8") == "mine"
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 8,
                               "intermediate_size": 4096, "vocab_size": 1000}), encoding="utf-8")
    r = runner.invoke(app, ["simulate", "--model", str(cfg), "--gpus", "8", "--layout", "tp1-pp1-dp8",
                            "--global-batch", "8", "--trace", str(cfg), "--force"])
    assert r.exception.field == "trace" and "input" in str(r.exception) and "hidden_size" in cfg.read_text()
    link = tmp_path / "link.png"
    link.symlink_to(tmp_path / "elsewhere.png")
    r = runner.invoke(app, ["estimate", "--plot", str(link), "--force"])
    assert r.exception.field == "plot" and "symbolic link" in str(r.exception)
    r = runner.invoke(app, ["estimate", "--plot", str(tmp_path / "missing" / "a.png")])
    assert r.exception.field == "plot" and "does not exist" in str(r.exception)


def test_outputs_are_refused_where_they_cannot_be_written_before_any_work(tmp_path):
    """A name past what the file system (and the temporary file beside it) takes, and a report in a
    folder that does not exist: one named error, and no folder is made."""
    long = str(tmp_path / ("x" * 240 + ".png"))
    r = runner.invoke(app, ["validate", "--plot", long])
    assert isinstance(r.exception, InputError) and r.exception.field == "plot" and "bytes" in str(r.exception)
    r = runner.invoke(app, ["report", "--model", "llama3-8b", "--gpus", "8", "--out", str(tmp_path / "a" / "b")])
    assert isinstance(r.exception, InputError) and r.exception.field == "out" and not (tmp_path / "a").exists()


def test_a_report_folder_holding_a_report_is_kept_unless_forced(tmp_path):
    (tmp_path / "report.md").write_text("mine", encoding="utf-8")
    r = runner.invoke(app, ["report", "--out", str(tmp_path)])
    assert r.exception.field == "out" and (tmp_path / "report.md").read_text(encoding="utf-8") == "mine"


DEEP_JSON = "[" * 200_000 + "]" * 200_000
DEEP_TOML = "a = " + "[" * 200_000 + "]" * 200_000 + "\n"


@pytest.mark.parametrize("name, text, args, field, says", [
    ("config.json", '{"a": ' + DEEP_JSON + "}", ["estimate", "--model", "{path}"], "model", "nested too deeply"),
    ("ds.json", DEEP_JSON, ["estimate", "--model", "llama3-8b", "--config", "{path}", "--gpus", "8"], "config",
     "nested too deeply"),
    ("job.toml", DEEP_TOML, ["estimate", "--model", "llama3-8b", "--config", "{path}", "--gpus", "8"], "config",
     "nested too deeply"),
    ("profile.toml", DEEP_TOML, ["estimate", "--model", "llama3-8b", "--profile", "{path}", "--gpus", "8"],
     "profile", "nested too deeply"),
    ("rates.toml", DEEP_TOML, ["goodput", "--rates", "{path}"], "rates", "nested too deeply"),
    ("rates.toml", b"[r]\nname = \"caf\xe9\"\n", ["goodput", "--rates", "{path}"], "rates", "not UTF-8"),
    ("train.sh", b"# caf\xe9\n--num-layers 32\n", ["estimate", "--model", "llama3-8b", "--config", "{path}",
                                                   "--gpus", "8"], "config", "not UTF-8"),
    ("config.json", b"{\"hidden_size\": 4096, \"name\": \"caf\xe9\"}", ["estimate", "--model", "{path}"], "model",
     "not UTF-8"),
])
def test_an_input_file_too_deep_or_not_utf8_is_one_named_error(tmp_path, name, text, args, field, says):
    """Every user file goes through one bounded reader (files.read_input / parse_json / parse_toml):
    nesting that would exhaust Python's stack, or bytes that are not UTF-8, are named, never a
    RecursionError or UnicodeDecodeError traceback."""
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    r = runner.invoke(app, [a.replace("{path}", str(path)) for a in args])
    assert isinstance(r.exception, InputError), (r.exception, r.output)
    assert r.exception.field == field and says in str(r.exception)


def test_an_input_file_past_the_size_bound_is_refused_before_it_is_read(tmp_path):
    from supercluster.files import MAX_INPUT_BYTES

    path = tmp_path / "huge.toml"
    with path.open("wb") as fh:  # (sparse: no 16 MiB written)
        fh.truncate(MAX_INPUT_BYTES + 1)
    r = runner.invoke(app, ["goodput", "--rates", str(path)])
    assert isinstance(r.exception, InputError) and r.exception.field == "rates"
    assert "larger than" in str(r.exception)


LONG = "a" * 5000


@pytest.mark.parametrize("args, field", [
    (["estimate", "--model", LONG], "model"),
    (["estimate", "--model", "b/" * 3000 + "x.json"], "model"),
    (["estimate", "--config", LONG], "config"),
    (["estimate", "--profile", LONG], "profile"),
    (["validate", "--runs", LONG], "runs"),
    (["goodput", "--rates", LONG], "rates"),
    (["calibrate", "--nccl-tests", LONG, "--gpu", "h100-sxm"], "nccl-tests"),
])
def test_an_input_path_longer_than_a_file_system_takes_is_refused_naming_the_field(args, field, tmp_path):
    """A name past 255 bytes, or a path past 4,096, made the file system's OSError a traceback."""
    r = runner.invoke(app, [*args, *(["--out", str(tmp_path / "o.toml")] if args[0] == "calibrate" else [])])
    assert r.exit_code != 0 and isinstance(r.exception, InputError) and r.exception.field == field, r.output
    assert "at most" in str(r.exception)


def test_a_json_integer_of_thousands_of_digits_is_an_error_naming_the_file(tmp_path):
    """Python converts integers of at most 4,300 digits; json's ValueError past that was a traceback."""
    cfg = tmp_path / "config.json"
    cfg.write_text('{"hidden_size": ' + "9" * 5000 + ', "num_hidden_layers": 2}')
    r = runner.invoke(app, ["estimate", "--model", str(cfg)])
    assert isinstance(r.exception, InputError) and r.exception.field == "model", r.output
    assert "not valid JSON" in str(r.exception)
