"""Real browser: JupyterLab + Debian's chromium (Playwright) runs a %%gpujob cell and watches
the live widget go queued/admitted/starting → running → succeeded with gang 2/2 and the result."""
from __future__ import annotations

import os
import re
import shutil
import time
import warnings
from pathlib import Path

import nbformat
import pytest

from labserver import start_lab

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
         "--disable-dev-shm-usage"]

pytestmark = [pytest.mark.slow, pytest.mark.browser]

# Both local GPU slots are busy for a few seconds, so a backend with admission queues the job.
SETUP_CELL = """%load_ext gpujobs_magic
import time, torch, gpujobs
base = 20
def hold(seconds):
    time.sleep(seconds)
blocker = gpujobs.submit(hold, 6, gpus=2, name="blocker")
time.sleep(0.5)"""

JOB_CELL = """%%gpujob --gpus 2 -o job --return total,world
import time, gpujobs, torch.distributed as dist
ctx = gpujobs.context()
t = torch.tensor([float(base + ctx.rank)])
dist.all_reduce(t)
total, world = t.item(), ctx.world_size
print(f"rank {ctx.rank}: all_reduce gave {total}", flush=True)
time.sleep(3)   # long enough to watch it running"""

# Records every phase badge the page ever shows (a MutationObserver sees even brief states).
OBSERVE_JS = """() => {
  window.__phases = [];
  const note = () => {
    const b = document.querySelector('.gpujobs-job-widget .gpujobs-phase');
    const p = b ? b.textContent : null;
    if (p && window.__phases[window.__phases.length - 1] !== p) window.__phases.push(p);
  };
  new MutationObserver(note).observe(document.body, {subtree: true, childList: true,
                                                      characterData: true});
}"""

PHASE_JS = """() => {
  const w = document.querySelector('.gpujobs-job-widget');
  if (!w) return null;
  const badge = w.querySelector('.gpujobs-phase');
  const tl = w.querySelector('.gpujobs-timeline');
  return {phase: badge ? badge.textContent : null, text: w.innerText,
          timeline: tl ? tl.textContent : ''};
}"""


def _run_all(page, tries: int = 4) -> None:
    """Run > Run All Cells; a click made while the kernel is still connecting can be lost,
    so retry until some cell shows it ran ('[*]' or '[1]')."""
    started = "() => Array.from(document.querySelectorAll('.jp-InputArea-prompt'))" \
              ".some(e => /\\[(\\*|\\d+)\\]/.test(e.textContent))"
    for _ in range(tries):
        page.click("li.lm-MenuBar-item:has-text('Run')")
        page.click(".lm-Menu-item:has-text('Run All Cells')")
        try:
            page.wait_for_function(started, timeout=10_000)
            return
        except Exception:
            page.keyboard.press("Escape")
    pytest.fail("JupyterLab never started running the cells")


def _chromium() -> str | None:
    return CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")


@pytest.fixture
def lab(tmp_path, gpujobs_home):
    lab = start_lab(tmp_path / "lab", {"GPUJOBS_HOME": str(gpujobs_home), "GPUJOBS_BACKEND": "local",
                                       "GPUJOBS_LOCAL_GPUS": "2", "GPUJOBS_DISPLAY": ""})
    try:
        yield lab
    finally:
        survivors = lab.stop()
        assert survivors == [], f"processes survived JupyterLab's teardown: {survivors}"


def test_widget_goes_live_in_jupyterlab(lab, tmp_path):
    exe = _chromium()
    if exe is None:
        pytest.skip("no chromium binary (apt-get install chromium); never `playwright install`")
    from playwright.sync_api import sync_playwright

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(SETUP_CELL), nbformat.v4.new_code_cell(JOB_CELL)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, lab.root / "demo.ipynb")

    phases: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=FLAGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 900})
            page.goto(lab.url("lab/tree/demo.ipynb?reset"), wait_until="domcontentloaded")
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']",
                                   timeout=60_000)
            page.evaluate(OBSERVE_JS)
            _run_all(page)
            deadline = time.monotonic() + 90
            state = None
            while time.monotonic() < deadline:
                state = page.evaluate(PHASE_JS)
                if state and state["phase"] and (not phases or phases[-1] != state["phase"]):
                    phases.append(state["phase"])
                if phases and phases[-1] in ("succeeded", "failed", "cancelled"):
                    break
                time.sleep(0.1)
            lab.remember_children()
            if not phases:
                page.screenshot(path=str(tmp_path / "failure.png"))
                outs = page.evaluate("() => Array.from(document.querySelectorAll("
                                     "'.jp-OutputArea-output')).map(e => e.innerText)")
                pytest.fail(f"no widget appeared; outputs: {outs}; screenshot: {tmp_path}/failure.png; "
                            f"lab log: {lab.log.read_text()[-800:]}")
            page.wait_for_function(
                "() => (document.querySelector('.gpujobs-job-widget .gpujobs-result') || {})"
                ".textContent?.includes('41.0')", timeout=10_000)
            final = page.evaluate(PHASE_JS)
            seen = page.evaluate("() => window.__phases")
            widget = page.locator(".gpujobs-job-widget").first
            widget.scroll_into_view_if_needed()
            artifacts = ROOT / "tests" / "artifacts"
            artifacts.mkdir(parents=True, exist_ok=True)
            widget.screenshot(path=str(artifacts / "widget.png"))
        finally:
            browser.close()

    print("phases polled:", phases, "phases observed:", seen)
    assert "running" in seen and seen[-1] == "succeeded", (seen, phases)
    assert "running" in phases and phases[-1] == "succeeded", phases
    # What the backend reported (the widget's timeline): seconds from submit to start.
    offsets = {m[2]: float(m[1]) for m in re.finditer(r"\(\+([\d.]+)s\) ([a-z]+)", final["timeline"])}
    assert {"submitted", "started", "finished"} <= set(offsets), final["timeline"]
    assert offsets["submitted"] <= offsets.get("admitted", offsets["started"]) <= offsets["started"]
    if offsets["started"] >= 2.0:
        # The job really waited (queued behind the blocker): the widget must have shown it live.
        assert seen[0] in ("queued", "admitted", "starting"), (seen, final["timeline"])
        assert seen.index("running") > 0
    else:
        warnings.warn(f"the backend started the job {offsets['started']}s after submit (no queue "
                      f"wait to watch live); checked the pre-running phases in the timeline only", stacklevel=1)
    assert "gang 2/2" in final["text"] and "2/2 ready" in final["text"]
    assert "'total': 41.0" in final["text"] and "'world': 2" in final["text"]  # rank 0's result
    assert "ranks on CPU" in final["text"]
    png = (ROOT / "tests" / "artifacts" / "widget.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 2000
    if os.environ.get("GPUJOBS_UPDATE_DOCS") == "1":  # refresh the README's screenshot
        (ROOT / "docs").mkdir(exist_ok=True)
        (ROOT / "docs" / "widget.png").write_bytes(png)
