"""docs/report.png: the HTML report of one job as headless Chromium shows it on a laptop-width window.

    python docs/report_screenshot.py        # needs Debian's chromium (apt-get install chromium)

The job is the report test's (Llama 3 8B on 64 H100, compared with B200); the page is the
``report.html`` that ``supercluster report`` writes, nothing added.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from typer.testing import CliRunner

from supercluster.cli import app

JOB = ["--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "64", "--global-batch", "256", "--seq-len", "4096",
       "--trials", "50", "--gpu-types", "b200"]
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]
OUT = Path(__file__).parent / "report.png"


def main() -> int:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        print("needs chromium (Debian: apt-get install chromium)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        r = CliRunner().invoke(app, ["report", *JOB, "--out", f"{tmp}/rep"])
        if r.exit_code != 0:
            print(r.output, file=sys.stderr)
            return 1
        page = (Path(tmp) / "rep" / "report.html").as_uri()
        subprocess.run([browser, *FLAGS, f"--user-data-dir={tmp}/profile", "--window-size=1280,2400",
                        f"--screenshot={OUT}", page], check=True, capture_output=True, timeout=120)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
