"""Stage 3, status: what a submitted job is doing, from the cluster's objects and the pods' logs.

``informer`` is a generic list+watch cache; ``hub`` runs one per resource and namespace and keeps
every job's status current from them (``mapping`` turns objects into JobStatus, pure functions;
``trainer_status`` adds a kind's own progress report); ``live`` answers the backend's status, wait,
subscribe, jobs and logs from the hub; ``logs``, ``results`` and ``pod_metrics`` read the pods'
logs (cancel and stacks act on a job: :mod:`..control`); ``archive`` keeps ended jobs locally; ``forecasting`` turns
the cluster's Kueue objects (kept by cluster-wide informers on the hub) into the admission
forecast's input: queued jobs' reason, blocked_by, expected start, and ``plan()``.

``hints`` says why a job is stuck, in words; ``kueue_read`` reads the Kueue objects this user may
read and ``kueue_model`` turns them into the admission forecast's Snapshot; ``log_keeper`` keeps
the logs of pods about to be deleted.
"""
