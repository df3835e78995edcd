"""scikit-learn's digits (1,797 images of 8x8 px, 10 classes; the pixels as
features, rows L2-normalised as DINO's features are) written as a features
directory (features.npy, index.csv, metadata.json: what scdino-features
writes), with the config scdino-eval evaluates it under: the features no one
here made that the evaluation's oracle tests share."""
import json
import os
import subprocess
import sys
import time

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split


def write_digits(work, test_size, evaluation):
    """Writes work/features/digits and work/eval.yaml (`evaluation`: the
    scdino.evaluation mapping, YAML flow style). Returns (features dir,
    config, x, y, train rows, test rows)."""
    digits = load_digits()
    x = digits.data.astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    y = digits.target
    train, test = train_test_split(np.arange(len(y)), test_size=test_size, stratify=y, random_state=0)
    split = np.array(["train"] * len(y), dtype=object)
    split[test] = "test"
    features = os.path.join(work, "features", "digits")
    os.makedirs(features, exist_ok=True)
    np.save(os.path.join(features, "features.npy"), x)
    with open(os.path.join(features, "index.csv"), "w") as f:
        f.write("index,path,class_name,class_index,split\n")
        for i in range(len(y)):
            f.write(f"{i},digits/{i}.png,{y[i]},{y[i]},{split[i]}\n")
    with open(os.path.join(features, "metadata.json"), "w") as f:
        json.dump({"classes": [str(c) for c in range(10)], "source": "sklearn.datasets.load_digits"}, f)
    config = os.path.join(work, "eval.yaml")
    with open(config, "w") as f:
        f.write(f"""meta: {{name_of_run: digits, output_dir: "{work}/runs", dataset_dir: "{work}", seed: 0}}
downstream_analyses:
  kNN: {{global: {{n_neighbors: [20], temperature: 0.07}}}}
scdino:
  device: cpu
  threads: 2
  control: {{enabled: false}}
  metrics: {{enabled: false}}
  evaluation: {evaluation}
""")
    return features, config, x, y, train, test


def run_eval(scdino_eval, work, config, features):
    """Runs scdino-eval on the digits; exits the test (FAIL:) when it fails.
    Returns (its output directory, its wall seconds)."""
    start = time.time()
    run = subprocess.run([scdino_eval, "--config", config, "--features", features, "--no-attention"],
                         capture_output=True, text=True)
    seconds = time.time() - start
    if run.returncode != 0:
        print(run.stdout + run.stderr)
        print(f"FAIL: scdino-eval exited {run.returncode}")
        sys.exit(1)
    return os.path.join(work, "runs", "digits", "eval", "digits"), seconds
