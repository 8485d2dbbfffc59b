"""Widget state driven by scripted JobStatus sequences: no frontend, no backend."""
from __future__ import annotations

import threading
import time

import ipywidgets as W

from gpujobs.views.widgets import JobUpdater, JobWidget, QueueWidget

from tests.notebook.nbscript import ScriptedJob, sample, script, status


def test_job_widget_follows_a_scripted_sequence(recording_comm):
    seq = script()
    w = JobWidget(seq[0])
    assert "2nd in team-a" in w.header.value and 'gpujobs-phase-queued' in w.header.value
    assert (w.gang.value, w.gang.max, w.gang_label.value) == (0, 2, "gang 0/2 ready")
    w.update(seq[3])  # starting, 1 of 2 ranks ready
    assert (w.gang.value, w.gang_label.value, w.gang.bar_style) == (1, "gang 1/2 ready", "info")
    assert "2nd in" not in w.header.value and "starting" in w.header.value
    w.update(seq[4])
    w.update(seq[5])
    assert w.gang_label.value == "gang 2/2 ready" and w.gang.bar_style == "success"
    assert w.history[(0, 0, "nvml")] == [(50, 1 / 16), (90, 3 / 16)]
    assert w.metrics.value.count("<polyline") == 4  # util + memory per rank
    assert not w.cancel_button.disabled
    w.update(seq[5])  # the same samples again add no history points
    assert len(w.history[(1, 0, "nvml")]) == 2
    w.update(seq[6], logs_tail="[rank 0] done", result_text="42")
    assert w.cancel_button.disabled and w.cancel_button.description == "ended"
    assert "result: <code>42</code>" in w.result.value and "[rank 0] done" in w.logs.value
    assert "finished" in w.timeline.value
    assert 'data-phase="succeeded"' in w.to_html()


def test_cpu_samples_are_labelled_cpu_in_the_widget(recording_comm):
    w = JobWidget(status("running", gang_ready=2, metrics=(sample(1.0, 0, 20, 2**29, "psutil"),)))
    assert "rank 0 CPU" in w.metrics.value and "GPU" not in w.metrics.value.replace("no GPU", "")


def test_update_batches_each_child_into_one_message(recording_comm):
    seq = script()
    w = JobWidget(seq[0])
    recording_comm.log.clear()
    w.update(seq[4])
    per_widget: dict[int, int] = {}
    for comm, data in recording_comm.log:
        assert data["method"] == "update"
        per_widget[id(comm)] = per_widget.get(id(comm), 0) + 1
    assert per_widget and max(per_widget.values()) == 1  # hold_sync: one message per widget
    recording_comm.log.clear()
    w.update(seq[4])  # nothing changed: nothing sent
    assert recording_comm.log == []


def test_cancel_button_calls_the_callback_and_shows_errors(recording_comm):
    calls = []
    w = JobWidget(status("running"), on_cancel=lambda: calls.append(1))
    w.cancel_button.click()
    assert calls == [1] and w.cancel_button.disabled

    def broken():
        raise RuntimeError("api down")
    w2 = JobWidget(status("running"), on_cancel=broken)
    w2.cancel_button.click()
    assert "cancel failed: api down" in w2.error.value and not w2.cancel_button.disabled


def test_updater_throttles_coalesces_and_stops_at_terminal(recording_comm):
    seq = [status("running", gang_ready=2, started_at=1.0,
                  metrics=(sample(float(i), 0, i % 100, 2**30),)) for i in range(200)]
    seq.append(status("succeeded", gang_ready=2, started_at=1.0, finished_at=9.0))
    job = ScriptedJob([status("queued", queue_position=1)] + seq, value={"loss": 0.25})
    w = JobWidget(job.current)
    renders: list[tuple[float, str]] = []
    orig = w.update

    def timed(st, **kw):
        renders.append((time.monotonic(), st.phase))
        orig(st, **kw)
    w.update = timed
    from gpujobs.views import summarize_outcome
    up = JobUpdater(job, w, min_interval=0.5, poll_s=5.0, summarize=summarize_outcome).start()
    t0 = time.monotonic()
    job.play(gap=0.005)  # 201 statuses in about 1 s
    assert up.join(timeout=10), "the updater did not stop at the terminal phase"
    elapsed = time.monotonic() - t0
    gaps = [b[0] - a[0] for a, b in zip(renders, renders[1:])]
    assert all(g >= 0.45 for g in gaps), gaps  # never faster than ~2 Hz
    assert len(renders) <= elapsed / 0.5 + 2 and len(renders) < 10  # coalesced, not 201
    assert renders[-1][1] == "succeeded" and up.final_status.phase == "succeeded"
    assert w.result_text == "{'loss': 0.25}" and "[rank 0] hi" in w.logs_tail
    assert job.subscribers == []  # unsubscribed
    n = w.renders
    job.emit(status("running"))  # late events are ignored
    time.sleep(0.3)
    assert w.renders == n


