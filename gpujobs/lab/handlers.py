"""The panel's HTTP API under ``{base_url}gpujobs/api/``, behind Jupyter's own authentication.

``GET jobs`` (the list), ``GET jobs/{id}``, ``POST jobs/{id}/cancel``, ``GET jobs/{id}/logs``
(``?rank=N``), ``GET jobs/{id}/stacks`` (``{rank: text}`` of a running job) and ``GET events`` (server-sent events: a ``snapshot`` then ``changes``).
Everything goes through gpujobs' public API (``gpujobs.jobs``, ``gpujobs.attach``).
"""
from __future__ import annotations

import asyncio
import json
from typing import Any

from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web
from tornado.iostream import StreamClosedError

import gpujobs

from .feed import JobFeed, job_row

HEARTBEAT_S = 15.0


class _Base(APIHandler):
    @property
    def feed(self) -> JobFeed:
        return self.settings["gpujobs_feed"]

    def _fail(self, exc: gpujobs.GpuJobsError) -> None:
        status = 404 if isinstance(exc, gpujobs.JobNotFound) else \
            400 if isinstance(exc, gpujobs.SpecError) else \
            409 if isinstance(exc, gpujobs.errors.JobStateError) else 503
        self.set_status(status)
        self.finish(json.dumps({"error": type(exc).__name__, "message": str(exc)}))

    async def _attach(self, job_id: str) -> gpujobs.Job:
        return await asyncio.to_thread(gpujobs.attach, job_id)


class JobsHandler(_Base):
    @web.authenticated
    async def get(self) -> None:
        try:
            rows = await self.feed.current()
        except gpujobs.GpuJobsError as exc:
            return self._fail(exc)
        self.finish(json.dumps(rows))


class JobHandler(_Base):
    @web.authenticated
    async def get(self, job_id: str) -> None:
        rows = {r["job_id"]: r for r in await self._rows()}
        if job_id in rows:
            self.finish(json.dumps(rows[job_id]))
            return
        try:  # not in the listing (e.g. another backend's): ask for it
            job = await self._attach(job_id)
            st = await asyncio.to_thread(job.status)
        except gpujobs.GpuJobsError as exc:
            return self._fail(exc)
        self.finish(json.dumps(job_row(st)))

    async def _rows(self) -> list[dict[str, Any]]:
        try:
            return await self.feed.current()
        except gpujobs.GpuJobsError:
            return []


class CancelHandler(_Base):
    @web.authenticated
    async def post(self, job_id: str) -> None:
        try:
            job = await self._attach(job_id)
            await asyncio.to_thread(job.cancel)
        except gpujobs.GpuJobsError as exc:
            return self._fail(exc)
        self.feed.kick()
        self.finish(json.dumps({"job_id": job_id, "cancelled": True}))


class LogsHandler(_Base):
    @web.authenticated
    async def get(self, job_id: str) -> None:
        raw = self.get_query_argument("rank", None)
        try:
            rank = None if raw in (None, "") else int(raw)
        except ValueError:
            self.set_status(400)
            self.finish(json.dumps({"error": "SpecError",
                                    "message": f"rank: {raw!r} is not a rank number (?rank=0)"}))
            return
        try:
            job = await self._attach(job_id)
            text = await asyncio.to_thread(lambda: job.logs(rank=rank))
        except gpujobs.GpuJobsError as exc:
            return self._fail(exc)
        self.finish(text, set_content_type="text/plain; charset=utf-8")


class StacksHandler(_Base):
    @web.authenticated
    async def get(self, job_id: str) -> None:
        try:
            job = await self._attach(job_id)
            stacks = await asyncio.to_thread(job.stacks)
        except gpujobs.GpuJobsError as exc:
            return self._fail(exc)
        self.finish(json.dumps({str(rank): text for rank, text in sorted(stacks.items())}))


class EventsHandler(_Base):
    """Server-sent events: ``snapshot`` (the whole list) once, then ``changes`` per refresh."""

    @web.authenticated
    async def get(self) -> None:
        self.set_header("Content-Type", "text/event-stream")
        self.set_header("Cache-Control", "no-cache")
        self.set_header("X-Accel-Buffering", "no")
        q = self.feed.subscribe()
        try:
            try:
                rows = await self.feed.current()
            except gpujobs.GpuJobsError as exc:
                rows = []
                await self._send("error", {"message": str(exc)})
            await self._send("snapshot", rows)
            while True:
                try:
                    diff = await asyncio.wait_for(q.get(), HEARTBEAT_S)
                except asyncio.TimeoutError:
                    self.write(": keep-alive\n\n")
                    await self.flush()
                    continue
                await self._send("changes", diff)
        except StreamClosedError:
            pass
        finally:
            self.feed.unsubscribe(q)

    async def _send(self, event: str, data: Any) -> None:
        self.write(f"event: {event}\ndata: {json.dumps(data)}\n\n")
        await self.flush()


def setup_handlers(web_app: Any) -> None:
    web_app.settings.setdefault("gpujobs_feed", JobFeed())
    base = url_path_join(web_app.settings["base_url"], "gpujobs", "api")
    job = r"/jobs/(?P<job_id>[^/]+)"
    web_app.add_handlers(".*$", [
        (url_path_join(base, "jobs"), JobsHandler),
        (url_path_join(base, job), JobHandler),
        (url_path_join(base, job, "cancel"), CancelHandler),
        (url_path_join(base, job, "logs"), LogsHandler),
        (url_path_join(base, job, "stacks"), StacksHandler),
        (url_path_join(base, "events"), EventsHandler),
    ])
