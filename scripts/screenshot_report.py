#!/usr/bin/env python3
"""Regenerate docs/report.png: the HTML report of a sample model, photographed by headless Chromium.

Uses Debian's ``chromium`` (``apt-get install -y chromium``); nothing is downloaded. The page is
loaded from a file with the same isolating flags as the browser tests, at a fixed window size,
so the picture is the top of the report as a reader first sees it.

Usage::

    python scripts/screenshot_report.py [--model sample_models/bert_two_layers.onnx]
        [--out docs/report.png] [--width 1280] [--height 1240] [--dark]
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mhainspect.pipeline import audit  # noqa: E402
from mhainspect.render.html import render_html  # noqa: E402 - after the path setup

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--disable-extensions", "--hide-scrollbars", "--force-device-scale-factor=1")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="sample_models/bert_two_layers.onnx")
    parser.add_argument("--out", default=str(ROOT / "docs" / "report.png"))
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=1240)
    parser.add_argument("--dark", action="store_true", help="emulate prefers-color-scheme: dark")
    args = parser.parse_args()
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        print("screenshot_report: chromium not found (apt-get install -y chromium)", file=sys.stderr)
        return 2
    model = Path(args.model)
    # The path as a reader types it in the README (relative to the repository root).
    name = str(model.resolve().relative_to(ROOT)) if model.resolve().is_relative_to(ROOT) else str(model)
    report = audit(str(model.resolve()))
    report = dataclasses.replace(report, model=dataclasses.replace(report.model, path=name))
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "report.html"
        page.write_text(render_html(report), encoding="utf-8")
        extra = ["--force-dark-mode", "--blink-settings=preferredColorScheme=0"] if args.dark else []
        subprocess.run([browser, *FLAGS, *extra, f"--user-data-dir={tmp}/profile",
                        f"--window-size={args.width},{args.height}", f"--screenshot={Path(args.out).resolve()}",
                        page.as_uri()], check=True, capture_output=True, timeout=120)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
