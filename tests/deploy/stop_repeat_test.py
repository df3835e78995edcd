#!/usr/bin/python3
"""A preempted 2-rank training job, stopped again and again at chosen moments.

One job of deploy/slurm/train.sbatch (2 tasks on the test Slurm) is stopped
REPEATS times, each attempt at another moment, cycling through:
  step        scancel --signal=TERM at a random time inside the training steps;
  checkpoint  TERM to both ranks while an epoch's checkpoint is being written,
              and TERM again while the stop's own checkpoint is written;
  learning    TERM to both ranks while rank 0 runs the learning check;
  allreduce   TERM to rank 1 alone while it waits in the all-reduce for rank
              0, which is in the learning check;
  shutdown    scancel --signal=TERM, then TERM again to every rank still
              there once the stop's checkpoint is written (its shutdown);
  usr1        scancel --signal=USR1 (the time limit's warning).
Each time every rank must exit 75 and the job must requeue itself; Slurm's
two-minute hold of a requeued job is lifted (scontrol update StartTime=now).
Then rank 0 is killed (SIGKILL) while it writes the stop's checkpoint: the
previous checkpoint stays intact and a new submission resumes from it. The
run must end with the weights of an uninterrupted run of the same job.

  stop_repeat_test.py SOURCE_DIR BUILD_DIR [--bin DIR] [--repeats N] [--name NAME]

--bin: where scdino-trainer is (default BUILD_DIR/services/trainer; the
sanitizer build passes its own). Prints "ok: ..." lines; "FAIL: ..." and
exit 1 on the first failure.
"""
import argparse
import glob
import json
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import time

PHASES = ["step", "checkpoint", "learning", "allreduce", "shutdown", "usr1"]


def fail(msg, out=None):
    print("FAIL: " + msg)
    if out and os.path.exists(out):
        print("---- job output (last 60 lines) ----")
        print("".join(open(out, errors="replace").readlines()[-60:]))
    sys.exit(1)


def sh(*args, check=True):
    r = subprocess.run(args, capture_output=True, text=True)
    if check and r.returncode != 0:
        fail(f"{' '.join(args)}: exit {r.returncode}: {r.stderr.strip()}")
    return r.stdout.strip()