def test_updater_falls_back_to_polling_without_events(recording_comm):
    job = ScriptedJob([status("running", gang_ready=2)])
    job.subscribe = lambda cb: (_ for _ in ()).throw(RuntimeError("no events here"))
    w = JobWidget(job.current)
    up = JobUpdater(job, w, min_interval=0.05, poll_s=0.1).start()
    time.sleep(0.3)
    job.current = status("failed", gang_ready=2, message="rank 1 exited 3")
    assert up.join(timeout=3)
    assert w.status.phase == "failed" and job.polls >= 2
    assert "rank 1 exited 3" in w.header.value


def test_widget_updates_from_a_background_thread_reach_the_comm(recording_comm):
    w = JobWidget(status("queued", queue_position=3))
    recording_comm.log.clear()
    t = threading.Thread(target=w.update, args=(status("running", gang_ready=2),))
    t.start()
    t.join()
    sent = [d["state"] for c, d in recording_comm.log if c is w.gang.comm]
    assert sent and sent[-1].get("value") == 2


def test_queue_widget_refreshes_itself(recording_comm):
    box = [status("queued", job_id="a", queue_position=1)]
    q = QueueWidget(lambda: list(box), title="queue team-a", refresh_s=0.1)
    assert "queue team-a" in q.table.value and ">a<" in q.table.value
    assert list(q.frame["job_id"]) == ["a"]
    box.append(status("queued", job_id="b", queue_position=2, user="grace", reason="quota"))
    deadline = time.time() + 3
    while ">b<" not in q.table.value and time.time() < deadline:
        time.sleep(0.05)
    assert ">b<" in q.table.value and "grace" in q.table.value and "quota" in q.table.value
    assert q.updated.value.startswith("2 jobs")
    q.close()
    n = q.refreshes
    time.sleep(0.3)
    assert q.refreshes == n  # closing stops the refresher


def test_queue_widget_shows_source_errors(recording_comm):
    def broken():
        raise ConnectionError("apiserver unreachable")
    q = QueueWidget(broken, autostart=False)
    assert "refresh failed: ConnectionError: apiserver unreachable" in q.updated.value


def test_widget_uses_only_core_widgets():
    w = JobWidget(status("queued"))
    core = (W.HTML, W.IntProgress, W.Label, W.Button, W.HBox, W.VBox)
    stack = [w]
    while stack:
        x = stack.pop()
        assert isinstance(x, core), type(x)
        stack.extend(getattr(x, "children", ()))


def test_seeded_history_feeds_the_sparklines(recording_comm):
    w = JobWidget()
    w.seed_history([sample(3.0, 0, 30, 2**30), sample(1.0, 0, 10, 2**30), sample(2.0, 0, 20, 2**30)])
    w.update(status("running", metrics=(sample(3.0, 0, 30, 2**30), sample(4.0, 0, 40, 2**30))))
    assert [u for u, _ in w.history[(0, 0, "nvml")]] == [10, 20, 30, 40]


def test_newest_log_line_stays_in_view(recording_comm):
    tail = "".join(f"[rank 0] step {i}\n" for i in range(40))
    w = JobWidget(status("running", gang_ready=2))
    w.update(status("running", gang_ready=2), logs_tail=tail)
    # compact: the newest line is shown on its own
    assert "step 39" in w.last_line.value and "step 38" not in w.last_line.value
    # expanded: the tail box is anchored at its end (column-reverse scrolls to the bottom)
    w.toggle_details(True)
    assert w.details.layout.display == "" and w.last_line.value == ""
    assert "flex-direction:column-reverse" in w.logs.value and "step 39" in w.logs.value
    w.toggle_details(False)
    assert w.details.layout.display == "none" and "step 39" in w.last_line.value


def test_cancelled_shows_cancelling_until_the_ranks_exit(recording_comm):
    import os
    import subprocess
    import sys
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    w = JobWidget(status("running", gang_ready=2, backend="local"), on_cancel=lambda: None)
    w.cancel_button.click()
    alive = status("cancelled", gang_ready=2, backend="local", extra={"pids": [os.getpid()]})
    w.update(alive)  # the agent says cancelled, a rank is still in its grace period
    assert "cancelling…" in w.header.value and w.cancel_button.description == "cancelling…"
    assert w.cancel_button.disabled and w.ending(alive)
    gone = status("cancelled", gang_ready=2, backend="local", extra={"pids": [dead.pid]})
    w.update(gone)
    assert ">cancelled<" in w.header.value and w.cancel_button.description == "ended"
    assert not w.ending(gone)


def test_updater_keeps_polling_while_a_cancelled_job_is_ending(recording_comm):
    job = ScriptedJob([status("cancelled", gang_ready=2)])
    w = JobWidget(job.current)
    w.ending = lambda st: job.polls < 3  # the ranks exit after two more polls
    JobUpdater(job, w, min_interval=0.0, poll_s=0.01).start().join(timeout=10)
    assert job.polls >= 3


