"""What happens to each #SBATCH directive that does not shape the job: a warning or a refusal."""
from __future__ import annotations

WARN_ONLY = {
    "mail-user": "gpujobs sends no mail; watch the job with `gpujobs status` or the notebook widget",
    "mail-type": "gpujobs sends no mail; watch the job with `gpujobs status` or the notebook widget",
    "account": "accounting is per Kueue queue; the account is not used",
    "comment": "comments are not kept", "wckey": "workload keys are not kept",
    "open-mode": "gpujobs keeps one log per rank (`gpujobs logs JOB`)",
    "output": "gpujobs keeps one log per rank (`gpujobs logs JOB --rank N`); the path is not used",
    "error": "gpujobs keeps one log per rank (`gpujobs logs JOB --rank N`); the path is not used",
    "input": "ranks read no stdin",
    "requeue": "requeueing after preemption is decided by the queue (Kueue / local scheduler)",
    "no-requeue": "requeueing after preemption is decided by the queue (Kueue / local scheduler)",
    "exclusive": "whole-node exclusivity is not requested; the gang gets exactly its GPUs",
    "signal": "gpujobs announces preemption with SIGTERM and gpujobs.context().should_stop()",
    "nice": "use --qos (priority class) instead of nice", "parsable": "no effect",
    "hint": "CPU binding hints are not translated", "distribution": "task distribution is not translated",
    "threads-per-core": "CPU topology is not translated", "cores-per-socket": "CPU topology is not translated",
    "sockets-per-node": "CPU topology is not translated", "gpu-bind": "each rank sees only its own GPUs",
    "cpu-bind": "CPU binding is not translated", "mem-bind": "memory binding is not translated",
    "gpu-freq": "GPU clocks are not set", "time-min": "the time limit is --time only",
    "kill-on-invalid-dep": "dependencies are not supported", "quiet": "no effect", "verbose": "no effect",
    "get-user-env": "the image provides the environment", "propagate": "resource limits are not propagated",
    "export-file": "pass variables with --export=K=V", "switches": "network topology is not translated "
    "(use builder.topology())", "tmp": "node-local scratch space is not requested",
    "container-mounts": "use builder.volume(claim) for data volumes",
}
REFUSED = {
    "dependency": "run the jobs in order from Python: job_a.result(); then submit job_b",
    "begin": "submit the job when it should start", "hold": "submit the job when it may start",
    "nodelist": "map a --constraint to a node selector in the mapping file",
    "exclude": "map a --constraint to a node selector in the mapping file",
    "reservation": "ask for a dedicated queue (partition) instead",
    "licenses": "express licences as a queue quota", "wait": "use `gpujobs sbatch --wait FILE`",
    "deadline": "use --time for a limit", "clusters": "choose the backend/context instead",
    "test-only": "use `gpujobs render FILE` to see what would be created",
    "overcommit": "each rank gets whole CPUs", "oversubscribe": "each rank gets whole CPUs",
    "contiguous": "use builder.topology() to keep a gang together",
    "wrap": "write the command in the script body", "het-job": "submit each component as its own job",
    "batch": "use --constraint with a mapping", "burst-buffer": "use builder.volume(claim)",
}
