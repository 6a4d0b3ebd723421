"""The slurm profile against a real SLURM: a one-node cluster on localhost (munged, slurmctld and
slurmd started here, in a temporary directory, without accounting), the tiny config run through
`--profile profiles/slurm` (a curve job), and its curves equal to the local run's.

Installs Debian's slurm-wlm and munge with apt-get when they are missing (root only). Every wait is
bounded and every daemon started here is stopped in the fixture's teardown, also on failure."""

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
from workflow_helpers import CORES, copy_workflow, reuse_results, smk, smk_env

pytestmark = [pytest.mark.slurm, pytest.mark.workflow]

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scancel", "srun")
# tiny_mha's IOI curves (ranked and greedy, and the random-unit control), both of its ablations
CURVES = [f"results/curves/ioi/tiny_mha/{a}{part}.parquet" for a in ("zero-query", "resample-query")
          for part in ("", ".control")]
RTOL, ATOL = 1e-9, 1e-12  # same machine, one torch thread per job: the same numbers


def _run(cmd, timeout, env=None, check=True):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p


def _ensure_installed():
    missing = [b for b in BINARIES if not shutil.which(b)]
    if not missing:
        return
    if not shutil.which("apt-get"):
        pytest.skip(f"SLURM is not installed ({', '.join(missing)} missing) and there is no apt-get to install it")
    if os.geteuid() != 0:
        pytest.skip(f"SLURM is not installed ({', '.join(missing)} missing); installing it needs root")
    # No service starts during the install (policy-rc.d 101): this test starts its own daemons.
    policy = Path("/usr/sbin/policy-rc.d")
    own_policy = not policy.exists()
    if own_policy:
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
    try:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        _run(["apt-get", "update"], timeout=300, env=env)
        _run(["apt-get", "install", "-y", "--no-install-recommends", "slurm-wlm", "munge"], timeout=900, env=env)
    finally:
        if own_policy:
            policy.unlink()
    still = [b for b in BINARIES if not shutil.which(b)]
    assert not still, f"apt-get installed slurm-wlm and munge, but {still} are still missing"


def _free_ports(n):
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _node_hardware():
    """CPUs, topology and RealMemory as slurmd sees this machine (`slurmd -C`)."""
    out = _run(["slurmd", "-C"], timeout=30).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("NodeName="))
    fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
    keep = ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore", "RealMemory")
    return {k: fields[k] for k in keep if k in fields}


def _wait(what, predicate, timeout, procs, logs):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name, p in procs.items():
            if p.poll() is not None:
                raise AssertionError(f"{name} exited ({p.returncode}) while waiting for {what}:\n{_tails(logs)}")
        if predicate():
            return
        time.sleep(1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}:\n{_tails(logs)}")


def _tails(logs):
    out = []
    for path in logs:
        if Path(path).exists():
            out.append(f"--- {path}\n" + "\n".join(Path(path).read_text(errors="replace").splitlines()[-30:]))
    return "\n".join(out)


def _stop(proc, timeout=15):
    """Stop a daemon started here (its own session), by its process group id."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=timeout)
    except (subprocess.TimeoutExpired, ProcessLookupError):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=timeout)


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory):
    """munged + slurmctld + slurmd on localhost, configured in a temporary directory; yields the
    environment (SLURM_CONF) that talks to it."""
    _ensure_installed()
    d = tmp_path_factory.mktemp("slurm")
    for sub in ("state", "spool", "munge"):
        (d / sub).mkdir()
    (d / "munge").chmod(0o700)
    key = d / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    munge_socket = d / "munge" / "munge.socket"
    ctld_port, slurmd_port = _free_ports(2)
    hw = _node_hardware()
    conf = d / "slurm.conf"
    conf.write_text(f"""\
