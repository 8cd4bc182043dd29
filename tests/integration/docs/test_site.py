"""The docs site builds with warnings as errors and shows its pages in a real browser.

`mkdocs build --strict` fails on a broken link or anchor between pages, a page missing
from the navigation, a reference to a Python name that does not exist, and a generated
table whose code moved (scripts/docs_hooks.py). Then a headless Chromium opens a page
served over HTTP, runs the theme's JavaScript and takes a screenshot: the page must show
its navigation and its highlighted code blocks, with the copy buttons the theme adds.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
SECTIONS = ("Getting started", "Concepts", "How-to", "Operations", "Reference", "Benchmarks")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    r = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, f"mkdocs build --strict failed:\n{r.stdout}{r.stderr}"[-6000:]
    return out


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.fail(
        "no Chromium for the docs' browser test: apt-get install chromium (bin/setup --tests does)"
    )


def browse(url: str, tmp: Path, *args: str) -> str:
    r = subprocess.run(
        [
            chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            f"--user-data-dir={tmp / 'profile'}",
            "--window-size=1280,900",
            "--hide-scrollbars",
            "--virtual-time-budget=5000",
            *args,
            url,
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def png_rows(path: Path) -> tuple[int, int, list[bytes]]:
    """Width, height and the RGB bytes of each row of a PNG."""
    with Image.open(path) as png:
        assert png.format == "PNG", png.format
        rgb = png.convert("RGB")
    width, height = rgb.size
    raw, stride = rgb.tobytes(), width * 3
    return width, height, [raw[i * stride : (i + 1) * stride] for i in range(height)]


def test_the_site_builds_strict_with_every_section(site: Path) -> None:
    home = (site / "index.html").read_text()
    assert [s for s in SECTIONS if s not in home] == []
    api = (site / "reference/api/index.html").read_text()
    names = ["client.TaskState", "client.LocalContext", "client.admin.AdminClient",
             "spark_plugin.configure", "spark_plugin.with_batch_id", "spark_plugin.resume",
             "spark_plugin.processor.TaskStateProcessor"]  # fmt: skip
    assert [n for n in names if f'id="taskstate.{n}"' not in api] == []
    settings = (site / "reference/settings/index.html").read_text()
    assert "TASKSTATE_RETRY_DEADLINE" in settings  # the generated table is there


def test_a_page_in_a_headless_browser_shows_its_navigation_and_code(
    site: Path, served: str, tmp_path: Path
) -> None:
    url = f"{served}/getting-started/first-job/"
    dom = browse(url, tmp_path, "--dump-dom")
    assert [s for s in SECTIONS if s not in dom] == [], dom[:3000]
    assert 'class="md-nav' in dom
    assert dom.count('class="highlight"') >= 2  # the job and the spark-submit flags
    assert "configure(spark, namespace=<span" in dom or "shop-totals" in dom  # the README's
    # the theme's JavaScript ran: it adds a copy button to each code block
    assert dom.count('data-md-type="copy"') >= 2
    assert 'data-md-type="copy"' not in (site / "getting-started/first-job/index.html").read_text()
    shot = tmp_path / "first-job.png"
    browse(url, tmp_path, f"--screenshot={shot}")
    width, height, rows = png_rows(shot)
    assert (width, height) == (1280, 900)
    # a rendered page, not a blank one: many distinct rows, and more than two colours
    assert len(set(rows)) > 100
    assert len({rows[h][i : i + 3] for h in range(0, height, 7) for i in range(0, 3000, 3)}) > 8
    print(f"screenshot: {shot}")
