"""Stage 3, status: what a submitted job is doing, from the cluster's objects and the pods' logs.

``watch`` keeps shared informers per namespace and a status hub over them; ``mapping`` turns
objects into JobStatus (pure functions; ``trainer_status`` adds a TrainJob's progress); ``live``
answers the backend's status/wait/subscribe/jobs/logs/cancel from them; ``logs``, ``results``,
``stacks`` and ``pod_metrics`` read the pods' logs; ``archive`` keeps ended jobs locally;
``forecasting`` turns the cluster's Kueue objects into the admission forecast's input (queued
jobs' reason, blocked_by, expected start; ``plan()``).
"""