ClusterName=circuitloc
SlurmctldHost=localhost
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
StateSaveLocation={d / 'state'}
SlurmdSpoolDir={d / 'spool'}
SlurmctldPidFile={d / 'slurmctld.pid'}
SlurmdPidFile={d / 'slurmd.pid'}
SlurmctldLogFile={d / 'slurmctld.log'}
SlurmdLogFile={d / 'slurmd.log'}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
MinJobAge=600
SlurmctldTimeout=30
SlurmdTimeout=30
KillWait=5
NodeName=localhost NodeAddr=127.0.0.1 {' '.join(f'{k}={v}' for k, v in hw.items())} State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
""")
    # The SLURM jobstep plugin drops SLURM_* variables, SLURM_CONF included, for the srun it runs
    # inside each job; on a real cluster srun then finds /etc/slurm/slurm.conf (or slurmd's configless
    # cache). This cluster's config lives here, so the jobs see an srun that knows where it is.
    shim = d / "bin"
    shim.mkdir()
    (shim / "srun").write_text(f"#!/bin/sh\nSLURM_CONF={conf} exec {shutil.which('srun')} \"$@\"\n")
    (shim / "srun").chmod(0o755)
    env = {**os.environ, "SLURM_CONF": str(conf), "PATH": f"{shim}{os.pathsep}{os.environ.get('PATH', '')}"}
    logs = [d / "munged.log", d / "slurmctld.log", d / "slurmd.log"]
    procs = {}

    def start(name, cmd):
        out = open(d / f"{name}.out", "w")
        procs[name] = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        logs.append(d / f"{name}.out")

    try:
        start("munged", ["munged", "--foreground", "--force", f"--key-file={key}", f"--socket={munge_socket}",
                         f"--pid-file={d / 'munge' / 'munged.pid'}", f"--log-file={d / 'munged.log'}",
                         f"--seed-file={d / 'munge' / 'munged.seed'}"])
        _wait("the munge socket", munge_socket.exists, 30, procs, logs)
        start("slurmctld", ["slurmctld", "-D", "-i", "-f", str(conf)])
        _wait("slurmctld", lambda: _run(["scontrol", "ping"], 10, env, check=False).stdout.count("UP") > 0,
              60, procs, logs)
        start("slurmd", ["slurmd", "-D", "-N", "localhost", "-f", str(conf)])
        _wait("the node to be idle",
              lambda: _run(["sinfo", "-h", "-N", "-o", "%t"], 10, env, check=False).stdout.strip() == "idle",
              60, procs, logs)
        yield env
    finally:
        if "slurmctld" in procs and procs["slurmctld"].poll() is None:
            # cancel whatever is left (a failed or timed-out run), and give the jobs a moment to end
            subprocess.run(["scancel", "--full", "--user", "root"], env=env, capture_output=True, timeout=30)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                q = subprocess.run(["squeue", "-h", "-t", "PD,R,CG", "-o", "%i"], env=env, capture_output=True,
                                   text=True, timeout=10)
                if q.returncode != 0 or not q.stdout.strip():
                    break
                time.sleep(1)
        for name in ("slurmd", "slurmctld", "munged"):
            if name in procs:
                _stop(procs[name])


@pytest.mark.long(30)
def test_slurm_profile_run_equals_local_run(slurm_cluster, tiny_run, tmp_path):
    work = copy_workflow(tmp_path / "wf")
    # the local run's models, datasets and scores (mtimes kept): SLURM runs one torch job, tiny_mha's
    # IOI curves (two ablations). One wave of jobs: the plugin polls 2 s after it submits, then 10 s
    # later again each time no job has finished, so every further wave would cost 14 to 36 s here
    reuse_results(tiny_run, work, "models", "data", "scores")
    env = smk_env(SLURM_CONF=slurm_cluster["SLURM_CONF"], PATH=slurm_cluster["PATH"])
    t0 = time.monotonic()
    p = smk("--profile", "profiles/slurm", "--configfile", ".test/config.yaml", "--jobs", CORES,
            # quick status polls for a test cluster (the profile keeps the plugin's defaults)
            "--slurm-init-seconds-before-status-checks", "2", "--slurm-keep-successful-logs",
            *CURVES, cwd=work, env=env, timeout=600, check=False)
    took = time.monotonic() - t0
    logs = sorted((work / ".snakemake" / "slurm_logs").rglob("*.log"))
    assert p.returncode == 0, (f"snakemake --profile profiles/slurm failed after {took:.0f} s:\n{p.stdout[-4000:]}\n"
                               f"{p.stderr[-6000:]}\n" + _tails(logs[-3:]))
    out = p.stdout + p.stderr
    assert not (work / "results" / "logs" / "models").exists(), "the local run's models were to be reused"
    assert not (work / "results" / "logs" / "scores").exists(), "the local run's scores were to be reused"
    # it really went through SLURM: sbatch jobs with their own logs, status from squeue
    assert "SLURM run ID" in out, out[-3000:]
    assert logs and any(p.parent.parent.name.startswith("rule_curves") for p in logs), logs
    assert not re.search(r"Falling back to 'sacct'", out), out[-3000:]
    for curve in CURVES:
        got, exp = pd.read_parquet(work / curve), pd.read_parquet(tiny_run / curve)
        assert list(got.columns) == list(exp.columns) and len(got) == len(exp) > 0, curve
        for col in exp.columns:
            if exp[col].dtype.kind in "fi" and got[col].dtype.kind in "fi":
                pd.testing.assert_series_equal(got[col].astype(float), exp[col].astype(float), rtol=RTOL, atol=ATOL,
                                               check_names=False, obj=f"{curve}: {col}")
            else:
                assert got[col].astype(str).tolist() == exp[col].astype(str).tolist(), f"{curve}: {col}"