def test_no_gpu_is_an_info_chip_and_sampling_is_said(recording_comm):
    w = JobWidget(status("running", gang_ready=2, cpu_ranks=True))
    assert "gpujobs-info" in w.header.value and "ranks on CPU" in w.header.value
    assert "color:#cf222e" not in w.header.value                # not styled as an error
    assert "sampling…" in w.metrics.value and "?" not in w.metrics.value
    zero = JobWidget(status("running", gang_ready=2, cpu_ranks=True, gpus=0))
    assert "ranks on CPU" not in zero.header.value            # a 0-GPU job asked for no GPU


def test_default_priority_is_shown(recording_comm):
    assert "priority default" in JobWidget(status("queued")).header.value
    assert "priority high" in JobWidget(status("queued", priority="high")).header.value


def test_gang_is_said_once_and_the_widget_is_compact(recording_comm):
    w = JobWidget(status("running", gang_ready=2, metrics=(sample(1.0, 0, 20, 2**29),)))
    texts = [w.header.value, w.gang_label.value, w.last_line.value, w.result.value]
    assert sum(t.count("2/2") for t in texts) == 1
    assert w.details.layout.display == "none" and w.metrics in w.details.children
    w.details_button.click()
    assert w.details.layout.display == "" and w.expanded


def test_log_tail_interleaves_every_rank_and_ends_with_the_newest_lines(recording_comm):
    """#31: the details log tail showed one rank's lines only (job.logs() is rank 0's whole
    log, then rank 1's, …: its last 40 lines were the last rank's) and stopped short of
    rank 0's newest line."""
    def logs(upto):
        return "".join(f"[rank {r}] step {i}/{upto[r]}\n" for r in (0, 1, 2)
                       for i in range(1, upto[r] + 1))
    job = ScriptedJob([status("running", gang_ready=3, gang_size=3, started_at=1.0)],
                      logs=logs({0: 30, 1: 30, 2: 30}))
    w = JobWidget(status("running", gang_ready=3, gang_size=3))
    up = JobUpdater(job, w, min_interval=0.0, poll_s=0.05, logs_every_s=0.0)
    up.start()
    try:
        deadline = time.monotonic() + 10
        while "[rank 0]" not in w.logs_tail and time.monotonic() < deadline:
            time.sleep(0.02)
        job._logs = logs({0: 40, 1: 34, 2: 31})  # more output: rank 0 ran ahead
        job.emit(status("succeeded", gang_ready=3, gang_size=3, started_at=1.0, finished_at=9.0))
        assert up.join(timeout=10)
    finally:
        up.stop()
    tail = w.logs_tail.splitlines()
    assert {ln.split("]")[0] for ln in tail[-6:]} == {"[rank 0", "[rank 1", "[rank 2"}, tail[-6:]
    assert tail[-1] == "[rank 0] step 40/40", tail[-6:]
    for r, newest in ((0, 40), (1, 34), (2, 31)):
        assert f"[rank {r}] step {newest}/{newest}" in tail, (r, tail)
    assert "step 40/40" in w.last_line.value  # the compact view's newest line


def test_updater_says_when_the_status_cannot_be_read_and_recovers(recording_comm):
    from gpujobs.errors import BackendUnavailable
    job = ScriptedJob([status("running", gang_ready=2, message="epoch 1")])
    job.subscribe = lambda cb: (_ for _ in ()).throw(RuntimeError("no events here"))
    real_status, broken = job.status, threading.Event()

    def status_or_error():
        if broken.is_set():
            job.polls += 1
            raise BackendUnavailable("local agent at /tmp/x/agent.sock is not answering")
        return real_status()
    job.status = status_or_error
    w = JobWidget(job.current)
    up = JobUpdater(job, w, min_interval=0.0, poll_s=0.05).start()
    time.sleep(0.2)
    broken.set()
    deadline = time.time() + 3
    while "not current" not in w.header.value and time.time() < deadline:
        time.sleep(0.02)
    time.sleep(0.1)  # the render that set the header has returned (renders counted last)
    st = w.status
    assert st.message.startswith("not current: no news from the local agent since ")
    assert "BackendUnavailable: local agent at /tmp/x/agent.sock is not answering" in st.message
    assert st.message.endswith(" · epoch 1") and st.phase == "running" and "stale_since" in st.extra
    assert "not current" in w.header.value
    polls, renders = job.polls, w.renders
    time.sleep(0.3)
    assert job.polls > polls + 2 and w.renders == renders  # polls on, shows the same error once
    broken.clear()
    job.current = status("succeeded", gang_ready=2, finished_at=9.0)
    assert up.join(timeout=3)
    assert w.status.phase == "succeeded" and "not current" not in w.status.message
