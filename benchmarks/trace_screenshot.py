"""A screenshot of a real `--profile_steps` trace in a real trace viewer (docs/observe.md).

Not a benchmark and not run by CI; no test imports it. It makes docs/observe_trace_viewer.png:

1. traces steps 5 and 6 of a quickstart-sized run (Fashion-MNIST, resnet_small, M=4, P_degree=4
   on 8 forced CPU devices, 8 steps evaluated every epoch of 2 steps) with this interpreter, the
   project's venv (`--trace_dir` reuses a trace directory instead);
2. serves it with XProf (`xprof server`, the standalone TensorBoard profile plugin) on localhost;
3. opens XProf's Trace Viewer in headless Chromium through Playwright at two zooms, each after
   the viewer has fetched that range: step 5 from its dispatch to the evaluation after it, with
   the host's `train_step`, `input_wait` and `evaluation` selected; the end of step 5, with one
   device's gradient all-reduce selected (the instruction that the trace's phases.json maps to
   `grad_allreduce_data`);
4. stacks the two screenshots, unretouched, into one PNG of at most 256 colours.

What it needs, all offline once installed:
- Debian's Chromium, `apt-get install -y chromium` (Playwright drives it; its own browser
  download is not used);
- a venv for the viewer, apart from the project's: `--viewer_venv` (default xprof-venv in the
  temporary directory; made when missing, with
  `pip install xprof==2.24.2 playwright==1.65.3` from PyPI). XProf's overview page loads Google
  Charts from the internet; its Trace Viewer, all this script opens, needs nothing outside.

    python benchmarks/trace_screenshot.py --out=docs/observe_trace_viewer.png
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VIEWER_PACKAGES = ("xprof==2.24.2", "playwright==1.65.3")
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# The traced run: configs/quickstart.flags cut to 8 steps of 4 members on 8 CPU devices.
RUN_FLAGS = [
    "--flagfile=configs/quickstart.flags",
    "--members_per_device=2",
    "--parallel_degree=4",
    "--batch_size=16",
    "--steps=8",
    "--train_examples=32",
    "--eval_every_epochs=1",
    "--eval_examples=300",
    "--eval_batch_size=128",
    "--log_every=2",
    "--lr_schedule=constant",
    "--profile_steps=5:7",
    "--notensorboard",
    "--run_name=prof",
]


def _trace(work_dir: str) -> str:
    """Runs the profiled training and returns its process 0 trace directory."""
    env = dict(os.environ)
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    ).strip()
    results = os.path.join(work_dir, "results")
    cmd = [sys.executable, "-m", "hpcai_jax.main", *RUN_FLAGS, f"--results_dir={results}"]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL)
    return os.path.join(results, "prof.profile", "process_0")


def _viewer_python(venv: str) -> str:
    python = os.path.join(venv, "bin", "python")
    if not os.path.exists(os.path.join(venv, "bin", "xprof")):
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        subprocess.run([python, "-m", "pip", "install", "-q", *VIEWER_PACKAGES], check=True)
    return python


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_runs(port: int, server: subprocess.Popen, timeout_s: float = 120) -> str:
    """The first profile run XProf lists once it answers."""
    url = f"http://localhost:{port}/data/plugin/profile/runs"
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"xprof server exited with {server.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                body = response.read()
            runs = json.loads(gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body)
            if runs:
                return runs[0]
        except OSError:
            pass
        time.sleep(1)
    raise SystemExit(f"xprof server answered no runs at {url} within {timeout_s} s")


# The browser side runs in the viewer venv (Playwright), in a process of its own.

_LOADED = """() => { const v = document.querySelector('tf-trace-viewer');
  return !!(v && v._model && v._traceViewer && v._traceViewer.trackView && !v._isLoading); }"""

_HAS = """(name) => { const v = document.querySelector('tf-trace-viewer');
  if (!v || !v._model || v._isLoading) return false;
  for (const p of Object.values(v._model.processes))
    for (const t of Object.values(p.threads))
      if (t.sliceGroup.slices.some((s) => s.title.split(' ')[0] === name)) return true;
  return false; }"""

_FIND = """([host, device]) => {
  const v = document.querySelector('tf-trace-viewer'); const all = [];
  for (const p of Object.values(v._model.processes))
    for (const t of Object.values(p.threads))
      for (const s of t.sliceGroup.slices) all.push([s, t]);
  // XProf titles a StepTraceAnnotation with its step number: "train_step 5".
  const named = (n) => all.filter(([s]) => s.title.split(' ')[0] === n).map(([s]) => s)
    .sort((a, b) => a.start - b.start);
  const step = named(host[0])[0];
  const wait = named(host[1]).find((s) => s.start >= step.start);
  const evaluation = named(host[2]).find((s) => s.start >= step.start);
  const reduce = all.filter(([s]) => device.includes(s.title) && s.start >= step.start
      && s.start < evaluation.start).sort((a, b) => a[0].start - b[0].start);
  const first = reduce.length ? reduce[0][0].title : null;
  window.__shot = {step, wait, evaluation, reduce: reduce.length ? reduce[0][0] : null,
                   reduces: reduce.filter(([s]) => s.title === first),
                   hostThread: all.find(([s]) => s === step)[1]};
  return {step: [step.start, step.end], evaluation: evaluation.start,
          reduce: reduce.length ? [reduce[0][0].title, reduce[0][0].start] : null}; }"""

_COLLAPSE = """() => {
  // Fold the PjRt client and Python threading threads: the devices' XLA threads and the
  // host's annotated thread stay open.
  const host = window.__shot.hostThread;
  for (const t of Array.from(document.querySelectorAll('div.track.thread-track'))) {
    const name = t.thread ? t.thread.name : '';
    if (t.thread === host || name.includes('XLAEigen')) continue;
    t.querySelector('tr-ui-b-heading heading span').click(); } }"""

_ZOOM = """([lo, hi]) => { const v = document.querySelector('tf-trace-viewer');
  const view = v._traceViewer.trackView; const canvas = view.modelTrackContainer_.canvas;
  const d = new tr.ui.TimelineDisplayTransform(); d.xSetWorldBounds(lo, hi, canvas.width);
  view.viewport.setDisplayTransformImmediately(d); v._onViewportChanged(); }"""

_SCROLL = """(rows) => {
  // Thread order follows thread ids, which change from run to run: scroll so that the host's
  // thread shows its top rows at the bottom of the timeline, the tracks before it above.
  const host = window.__shot.hostThread;
  const track = Array.from(document.querySelectorAll('div.track.thread-track'))
    .find((t) => t.thread === host);
  const box = document.querySelector('tf-trace-viewer')._traceViewer.trackView
    .modelTrackContainer_;
  const below = track.getBoundingClientRect().top - box.getBoundingClientRect().top;
  box.scrollTop = Math.max(0, box.scrollTop + below + rows * 18 - box.clientHeight); }"""

_PICK_SHOWN = """() => {
  // Of the devices' events of that instruction, the one on the lowest track in view.
  const box = document.querySelector('tf-trace-viewer')._traceViewer.trackView
    .modelTrackContainer_.getBoundingClientRect();
  const tracks = Array.from(document.querySelectorAll('div.track.thread-track'));
  let best = null;
  for (const [s, thread] of window.__shot.reduces) {
    const r = tracks.find((t) => t.thread === thread).getBoundingClientRect();
    if (r.top >= box.top && r.top + 40 <= box.bottom && (!best || r.top > best[1]))
      best = [s, r.top];
  }
  if (best) window.__shot.reduce = best[0]; }"""

_SELECT = """(names) => { const v = document.querySelector('tf-trace-viewer');
  const events = names.map((n) => window.__shot[n]);
  v._traceViewer.brushingStateController.changeSelectionFromTimeline(
      new tr.model.EventSet(events)); }"""


def _settle(page, frame) -> None:
    page.wait_for_timeout(800)
    page.wait_for_load_state("networkidle")
    frame.wait_for_function(_LOADED, timeout=120_000)
    page.wait_for_timeout(1500)


def browse(spec: dict) -> None:
    """Opens the Trace Viewer and writes the two screenshots named in spec."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=spec["chromium"], args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.goto(spec["url"], wait_until="networkidle", timeout=180_000)
        page.click("button.sidenav-toggle-button")  # the run/tool side bar: more timeline
        frame = next(f for f in page.frames if "trace_viewer_index" in f.url)
        _settle(page, frame)
        frame.wait_for_function(_HAS, arg=spec["host"][0], timeout=120_000)
        found = frame.evaluate(_FIND, [spec["host"], spec["device"]])
        print("browser: found", json.dumps(found), flush=True)
        if found["reduce"] is None:
            raise SystemExit(f"no event of {spec['device']} between the step and evaluation")
        frame.evaluate(_COLLAPSE)
        step_lo, evaluation = found["step"][0], found["evaluation"]
        views = [
            ([step_lo - 0.5, evaluation + 2.0], ["step", "wait", "evaluation"]),
            ([found["reduce"][1] - 2.0, evaluation + 1.0], ["reduce"]),
        ]
        for ((lo, hi), selection), out in zip(views, spec["outs"], strict=True):
            frame.evaluate(_ZOOM, [lo, hi])
            _settle(page, frame)
            frame.evaluate(_SELECT, selection)
            _settle(page, frame)
            frame.evaluate(_SCROLL, 9)
            _settle(page, frame)
            if "reduce" in selection:
                frame.evaluate(_PICK_SHOWN)
                frame.evaluate(_SELECT, selection)
                _settle(page, frame)
            page.screenshot(path=out)
            print(f"browser: {out}: {lo:.2f} to {hi:.2f} ms, selected {selection}", flush=True)
        browser.close()


