#!/usr/bin/python3
"""The recipe sweep's table (bench/recipe_sweep/run.sh): one Markdown row per
run from its run directory: recipe.json, log.jsonl, the exit code and time.

  /usr/bin/python3 bench/recipe_sweep/table.py OUT > OUT/table.md
"""
import json
import os
import sys


def main():
    out = sys.argv[1]
    names = [l.strip() for l in open(os.path.join(out, "runs.txt")) if l.strip()]
    print("| data set | images | px | channels | classes | seed | epochs x steps | loss, first -> last epoch "
          "| verdicts | recoveries | 20-NN top-1 trained / random ViT / raw pixels (trained minus the better one) "
          "| learned | exit | minutes |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in names:
        d = os.path.join(out, "runs", name)
        try:
            recipe = json.load(open(os.path.join(d, "recipe.json")))
            lines = [json.loads(l) for l in open(os.path.join(d, "log.jsonl")) if l.strip()]
        except (OSError, ValueError) as e:
            print("| %s | (no result: %s) |" % (name, e))
            continue
        data = recipe["data"]
        values = {v["key"]: v["value"] for v in recipe["values"]}
        epochs = int(values["train_scDINO.epochs"])
        niter = max(1, data["images"] // data["global_batch"])
        set_dir = os.path.join(out, "data", name.rsplit("-", 1)[0])
        classes = len([c for c in os.listdir(set_dir) if os.path.isdir(os.path.join(set_dir, c))])
        # The last line of each epoch (a recovery repeats epochs).
        verdicts = []
        for l in lines:
            v = l.get("collapse", "not judged")
            if not verdicts or verdicts[-1][0] != v:
                verdicts.append([v, l["epoch"] + 1, l["epoch"] + 1])
            else:
                verdicts[-1][2] = l["epoch"] + 1
        verdict_text = ", ".join("%s %d-%d" % (v, a, b) if a != b else "%s %d" % (v, a) for v, a, b in verdicts)
        checks = [l for l in lines if "knn_top1" in l]
        knn, learned = "-", "-"
        if checks:
            t, r = checks[-1]["knn_top1"], checks[-1]["knn_random_top1"]
            p = checks[-1].get("knn_pixels_top1", -1.0)
            knn = "%.3f / %.3f / %s (%+.3f)" % (t, r, "%.3f" % p if p >= 0 else "-", t - max(r, p))
            learned = checks[-1].get("learning_verdict", "-")
        recoveries = max([l.get("recoveries", 0) for l in lines] + [0])
        rc = open(os.path.join(d, "exit_code")).read().strip() if os.path.exists(os.path.join(d, "exit_code")) else "?"
        secs = open(os.path.join(d, "seconds")).read().strip() if os.path.exists(os.path.join(d, "seconds")) else "0"
        print("| %s | %d | %d | %d | %d | %s | %d x %d | %.3f -> %.3f | %s | %d | %s | %s | %s | %.1f |" % (
            name.rsplit("-", 1)[0], data["images"], min(data["height"], data["width"]), data["channels"], classes,
            name.rsplit("-", 1)[1], epochs, niter, lines[0]["loss"], lines[-1]["loss"], verdict_text, recoveries,
            knn, learned, rc, int(secs) / 60.0))


if __name__ == "__main__":
    main()
