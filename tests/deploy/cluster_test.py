#!/usr/bin/python3
"""The batch scripts and documented command lines across the nodes of the test
cluster (scripts/slurm-cluster.sh: 2 nodes in network namespaces, 4 stand-in
GPUs each as Slurm GRES, node-local /tmp), as a user runs them.

  cluster_test.py PART SOURCE_DIR BUILD_DIR

PART:
  box       the cluster itself: host names, addresses without a default
            route, node-local /tmp, the shared project, GPUs bound by Slurm
  lines     every documented sbatch/srun line of the README, docs/ and the
            batch scripts' headers, submitted as typed (paths to the test's
            config and data put in), must run on the nodes, ranks and GPUs
            it asks for; geometries the scripts cannot honour are refused
  scripts   scdino-pack on tasks of both nodes; train.sbatch on 2 nodes x 2
            tasks with the preflight, on folders and on a packed set staged
            once per node into each node's /tmp; evaluate.sbatch and
            train-and-evaluate.sbatch across nodes; scdinoctl from the head
            node against a trainer on node2; Prometheus on the head node
            scraping every rank of both nodes and the job's node panels
  gpus      the preflight's GPU binding check on the GRES: one GPU per task
            passes; two tasks on one GPU, and a task without one in a GPU
            job, fail naming node and task
  nodeloss  node2 lost mid-epoch (slurmd and tasks killed, link down), twice:
            a --nodes=1-2 job, Slurm finding the node down first, resumes
            on node1 alone; a --nodes=2 job, its ranks noticing first,
            pends while node2 is down and resumes with 2 ranks on each node
            once it is back, one GPU a task on all 4 again (--gpus-per-node=2);
            both with exact schedules

Prints "ok: ..." lines; "FAIL: ..." and exit 1 on the first failure.
"""
import glob
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
import urllib.parse
import urllib.request

PART, SRC, BUILD = sys.argv[1], os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3])
WORK = os.path.join(BUILD, "test-scratch", "cluster-" + PART)
CLUSTER = os.path.join(SRC, "scripts", "slurm-cluster.sh")
TOOLS = os.path.join(BUILD, "services", "tools")
PY = "/usr/bin/python3"
TINY = ("{arch: vit_tiny, embed_dim: 32, depth: 2, num_heads: 2, patch_size: 8, global_crops_size: 16, "
        "local_crops_size: 8, local_crops_number: 2, out_dim: 64, head_hidden_dim: 32, head_bottleneck_dim: 16, "
        "warmup_epochs: 1, drop_path_rate: 0.0}")


def fail(msg, *outputs):
    print("FAIL: " + msg)
    for out in outputs:
        if out and os.path.exists(out):
            print(f"---- {out} (last 40 lines) ----")
            print("".join(open(out, errors="replace").readlines()[-40:]))
    sys.exit(1)


def run(*args, check=True, env=None, cwd=None, timeout=600):
    r = subprocess.run(args, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)
    if check and r.returncode != 0:
        fail(f"{' '.join(args)}: exit {r.returncode}: {(r.stdout + r.stderr).strip()[-2000:]}")
    return r


def cluster_env():
    env = dict(os.environ)
    for line in run("bash", CLUSTER, "env").stdout.splitlines():
        k, v = line.replace("export ", "", 1).split("=", 1)
        env[k] = v.replace("$PATH", os.environ["PATH"])
    # The documented lines give each task 8 CPUs; on 2 real cores, threads
    # that spin would take minutes.
    env["OMP_WAIT_POLICY"] = "PASSIVE"
    env["SCDINO_TEXTFILE_DIR"] = os.path.join(WORK, "textfile")
    return env


ENV = None


def slurm(*args, check=True, cwd=None):
    return run(*args, check=check, env=ENV, cwd=cwd)


def wait_job(job, seconds, out=None, release_holds=True):
    """Waits until Slurm no longer runs or holds `job` (a requeue's begin-time hold lifted); its exit code."""
    t0 = time.time()
    while time.time() - t0 < seconds:
        st = slurm("squeue", "-h", "-j", job, "-o", "%T %r", check=False).stdout.strip()
        if not st:
            info = slurm("scontrol", "show", "job", job, check=False).stdout
            m = re.search(r" ExitCode=(\d+):(\d+)", info)
            return int(m.group(1)) if m else -1
        if release_holds and "BeginTime" in st:
            # Only Slurm's two-minute hold, not the lifted one (lifting that
            # again would push the start on for ever).
            info = slurm("scontrol", "show", "job", "-o", job, check=False).stdout
            m = re.search(r" StartTime=(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d) ", info)
            if m and time.mktime(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S")) > time.time() + 5:
                slurm("scontrol", "update", f"JobId={job}", "StartTime=now+3", check=False)
        time.sleep(0.5)
    slurm("scancel", job, check=False)
    fail(f"job {job} still in the queue after {seconds} s", out)


def config(name, dataset, epochs=2, extra=""):
    path = os.path.join(WORK, name + ".yaml")
    open(path, "w").write(f"""meta: {{name_of_run: {name}, output_dir: "{WORK}/runs", dataset_dir: "{dataset}", seed: 5,
       selected_channel_combination_per_run: ["012"]}}
train_scDINO:
  epochs: {epochs}
  saveckp_freq: 1
  batch_size_per_gpu: 4
  num_workers: 1
  hyperparameters: {TINY}
downstream_analyses:
  compute_cls_features: {{resize_length: 16}}
  attention_visualisation: {{num_images_per_class: 1, image_size: 32}}
  kNN: {{global: {{n_neighbors: [5], temperature: 0.07}}}}
scdino:
  threads: 1
  features: {{shard_size: 16}}
  evaluation: {{tsne: false, umap: false}}
  preflight: {{max_bytes: 1048576, seconds_per_size: 0.2, read_files: 16}}
{extra}""")
    return path


def submit(args, name, exports="", cwd=None):
    out = os.path.join(WORK, name + "-%j.out")
    r = slurm("sbatch", "--parsable", f"--output={out}", f"--export=ALL{exports}", *args, cwd=cwd or WORK)
    job = r.stdout.strip().split(";")[0]
    return job, out.replace("%j", job)


def text(path):
    return open(path, errors="replace").read() if os.path.exists(path) else ""


def ranks_by_node(out):
    """rank -> node from the trainer's metrics lines ("rank 3 metrics on http://node2:...")."""
    return {int(r): n for r, n in re.findall(r"rank (\d+) metrics on http://([^:]+):", text(out))}


def checkpoint_meta(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8:8 + n]).get("__metadata__", {})


