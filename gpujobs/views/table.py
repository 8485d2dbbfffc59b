"""Job lists as tables: :class:`JobTable` (what ``gpujobs.jobs()`` returns) and :class:`QueueView`
(their rows: :mod:`.frames`)."""
from __future__ import annotations

from typing import Any, Callable

from ..status import JobStatus
from .frames import _plain, frame_html, jobs_frame, sort_key


class JobTable(list):
    """A list of :class:`JobStatus`; ``.to_pandas()`` for a DataFrame, tables in reprs."""

    def to_pandas(self):
        return jobs_frame(self)

    def __repr__(self) -> str:
        if not self:
            return "JobTable(no jobs)"
        return _plain(self.to_pandas())

    def _repr_html_(self) -> str:
        return frame_html(self.to_pandas())


class QueueView:
    """The jobs of one queue (or all queues), read through ``source()`` each time.

    ``source`` is typically ``lambda: backend.jobs(queue)``; the view holds no backend logic.
    """

    def __init__(self, source: Callable[[], list[JobStatus]], name: str | None = None,
                 refresh_s: float = 2.0, active_only: bool = True):
        self._source = source
        self.name = name
        self.refresh_s = refresh_s
        self.active_only = active_only  # only says so in the title: the source does the filtering

    @property
    def title(self) -> str:
        where = f"queue {self.name}" if self.name else "all queues"
        return f"{where}: active jobs (all=True adds finished ones)" if self.active_only else where

    def jobs(self) -> JobTable:
        return JobTable(sorted(self._source(), key=sort_key))

    def to_pandas(self):
        return jobs_frame(self._source())

    def widget(self, statuses: list[JobStatus] | None = None):
        """A refreshing :class:`~gpujobs.views.widgets.QueueWidget`, first showing ``statuses``
        when given (else reading the source)."""
        from .widgets import QueueWidget
        return QueueWidget(self._source, title=self.title, refresh_s=self.refresh_s, statuses=statuses)

    def __len__(self) -> int:
        return len(self._source())

    def __iter__(self):
        return iter(self.jobs())

    def _text(self, frame: Any) -> str:
        body = _plain(frame) if len(frame) else "(no jobs)"
        return f"{self.title}:\n{body}"

    def __repr__(self) -> str:
        return self._text(self.to_pandas())

    def _repr_html_(self) -> str:
        return frame_html(self.to_pandas(), self.title)

    def _ipython_display_(self) -> None:
        """One read of the source feeds the text, the HTML and the widget's first table."""
        from .bundle import display_bundle
        statuses = list(self._source())
        frame = jobs_frame(statuses)
        display_bundle(lambda: self.widget(statuses), text=self._text(frame),
                       html=frame_html(frame, self.title))
