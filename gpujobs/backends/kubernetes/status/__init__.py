"""Stage 3, status: what a submitted job is doing, from the cluster's objects and the pods' logs.

``informer`` is a generic list+watch cache; ``hub`` runs one per resource and namespace and keeps
every job's status current from them (``mapping`` turns objects into JobStatus, pure functions;
``trainer_status`` adds a kind's own progress report); ``live`` answers the backend's status, wait,
subscribe, jobs, logs and cancel from the hub; ``logs``, ``results``, ``stacks`` and
``pod_metrics`` read the pods' logs; ``archive`` keeps ended jobs locally; ``forecasting`` turns
the cluster's Kueue objects (kept by cluster-wide informers on the hub) into the admission
forecast's input: queued jobs' reason, blocked_by, expected start, and ``plan()``.
"""
