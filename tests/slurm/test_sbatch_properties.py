"""Property-based: whatever the script, from_sbatch answers with a builder or a SpecError."""
from __future__ import annotations

import warnings

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpujobs.builder import JobBuilder
from gpujobs.errors import SpecError
from gpujobs.slurm import from_sbatch, from_sbatch_array
from gpujobs.slurm.directives import SBATCH_OPTIONS
from gpujobs.spec import JobSpec

VALUES = st.one_of(
    st.sampled_from(["1", "2", "8", "0", "-1", "gpu", "gpu:2", "gpu:a100:4", "a100:2", "1g.10gb:1",
                     "01:00:00", "1-00:00", "UNLIMITED", "64G", "0", "4000", "0-3", "0-9:2%3",
                     "ALL", "NONE", "ALL,X=1", "team-a", "Team_B", "afterok:1", "2-4", "", "x=y",
                     "$HOME", "'quoted value'", "\"unterminated"]),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12))
OPTION_NAMES = sorted(SBATCH_OPTIONS) + ["gpu-count", "nodes-per-task", "x"]
BODY = st.sampled_from([
    "python train.py", "srun python train.py --lr 0.1", "srun --mpi=pmix ./a.out",
    "srun torchrun --nnodes=$SLURM_NNODES --nproc_per_node=gpu train.py",
    "torchrun --standalone --nproc-per-node=4 -m pkg.main", "mpirun -np 4 python x.py",
    "mpiexec -n 3 -x A=1 ./prog", "module load cuda", "export A=1 B=2", "export P=$(pwd)",
    "cd /data", "echo hi", "for i in 1 2; do", "done", "srun --weird x", "srun", "torchrun",
    "python", "mpirun -np two x", "srun --gpus-per-task=1 -n 4 python t.py", "accelerate launch t.py",
    "python t.py > out.log", "srun -N 3 python t.py", "   ", "# a comment", "./run.sh",
    "srun python t.py \\", "  --more args",
])


@st.composite
def scripts(draw) -> str:
    lines = ["#!/bin/bash"]
    for _ in range(draw(st.integers(0, 8))):
        name = draw(st.sampled_from(OPTION_NAMES))
        takes = SBATCH_OPTIONS.get(name, (None, True))[1]
        if takes:
            sep = draw(st.sampled_from(["=", " "]))
            lines.append(f"#SBATCH --{name}{sep}{draw(VALUES)}")
        else:
            lines.append(f"#SBATCH --{name}")
    lines += draw(st.lists(BODY, max_size=5))
    return "\n".join(lines) + "\n"


def check(text: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            builder = from_sbatch(text)
        except SpecError as exc:
            assert str(exc) and exc.field
            return
        assert isinstance(builder, JobBuilder)
        assert isinstance(builder.spec(), JobSpec)  # validated inside from_sbatch already
        try:
            builders = from_sbatch_array(text)
        except SpecError:
            raise AssertionError("from_sbatch accepted a script from_sbatch_array refuses") from None
        assert len(builders) == 1


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scripts())
def test_structured_scripts_never_crash(text):
    check(text)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300).map(lambda t: "#!/bin/bash\n" + t))
def test_arbitrary_text_never_crashes(text):
    check(text)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["#SBATCH", "#SBATCH ", "--", "-", "=", " ", "\n", "\\", "'", "\"",
                                 "#", "gpu", ":", "srun", "python", "$", "N", "2", "-N", "x"]),
                max_size=40).map("".join))
def test_token_soup_never_crashes(text):
    check("#!/bin/sh\n" + text)


GOOD = {
    "nodes": ["1", "2", "4"], "ntasks-per-node": ["1", "2", "4", "8"], "ntasks": ["1", "4", "8"],
    "gpus-per-node": ["1", "2", "4", "8", "a100:4"], "gres": ["gpu:1", "gpu:2", "gpu:a100:8", "gpu"],
    "cpus-per-task": ["1", "4", "16"], "mem": ["16G", "64G", "4000"], "time": ["10", "01:00:00", "2-0"],
    "partition": ["gpu", "cpu", "team-a"], "qos": ["high", "low"], "job-name": ["train", "My_Job"],
    "mail-user": ["a@b.c"], "output": ["o.txt"], "export": ["NONE", "A=1,B=2"],
    "chdir": ["/work"], "account": ["proj1"],
}
LAUNCH = ["python train.py", "srun python train.py", "srun torchrun --nproc_per_node=gpu t.py",
          "mpirun python m.py", "srun --mpi=pmix ./a.out", "torchrun --nproc-per-node=2 t.py"]


@st.composite
def plausible_scripts(draw) -> str:
    names = draw(st.lists(st.sampled_from(sorted(GOOD)), max_size=6, unique=True))
    lines = ["#!/bin/bash"] + [f"#SBATCH --{n}={draw(st.sampled_from(GOOD[n]))}" for n in names]
    lines += draw(st.lists(st.sampled_from(["module load x", "export K=v", "echo start"]), max_size=2))
    lines.append(draw(st.sampled_from(LAUNCH)))
    return "\n".join(lines) + "\n"


@settings(max_examples=300, deadline=None)
@given(plausible_scripts())
def test_plausible_scripts_never_crash_and_keep_their_shape(text):
    check(text)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            spec = from_sbatch(text).spec()
        except SpecError:
            return
    # what the script asked for is what the spec holds
    if "#SBATCH --nodes=" in text:
        assert f"#SBATCH --nodes={spec.nodes}\n" in text
    if "#SBATCH --time=" in text:
        assert spec.max_runtime_s is not None and spec.max_runtime_s > 0
    assert spec.world_size >= 1 and spec.command
