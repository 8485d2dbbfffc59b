"""Stage 1, render: JobSpec -> the exact Kubernetes objects of a job, made without a cluster.

``job.render_job`` is the entry point; each kind renders itself (its module in ``kinds/``), from
``podspec``, the pod template they share, ``kubeflow`` (runPolicy, gpujobs' training runtimes) and
``ray_submitter`` (KubeRay's submitter pod); ``payload_objects`` what a pod needs besides its
image (runtime ConfigMap, key Secret, the sealed call) and ``bootstrap_script`` the script the
pods run; ``images`` what is known of an image without pulling it (Python version, the MPI
tools); ``podsets`` reads a rendered object back as Kueue's pod sets (each kind's own); ``yamlout`` prints it all
for ``kubectl apply -f -``.

``shipped`` lists the code a pod gets (the runner's import closure).
"""