def weights(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    h.pop("__metadata__", None)
    return {k: b[8 + n + v["data_offsets"][0]: 8 + n + v["data_offsets"][1]] for k, v in h.items()}


def synth(name, classes=2, per_class=24):
    d = os.path.join(WORK, name)
    run(os.path.join(TOOLS, "scdino-synth"), "--out", d, "--classes", str(classes), "--per-class", str(per_class),
        "--channels", "3", "--size", "24", "--seed", "3")
    return d


# ---------------------------------------------------------------------------------------------------------------

def part_box():
    r = slurm("srun", "--nodes=2", "--ntasks-per-node=1", "bash", "-c",
              'echo "$(hostname) $SLURMD_NODENAME $(ip -4 -br addr show eth0 | awk \'{print $3}\') '
              'default=$(ip route show default | wc -l) tmp=$(touch /tmp/scdino-box-$SLURMD_NODENAME; ls /tmp | '
              'grep -c scdino-box-) shared=$(test -d ' + SRC + ' && echo yes)"')
    lines = sorted(r.stdout.split("\n"))[1:] if r.stdout.startswith("\n") else sorted(r.stdout.strip().split("\n"))
    want = ["node1 node1 198.18.0.11/24 default=0 tmp=1 shared=yes", "node2 node2 198.18.0.12/24 default=0 tmp=1 shared=yes"]
    if lines != want:
        fail(f"the nodes are not what the cluster promises: {lines}, expected {want}")
    if glob.glob("/tmp/scdino-box-node*"):
        fail("a file a node wrote to its /tmp is in the head node's /tmp: /tmp is not node-local")
    print("ok: two nodes, each its host name, address (no default route) and own /tmp; the project shared")
    r = slurm("srun", "--nodes=2", "--ntasks-per-node=2", "--gpus-per-task=1", "bash", "-c",
              'echo "$SLURMD_NODENAME $SLURM_LOCALID $CUDA_VISIBLE_DEVICES $SLURM_STEP_GPUS $(nvidia-smi -L | wc -l)"')
    got = sorted(r.stdout.strip().split("\n"))
    want = ["node1 0 0 0 1", "node1 1 1 1 1", "node2 0 0 0 1", "node2 1 1 1 1"]
    if got != want:
        fail(f"--gpus-per-task=1: Slurm bound {got}, expected {want}")
    r = slurm("srun", "--nodes=1", "--ntasks=1", "--gpus-per-node=4", "bash", "-c",
              'echo "$CUDA_VISIBLE_DEVICES $SLURM_STEP_GPUS"')
    if r.stdout.strip() != "0,1,2,3 0,1,2,3":
        fail(f"--gpus-per-node=4: {r.stdout.strip()}")
    print("ok: Slurm binds the stand-in GPUs: CUDA_VISIBLE_DEVICES and SLURM_STEP_GPUS per task and per node")

    # A link too slow for the preflight's threshold: the job ends with 6
    # before training, naming both nodes and the bus bandwidth.
    cells = synth("cells")
    slow = config("slow", cells, epochs=1)
    slow_text = open(slow).read().replace("preflight: {max_bytes: 1048576, seconds_per_size: 0.2, read_files: 16}",
                                          "preflight: {max_bytes: 4194304, seconds_per_size: 0.5, min_busbw_gbps: 0.05}")
    open(slow, "w").write(slow_text)
    run("bash", CLUSTER, "shape", "100mbit")
    try:
        job, out = submit(["--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=1",
                           os.path.join(SRC, "deploy/slurm/train.sbatch"), slow], "slow",
                          exports=f",SCDINO_BIN={BUILD}/services/trainer")
        code = wait_job(job, 300, out)
    finally:
        run("bash", CLUSTER, "shape", "off")
    m = re.search(r"FAILED: all-reduce over node1, node2: bus bandwidth ([0-9.]+) GB/s", text(out))
    if code != 6 or not m or "scdino-trainer: run" in text(out) or "requeueing" in text(out):
        fail(f"a 100 Mbit/s link under a 0.05 GB/s threshold: expected exit 6 naming both nodes, got {code}", out)
    print(f"ok: a link shaped to 100 Mbit/s fails the preflight (6, not requeued): busbw {m.group(1)} GB/s, "
          "over node1, node2")

    # A run directory each node has its own of (node-local /tmp): refused at
    # the rendezvous, naming the node, instead of a wait until the timeout.
    local = config("local", cells, epochs=1)
    local_text = open(local).read().replace(f'output_dir: "{WORK}/runs"', 'output_dir: "/tmp/scdino-local-runs"')
    open(local, "w").write(local_text)
    job, out = submit(["--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=1",
                       os.path.join(SRC, "deploy/slurm/train.sbatch"), local], "local",
                      exports=f",SCDINO_BIN={BUILD}/services/trainer")
    code = wait_job(job, 300, out)
    # node2's rank exits 2 at once; srun ends the step (rank 0, waiting for
    # it, is killed after Slurm's KillWait).
    if code == 0 or "rank 1 on node2: the process serving the rendezvous at" not in text(out) or \
            "scdino-trainer: run" in text(out) or "requeueing" in text(out):
        fail(f"a run directory on node-local /tmp: expected a refusal naming node2 before training, got {code}", out)
    print("ok: a run directory that is not the same on every node (node-local /tmp) is refused, naming node2")


# ---------------------------------------------------------------------------------------------------------------

def documented_lines():
    """(file, line) of every sbatch/srun line the README, docs/ and the batch scripts' headers show."""
    found = []
    for path in [os.path.join(SRC, "README.md")] + sorted(glob.glob(os.path.join(SRC, "docs", "*.md"))) + \
            sorted(glob.glob(os.path.join(SRC, "deploy", "slurm", "*.sbatch"))):
        lines = open(path).read().split("\n")
        i = 0
        while i < len(lines):
            line = lines[i]
            if path.endswith(".sbatch"):
                if not line.startswith("#"):
                    break  # the header ends
                line = line[1:]
            joined = line.strip()
            while joined.endswith("\\") and i + 1 < len(lines):
                i += 1
                nxt = lines[i][1:] if path.endswith(".sbatch") else lines[i]
                joined = joined[:-1].rstrip() + " " + nxt.strip()
            if re.match(r'^([A-Z_]+=("[^"]*"|\S+)\s+)*(sbatch|srun) ', joined) and (
                    "deploy/slurm/" in joined or "scdino-pack" in joined):
                found.append((os.path.relpath(path, SRC), joined))
            i += 1
    return found


def part_lines():
    cells = synth("cells")
    # The stand-in GPUs cannot compute: the CPU on purpose (under auto a task
    # Slurm bound one to exits 2, part_gpus).
    cfg = config("run", cells, epochs=2, extra="  device: cpu\n")
    for link, target in (("deploy", os.path.join(SRC, "deploy")), ("build", BUILD)):
        os.symlink(target, os.path.join(WORK, link))
    lines = documented_lines()
    if len(lines) < 8:
        fail(f"found only {len(lines)} documented command lines: {lines}")
    ran = 0
    for where, line in lines:
        if "--container-image" in line or "SCDINO_CONTAINER=" in line:
            print(f"skip: {where}: {line} (needs Pyxis and an image; tests/deploy/container_test.sh)")
            continue
        if "deploy/slurm/scdinoctl.sh" in line:
            print(f"skip: {where}: {line} (needs enroot and a job to watch; tests/deploy/submit_test.sh)")
            continue
        if "[" in line.split("#")[0] and "scdino-pack" not in line:
            line = re.sub(r"\s*\[[^]]*\]", "", line)  # "[scdino-trainer flags]": none given
        typed = line
        line = re.sub(r"\S*(CONFIG|run|pbmc)\.yaml", cfg, line)
        line = line.replace("/shared/data/cells-packed", os.path.join(WORK, "packed-lines"))
        line = re.sub(r"\s*\[--[^]]*\]", "", line)
        name = f"line{ran}"
        if line.startswith("srun") or " srun " in line:
            r = run("bash", "-c", line, env=ENV, cwd=WORK, check=False, timeout=300)
            if r.returncode != 0:
                fail(f"{where}: `{typed}` exited {r.returncode}: {(r.stdout + r.stderr)[-1500:]}")
            if "packed-lines is complete" not in r.stdout + r.stderr:
                fail(f"{where}: `{typed}` did not complete the packed set: {(r.stdout + r.stderr)[-1500:]}")
            print(f"ok: {where}: `{typed}` packed the set")
            ran += 1
            continue
        # sbatch: the output next to the others, the rest as typed.
        line = re.sub(r"\bsbatch ", f"sbatch --parsable --output={WORK}/{name}-%j.out ", line, count=1)
        r = run("bash", "-c", line, env=ENV, cwd=WORK, check=False)
        if r.returncode != 0:
            fail(f"{where}: `{typed}` was refused by sbatch: {(r.stdout + r.stderr).strip()}")
        job = r.stdout.strip().split(";")[0].split("\n")[-1]
        out = f"{WORK}/{name}-{job}.out"
        code = wait_job(job, 600, out)
        o = text(out)
        if code != 0:
            fail(f"{where}: `{typed}` ended with exit code {code}", out)
        # Ranks and GPUs as the line asks: every node it names, every task.
        m_nodes = re.search(r"--nodes=(\d+)", typed)
        m_per = re.search(r"--ntasks-per-node=(\d+)", typed)
        m_tasks = re.search(r"--ntasks=(\d+)", typed)
        want_tasks = int(m_nodes.group(1)) * int(m_per.group(1)) if m_nodes and m_per else \
            int(m_tasks.group(1)) if m_tasks else 1
        if "train-and-evaluate" in typed:
            m_step = re.search(r'SCDINO_TRAIN_STEP="--ntasks=(\d+)', typed)
            want_tasks = int(m_step.group(1)) if m_step else want_tasks - 1
        if "train" in typed:
            nodes = ranks_by_node(out)
            if len(nodes) != want_tasks:
                fail(f"{where}: `{typed}` trained on {len(nodes)} rank(s) ({nodes}), the line asks for {want_tasks}", out)
            if m_nodes and len(set(nodes.values())) != int(m_nodes.group(1)):
                fail(f"{where}: `{typed}` ran on nodes {sorted(set(nodes.values()))}", out)
        if "evaluate.sbatch" in typed and "rank" in o and want_tasks > 1:
            if f"rank {want_tasks - 1} of {want_tasks}" not in o:
                fail(f"{where}: `{typed}`: scdino-features did not run on {want_tasks} ranks", out)
        if "--gpus" in typed and "train" in typed:
            bound = re.findall(r"# rank \d+ on (\S+) .*bound to GPU (\S+)", o)
            if len(bound) != len(set(bound)) or (bound and len(bound) != want_tasks):
                fail(f"{where}: `{typed}`: GPU bindings {bound}", out)
        print(f"ok: {where}: `{typed}` ran {want_tasks} rank(s) as asked")
        ran += 1
    # A geometry the scripts cannot honour is refused before any step, named.
    for args, says in (
            (["--nodes=1", "--ntasks=3", "--gpus-per-node=2", "--cpus-per-task=1"],
             "runs 3 task(s) on a node with 2 GPU(s)"),):
        job, out = submit(args + [os.path.join(SRC, "deploy/slurm/train.sbatch"), cfg], "refused",
                          exports=f",SCDINO_BIN={BUILD}/services/trainer")
        code = wait_job(job, 120, out)
        if code != 2 or says not in text(out) or "scdino-trainer: run" in text(out):
            fail(f"sbatch {' '.join(args)} train.sbatch: expected a refusal (exit 2) saying '{says}', got {code}",
                 out)
        print(f"ok: sbatch {' '.join(args)} train.sbatch is refused: {says}")
    # A task count that is not what --ntasks-per-node x nodes asked: the
    # script as it was, with a directive of its own (--ntasks=1) that turned
    # a request for 2 nodes x 2 tasks into one task, silently.
    old_style = os.path.join(WORK, "train-with-ntasks.sbatch")
    body = open(os.path.join(SRC, "deploy/slurm/train.sbatch")).read()
    open(old_style, "w").write(body.replace("#SBATCH --job-name=scdino-train\n",
                                            "#SBATCH --job-name=scdino-train\n#SBATCH --ntasks=1\n"))
    job, out = submit(["--nodes=2", "--ntasks-per-node=2", "--cpus-per-task=1", old_style, cfg], "mismatch",
                      exports=f",SCDINO_BIN={BUILD}/services/trainer,SCDINO_DEPLOY={SRC}/deploy/slurm")
    code = wait_job(job, 120, out)
    if code != 2 or not re.search(r"asked for 2 task\(s\) per node on 1 node\(s\) \(2 in all\) but has 1", text(out)):
        fail(f"a job whose task count differs from what it asked was not refused (exit {code})", out)
    print("ok: a task count other than --ntasks-per-node x nodes (a --ntasks directive) is refused, naming both")


# ---------------------------------------------------------------------------------------------------------------

def part_scripts():
    cells = synth("cells", per_class=32)
    trainer_env = f",SCDINO_BIN={BUILD}/services/trainer"
    folder = config("folder", cells, epochs=2)
    # scdino-pack on tasks of both nodes.
    r = slurm("srun", "--nodes=2", "--ntasks-per-node=2", "--cpus-per-task=1", "--kill-on-bad-exit=1",
              os.path.join(TOOLS, "scdino-pack"), "--config", folder, "--out", os.path.join(WORK, "packed"),
              "--shard-images", "16", "--block", "8", cwd=WORK)
    said = r.stdout + r.stderr
    if f"{WORK}/packed is complete" not in said:
        fail(f"scdino-pack on 2 nodes x 2 tasks did not complete the set: {said[-1500:]}")
    shards = sorted(os.path.basename(p) for p in glob.glob(os.path.join(WORK, "packed", "shard-*.tar")))
    if len(shards) != 4:
        fail(f"expected 4 shards from 64 images, got {shards}")
    print(f"ok: scdino-pack on 2 nodes x 2 tasks wrote {len(shards)} shards and the index")
    packed = config("packed", os.path.join(WORK, "packed"), epochs=2)

    # train.sbatch on 2 nodes x 2 tasks, the preflight on, folders then packed.
    for name, cfg in (("folder", folder), ("packed", packed)):
        job, out = submit(["--nodes=2", "--ntasks-per-node=2", "--cpus-per-task=1",
                           os.path.join(SRC, "deploy/slurm/train.sbatch"), cfg], "train-" + name, exports=trainer_env)
        code = wait_job(job, 600, out)
        o = text(out)
        if code != 0:
            fail(f"train.sbatch on 2 nodes x 2 tasks ({name}) ended with {code}", out)
        if "scdino-preflight: passed on 4 rank(s)" not in o:
            fail(f"the preflight did not pass on 4 ranks ({name})", out)
        nodes = ranks_by_node(out)
        if sorted(nodes.items()) != [(0, "node1"), (1, "node1"), (2, "node2"), (3, "node2")]:
            fail(f"the ranks ran on {nodes} ({name})", out)
        if name == "packed":
            staged = re.findall(r"staged and verified (\S+): .* on (node\d)", o)
            if sorted(n for _, n in staged) != ["node1", "node2"]:
                fail(f"the packed set was not staged once on each node: {staged}", out)
            if not re.search(r"read the packed set from /tmp/scdino-stage-\S+ \(this node's copy\)", o):
                fail("the preflight did not read the node's staged copy through the packed reader", out)
            if len(re.findall(r"reading \S+ from its copy on this node, /tmp/scdino-stage", o)) < 2:
                fail("the trainers did not read each node's copy", out)
            for d, n in staged:
                r = run("bash", CLUSTER, "exec", n, "sh", "-c", f"ls {d}/shard-*.tar | wc -l")
                if r.stdout.strip() != "4" or os.path.exists(d):
                    fail(f"{n}'s copy {d} holds {r.stdout.strip()} shards (expected 4) or is visible from the head node")
        print(f"ok: train.sbatch on 2 nodes x 2 tasks, preflight passed, {name} data"
              + (": staged once into each node's own /tmp, read from there" if name == "packed" else ""))

    # evaluate.sbatch across nodes, on the packed run's checkpoints.
    job, out = submit(["--nodes=2", "--ntasks-per-node=2", "--cpus-per-task=1",
                       os.path.join(SRC, "deploy/slurm/evaluate.sbatch"), packed, "--checkpoint",
                       os.path.join(WORK, "runs", "packed", "checkpoint.safetensors"), "--random-init"], "evaluate",
                      exports=f",SCDINO_BUILD={BUILD}")
    code = wait_job(job, 600, out)
    if code != 0 or "rank 3 of 4" not in text(out):
        fail(f"evaluate.sbatch on 2 nodes x 2 tasks ended with {code}", out)
    for sub in ("checkpoint", "random_init"):
        if not os.path.exists(os.path.join(WORK, "runs", "packed", "eval", sub, "knn_results.json")):
            fail(f"evaluate.sbatch wrote no eval/{sub}/knn_results.json", out)
    print("ok: evaluate.sbatch on 2 nodes x 2 tasks: features on 4 ranks, evaluation of the checkpoint and a random ViT")

    # train-and-evaluate.sbatch: the trainer on 3 tasks over both nodes, the follower on the fourth.
    tae = config("tae", cells, epochs=3)
    job, out = submit(["--nodes=2", "--ntasks-per-node=2", "--cpus-per-task=1",
                       os.path.join(SRC, "deploy/slurm/train-and-evaluate.sbatch"), tae], "tae",
                      exports=f",SCDINO_BUILD={BUILD}")
    code = wait_job(job, 900, out)
    nodes = ranks_by_node(out)
    if code != 0 or len(nodes) != 3 or set(nodes.values()) != {"node1", "node2"}:
        fail(f"train-and-evaluate.sbatch on 2 nodes ended with {code}, trainer ranks {nodes}", out)
    csv_path = os.path.join(WORK, "runs", "tae", "eval", "knn_per_checkpoint.csv")
    if not os.path.exists(csv_path) or len(open(csv_path).read().strip().split("\n")) < 2:
        fail("the follower evaluated no checkpoint", out)
    print(f"ok: train-and-evaluate.sbatch on 2 nodes: 3 trainer ranks on {sorted(set(nodes.values()))}, "
          "the follower evaluated its checkpoints")

    # scdinoctl from the head node against a trainer on node2 (TLS, pinned).
    ctl = os.path.join(BUILD, "services", "ctl", "scdinoctl")
    long_run = config("ctl", cells, epochs=400)
    job, out = submit(["--nodelist=node2", "--ntasks=2", "--cpus-per-task=1",
                       os.path.join(SRC, "deploy/slurm/train.sbatch"), long_run], "ctl",
                      exports=trainer_env + ",SCDINO_PREFLIGHT=0")
    endpoint = os.path.join(WORK, "runs", "ctl", "endpoints", "trainer.json")
    t0 = time.time()
    while not os.path.exists(endpoint) and time.time() - t0 < 120:
        time.sleep(0.5)
    if not os.path.exists(endpoint):
        fail("no endpoint file from the trainer on node2", out)
    ep = json.load(open(endpoint))
    if ep.get("host") != "node2" or not ep.get("tls"):
        fail(f"the endpoint file does not name node2 with TLS: {ep}")
    run_dir = os.path.join(WORK, "runs", "ctl")
    st = json.loads(run(ctl, "status", "--run-dir", run_dir, "--json").stdout)
    if st["run"]["slurm_job_id"] != job or int(st["run"]["world_size"]) != 2:
        fail(f"scdinoctl status from the head node: {st}")
    run(ctl, "pause", "--run-dir", run_dir)
    t0 = time.time()
    while json.loads(run(ctl, "status", "--run-dir", run_dir, "--json").stdout)["state"] != "RUN_STATE_PAUSED":
        if time.time() - t0 > 60:
            fail("the trainer on node2 did not pause", out)
        time.sleep(0.5)
    run(ctl, "resume", "--run-dir", run_dir)
    run(ctl, "stop", "--run-dir", run_dir)
    code = wait_job(job, 120, out, release_holds=False)
    if code != 4:
        fail(f"scdinoctl stop of the trainer on node2: the job ended with {code}, expected 4", out)
    print(f"ok: scdinoctl status, pause, resume and stop from the head node against the trainer on node2 "
          f"({ep['host']}:{ep['port']}, TLS {ep['tls_fingerprint'][:19]}...)")

    monitoring(cells, trainer_env)


def monitoring(cells, trainer_env):
    """Prometheus on the head node scrapes every rank of a 2-node job and both nodes' node_exporter."""
    sd = os.path.join(WORK, "runs", "prometheus_targets")
    os.makedirs(os.path.join(sd, "node_exporter"), exist_ok=True)
    json.dump([{"targets": [f"node{i}:9100"], "labels": {"node": f"node{i}"}} for i in (1, 2)],
              open(os.path.join(sd, "node_exporter", "nodes.json"), "w"))
    port = run(PY, "-c", "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"
               ).stdout.strip()
    data = os.path.join(WORK, "stack")
    run("bash", os.path.join(SRC, "scripts", "monitoring-up.sh"), "start", "--data-dir", data, "--sd-dir", sd,
        "--prometheus-port", port, "--alertmanager-port", str(int(port) + 1), "--node-exporter-port",
        str(int(port) + 2), "--scrape-interval", "1s", "--evaluation-interval", "1s")
    prom = f"http://127.0.0.1:{port}"
    try:
        long_run = config("mon", cells, epochs=400)
        job, out = submit(["--nodes=2", "--ntasks-per-node=2", "--cpus-per-task=1",
                           os.path.join(SRC, "deploy/slurm/train.sbatch"), long_run], "mon",
                          exports=trainer_env + ",SCDINO_PREFLIGHT=0")

        def query(q):
            url = prom + "/api/v1/query?" + urllib.parse.urlencode({"query": q})
            return json.load(urllib.request.urlopen(url, timeout=10))["data"]["result"]

        def wait_query(q, want, what, seconds=90):
            t0 = time.time()
            got = []
            while time.time() - t0 < seconds:
                try:
                    got = query(q)
                except OSError:
                    got = []
                if want(got):
                    return got
                time.sleep(1)
            fail(f"{what}: {q} gave {got}", out)

        up = wait_query(f'up{{job="scdino", service="trainer", slurm_job_id="{job}"}} == 1',
                        lambda r: len(r) == 4, "Prometheus does not scrape the 4 trainer ranks")
        scraped = sorted((r["metric"]["rank"], r["metric"]["node"]) for r in up)
        if scraped != [("0", "node1"), ("1", "node1"), ("2", "node2"), ("3", "node2")]:
            fail(f"the scraped ranks and nodes: {scraped}")
        print(f"ok: Prometheus on the head node scrapes the 4 trainer ranks on both nodes: {scraped}")
        # The per-node panels of the job dashboard, for this job and both nodes.
        dash = json.load(open(os.path.join(SRC, "monitoring", "grafana", "dashboards", "gpus-nodes.json")))
        in_row, answered = False, []
        for p in dash["panels"]:
            if p.get("type") == "row":
                in_row = p.get("title", "").startswith("Nodes")
                continue
            if not in_row:
                continue
            for t in p.get("targets", []):
                q = t["expr"].replace("$job", job).replace("$node", "node1|node2").replace(
                    "$__rate_interval", "10s").replace("$__range", "5m")
                got = wait_query(q, lambda r: {x["metric"].get("node") for x in r} >= {"node1", "node2"},
                                 f"panel '{p['title']}' does not answer for both nodes")
                answered.append(p["title"])
        if len(answered) < 4:
            fail(f"found only {answered} in the dashboard's node row")
        print(f"ok: the job dashboard's node panels answer for node1 and node2 through Prometheus: {sorted(set(answered))}")
        run(os.path.join(BUILD, "services", "ctl", "scdinoctl"), "stop", "--run-dir", os.path.join(WORK, "runs", "mon"))
        if wait_job(job, 120, out, release_holds=False) != 4:
            fail("the monitored job did not stop through the control API (exit 4)", out)
    finally:
        run("bash", os.path.join(SRC, "scripts", "monitoring-up.sh"), "stop", "--data-dir", data, check=False)


# ---------------------------------------------------------------------------------------------------------------

def part_gpus():
    cells = synth("cells")
    # The stand-in GPUs cannot compute: the bindings are checked with the CPU
    # chosen on purpose (scdino.device cpu); under auto, the default, a task
    # Slurm bound a GPU to that CUDA cannot see is refused (exit 2).
    cfg = config("gpus", cells, epochs=1, extra="  device: cpu\n")
    auto = config("gpus-auto", cells, epochs=1)
    preflight = os.path.join(BUILD, "services", "preflight", "scdino-preflight")

    def step(*args, config=cfg, kill=True):
        return run("bash", "-c", "srun " + ("--kill-on-bad-exit=1 " if kill else "") + " ".join(args) +
                   f" {preflight} --config {config} --threads 1 2>&1", env=ENV, cwd=WORK, check=False)

    # Every rank refuses, naming what Slurm gave it and what it sees.
    r = step("--nodes=2", "--ntasks-per-node=2", "--cpus-per-task=1", "--gpus-per-task=1", config=auto, kill=False)
    refused = re.findall(r"scdino\.device is auto and Slurm bound GPU (\d) \(CUDA_VISIBLE_DEVICES=(\d), the one this "
                         r"task was given\) to task (\d) \(local rank (\d)\), but no GPU is visible to it "
                         r"\(CUDA_VISIBLE_DEVICES=\d, NVIDIA_VISIBLE_DEVICES unset, NVIDIA driver none found "
                         r"\(no /proc/driver/nvidia/version\)\); "
                         r"this build of scdino has no CUDA", r.stdout)
    if r.returncode != 2 or len(refused) != 4 or "set scdino.device: cpu" not in r.stdout:
        fail(f"scdino.device auto on GPUs CUDA cannot see: expected exit 2 from every rank naming both sides, got "
             f"{r.returncode} and {refused}: {r.stdout[-1500:]}")
    print(f"ok: auto on a bound GPU CUDA cannot see exits 2 on every rank, naming both sides: {sorted(refused)}")
    # Without GPUs in the job, auto stays on the CPU.
    r = step("--nodes=1", "--ntasks=1", "--cpus-per-task=1", config=auto)
    if r.returncode != 0 or "scdino.device auto: a build without CUDA" not in r.stdout:
        fail(f"auto in a job without GPUs should run on the CPU: exit {r.returncode}: {r.stdout[-1500:]}")
    print("ok: auto in a job without GPUs runs on the CPU")
    r = step("--nodes=2", "--ntasks-per-node=2", "--cpus-per-task=1", "--gpus-per-task=1")
    bound = re.findall(r"# rank (\d) on (node\d) .*bound to GPU (\d)", r.stdout)
    if r.returncode != 0 or sorted(bound) != [("0", "node1", "0"), ("1", "node1", "1"), ("2", "node2", "0"),
                                              ("3", "node2", "1")]:
        fail(f"one GPU per task should pass: exit {r.returncode}, bindings {bound}: {r.stdout[-1500:]}")
    print(f"ok: one GPU per task on 2 nodes passes the preflight: {bound}")
    decided = re.findall(r"# rank (\d) on (node\d) \(cpu: scdino\.device cpu[):]", r.stdout)
    if sorted(decided) != [("0", "node1"), ("1", "node1"), ("2", "node2"), ("3", "node2")]:
        fail(f"every rank should say its device: {decided}: {r.stdout[-1500:]}")
    print("ok: every rank says its device (the CPU, on purpose)")
    r = step("--nodes=2", "--ntasks-per-node=2", "--cpus-per-task=1", "--gpus-per-node=1")
    if r.returncode != 6 or not re.search(r"GPU binding: node1: tasks 0 and 1 \(ranks 0 and 1\) are both bound to GPU 0",
                                          r.stdout):
        fail(f"two tasks on one GPU: expected exit 6 naming node1, tasks 0 and 1 and GPU 0; got {r.returncode}: "
             f"{r.stdout[-1500:]}")
    print("ok: two tasks of a node given one GPU fail the preflight (6), named: node, tasks, ranks, GPU")
    # A step without GPUs in a job with them (srun --gpus-per-node=0, as a
    # follower step with --gres=none would be): its tasks have none.
    r = run("bash", "-c", "salloc --nodes=2 --ntasks-per-node=2 --cpus-per-task=1 --gpus-per-node=2 "
            f"srun --kill-on-bad-exit=1 --gpus-per-node=0 {preflight} --config {cfg} --threads 1 2>&1", env=ENV,
            cwd=WORK, check=False)
    if r.returncode != 6 or "GPU binding: node2: task 0 (rank 2): this task (local rank 0) was given no GPU " \
                            "(CUDA_VISIBLE_DEVICES unset) although the job has GPUs (SLURM_GPUS_PER_NODE=2)" not in r.stdout:
        fail(f"tasks without a GPU in a GPU job: expected exit 6 naming node2, task 0, rank 2; got {r.returncode}: "
             f"{r.stdout[-1500:]}")
    print("ok: a task given no GPU in a job with GPUs fails the preflight (6), named: node, task, rank")


# ---------------------------------------------------------------------------------------------------------------

def part_nodeloss():
    cells = synth("cells", per_class=32)
    extra = "  elastic_resume: global_batch\n  distributed_timeout_s: 30\n  log_samples: true\n"
    lost = config("lost", cells, epochs=12, extra=extra)
    ref = config("whole", cells, epochs=12, extra=extra)
    # The ranks notice a lost node within 8 s, before Slurm does (SlurmdTimeout 15 s).
    # It runs one (stand-in) GPU a task, on the CPU on purpose (part_gpus).
    fixed = config("fixed", cells, epochs=12,
                   extra=extra.replace("distributed_timeout_s: 30", "distributed_timeout_s: 8") + "  device: cpu\n")
    trainer_env = f",SCDINO_BIN={BUILD}/services/trainer,SCDINO_PREFLIGHT=0"
    train = os.path.join(SRC, "deploy/slurm/train.sbatch")
    # The uninterrupted run: 4 ranks on 2 nodes.
    job, out = submit(["--nodes=2", "--ntasks-per-node=2", "--cpus-per-task=1", train, ref], "whole",
                      exports=trainer_env)
    if wait_job(job, 600, out) != 0:
        fail("the uninterrupted 2-node run failed", out)

    def started(run_name, out):
        log = os.path.join(WORK, "runs", run_name, "log.jsonl")
        t0 = time.time()
        while (not os.path.exists(log) or len(open(log).read().strip().split("\n")) < 3) and time.time() - t0 < 300:
            time.sleep(0.2)
        if len(ranks_by_node(out)) != 4:
            fail(f"the job did not start on both nodes: {ranks_by_node(out)}", out)

    def wait_for(out, words, seconds, what):
        t0 = time.time()
        while words not in text(out) and time.time() - t0 < seconds:
            time.sleep(0.5)
        if words not in text(out):
            fail(f"{what}: no '{words}' within {seconds} s", out)

    # --nodes=1-2, Slurm first: node2 lost in the fourth epoch and marked
    # down at once; the job resumes on node1 alone.
    job, out = submit(["--nodes=1-2", "--ntasks-per-node=2", "--cpus-per-task=1", train, lost], "lost",
                      exports=trainer_env)
    started("lost", out)
    run("bash", CLUSTER, "lose", "node2")
    try:
        slurm("scontrol", "update", "NodeName=node2", "State=DOWN", "Reason=scdino test: node lost")
        wait_for(out, "Slurm requeued job", 120, "Slurm marked node2 down")
        o = text(out)
        if "with node2 down; its task count is now 2 (2 per node on the 1 node(s) left)" not in o:
            fail("the batch script did not fit the --nodes=1-2 job to the node left, or did not say so", out)
        print("ok: --nodes=1-2, Slurm first: " + re.search(r"scdino: Slurm requeued job[^\n]*", o).group(0))
        code = wait_job(job, 900, out)
        o = text(out)
        if code != 0 or not re.findall(r"resume: (.*)", o):
            fail(f"the job did not requeue and complete on the remaining node (exit {code})", out)
        after = o.split("Slurm requeued job")[-1]
        nodes_after = set(re.findall(r"rank \d+ metrics on http://([^:]+):", after))
        if nodes_after != {"node1"}:
            fail(f"the requeued job ran on {nodes_after}, expected node1 alone", out)
        print(f"ok: the --nodes=1-2 job resumed on node1 alone with 2 ranks and completed")
    finally:
        run("bash", CLUSTER, "restore", "node2")
    lost_out = o

    # --nodes=2 --gpus-per-node=2, the ranks first: node2 lost; once Slurm
    # finds it down the batch script fits the job, which pends for its 2
    # nodes until node2 is back, then resumes with 2 ranks on each, each on
    # a GPU of its own (the preflight at each start says which).
    job, out = submit(["--nodes=2", "--ntasks-per-node=2", "--cpus-per-task=1", "--gpus-per-node=2", train, fixed],
                      "fixed", exports=trainer_env.replace("SCDINO_PREFLIGHT=0", "SCDINO_PREFLIGHT=1"))
    started("fixed", out)
    lost_at = time.time()
    run("bash", CLUSTER, "lose", "node2")
    try:
        wait_for(out, "with node2 down; its task count is now 2", 120, "Slurm finding node2 down")
        o = text(out)
        m = re.search(r"rank \d+ of 4: lost contact with ([^\n]*)", o)
        if not m or "node2" not in m.group(1) or o.find(m.group(0)) > o.find("DUE TO NODE FAILURE"):
            fail("the ranks on node1 did not stop first naming node2", out)
        print(f"ok: --nodes=2, ranks first: node1's ranks stopped within {time.time() - lost_at:.0f} s: {m.group(0)}")
        # srun waits for node2's tasks until Slurm finds node2 down, so the
        # batch script learns it from Slurm's requeue either way.
        print("ok: " + re.search(r"scdino: Slurm requeued job[^\n]*", o).group(0))
        t0 = time.time()
        reason = ""
        while "node2" not in reason and "DOWN" not in reason and time.time() - t0 < 60:
            reason = slurm("squeue", "-h", "-j", job, "-o", "%T %r", check=False).stdout.strip()
            if "BeginTime" in reason:  # the requeue's hold: lifted, so that Slurm says what the job waits for
                slurm("scontrol", "update", f"JobId={job}", "StartTime=now", check=False)
            time.sleep(0.5)
        if not reason.startswith("PENDING") or ("node2" not in reason and "DOWN" not in reason):
            fail(f"the --nodes=2 job while node2 is down: squeue says '{reason}'", out)
        print(f"ok: the --nodes=2 job pends while node2 is down, Slurm saying: {reason}")
        # Held while node2 comes back: Slurm 22.05 allocating a node at the
        # instant it registers again once gave the job one node under a
        # two-node environment, and srun then waited for ever ("Requested
        # nodes are busy"); a node back from a failure takes longer than that.
        slurm("scontrol", "hold", job, check=False)
    finally:
        run("bash", CLUSTER, "restore", "node2")
    t0 = time.time()
    while "idle" not in slurm("sinfo", "-h", "-n", "node2", "-o", "%T", check=False).stdout and time.time() - t0 < 60:
        time.sleep(0.5)
    time.sleep(5)
    slurm("scontrol", "release", job, check=False)
    code = wait_job(job, 900, out)
    o = text(out)
    after = o.split("Slurm requeued job")[-1]
    if code != 0 or set(re.findall(r"rank \d+ metrics on http://([^:]+):", after)) != {"node1", "node2"}:
        fail(f"the --nodes=2 job did not resume on both nodes once node2 was back (exit {code})", out)
    ranks_after = {int(r): n for r, n in re.findall(r"rank (\d+) metrics on http://([^:]+):", after)}
    if sorted(ranks_after.values()) != ["node1", "node1", "node2", "node2"]:
        fail(f"the --nodes=2 job resumed with other than 2 ranks on each node: {ranks_after}", out)
    bound = sorted(set(re.findall(r"# rank (\d) on (node\d) .*bound to GPU (\d)", after)))
    if bound != [("0", "node1", "0"), ("1", "node1", "1"), ("2", "node2", "0"), ("3", "node2", "1")]:
        fail(f"the --nodes=2 --gpus-per-node=2 job did not get a GPU for each of its 4 tasks again: {bound}", out)
    print(f"ok: node2 back: the --nodes=2 --gpus-per-node=2 job resumed on both nodes with 2 ranks each, each bound "
          f"to a GPU of its own ({bound}), and completed")

    # Exact: the same images at every step as the uninterrupted run (the
    # per-rank sampler logs of both), and the final weights within float
    # tolerance of another world size's summation order.
    def steps(run_name, resumed_at, resumed_world):
        """iteration -> (sorted images of every rank, lr, momentum): the attempt that counts for each iteration
        (from `resumed_at` on, the resumed run's at its world size, whose lines come after the first attempt's)."""
        seen = {}
        for f in glob.glob(os.path.join(WORK, "runs", run_name, "samples", "rank*.jsonl")):
            for line in open(f):
                e = json.loads(line)
                if e["iteration"] >= resumed_at and e["world_size"] != resumed_world:
                    continue  # a step of the first attempt that the resumed run made again
                seen.setdefault(e["iteration"], {})[f] = e
        return {k: (sorted(i for e in v.values() for i in e["samples"]), next(iter(v.values()))["lr"],
                    next(iter(v.values()))["momentum"]) for k, v in seen.items()}
    a = steps("whole", 1 << 30, 4)
    for name, o, world in (("lost", lost_out, 2), ("fixed", o, 4)):
        at = int(re.search(r"resuming from iteration (\d+)", o).group(1))
        b = steps(name, at, world)
        differ = [k for k in a if k not in b or a[k][0] != b[k][0] or abs(a[k][1] - b[k][1]) > 1e-12 or
                  abs(a[k][2] - b[k][2]) > 1e-12]
        if differ:
            fail(f"the {name} run resumed at iteration {at} on {world} ranks did not take the uninterrupted 4-rank "
                 f"run's images and schedule values at every step: {len(differ)} differ, first {differ[:5]}")
        print(f"ok: {name}: all {len(a)} steps (resumed at {at} on {world} ranks) took the uninterrupted run's "
              "images, learning rate and teacher momentum (exact schedules)")


def main():
    global ENV
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(os.path.join(WORK, "textfile"))
    if run("bash", CLUSTER, "status", check=False).returncode != 0:
        fail("the test cluster is not up (bash scripts/slurm-cluster.sh start; scripts/test.sh starts it)")
    ENV = cluster_env()
    # The parts run one at a time (RUN_SERIAL): a job still queued was left by
    # an earlier try that failed (ctest runs a failed test once more), and it
    # would stand ahead of this try's jobs ("PENDING Priority").
    left = slurm("squeue", "-h", "-o", "%i", check=False).stdout.split()
    if left:
        print(f"note: cancelling job(s) {' '.join(left)} left in the test cluster by an earlier try")
        slurm("scancel", *left, check=False)
        t0 = time.time()
        while slurm("squeue", "-h", "-o", "%i", check=False).stdout.strip() and time.time() - t0 < 60:
            time.sleep(0.5)
    {"box": part_box, "lines": part_lines, "scripts": part_scripts, "gpus": part_gpus,
     "nodeloss": part_nodeloss}[PART]()


if __name__ == "__main__":
    main()
