"""Real browser: JupyterLab + Debian's chromium (Playwright) with the GPU jobs side panel. The
panel shows a job queued behind a blocker, then running with a progress bar, then succeeded;
another queued job is cancelled from the panel (after the confirmation dialog); the finished
job's logs open in a main-area tab; attach inserts ``job = gpujobs.attach("…")`` into the
active notebook's cell."""
from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest

import gpujobs
from tests.browser.labserver import panel_server
from tests.browser.test_widget_browser import FLAGS, _chromium

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def wait_for_file(path: str, value):
    import time as _t
    while not os.path.exists(path):
        _t.sleep(0.05)
    return value


def stepping(path: str, steps: int):
    """Waits for ``path``, then reports ``steps`` steps of progress and prints each."""
    import time as _t
    import gpujobs as _g
    ctx = _g.context()
    while not os.path.exists(path):
        _t.sleep(0.05)
    for i in range(1, steps + 1):
        ctx.progress(i, total=steps)
        print(f"rank {ctx.rank} step {i}/{steps}", flush=True)
        _t.sleep(1.0)
    return steps


def holding(path: str):
    """Reports progress (out of 100) until ``path`` exists."""
    import time as _t
    import gpujobs as _g
    ctx = _g.context()
    i = 0
    while not os.path.exists(path):
        i = min(i + 1, 99)
        ctx.progress(i, total=100)
        _t.sleep(0.2)
    return "b"


# every phase a row ever shows, per job id (a MutationObserver sees brief states too)
OBSERVE_JS = """() => {
  window.__rows = {};
  const note = () => {
    for (const row of document.querySelectorAll('.gpujobs-row')) {
      const id = row.dataset.jobId, seen = (window.__rows[id] = window.__rows[id] || []);
      const bar = row.querySelector('.gpujobs-bar-fill');
      const state = row.dataset.phase + (bar ? ' bar' : '');
      if (seen[seen.length - 1] !== state) seen.push(state);
    }
  };
  new MutationObserver(note).observe(document.body, {subtree: true, childList: true, attributes: true});
  note();
}"""


@pytest.fixture
def lab(tmp_path, gpujobs_home, monkeypatch):
    with panel_server(monkeypatch, tmp_path / "lab", gpujobs_home) as lab:
        yield lab


def row(page, job_id: str):
    return page.locator(f".gpujobs-row[data-job-id='{job_id}']")


