"""Wall-clock accuracy of the cost model on this machine's CPU: calibrate, then train a small GPT
for real at DP=2 and TP=2, two sizes each, and print measured against predicted step time.

Run it on a quiet machine (the figures move by 10-50 % under any other load on the cores):

    python benchmarks/verify_cpu.py

The last line is JSON: per case the measured and predicted step and the error.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from typer.testing import CliRunner

from supercluster.cli import app

CASES = [["--dp", "2", "--hidden", "768", "--layers", "3"], ["--tp", "2", "--hidden", "768", "--layers", "3"],
         ["--dp", "2", "--hidden", "1024", "--layers", "4", "--steps", "3"],
         ["--tp", "2", "--hidden", "1024", "--layers", "4", "--steps", "3"]]


def main() -> None:
    runner = CliRunner()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp:
        prof = str(Path(tmp) / "profile.toml")
        r = runner.invoke(app, ["calibrate", "--nproc", "2", "--quick", "--device", "cpu", "--out", prof, "--json"])
        assert r.exit_code == 0, r.output
        out = []
        for args in CASES:
            r = runner.invoke(app, ["verify", "--profile", prof, "--nproc", "2", *args, "--json"])
            assert r.exit_code == 0, r.output
            d = json.loads(r.stdout)
            out.append({"case": " ".join(args), "measured_s": d["measured_step_time_s"],
                        "predicted_s": d["predicted_step_time_s"], "error": d["error"]})
            print(f"{out[-1]['case']:45s} measured {d['measured_step_time_s']:.4f} s  predicted "
                  f"{d['predicted_step_time_s']:.4f} s  {100 * d['error']:+.1f} %")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
