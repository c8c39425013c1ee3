"""Real launchers and a real scheduler on this machine: SLURM (Debian's slurm-wlm and munge) and Open MPI.

One SLURM cluster is started for the module (``slurm``): munged, slurmctld and slurmd on localhost, every file
of theirs in a temporary folder (its own munge key and socket, free ports, one node of 2 CPUs named after this
host, process tracking by process group, no cgroups), run as root as CI runs. On it:

- ``python -m scalelib.parallel.selfcheck multislice`` through ``srun --ntasks=2`` as the README says, without
  ``--local-devices``: JAX joins the tasks from SLURM's variables, and the selfcheck gives each 8 / 2 CPU devices;
- the grading recipe (``autograder/deploy/slurm/submit.sh``: an array job of 2 shards, then the merge) for a
  class of 3, compared file for file with one run of ``python -m autograder grade`` on one machine.

And without SLURM, the selfcheck (one collective matmul, the cheapest check) through ``mpirun -np 2``. Each is
skipped, saying what to install, where the packages are missing (``.ci/run`` installs them). Everything started
here is stopped, even on failure: every daemon and client leads its own process group, stopped with SIGTERM then
SIGKILL, and anything left that carries this module's marker in its environment (job steps, tasks) is killed by a
sweep of /proc.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import nbformat
import pytest

from autograder import course
from autograder.cli.main import main as autograder_main
from scalelib import launch
from scalelib.launch import free_port
from tests.notebook_answers import answered

ROOT = course.ROOT
DEPLOY = ROOT / "autograder" / "deploy"
SBIN = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
SLURM_TOOLS = ("munged", "slurmctld", "slurmd", "srun", "sbatch", "squeue", "scontrol", "scancel", "sinfo")
MARKER = "SCALELIB_TEST_CLUSTER"  # in the environment of everything this module starts
SRUN_CHECK = "multislice"  # it also checks where each mesh axis runs: its slice axis must join the processes
MPIRUN_CHECK = "collective_matmul.all_gather"  # a ring through every device of both processes; cheaper
CH = "06_training_llama3"  # the cheapest chapter to grade
ROSTER = """student,name,id,sis_id,login,section
alice,Alice Adams,101,S-101,aadams,A
bob,Bob Brown,102,S-102,bbrown,A
dora,Dora Dele,103,S-103,ddele,B
"""


def _which(tool: str) -> str | None:
    return shutil.which(tool, path=SBIN)


def _sweep(token: str) -> None:
    """SIGKILL every process whose environment carries this run's marker (Linux /proc)."""
    launch.kill_marked(MARKER, token)


def _stop_group(proc: subprocess.Popen) -> None:
    for sig, wait_s in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        if proc.poll() is not None:
            break
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=wait_s)
    with contextlib.suppress(ProcessLookupError):  # what the leader left behind in its group
        os.killpg(proc.pid, signal.SIGKILL)


