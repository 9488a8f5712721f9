#!/usr/bin/env python3
"""Vectorised NumPy baseline of the random-walk ADMM hop (Algorithm 4, as in walk/update.go).

Every node holds one row (a_i, y_i) of a squared-loss problem with weight c_i,
f_i(x) = (c_i/2) (a_i.x - y_i)^2, and a private u_i (initially 0). The token holds zhat
(initially 0) and z = prox_{gamma r}(zhat). One hop at node i:

    x    = prox_{gamma f_i}(2z - u_i)  = v + K_i (y_i - a_i.v) a_i,  v = 2z - u_i,
                                          K_i = gamma c_i / (1 + gamma c_i ||a_i||^2)
    g    = Clip(x - z, C)
    du   = 2 lambda g                    (sigma = 0: no noise)
    u_i += du
    zhat += du / n
    z    = soft-threshold(zhat, gamma l1) / (1 + gamma l2)

The sequence of holders is read from a file (little-endian int32, one per hop), so that the
run follows exactly the path of the Go simulator and the final z can be compared numerically.

Input CSV: one line per node, in node order: c_i, y_i, a_i1, ..., a_ip (no header).
Output (stdout): JSON {"hops", "nodes", "dims", "us_per_hop", "objective", "z"}; the time
covers the hop loop only. The objective is the mean of 0.5 (a.z - y)^2 over the rows plus
l1 ||z||_1 + (l2/2) ||z||^2.

Two codings of the same hop are provided: --style tuned (default) works in place on
preallocated vectors with out= arguments and no temporaries; --style plain writes the hop as
NumPy expressions (temporaries, np.linalg.norm, np.sign), the way it is usually written.

Usage: walk_numpy.py --data FILE.csv --path FILE.bin --gamma G --lam L --clip C --l1 A --l2 MU
                     [--style tuned|plain]
"""

import argparse
import json
import math
import sys
import time

try:
    import numpy as np
except ImportError:
    sys.stderr.write("walk_numpy.py: numpy is not installed for %s (install python3-numpy)\n" % sys.executable)
    sys.exit(2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--path", required=True)
    ap.add_argument("--gamma", type=float, required=True)
    ap.add_argument("--lam", type=float, required=True)
    ap.add_argument("--clip", type=float, required=True)
    ap.add_argument("--l1", type=float, default=0.0)
    ap.add_argument("--l2", type=float, default=0.0)
    ap.add_argument("--style", choices=("tuned", "plain"), default="tuned")
    args = ap.parse_args()

    raw = np.loadtxt(args.data, delimiter=",", ndmin=2)
    c, y, A = raw[:, 0].copy(), raw[:, 1].copy(), np.ascontiguousarray(raw[:, 2:])
    n, p = A.shape
    path = np.fromfile(args.path, dtype="<i4")
    if path.size == 0 or path.min() < 0 or path.max() >= n:
        sys.stderr.write("walk_numpy.py: %s: path must be non-empty with holders in [0,%d)\n" % (args.path, n))
        sys.exit(2)
    hops = int(path.size)

    gamma, lam, clip = args.gamma, args.lam, args.clip
    K = gamma * c / (1.0 + gamma * c * np.einsum("ij,ij->i", A, A))
    t, sh = gamma * args.l1, 1.0 / (1.0 + gamma * args.l2)
    U = np.zeros((n, p))
    zhat = np.zeros(p)
    z = np.zeros(p)
    v = np.empty(p)
    d = np.empty(p)
    inv = 1.0 / n
    two_lam = 2.0 * lam
    holders = path.tolist()
    Ks, ys = K.tolist(), y.tolist()
    rows = [A[i] for i in range(n)]
    us = [U[i] for i in range(n)]

    t0 = time.perf_counter()
    if args.style == "plain":
        for i in holders:
            a = A[i]
            v = 2 * z - U[i]
            x = v + K[i] * (y[i] - a @ v) * a
            d = x - z
            nrm = np.linalg.norm(d)
            du = two_lam * (d * (clip / nrm) if nrm > clip else d)
            U[i] += du
            zhat += du / n
            z = np.sign(zhat) * np.maximum(np.abs(zhat) - t, 0.0) * sh
    else:
        for i in holders:
            a, u = rows[i], us[i]
            np.multiply(z, 2.0, out=v)
            v -= u                                  # v = 2z - u_i
            s = Ks[i] * (ys[i] - float(np.dot(a, v)))
            np.multiply(a, s, out=d)
            d += v
            d -= z                                  # d = x - z, x = v + s a
            nrm = math.sqrt(float(np.dot(d, d)))
            sc = two_lam * clip / nrm if nrm > clip else two_lam
            d *= sc                                 # du
            u += d
            d *= inv
            zhat += d
            np.abs(zhat, out=z)                     # z = sign(zhat) max(|zhat| - t, 0) sh
            z -= t
            np.maximum(z, 0.0, out=z)
            np.copysign(z, zhat, out=z)
            if sh != 1.0:
                z *= sh
    elapsed = time.perf_counter() - t0

    r = A @ z - y
    obj = 0.5 * float(np.dot(r, r)) / n + args.l1 * float(np.abs(z).sum()) + 0.5 * args.l2 * float(np.dot(z, z))
    json.dump({"hops": hops, "nodes": n, "dims": p, "us_per_hop": elapsed / hops * 1e6,
               "objective": obj, "z": z.tolist()}, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