def tensors(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    meta = h.pop("__metadata__", {})
    return meta, {k: b[8 + n + v["data_offsets"][0]: 8 + n + v["data_offsets"][1]] for k, v in h.items()}


class Job:
    def __init__(self, args, name):
        self.args, self.name = args, name
        self.run_dir = os.path.join(args.work, name)
        self.out = None
        self.id = None

    def submit(self, extra_env=""):
        cmd = ["sbatch", "--parsable", "--ntasks=2", "--cpus-per-task=1", f"--chdir={self.args.work}",
               f"--output={self.args.work}/{self.name}-%j.out",
               f"--export=ALL,SCDINO_BIN={self.args.bin},SCDINO_PREFLIGHT=0,SCDINO_MAX_REQUEUES=100{extra_env}",
               os.path.join(self.args.src, "deploy/slurm/train.sbatch"), os.path.join(self.args.work, "stop.yaml")]
        if self.name != "stop":
            cmd[-1] = os.path.join(self.args.work, self.name + ".yaml")
        self.id = sh(*cmd)
        self.out = f"{self.args.work}/{self.name}-{self.id}.out"
        return self.id

    def text(self):
        return open(self.out, errors="replace").read() if os.path.exists(self.out) else ""

    def state(self):
        return sh("squeue", "-h", "-j", self.id, "-o", "%T %r", check=False)

    def wait_gone(self, seconds):
        t0 = time.time()
        while time.time() - t0 < seconds:
            if not self.state():
                return
            time.sleep(0.5)
        sh("scancel", self.id, check=False)
        fail(f"job {self.id} still in the queue after {seconds} s", self.out)

    def trainer_pids(self):
        """rank -> pid of this job's trainer processes (on this host)."""
        pids = {}
        for p in glob.glob("/proc/[0-9]*"):
            try:
                cmd = open(p + "/cmdline", "rb").read().split(b"\0")
                if not cmd or not cmd[0].endswith(b"scdino-trainer"):
                    continue
                env = dict(e.split(b"=", 1) for e in open(p + "/environ", "rb").read().split(b"\0") if b"=" in e)
                if env.get(b"SLURM_JOB_ID", b"").decode() != self.id:
                    continue
                pids[int(env.get(b"SLURM_PROCID", b"0"))] = int(p[6:])
            except (OSError, ValueError):
                continue
        return pids


def task_codes(text):
    """task -> exit code from srun's lines ("tasks 0-1: Exited with exit code 75", one a task when they differ)."""
    codes = {}
    for tasks, code in re.findall(r"srun: error: [^:]+: tasks? ([0-9,-]+): Exited with exit code (\d+)", text):
        for part in tasks.split(","):
            lo, _, hi = part.partition("-")
            for t in range(int(lo), int(hi or lo) + 1):
                codes[t] = code
    return codes


def wait_for(pred, seconds, what, out=None, step=0.002):
    t0 = time.time()
    while time.time() - t0 < seconds:
        v = pred()
        if v:
            return v
        time.sleep(step)
    fail(f"waited {seconds} s for {what}", out)


def kill(pids, sig):
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def temp_checkpoint(run_dir):
    try:
        return any(n.startswith(".checkpoint.safetensors.tmp~") for n in os.listdir(run_dir))
    except FileNotFoundError:
        return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("build")
    ap.add_argument("--bin")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--name", default="stop-repeat")
    ap.add_argument("--seed", type=int, default=int(time.time()))
    args = ap.parse_args()
    args.bin = os.path.abspath(args.bin or os.path.join(args.build, "services/trainer"))
    args.work = os.path.join(os.path.abspath(args.build), "test-scratch", args.name)
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    os.environ["SCDINO_TEXTFILE_DIR"] = args.work
    rng = random.Random(args.seed)
    print(f"stop_repeat_test: seed {args.seed}, {args.repeats} stops, trainer {args.bin}/scdino-trainer")
    if "idle" not in sh("sinfo", "-h", "-o", "%T", check=False) and "mixed" not in sh("sinfo", "-h", "-o", "%T"):
        fail("no idle Slurm node (scripts/slurm-local.sh starts the test Slurm)")

    # 240 labelled images: 30 steps an epoch on 2 ranks, a learning check at
    # every epoch's end on the held-out part, and checkpoints of ~17 MB
    # (65,536 prototypes) whose write takes long enough to land a signal in.
    sh(os.path.join(args.build, "services/tools/scdino-synth"), "--out", f"{args.work}/cells", "--classes", "2",
       "--per-class", "120", "--channels", "3", "--size", "24", "--seed", "3")
    # Each stop costs about 1.3 epochs of progress (a resume, then the wait
    # for its moment): two epochs a stop leave the last ones for the killed
    # writer and the resubmission, and no stop meets the run's end.
    epochs = 2 * args.repeats + 6
    for name in ("stop", "reference"):
        open(f"{args.work}/{name}.yaml", "w").write(f"""
meta: {{name_of_run: "{name}", output_dir: "{args.work}", dataset_dir: "{args.work}/cells", seed: 5,
       selected_channel_combination_per_run: ["012"]}}
train_scDINO:
  epochs: {epochs}
  saveckp_freq: 1
  batch_size_per_gpu: 4
  num_workers: 1
  hyperparameters: {{arch: vit_tiny, embed_dim: 32, depth: 2, num_heads: 2, patch_size: 8, global_crops_size: 16,
                    local_crops_size: 8, local_crops_number: 2, out_dim: 65536, head_hidden_dim: 32,
                    head_bottleneck_dim: 16, warmup_epochs: 1, drop_path_rate: 0.0}}
scdino: {{threads: 1, log_every: 30, keep_checkpoints: 1}}
""")
    reference = Job(args, "reference")
    reference.submit()
    reference.wait_gone(900)
    if "tasks 0-1: Exited with exit code" in reference.text() or not os.path.exists(
            f"{reference.run_dir}/checkpoint.safetensors"):
        fail("the uninterrupted reference run did not complete", reference.out)
    print(f"ok: reference run of {epochs} epochs on 2 ranks")

    job = Job(args, "stop")
    job.submit()
    requeues = 0
    for k in range(args.repeats):
        phase = PHASES[k % len(PHASES)]
        # Attempt k+1 is training once both ranks run and rank 0 printed the
        # attempt's first progress line (an epoch's end).
        wait_for(lambda: job.text().count("rank 1 of 2, gloo") > k and len(job.trainer_pids()) == 2, 240,
                 f"attempt {k + 1} to start", job.out, 0.2)
        attempt_text = lambda: job.text().split(f"requeueing job {job.id}")[-1]
        wait_for(lambda: re.search(r"scdino-trainer: epoch \d+/", attempt_text()), 120,
                 f"attempt {k + 1} to train an epoch", job.out, 0.05)
        pids = job.trainer_pids()
        if phase == "step":
            time.sleep(rng.uniform(0.05, 0.5))
            sh("scancel", "--signal=TERM", job.id)
        elif phase == "usr1":
            time.sleep(rng.uniform(0.05, 0.5))
            sh("scancel", "--signal=USR1", job.id)
        elif phase == "checkpoint":
            wait_for(lambda: temp_checkpoint(job.run_dir), 60, "a checkpoint write", job.out)
            kill(pids.values(), signal.SIGTERM)
            # The stop's own checkpoint follows the current step: a second
            # signal while it is written.
            time.sleep(0.05)
            wait_for(lambda: temp_checkpoint(job.run_dir) or "stopped after iteration" in job.text(), 60,
                     "the stop's checkpoint", job.out, 0.001)
            kill(pids.values(), signal.SIGTERM)
        elif phase in ("learning", "allreduce"):
            # The progress line of an epoch's end comes just before rank 0's
            # learning check; rank 1 then waits for it in the next all-reduce.
            n = len(re.findall(r"scdino-trainer: epoch \d+/", job.text()))
            wait_for(lambda: len(re.findall(r"scdino-trainer: epoch \d+/", job.text())) > n, 60,
                     "an epoch's end", job.out, 0.001)
            kill(pids.values() if phase == "learning" else [pids[1]], signal.SIGTERM)
        elif phase == "shutdown":
            sh("scancel", "--signal=TERM", job.id)
            wait_for(lambda: "stopped after iteration" in job.text().split("requeueing job")[-1], 60,
                     "the stop's checkpoint", job.out, 0.001)
            kill(job.trainer_pids().values(), signal.SIGTERM)
        # Every rank exits 75 and the job requeues itself.
        wait_for(lambda: job.text().count(f"requeueing job {job.id}") > requeues or not job.state(), 180,
                 f"the requeue after the {phase} stop", job.out, 0.2)
        if job.text().count(f"requeueing job {job.id}") <= requeues:
            fail(f"stop {k + 1} ({phase}): the job ended without requeueing itself", job.out)
        attempt = job.text().split(f"requeueing job {job.id}")[requeues]
        requeues += 1
        codes = task_codes(attempt)
        if codes != {0: "75", 1: "75"}:
            fail(f"stop {k + 1} ({phase}): the ranks exited {codes or 'without an error line'}, expected every "
                 "rank 75", job.out)
        if phase in ("learning", "allreduce") and not re.search(r"signal received.*\n(.*\n)*.*learning check at epoch",
                                                                 attempt):
            print(f"note: stop {k + 1} ({phase}): the learning check ended before the signal arrived")
        print(f"ok: stop {k + 1} ({phase}): both ranks exited 75, the job requeued itself")
        # Slurm holds a requeued job for two minutes (so that the previous
        # run's revoked credential is older than the next one's): shortened
        # to a few seconds.
        wait_for(lambda: "BeginTime" in job.state() or not job.state(), 60, "the requeued job to be pending",
                 job.out, 0.2)
        sh("scontrol", "update", f"JobId={job.id}", "StartTime=now+3", check=False)

    # Rank 0 killed while writing the stop's checkpoint: the job fails, the
    # previous checkpoint stays whole, and the next submission resumes there.
    wait_for(lambda: job.text().count("rank 1 of 2, gloo") > args.repeats and len(job.trainer_pids()) == 2, 240,
             "the last attempt to start", job.out, 0.2)
    wait_for(lambda: re.search(r"scdino-trainer: epoch \d+/", job.text().split(f"requeueing job {job.id}")[-1]),
             120, "the last attempt to train", job.out, 0.05)
    wait_for(lambda: not temp_checkpoint(job.run_dir), 30, "no checkpoint being written", job.out)
    before, _ = tensors(f"{job.run_dir}/checkpoint.safetensors")
    pids = job.trainer_pids()
    kill(pids.values(), signal.SIGTERM)
    wait_for(lambda: temp_checkpoint(job.run_dir), 60, "the stop's checkpoint write", job.out, 0.001)
    kill([pids[0]], signal.SIGKILL)
    job.wait_gone(300)
    if "requeueing job" in job.text().split(f"requeueing job {job.id}")[-1]:
        fail("a job whose rank 0 was killed while checkpointing was requeued", job.out)
    meta, _ = tensors(f"{job.run_dir}/checkpoint.safetensors")
    # A killed writer leaves its temporary file (the next start removes it);
    # a write that ended between the test seeing it and the SIGKILL landing
    # (a few milliseconds for this model) renamed it away: then the new
    # checkpoint must be whole, which reading it above showed.
    path = f"{job.run_dir}/checkpoint.safetensors"
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    end = max(v["data_offsets"][1] for k, v in h.items() if k != "__metadata__")
    if 8 + n + end != os.path.getsize(path):
        fail("the checkpoint left after rank 0 was killed while checkpointing is not whole", job.out)
    if int(meta["iteration"]) < int(before["iteration"]):
        fail(f"the checkpoint went back from iteration {before['iteration']} to {meta['iteration']}", job.out)
    if not temp_checkpoint(job.run_dir):
        print(f"note: the stop's checkpoint write ended before the SIGKILL landed: checkpoint.safetensors holds "
              f"iteration {meta['iteration']}, whole")
    elif meta["iteration"] != before["iteration"]:
        # The killed write's temporary file is there, so the file it would
        # have replaced is an earlier write that completed: the epoch's own
        # checkpoint, when the signal landed in the last step of an epoch
        # after `before` was read.
        print(f"note: an epoch's checkpoint (iteration {meta['iteration']}) completed after iteration "
              f"{before['iteration']} was read and before the killed stop's write; it is whole")
    else:
        print(f"ok: rank 0 killed while checkpointing: checkpoint.safetensors still holds iteration "
              f"{meta['iteration']}")
    last = Job(args, "stop")
    last.submit()
    last.wait_gone(900)
    m = re.search(r"resuming from iteration (\d+)", last.text())
    if not m or m.group(1) != meta["iteration"]:
        fail(f"the new submission did not resume from iteration {meta['iteration']}", last.out)
    if temp_checkpoint(job.run_dir):
        fail("the killed write's temporary file was left in the run directory")

    final_meta, final = tensors(f"{job.run_dir}/checkpoint.safetensors")
    ref_meta, ref = tensors(f"{reference.run_dir}/checkpoint.safetensors")
    if final_meta["iteration"] != ref_meta["iteration"]:
        fail(f"the stopped run ended at iteration {final_meta['iteration']}, the reference at "
             f"{ref_meta['iteration']}", last.out)
    differ = [k for k in ref if not k.startswith("optimizer.") and ref[k] != final.get(k)]
    if differ:
        fail(f"after {args.repeats} stops the weights differ from the uninterrupted run's: {differ[:5]}")
    resumed = [int(x) for x in re.findall(r"resuming from iteration (\d+)", job.text() + last.text())]
    print(f"ok: {args.repeats} stops, a killed writer and a resubmission (resumed at {resumed}) end with the "
          f"weights of the uninterrupted run at iteration {final_meta['iteration']}")


if __name__ == "__main__":
    main()