def _stack(shots: list[str], out: str) -> None:
    """One PNG, the screenshots one above the other with a grey rule between, 256 colours."""
    from PIL import Image

    images = [Image.open(s).convert("RGB") for s in shots]
    gap = 6
    width = max(i.width for i in images)
    canvas = Image.new("RGB", (width, sum(i.height for i in images) + gap), (96, 96, 96))
    y = 0
    for image in images:
        canvas.paste(image, (0, y))
        y += image.height + gap
    canvas.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(out, optimize=True)
    print(f"{out}: {canvas.width} x {canvas.height}, {os.path.getsize(out) / 1024:.0f} KiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/observe_trace_viewer.png")
    parser.add_argument("--trace_dir", default="", help="a process_N trace directory to reuse")
    parser.add_argument("--work_dir", default="", help="default: a temporary directory")
    parser.add_argument("--viewer_venv", default=os.path.join(tempfile.gettempdir(), "xprof-venv"))
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    parser.add_argument("--browse", default="", help=argparse.SUPPRESS)  # the browser process
    args = parser.parse_args()
    if args.browse:
        browse(json.loads(args.browse))
        return
    if not os.path.exists(args.chromium):
        raise SystemExit(f"--chromium={args.chromium}: no such browser (apt-get install chromium)")
    from hpcai_jax.axes import DATA
    from hpcai_jax.engine.step import allreduce_scope
    from hpcai_jax.telemetry.profile import EVALUATION, INPUT_WAIT, STEP_ANNOTATION

    work = args.work_dir or tempfile.mkdtemp(prefix="trace_screenshot_")
    os.makedirs(work, exist_ok=True)
    trace_dir = args.trace_dir or _trace(work)
    with open(os.path.join(trace_dir, "phases.json")) as f:
        phases = json.load(f)["phases"]
    xplanes = sorted(glob.glob(os.path.join(trace_dir, "plugins", "profile", "*", "*.xplane.pb")))
    if not xplanes:
        raise SystemExit(f"{trace_dir}: no *.xplane.pb under plugins/profile")
    reduce_ops = sorted(op for op, ph in phases.items() if ph == allreduce_scope(DATA))
    python = _viewer_python(args.viewer_venv)
    port = _free_port()
    xprof = os.path.join(args.viewer_venv, "bin", "xprof")
    server_cmd = [xprof, "server", f"--logdir={trace_dir}", f"--port={port}"]
    server_cmd.append(f"--grpc_port={_free_port()}")
    print("+", " ".join(server_cmd), flush=True)
    with open(os.path.join(work, "xprof.log"), "w") as log:
        server = subprocess.Popen(server_cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        run = _wait_for_runs(port, server)
        host = os.path.basename(xplanes[0])[: -len(".xplane.pb")]
        spec = {
            "url": f"http://localhost:{port}/data/plugin/profile/trace_viewer@"
            f"?run={run}&tag=trace_viewer@&host={host}",
            "chromium": args.chromium,
            "host": [STEP_ANNOTATION, INPUT_WAIT, EVALUATION],
            "device": reduce_ops,
            "outs": [os.path.join(work, "step.png"), os.path.join(work, "allreduce.png")],
        }
        subprocess.run([python, __file__, f"--browse={json.dumps(spec)}"], check=True)
    finally:
        server.terminate()
        server.wait(timeout=30)
    _stack(spec["outs"], args.out)


if __name__ == "__main__":
    main()
