"""Print an HTML report to PDF with headless Chromium (no network, no sandbox needed as root)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

# Binary names Debian, Ubuntu, Fedora and Chrome installs use.
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--no-pdf-header-footer",
         # plotly draws after load; give its scripts virtual time before printing
         "--virtual-time-budget=10000", "--run-all-compositor-stages-before-draw")


class PdfUnavailable(RuntimeError):
    """No Chromium to print with; the message says how to install one."""


def find_browser() -> str | None:
    """$UOL_CHROMIUM or the first Chromium/Chrome on PATH."""
    env = os.environ.get("UOL_CHROMIUM") or os.environ.get("BROWSER_PATH")
    if env and Path(env).exists():
        return env
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


def html_to_pdf(html_path: str | Path, pdf_path: str | Path, timeout: float = 120.0) -> Path:
    """Print `html_path` to `pdf_path`; raises PdfUnavailable or RuntimeError with Chromium's words."""
    browser = find_browser()
    if browser is None:
        raise PdfUnavailable("PDF export needs Chromium: apt-get install chromium (or set "
                             "UOL_CHROMIUM to a Chrome binary); HTML export works without it")
    html_path, pdf_path = Path(html_path).resolve(), Path(pdf_path).resolve()
    pdf_path.unlink(missing_ok=True)
    cmd = [browser, *FLAGS, f"--print-to-pdf={pdf_path}", html_path.as_uri()]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"Chromium did not finish printing within {timeout:.0f} s") from None
    if not pdf_path.exists() or pdf_path.stat().st_size == 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"Chromium wrote no PDF (status {proc.returncode}):\n{tail}")
    return pdf_path