def test_panel_follows_cancels_opens_logs_and_attaches(lab, tmp_path):
    exe = _chromium()
    if exe is None:
        pytest.skip("no chromium binary (apt-get install chromium); never `playwright install`")
    from playwright.sync_api import sync_playwright

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, lab.root / "attach.ipynb")

    gate, go = str(tmp_path / "gate"), str(tmp_path / "go")
    blocker = gpujobs.submit(holding, gate, gpus=2, name="blocker")
    watched = gpujobs.submit(stepping, go, 6, gpus=2, name="watched")
    victim = gpujobs.submit(wait_for_file, gate, "v", gpus=2, name="victim")

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=FLAGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(lab.url("lab/tree/attach.ipynb?reset"), wait_until="domcontentloaded")
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
            page.locator(".lm-TabBar-tab[data-id='gpujobs-panel']").click()
            panel = page.locator("#gpujobs-panel")
            panel.wait_for(state="visible", timeout=30_000)
            page.evaluate(OBSERVE_JS)
            row(page, watched.id).wait_for(timeout=30_000)
            page.wait_for_function(
                f"() => (document.querySelector(\".gpujobs-row[data-job-id='{blocker.id}']\") || {{}})"
                ".dataset?.phase === 'running'", timeout=60_000)
            queued_text = row(page, watched.id).inner_text()
            assert "queued" in queued_text and "1st in" in queued_text, queued_text
            assert "gang 0/2" in queued_text, queued_text
            # active first: the running blocker, then the queued jobs in queue order
            ids = page.evaluate("() => Array.from(document.querySelectorAll("
                                "'.gpujobs-section-active .gpujobs-row')).map(e => e.dataset.jobId)")
            assert ids == [blocker.id, watched.id, victim.id], ids
            # the queue view: positions in order
            queue_rows = page.evaluate("() => Array.from(document.querySelectorAll("
                                       "'.gpujobs-queue-table tbody tr')).map(tr => [tr.dataset.jobId,"
                                       " tr.cells[0].textContent])")
            assert queue_rows == [[watched.id, "1"], [victim.id, "2"]], queue_rows

            page.wait_for_selector(f".gpujobs-row[data-job-id='{blocker.id}'] .gpujobs-bar-fill",
                                   timeout=30_000)
            if os.environ.get("GPUJOBS_UPDATE_DOCS") == "1":  # the README's screenshot: a queue
                page.wait_for_function(  # once the forecast has a rate to go on
                    f"() => document.querySelector(\".gpujobs-row[data-job-id='{watched.id}']\")"
                    ".innerText.includes('between')", timeout=30_000)
                (ROOT / "docs").mkdir(exist_ok=True)
                panel.screenshot(path=str(ROOT / "docs" / "panel.png"))

            # cancel the victim, through the confirmation dialog
            row(page, victim.id).locator("button:has-text('cancel')").click()
            dialog = page.locator(".jp-Dialog")
            dialog.wait_for(timeout=10_000)
            assert victim.id in dialog.inner_text()
            dialog.locator("button:has-text('Cancel job')").click()
            page.wait_for_selector(f".gpujobs-section-recent .gpujobs-row[data-job-id='{victim.id}']"
                                   "[data-phase='cancelled']", timeout=30_000)
            assert victim.status().phase == "cancelled"

            # release the blocker, then the watched job: running with a bar, then succeeded
            Path(gate).touch()
            page.wait_for_selector(f".gpujobs-row[data-job-id='{watched.id}'][data-phase='running']",
                                   timeout=60_000)
            Path(go).touch()
            page.wait_for_selector(f".gpujobs-row[data-job-id='{watched.id}'] .gpujobs-bar-fill",
                                   timeout=60_000)
            running_text = row(page, watched.id).inner_text()
            # live stacks of the running job in a tab
            row(page, watched.id).locator("button:has-text('stacks')").click()
            page.wait_for_function("() => Array.from(document.querySelectorAll('.gpujobs-stacks pre'))"
                                   ".some(e => e.textContent.includes('== rank 1 =='))", timeout=30_000)
            stacks = page.locator(".gpujobs-stacks pre").first.inner_text()
            page.wait_for_selector(f".gpujobs-section-recent .gpujobs-row[data-job-id='{watched.id}']"
                                   "[data-phase='succeeded']", timeout=60_000)
            seen = page.evaluate("() => window.__rows")[watched.id]

            # logs in a main-area tab
            row(page, watched.id).locator("button:has-text('logs')").click()
            page.wait_for_selector(".lm-TabBar-tab:has-text('Logs: watched')", timeout=10_000)
            page.wait_for_function("() => Array.from(document.querySelectorAll('.gpujobs-logview pre'))"
                                   ".some(e => e.textContent.includes('[rank 1] rank 1 step 6/6'))",
                                   timeout=30_000)
            logs = page.locator(".gpujobs-logview pre").first.inner_text()

            # attach into the notebook's active cell
            page.locator(".lm-TabBar-tab:has-text('attach.ipynb')").click()
            page.locator(".jp-Notebook .jp-Cell").first.click()
            row(page, watched.id).locator("button:has-text('attach')").click()
            page.wait_for_function(
                "() => (document.querySelector('.jp-Notebook .jp-Cell .cm-content') || {})"
                f".textContent?.includes('gpujobs.attach(\"{watched.id}\")')", timeout=10_000)
            cell = page.locator(".jp-Notebook .jp-Cell .cm-content").first.inner_text()
            lab.remember_children()
        finally:
            browser.close()

    states = [s.split()[0] for s in seen]
    assert states.index("queued") < states.index("running") < states.index("succeeded"), seen
    assert any(s == "running bar" for s in seen), seen  # a progress bar while it ran
    assert "gang 2/2" in running_text and "step" in running_text, running_text
    assert "== rank 0 ==" in stacks and "stepping" in stacks, stacks
    assert "[rank 0] rank 0 step 1/6" in logs and "[rank 1] rank 1 step 6/6" in logs, logs
    assert f'job = gpujobs.attach("{watched.id}")' in cell, cell
    assert watched.result(timeout=30) == 6 and blocker.result(timeout=30) == "b"
