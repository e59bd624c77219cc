"""Grade on a SLURM cluster: start Dask workers as SLURM jobs, then grade through their scheduler.

Needs `pip install dask-jobqueue` in the course environment on the login node (the workers need only
the course's own requirements.txt). Run from the course folder, on a node that can reach the compute
nodes:

    python cluster/slurm_cluster.py --jobs 8            # 8 jobs x 4 workers of one thread each

It starts a scheduler here, asks SLURM for the jobs, waits for the workers and then grades every
submission with `python -m attention_course.grading autograde --scheduler <address>`. Edit the
SLURMCluster arguments for your site (partition, account, how Python is activated on the nodes).
"""

import argparse
import subprocess
import sys

from dask_jobqueue import SLURMCluster

parser = argparse.ArgumentParser()
parser.add_argument("--jobs", type=int, default=4, help="SLURM jobs to start (default 4)")
parser.add_argument("--workers-per-job", type=int, default=4, help="Dask workers (one thread each) per job")
args = parser.parse_args()

cluster = SLURMCluster(
    queue="standard",                 # your partition
    account=None,                     # your account, if the site needs one
    cores=args.workers_per_job,       # one core per worker process
    processes=args.workers_per_job,   # one thread each: a worker grades one notebook at a time
    memory=f"{6 * args.workers_per_job}GB",  # a kernel may use 4 GiB, its judge 3 GiB
    walltime="01:00:00",
    job_script_prologue=["source /path/to/attention-from-scratch/.venv/bin/activate"],
    local_directory="$TMPDIR",       # the workers' scratch courses: node-local disk, no shared folder needed
)
cluster.scale(jobs=args.jobs)
try:
    from distributed import Client

    with Client(cluster) as client:
        client.wait_for_workers(1, timeout=1800)  # start as soon as one job runs; others join as they start
    sys.exit(subprocess.call([sys.executable, "-m", "attention_course.grading", "autograde",
                              "--scheduler", cluster.scheduler_address]))
finally:
    cluster.close()