def run(cmd: list[str], env: dict[str, str], timeout_s: float, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """``cmd`` in its own process group; on a timeout the whole group is stopped and the test fails."""
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _stop_group(proc)
        out, err = proc.communicate()
        pytest.fail(f"{' '.join(cmd)} still running after {timeout_s:g} s; stopped it\n{out[-3000:]}\n{err[-3000:]}")
    finally:
        _stop_group(proc)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


class Cluster:
    """A one-node SLURM cluster in ``root``; ``env`` is what its clients (srun, sbatch, ...) run with."""

    def __init__(self, root: Path, token: str) -> None:
        self.root, self.token = root, token
        self.daemons: list[subprocess.Popen] = []
        self.host = socket.gethostname().split(".")[0]
        self.env = {**os.environ, "PATH": SBIN, MARKER: token, "SLURM_CONF": str(root / "slurm.conf"),
                    "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1"}
        for k in [k for k in self.env if k.startswith(("SLURM_", "SCALELIB_", "OMPI_", "PMI")) and k != "SLURM_CONF"]:
            del self.env[k]  # this test may itself run inside a job: its clients must talk to this cluster only

    def start(self) -> None:
        r = self.root
        for d in ("munge", "state", "spool", "log"):
            (r / d).mkdir(mode=0o700)
        (r / "munge").chmod(0o711)  # munged wants its socket's folder searchable by everyone
        key = r / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        socket_path = r / "munge" / "munge.socket"
        ctld_port, d_port = free_port(), free_port()
        # JAX's coordinator listens on a port derived from the job id: a random first id keeps two such
        # clusters on one machine (two test runs) from choosing the same one
        first_job = random.randint(1000, 3_000_000)
        (r / "slurm.conf").write_text(f"""\
ClusterName=scalelibtest
SlurmctldHost={self.host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={socket_path}
CredType=cred/munge
StateSaveLocation={r / "state"}
SlurmdSpoolDir={r / "spool"}
SlurmctldPidFile={r / "slurmctld.pid"}
SlurmdPidFile={r / "slurmd.pid"}
SlurmctldLogFile={r / "log" / "slurmctld.log"}
SlurmdLogFile={r / "log" / "slurmd.log"}
FirstJobId={first_job}
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
SwitchType=switch/none
MinJobAge=600
NodeName={self.host} NodeAddr=127.0.0.1 CPUs=2 RealMemory=32768 State=UNKNOWN
PartitionName=test Nodes={self.host} Default=YES MaxTime=INFINITE State=UP
""")
        # the recipe asks for --mem=16G: RealMemory is declared (config_overrides), nothing enforces it here
        self._daemon("munged", [_which("munged") or "munged", "-F", "-f", f"--key-file={key}",
                                f"--socket={socket_path}", f"--pid-file={r / 'munge' / 'munged.pid'}",
                                f"--seed-file={r / 'munge' / 'seed'}", f"--log-file={r / 'munge' / 'munged.log'}"])
        self._wait(lambda: socket_path.exists(), "munged to open its socket", 15)
        conf = str(r / "slurm.conf")
        self._daemon("slurmctld", [_which("slurmctld") or "slurmctld", "-D", "-f", conf])
        self._daemon("slurmd", [_which("slurmd") or "slurmd", "-D", "-f", conf, "-N", self.host])

        def idle() -> bool:
            out = subprocess.run(["sinfo", "-h", "-o", "%T"], env=self.env, capture_output=True, text=True,
                                 timeout=10, check=False).stdout
            return out.strip() == "idle"

        self._wait(idle, "the node to be idle", 30)

    def _daemon(self, name: str, cmd: list[str]) -> None:
        with open(self.root / "log" / f"{name}.out", "w") as log:
            self.daemons.append(subprocess.Popen(cmd, env=self.env, cwd=self.root, stdin=subprocess.DEVNULL,
                                                 stdout=log, stderr=subprocess.STDOUT, start_new_session=True))

    def _wait(self, ready: Callable[[], bool], what: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            dead = [p.args[0] for p in self.daemons if p.poll() is not None]
            if dead:
                raise RuntimeError(f"{dead} exited while waiting for {what}\n{self.logs()}")
            if ready():
                return
            time.sleep(0.2)
        raise RuntimeError(f"gave up waiting {timeout_s:g} s for {what}\n{self.logs()}")

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}"
                         for p in sorted((self.root / "log").glob("*")) if p.is_file())

    def stop(self) -> None:
        with contextlib.suppress(Exception):  # cancel what is still queued or running, then give it a moment
            subprocess.run(["scancel", "--full", "--user", str(os.geteuid())], env=self.env, timeout=10,
                           capture_output=True, check=False)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and subprocess.run(
                    ["squeue", "-h"], env=self.env, capture_output=True, text=True, timeout=10, check=False).stdout:
                time.sleep(0.2)
        for proc in reversed(self.daemons):
            _stop_group(proc)
        _sweep(self.token)

    def job_states(self, job: str) -> list[tuple[str, str]]:
        """(JobState, ExitCode) of the job, one per array task."""
        out = subprocess.run(["scontrol", "-o", "show", "job", job], env=self.env, capture_output=True, text=True,
                             timeout=10, check=False).stdout
        return re.findall(r"JobState=(\S+).*?ExitCode=(\S+)", out)

    def wait_for(self, jobs: list[str], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            queued = subprocess.run(["squeue", "-h", "-o", "%i %T", "-j", ",".join(jobs)], env=self.env,
                                    capture_output=True, text=True, timeout=10, check=False).stdout.strip()
            if not queued:
                return
            if time.monotonic() > deadline:
                pytest.fail(f"jobs still queued or running after {timeout_s:g} s:\n{queued}\n{self.logs()}")
            time.sleep(0.5)


def _skip_without(tools: tuple[str, ...], packages: str) -> None:
    missing = [t for t in tools if _which(t) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed: apt-get install {packages} (.ci/run installs them)")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory) -> Iterator[Cluster]:
    """One SLURM cluster on this machine for every test of the module; stopped, with all it ran, at the end."""
    _skip_without(SLURM_TOOLS, "slurm-wlm munge")
    if os.geteuid() != 0:
        pytest.skip("the one-node SLURM cluster runs its daemons as root (as CI does); run the suite as root")
    host = socket.gethostname().split(".")[0]
    try:
        socket.gethostbyname(host)
    except OSError:
        pytest.skip(f"this host's name {host!r} does not resolve, and JAX's SLURM set-up finds the coordinator by it")
    cluster = Cluster(tmp_path_factory.mktemp("slurm"), uuid.uuid4().hex)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def _selfcheck_ran(result: subprocess.CompletedProcess, how: str, check: str) -> None:
    out = result.stdout + result.stderr
    assert result.returncode == 0, f"{how}: exit status {result.returncode}\n{out[-4000:]}"
    # joined by the launcher's own variables, 4 CPU devices each without --local-devices
    assert "selfcheck on process 0 of 2 (cluster environment): 4 of 8 cpu devices are local" in result.stdout, out
    assert re.search(rf"^{re.escape(check)} ok  \(\d+\.\d s\)$", result.stdout, re.M), out


@pytest.mark.sweep
def test_selfcheck_through_srun(slurm):
    cmd = ["srun", "--ntasks=2", "--kill-on-bad-exit=1", sys.executable, "-m", "scalelib.parallel.selfcheck",
           SRUN_CHECK]
    _selfcheck_ran(run(cmd, slurm.env, timeout_s=600), "srun", SRUN_CHECK)


README_MPIRUN = "mpirun --bind-to none -np 2 python -m scalelib.parallel.selfcheck"  # as the README writes it
README_AS_ROOT = "mpirun --allow-run-as-root --bind-to none -np 2 ..."  # and what it says to add as root


def readme_mpirun(*args: str) -> list[str]:
    """The README's mpirun line as written (``python`` is this interpreter), with ``--allow-run-as-root`` first
    when run as root, as the README says, and ``args`` after it."""
    readme = (ROOT / "README.md").read_text()
    assert f"`{README_MPIRUN}`" in readme and f"`{README_AS_ROOT}`" in readme
    cmd = [sys.executable if word == "python" else word for word in README_MPIRUN.split()]
    return [cmd[0], *(["--allow-run-as-root"] if os.geteuid() == 0 else []), *cmd[1:], *args]


@pytest.mark.sweep
def test_selfcheck_through_mpirun(tmp_path):
    """The README's line, as written: each rank may use every core (Open MPI's default binds each to one),
    and the selfcheck passes."""
    _skip_without(("mpirun",), "openmpi-bin")
    token = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SCALELIB_", "OMPI_", "PMI"))}
    env.update({MARKER: token, "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1"})
    # one write(2) per rank: print() with PYTHONUNBUFFERED writes word by word, and mpirun interleaves the ranks' words
    cores = "import os; os.write(1, f'cores {len(os.sched_getaffinity(0))}\\n'.encode())"
    try:
        bound = run([*readme_mpirun()[:-2], "-c", cores], env, timeout_s=120)
        assert bound.returncode == 0, bound.stdout + bound.stderr
        assert sorted(bound.stdout.splitlines()) == [f"cores {len(os.sched_getaffinity(0))}"] * 2, bound.stdout
        _selfcheck_ran(run(readme_mpirun(MPIRUN_CHECK), env, timeout_s=600), "mpirun", MPIRUN_CHECK)
    finally:
        _sweep(token)


def _class_files(folder: Path) -> dict[str, bytes]:
    """What a class gets: the CSVs and shard.json at the top, and every feedback page."""
    paths = [*folder.glob("*.csv"), *folder.glob("*.json"), *(folder / "feedback").glob("*.html")]
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(paths)}


@pytest.mark.grading
def test_slurm_array_recipe_and_merge_equal_one_run(slurm, tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    nbformat.write(answered(CH), subs / f"adams_101_1_{CH}.ipynb")
    shutil.copy(course.CHAPTERS / f"{CH}.ipynb", subs / f"brown_102_2_{CH}.ipynb")  # untouched
    (subs / f"dele_103_3_{CH}.ipynb").write_text("{ not json")  # "invalid notebook": not every student graded
    archive, roster = tmp_path / "export.zip", tmp_path / "roster.csv"
    with zipfile.ZipFile(archive, "w") as zf:
        for p in sorted(subs.iterdir()):
            zf.write(p, p.name)
    roster.write_text(ROSTER, encoding="utf-8")
    single = tmp_path / "single"
    status = autograder_main(["grade", str(archive), "--chapter", CH, "--out", str(single), "--roster", str(roster),
                              "--workers", "2", "--lms", "canvas"])
    assert status == 3  # graded and written, but dora's notebook is not one

    env = {**slurm.env, "SUBMISSIONS": str(archive), "CHAPTER": CH, "ROSTER": str(roster), "LMS": "canvas",
           "OUT_ROOT": str(tmp_path / "sharded"), "REPO": str(ROOT), "SCALELIB_PYTHON": sys.executable}
    submitted = run(["bash", str(DEPLOY / "slurm" / "submit.sh"), "2"], env, timeout_s=60, cwd=tmp_path)
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    grade_job = re.search(r"grading job (\d+) \(2 shards\)", submitted.stdout)
    merge_job = re.search(r"Submitted batch job (\d+)", submitted.stdout)
    assert grade_job and merge_job, submitted.stdout
    jobs = [grade_job[1], merge_job[1]]
    slurm.wait_for(jobs, timeout_s=900)
    logs = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted(tmp_path.glob("*.log")))
    shards, merged = slurm.job_states(grade_job[1]), slurm.job_states(merge_job[1])
    assert len(shards) == 2 and all(s == ("COMPLETED", "0:0") for s in shards + merged), (shards, merged, logs)
    # the shard with dora's broken notebook: grade exited 3 there, and the recipe counted it as graded
    assert re.search(r"students: .*1 invalid notebook", logs), logs

    one, class_ = _class_files(single), _class_files(tmp_path / "sharded" / "class")
    assert set(one) == set(class_) and {"grades.csv", "grades_long.csv", "canvas.csv", "submissions.csv"} <= set(one)
    assert len([f for f in one if f.startswith("feedback/")]) == 3
    for name in one:
        assert one[name] == class_[name], name
    rows = {r["student"]: r for r in csv.DictReader((single / "grades.csv").open(encoding="utf-8"))}
    assert rows["dora"]["status"] == "invalid notebook" and rows["alice"]["status"] == "graded"
    for path in (single / "results").glob("*.json"):  # the same results, apart from how long each took
        merged = tmp_path / "sharded" / "class" / "results" / path.name
        a, b = json.loads(path.read_text()), json.loads(merged.read_text())
        a.pop("seconds"), b.pop("seconds")
        assert a == b, path.name


@pytest.mark.grading
def test_a_usage_error_fails_the_shard(tmp_path):
    """grade.sbatch run as SLURM would (its variables set by hand): argparse's status 2 fails the task."""
    env = {**os.environ, "SUBMISSIONS": str(tmp_path), "CHAPTER": CH, "OUT_ROOT": str(tmp_path / "out"),
           "REPO": str(ROOT), "SCALELIB_PYTHON": sys.executable, "SLURM_ARRAY_TASK_ID": "0",
           "SLURM_ARRAY_TASK_COUNT": "1", "SLURM_CPUS_PER_TASK": "two"}  # --workers two: a usage error
    bad = run(["bash", str(DEPLOY / "slurm" / "grade.sbatch")], env, timeout_s=120)
    assert bad.returncode == 2 and "--workers: invalid int value: 'two'" in bad.stderr, bad.stdout + bad.stderr
    recipe = (DEPLOY / "slurm" / "grade.sbatch").read_text() + (DEPLOY / "kubernetes" / "grade-job.yaml").read_text()
    assert recipe.count('|| { status=$?; [ "$status" -eq 3 ] || exit "$status"; }') == 2 and "-eq 2" not in recipe
    with pytest.raises(SystemExit) as usage:
        autograder_main(["grade", str(tmp_path), "--chapter", CH, "--workers", "two"])
    assert usage.value.code == 2


@pytest.mark.grading
def test_the_kubernetes_recipe_states_and_meets_its_requirements():
    """procMount: Unmasked needs a user namespace (hostUsers: false), and both need feature gates that are on
    by default from Kubernetes 1.33 (UserNamespacesSupport, ProcMountType); the image's non-root user must
    own what it writes on the shared volume (runAsUser and fsGroup, the uid the Containerfile creates)."""
    import yaml

    grade_job = yaml.safe_load((DEPLOY / "kubernetes" / "grade-job.yaml").read_text())
    merge_job = yaml.safe_load((DEPLOY / "kubernetes" / "merge-job.yaml").read_text())
    pod = grade_job["spec"]["template"]["spec"]
    assert pod["hostUsers"] is False and pod["containers"][0]["securityContext"]["procMount"] == "Unmasked"
    containerfile = (DEPLOY / "Containerfile").read_text()
    uid = int(re.search(r"useradd --uid (\d+) .*grader", containerfile)[1])
    for job in (grade_job, merge_job):
        context = job["spec"]["template"]["spec"]["securityContext"]
        assert context["runAsUser"] == context["runAsGroup"] == context["fsGroup"] == uid != 0
        assert context["runAsNonRoot"] is True
    manifest = (DEPLOY / "kubernetes" / "grade-job.yaml").read_text()
    readme = (DEPLOY / "README.md").read_text()
    for text in (manifest, readme):
        assert "1.33" in text and "UserNamespacesSupport" in text and "ProcMountType" in text and "1.30" not in text
