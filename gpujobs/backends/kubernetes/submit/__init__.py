"""Stage 2, submit: check the cluster, then create the rendered objects (all or nothing, idempotent).

``preflight`` checks before anything is created (CRDs served, RBAC, queues and quota; ``rbac``
lists the permissions it asks for; ``trainer_api`` reads which Kubeflow Trainer API is served),
then ``create.submit_rendered`` creates the objects with retries.

``kueue_version`` reads Kueue's version from its manager's image; ``checkpoint_claim`` makes
the default checkpoint claim.
"""
