"""A real browser reads the list: headless Chromium (Debian's `chromium` package) renders the
shipped example's index.html and one entry page with JavaScript off, to a screenshot that is
not blank, and its DOM holds every listed result ID in rank order. Skipped, with the reason,
where Chromium is absent (`apt-get install -y chromium`). Slow: it starts a browser."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from helpers import ROOT

pytestmark = pytest.mark.slow

LIST = ROOT / "docs" / "example_ranking" / "list"
BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-javascript",  # readable with JavaScript off
]


def _chromium(tmp_path, *args) -> subprocess.CompletedProcess:
    argv = [BROWSER, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *map(str, args)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def _not_blank(png) -> bool:
    from PIL import Image

    with Image.open(png) as image:
        colours = image.convert("L").getextrema()
        return image.size[0] >= 800 and colours[1] - colours[0] > 100


@pytest.mark.skipif(BROWSER is None, reason="no chromium here (apt-get install -y chromium)")
@pytest.mark.parametrize("page", ["index.html", "entry"])
def test_chromium_renders_the_list(tmp_path, page):
    doc = json.loads((LIST / "ranking.json").read_text())
    ranked = [row["result_id"] for t in doc["tables"] for row in t["rows"]]
    path = LIST / "index.html" if page == "index.html" else LIST / "entries" / f"{ranked[0]}.html"
    shot = tmp_path / "shot.png"
    done = _chromium(tmp_path, f"--screenshot={shot}", "--window-size=1400,900", path.as_uri())
    assert shot.is_file() and _not_blank(shot), done.stderr[-2000:]
    dom = _chromium(tmp_path, "--dump-dom", path.as_uri()).stdout
    assert "CPU examples, not systems" in dom
    if page == "entry":
        assert f"result {ranked[0]}" in dom and "Cite as:" in dom
        return
    places = [dom.find(f">{rid}</a>") for rid in ranked]
    assert all(p > 0 for p in places) and places == sorted(places), places
