"""Acting on a submitted Kubernetes job (its status is read in :mod:`..status`).

Modules: ``cancel`` (delete the job, its end archived first) and ``stack_dump``
(``job.stacks()`` without exec: a pod annotation in, the log channel out).
"""
