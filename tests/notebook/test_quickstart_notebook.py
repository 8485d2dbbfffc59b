"""nbclient runs examples/notebook_quickstart.ipynb end to end on the local backend."""
from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "examples" / "notebook_quickstart.ipynb"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


@pytest.mark.slow
def test_quickstart_notebook_runs_and_saves_the_final_widget_state(nb_env, tmp_path):
    from nbclient import NotebookClient
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # Headless runs keep only widget updates that arrive while a cell runs: let the live
    # views finish (fast jobs end within the throttle window of their last render).
    nb.cells.append(nbformat.v4.new_code_cell("import gpujobs.views\nassert gpujobs.views.settle(60)"))
    client = NotebookClient(nb, timeout=180, kernel_name="python3", store_widget_state=True,
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute()

    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    texts = "\n".join(o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in outputs)
    assert "(21.0, 2)" in texts  # --return names came back from rank 0
    assert "[rank 1] rank 1/2: all_reduce gave 21.0" in texts
    assert "-0.75" in texts  # the function API job's result
    assert "ranks on CPU" in texts  # the notebook says plainly that ranks run on CPU

    job_cell = next(c for c in nb.cells if c.source.startswith("%%gpujob"))
    bundle, copy = [o for o in job_cell.outputs if o.output_type == "display_data"][:2]
    assert set(bundle.data) == {WIDGET_MIME}  # the widget view, then its static copy
    assert {"text/html", "text/plain"} <= set(copy.data) and "gpujobs-job" in copy.data["text/html"]
    assert 'data-phase="succeeded"' in copy.data["text/html"]  # kept current: the final state

    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    model_id = bundle.data[WIDGET_MIME]["model_id"]
    box = state[model_id]["state"]
    assert box["_model_name"] == "VBoxModel"
    kids = [state[ref.removeprefix("IPY_MODEL_")]["state"] for ref in box["children"]]
    header = kids[0]["value"]
    assert 'gpujobs-phase-succeeded' in header and "gang 2/2" not in header  # said once, below
    row = [state[ref.removeprefix("IPY_MODEL_")]["state"] for ref in kids[1]["children"]]
    progress, label, button, details = row
    assert details["description"] == "details"  # compact: metrics, timeline, logs expand
    assert (progress["value"], progress["max"], label["value"]) == (2, 2, "gang 2/2 ready")
    assert button["disabled"] is True
    result = kids[4]["value"]
    assert "{&#x27;total&#x27;: 21.0, &#x27;world&#x27;: 2}" in result


@pytest.mark.slow
def test_without_widgets_the_html_output_is_rewritten_in_place(nb_env, monkeypatch, tmp_path):
    """GPUJOBS_DISPLAY=html (a frontend without a widget manager): one display_id output that
    the updater rewrites until the job ends."""
    from nbclient import NotebookClient
    monkeypatch.setenv("GPUJOBS_DISPLAY", "html")
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("import gpujobs\ndef f(x):\n    return x * 2\n"
                                  "job = gpujobs.submit(f, 21, gpus=2, name='html-view')\njob"),
        nbformat.v4.new_code_cell("job.wait(120)\nimport time\ntime.sleep(2)  # one more render"),
    ]
    NotebookClient(nb, timeout=180, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    outs = [o for o in nb.cells[0].outputs if o.output_type == "display_data"]
    assert len(outs) == 1 and WIDGET_MIME not in outs[0].data
    assert 'data-phase="succeeded"' in outs[0].data["text/html"]  # updated in place
    assert "result: <code>42</code>" in outs[0].data["text/html"]
    assert "html-view: succeeded" in outs[0].data["text/plain"]
