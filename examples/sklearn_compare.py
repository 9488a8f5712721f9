#!/usr/bin/env python3
"""Compare a noiseless dpadmm walk with scikit-learn on the same split and features.

    python3 examples/sklearn_compare.py --dpadmm ./dpadmm --data ../shared/data/wine.csv \
        --label class [--loss logistic|squared] [--l2 1e-3] [--nodes 8] [--hops 20000] \
        [--scale standardize+unitball] [--seed 1] [--json]

The script splits the file 80/20 (seeded), runs `dpadmm testnet --sigma 0 --max-updates 0`
on the two parts with `--scale-out`, applies that scaling to the same rows in NumPy and
fits scikit-learn on them with the same objective:

  * classification: LogisticRegression (multinomial for 3 or more classes, lbfgs, an
    unpenalised intercept) with C = 1 / (l2 * n_train), the minimiser of
    mean loss + (l2/2) ||w||^2, dpadmm's objective;
  * regression: LinearRegression (no penalty) and Ridge with alpha = l2 * n_train.

It prints the test accuracy (or R^2) of both, of dpadmm's centralised reference solver,
and their difference. It needs scikit-learn (Debian: python3-sklearn).
"""
import argparse
import csv
import json
import os
import random
import subprocess
import sys
import tempfile

import numpy as np


def read_csv(path):
    with open(path, newline="", encoding="utf-8-sig") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]


def write_csv(path, header, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def scale(x, sc):
    """dpadmm's Scaler.ScaleRow on every row, without the intercept's column."""
    x = np.array(x, dtype=float)
    kind = sc["kind"]
    if "standardize" in kind:
        x = (x - np.array(sc["mean"])) / np.array(sc["std"])
    if "rownorm" in kind:
        x = x / sc["row_div"]
    if "unitball" in kind:
        n = np.linalg.norm(x, axis=1, keepdims=True)
        x = x / np.maximum(1.0, n)
    c = sc.get("intercept", 0.0)
    return x * np.sqrt(1 - c * c)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dpadmm", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--label", required=True)
    ap.add_argument("--loss", default="logistic")
    ap.add_argument("--l2", type=float, default=1e-3)
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--hops", type=int, default=20000)
    ap.add_argument("--gamma", type=float, default=1.0)
    ap.add_argument("--scale", default="standardize+unitball")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    header, rows = read_csv(a.data)
    li = header.index(a.label)
    random.Random(a.seed).shuffle(rows)
    cut = int(round(0.8 * len(rows)))
    train, test = rows[:cut], rows[cut:]
    with tempfile.TemporaryDirectory() as d:
        tr, te = os.path.join(d, "train.csv"), os.path.join(d, "test.csv")
        write_csv(tr, header, train)
        write_csv(te, header, test)
        rep, sco = os.path.join(d, "report.json"), os.path.join(d, "scale.json")
        cmd = [a.dpadmm, "testnet", "--data", tr, "--test", te, "--label", a.label, "--loss", a.loss,
               "--sigma", "0", "--max-updates", "0", "--hops", str(a.hops), "--nodes", str(a.nodes),
               "--gamma", str(a.gamma), "--l2", str(a.l2), "--scale", a.scale, "--seed", str(a.seed),
               "--report", rep, "--scale-out", sco, "--quiet"]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(rep) as f:
            r = json.load(f)
        with open(sco) as f:
            sc = json.load(f)

    feat = [i for i in range(len(header)) if i != li]
    xtr = scale([[float(row[i]) for i in feat] for row in train], sc)
    xte = scale([[float(row[i]) for i in feat] for row in test], sc)
    out = {"data": os.path.basename(a.data), "rows": len(rows), "train_rows": len(train), "test_rows": len(test),
           "l2": a.l2, "nodes": a.nodes, "hops": a.hops, "scale": a.scale}
    if a.loss == "squared":
        from sklearn.linear_model import LinearRegression, Ridge
        ytr = np.array([float(row[li]) for row in train])
        yte = np.array([float(row[li]) for row in test])
        lin = LinearRegression().fit(xtr, ytr)
        # dpadmm's targets are (y - centre)/scale: the ridge penalty in those units.
        ts = sc.get("target_scale", 1.0) or 1.0
        ridge = Ridge(alpha=a.l2 * len(train)).fit(xtr, (ytr - sc.get("target_center", 0.0)) / ts)
        out.update({"metric": "test R^2", "dpadmm": r["r2"], "sklearn_linear": lin.score(xte, yte),
                    "sklearn_ridge_same_l2": ridge.score(xte, (yte - sc.get("target_center", 0.0)) / ts)})
        out["difference"] = out["dpadmm"] - out["sklearn_linear"]
    else:
        from sklearn.linear_model import LogisticRegression
        ytr = [row[li].strip() for row in train]
        yte = [row[li].strip() for row in test]
        clf = LogisticRegression(C=1.0 / (a.l2 * len(train)), max_iter=100000, tol=1e-10).fit(xtr, ytr)
        out.update({"metric": "test accuracy", "classes": len(set(ytr)), "dpadmm": r["accuracy"],
                    "sklearn": clf.score(xte, yte)})
        out["difference"] = out["dpadmm"] - out["sklearn"]
    out["dpadmm_gap_to_reference"] = r.get("gap")
    if a.json:
        json.dump(out, sys.stdout, indent=1)
        print()
    else:
        for k, v in out.items():
            print(f"{k:28s} {v}")


if __name__ == "__main__":
    main()
