#!/usr/bin/env python3
"""Model quality of every built-in algorithm next to a reference solver.

Run by scripts/quality.sh (which builds flexps and fetches the data). For
each algorithm and data set it writes a job from the shipped config
(configs/<algo>.toml: its stage parameters, consistency and stage layout,
so changes to the defaults show up here), resized to the data, runs it with
`flexps run --metrics-out` at every worker kind (ps, local, hogwild at 1,
2 and 4 workers; single at 1), scores the written model with `flexps eval`
and prints a markdown table with the reference figure beside it (one line
per algorithm and data set, a column per worker layout; --long: one line
per run, with its wall time):

  lr.sgd      test accuracy    vs liblinear-train -s 0 (C = 1, -B 1)
  svrg        objective        vs liblinear -s 0 with C = 1/(l2 n), its
                                  weights scored by the same objective
  k-means     objective        vs scikit-learn KMeans(n_init=10)
  mf.sgd      test RMSE        vs a regularized bias-only model and an
                                  ALS (numpy), both fitted here, and on
                                  InstEval scikit-surprise's SVD

Figures are read from `flexps eval` (the saved model) where the evaluator
reports them, else from the metrics file (svrg's objective); metric names
are looked up by several names so a renamed metric is still found. A run
that fails shows its error in the table instead of a figure.
"""
import argparse
import gzip
import json
import math
import os
import re
import subprocess
import sys
import time
import tomllib

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
KINDS = [("single", 1)] + [(k, w) for k in ("ps", "local", "hogwild") for w in (1, 2, 4)]


# ---------------------------------------------------------------- data sets

def split(n, frac, seed):
    perm = np.random.default_rng(seed).permutation(n)
    k = int(round(n * frac))
    return perm[k:], perm[:k]  # train, test


def write_libsvm(path, X, y):
    with open(path, "w") as f:
        for row, label in zip(X, y):
            feats = " ".join(f"{j + 1}:{v:.10g}" for j, v in enumerate(row) if v != 0)
            f.write(f"{int(label):+d} {feats}\n")


def read_libsvm(path, dim=None):
    ys, rows = [], []
    for line in open(path):
        parts = line.split()
        if not parts:
            continue
        ys.append(1 if float(parts[0]) > 0 else -1)
        rows.append({int(k): float(v) for k, v in (p.split(":") for p in parts[1:])})
    d = dim or max((max(r) for r in rows if r), default=0)
    X = np.zeros((len(rows), d))
    for i, r in enumerate(rows):
        for k, v in r.items():
            X[i, k - 1] = v
    return X, np.array(ys)


def sklearn_csv(name):
    import sklearn.datasets as ds
    path = os.path.join(os.path.dirname(ds.__file__), "data", name)
    opener = gzip.open if name.endswith(".gz") else open
    with opener(path, "rt") as f:
        return f.read().splitlines()


def breast_cancer():
    lines = sklearn_csv("breast_cancer.csv")[1:]  # first line: counts and names
    data = np.array([[float(v) for v in l.split(",")] for l in lines])
    return data[:, :-1], np.where(data[:, -1] > 0, 1, -1)


def wine():
    lines = sklearn_csv("wine_data.csv")[1:]
    return np.array([[float(v) for v in l.split(",")[:-1]] for l in lines])


def digits():
    lines = sklearn_csv("digits.csv.gz")
    return np.array([[float(v) for v in l.split(",")[:-1]] for l in lines])


def classification_sets(work, flexps):
    """Binary data sets as (name, train, test, dim) libsvm files."""
    out = []
    heart = "/usr/share/doc/liblinear-tools/examples/heart_scale"
    if os.path.exists(heart):
        X, y = read_libsvm(heart, 13)
        tr, te = split(len(y), 0.2, 1)
        p = os.path.join(work, "heart_scale")
        write_libsvm(p + ".train", X[tr], y[tr])
        write_libsvm(p + ".test", X[te], y[te])
        out.append(("heart_scale (Debian liblinear)", p + ".train", p + ".test", 13))
    X, y = breast_cancer()
    tr, te = split(len(y), 0.2, 1)
    p = os.path.join(work, "breast_cancer")
    write_libsvm(p + ".train", X[tr], y[tr])
    write_libsvm(p + ".test", X[te], y[te])
    out.append(("breast_cancer (scikit-learn, raw)", p + ".train", p + ".test", 30))
    p = os.path.join(work, "gen-libsvm")
    run([flexps, "gen", "libsvm", "--out", p + ".train", "--test-out", p + ".test", "--rows", "20000",
         "--test-rows", "5000", "--dim", "1000", "--nnz", "20", "--noise", "0.02", "--seed", "1"])
    out.append(("generated (flexps gen libsvm)", p + ".train", p + ".test", 1000))
    return out


def cluster_sets(work):
    """(name, libsvm path, matrix, k)."""
    out = []
    for name, X, k in (("wine (scikit-learn)", wine(), 3), ("digits (scikit-learn)", digits(), 10)):
        p = os.path.join(work, name.split()[0] + ".kmeans")
        write_libsvm(p, X, np.ones(len(X)))
        out.append((name, p, X, k))
    blobs = os.path.join(ROOT, "examples/kmeans/testdata/blobs.libsvm")
    X, _ = read_libsvm(blobs)
    out.append(("generated blobs (examples/kmeans)", blobs, X, 5))
    return out


def ratings_sets(work, flexps):
    """(name, shipped config, train, test, users, items)."""
    out = []
    d = os.path.join(ROOT, "data/insteval")
    if os.path.exists(os.path.join(d, "test.tsv")):
        out.append(("InstEval (R lme4)", "mf-insteval.toml", os.path.join(d, "train.tsv"), os.path.join(d, "test.tsv"), 2972, 1128))
    else:
        print("quality: data/insteval absent (scripts/insteval.sh): MF on InstEval skipped", file=sys.stderr)
    p = os.path.join(work, "gen-ratings")
    run([flexps, "gen", "ratings", "--out", p + ".train", "--test-out", p + ".test", "--users", "600", "--items", "400",
         "--rank", "4", "--rows", "80000", "--test-rows", "10000", "--noise", "0.1", "--seed", "3"])
    out.append(("generated rank 4 (flexps gen ratings)", "mf.toml", p + ".train", p + ".test", 600, 400))
    return out


# ---------------------------------------------------------------- references

def liblinear(train, test, C, work):
    model = os.path.join(work, "ll.model")
    run(["liblinear-train", "-s", "0", "-c", repr(C), "-B", "1", "-q", train, model])
    pred = os.path.join(work, "ll.pred")
    out = run(["liblinear-predict", test, model, pred])
    acc = float(re.search(r"Accuracy = ([0-9.]+)%", out).group(1)) / 100
    lines = open(model).read().split("\n")
    i = lines.index("w")
    w = np.array([float(l.split()[0]) for l in lines[i + 1:] if l.strip()])
    labels = next(l for l in lines if l.startswith("label")).split()[1:]
    if labels[0] != "1":  # liblinear's w scores its first label
        w = -w
    return acc, w[:-1], w[-1]


def lr_objective(path, dim, w, b, l2):
    """1/n sum log(1 + exp(-y (w.x + b))) + l2/2 |w|^2, the SVRG objective."""
    X, y = read_libsvm(path, dim)
    z = y * (X @ w + b)
    return float(np.mean(np.logaddexp(0, -z)) + l2 / 2 * w @ w)


def kmeans_ref(X, k):
    from sklearn.cluster import KMeans
    return float(KMeans(n_clusters=k, n_init=10, random_state=0).fit(X).inertia_)


def load_ratings(path):
    a = np.loadtxt(path, ndmin=2)
    return a[:, 0].astype(int), a[:, 1].astype(int), a[:, 2]


def bias_fit(u, i, r, nu, ni, lam, resid=None, iters=20):
    mu = r.mean()
    bu, bi = np.zeros(nu), np.zeros(ni)
    cu, ci = np.bincount(u, minlength=nu), np.bincount(i, minlength=ni)
    f = 0 if resid is None else resid
    for _ in range(iters):
        bi = np.bincount(i, r - mu - bu[u] - f, ni) / (ci + lam)
        bu = np.bincount(u, r - mu - bi[i] - f, nu) / (cu + lam)
    return mu, bu, bi


def mf_refs(train, test, nu, ni, rank=8):
    u, i, r = load_ratings(train)
    tu, ti, tr = load_ratings(test)
    rmse = lambda p: float(np.sqrt(np.mean((tr - p) ** 2)))
    mu, bu, bi = bias_fit(u, i, r, nu, ni, 10)
    bias = rmse(mu + bu[tu] + bi[ti])
    byu = [np.flatnonzero(u == a) for a in range(nu)]
    byi = [np.flatnonzero(i == a) for a in range(ni)]
    best = None
    for lam in (1, 5, 20):  # the reference gets the best of three L2s on test: a conservative comparison
        rng = np.random.default_rng(0)
        P, Q = rng.normal(0, 0.1, (nu, rank)), rng.normal(0, 0.1, (ni, rank))
        m, b_u, b_i = mu, bu.copy(), bi.copy()
        eye = lam * np.eye(rank)
        for _ in range(10):
            res = r - m - b_u[u] - b_i[i]
            for a, idx in enumerate(byu):
                Qa = Q[i[idx]]
                P[a] = np.linalg.solve(Qa.T @ Qa + eye, Qa.T @ res[idx])
            for a, idx in enumerate(byi):
                Pa = P[u[idx]]
                Q[a] = np.linalg.solve(Pa.T @ Pa + eye, Pa.T @ res[idx])
            m, b_u, b_i = bias_fit(u, i, r, nu, ni, 10, np.sum(P[u] * Q[i], 1), iters=3)
        got = rmse(m + b_u[tu] + b_i[ti] + np.sum(P[tu] * Q[ti], 1))
        if best is None or got < best[0]:
            best = (got, lam)
    return bias, best


def surprise_svd(train, test, rank=8, algo_name="SVD"):
    """scikit-surprise's SVD (biased MF by SGD, Funk/Koren: lr 0.005, reg
    0.02, 20 epochs, init N(0, 0.1)) or SVDpp (the same with implicit
    feedback, Koren 2008: lr 0.007, reg 0.02) with n_factors = rank, at
    their defaults, on the same split: standard implementations of the
    model mf.sgd trains (implicit = true is its default). None when
    scikit-surprise is not installed (scripts/setup.sh installs it)."""
    try:
        import surprise
        from surprise import Dataset, Reader, accuracy
    except ImportError:
        return None
    ts = Dataset.load_from_file(train, Reader(line_format="user item rating", sep="\t", rating_scale=(1, 5))).build_full_trainset()
    algo = getattr(surprise, algo_name)(n_factors=rank, random_state=0)
    algo.fit(ts)
    rows = [l.split() for l in open(test) if l.strip()]
    return accuracy.rmse(algo.test([(u, i, float(r)) for u, i, r in rows]), verbose=False)


# ---------------------------------------------------------------- flexps jobs

def run(cmd, check=True):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {lastline(p.stderr or p.stdout)}")
    return p.stdout


def lastline(s):
    lines = [l for l in s.strip().splitlines() if l.strip()]
    for l in reversed(lines):  # prefer the error line of a JSON log
        if '"level":"error"' in l or l.startswith("flexps") or "error" in l.lower():
            try:
                return json.loads(l).get("error") or json.loads(l).get("message")
            except ValueError:
                return l.strip()
    return lines[-1].strip() if lines else ""


def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    raise TypeError(v)


def write_job(path, job):
    """Writes the subset of the job TOML these jobs use."""
    out = []
    for k, v in job.items():
        if not isinstance(v, (dict, list)) or (isinstance(v, list) and v and not isinstance(v[0], dict)):
            out.append(f"{k} = {toml_value(v)}")
    out.append("[local]\nslaves = 2\nslots = 4")
    for t in job.get("table", []):
        out.append("[[table]]\n" + "\n".join(f"{k} = {toml_value(v)}" for k, v in t.items()))
    for name, inp in job.get("input", {}).items():
        out.append(f"[input.{name}]\n" + "\n".join(f"{k} = {toml_value(v)}" for k, v in inp.items() if not isinstance(v, dict)))
    for s in job.get("stage", []):
        body = "\n".join(f"{k} = {toml_value(v)}" for k, v in s.items() if k != "params")
        out.append("[[stage]]\n" + body)
        if s.get("params"):
            out.append("[stage.params]\n" + "\n".join(f"{k} = {toml_value(v)}" for k, v in s["params"].items()))
    with open(path, "w") as f:
        f.write("\n\n".join(out) + "\n")


def shipped(name):
    with open(os.path.join(ROOT, "configs", name), "rb") as f:
        return tomllib.load(f)


def with_layout(job, kind, workers):
    """Applies the worker kind and count to the stages the shipped config
    runs on several workers; one-worker stages (k-means seeding, SVRG's
    inner loop) stay as shipped."""
    for s in job["stage"]:
        if s.get("workers", 1) > 1:
            s["workers"] = workers
            s["worker_kind"] = kind
    return job


def flexps_run(flexps, job, work, tag):
    cfg = os.path.join(work, tag + ".toml")
    metrics = os.path.join(work, tag + ".jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    job["output"] = os.path.join(work, tag + ".model")
    write_job(cfg, job)
    t0 = time.time()
    p = subprocess.run([flexps, "run", cfg, "--metrics-out", metrics, "--log-level", "error", "--log-format", "json"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    secs = time.time() - t0
    if p.returncode != 0:
        raise RuntimeError(lastline(p.stderr + "\n" + p.stdout))
    records = [json.loads(l) for l in open(metrics)] if os.path.exists(metrics) else []
    return job["output"], records, secs


def flexps_eval(flexps, model, data):
    out = run([flexps, "eval", "--model", model, "--data", data])
    return {k: float(v) for k, v in re.findall(r"(\w+)=(-?[0-9.eE+-]+|NaN|[+-]Inf)", out.splitlines()[-1]) if k != "records"}


def last_value(records, *names):
    """The last epoch's value of the first of names any epoch reported."""
    for rec in reversed([r for r in records if r.get("type") == "epoch"]):
        for n in names:
            for src in ("values", "metrics"):
                if n in (rec.get(src) or {}):
                    return rec[src][n]
    return None


# ---------------------------------------------------------------- rows

def lr_jobs(name, train, test, dim):
    job = shipped("lr.toml")
    job["name"] = "quality-lr"
    for t in job["table"]:
        t["size"] = dim
    job["input"] = {"train": {"path": train, "format": "libsvm"}, "test": {"path": test, "format": "libsvm"}}
    return job


def svrg_job(train, test, dim):
    job = shipped("svrg.toml")
    job["name"] = "quality-svrg"
    for t in job["table"]:
        if t.get("size", 1) > 1:
            t["size"] = dim
    job["input"] = {"train": {"path": train, "format": "libsvm", "block_size": 16384}}
    return job


def kmeans_job(path, X, k):
    job = shipped("kmeans.toml")
    job["name"] = "quality-kmeans"
    d = X.shape[1]
    for t in job["table"]:
        t["size"] = k
        t["width"] = d + 1 if t["name"] == "acc" else d
    job["input"] = {"train": {"path": path, "format": "libsvm", "block_size": 16384}}
    for s in job["stage"]:
        s.setdefault("params", {})["k"] = k
    return job


def mf_job(config, train, test, users, items):
    job = shipped(config)
    job["name"] = "quality-mf"
    job["table"] = [t for t in job["table"] if t["name"] in ("users", "items")]
    for t in job["table"]:
        t["size"] = users if t["name"] == "users" else items
    job["input"] = {"train": {"path": train, "format": "ratings", "block_size": 65536},
                    "test": {"path": test, "format": "ratings"}}
    return job


def fmt(x, digits=4):
    if x is None:
        return "n/a"
    if isinstance(x, str):
        return x
    return f"{x:.{digits}f}" if abs(x) < 1e5 else f"{x:.6g}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flexps", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--only", default="lr,svrg,kmeans,mf", help="comma-separated algorithms")
    ap.add_argument("--long", action="store_true", help="one line per run, with seconds")
    ap.add_argument("--kinds", default="", help="e.g. ps:4,single:1 (default: every kind at 1, 2, 4 workers)")
    args = ap.parse_args()
    kinds = KINDS if not args.kinds else [(k, int(w)) for k, w in (x.split(":") for x in args.kinds.split(","))]
    only = set(args.only.split(","))
    os.makedirs(args.work, exist_ok=True)
    rows = []

    def matrix(algo, data, make, score, ref, metric):
        for kind, workers in kinds:
            tag = f"{algo}-{re.sub(r'[^a-z0-9]+', '-', data.lower())[:20]}-{kind}{workers}"
            try:
                model, records, secs = flexps_run(args.flexps, with_layout(make(), kind, workers), args.work, tag)
                got = score(model, records)
            except RuntimeError as e:
                got, secs = "error: " + str(e)[:90].replace("|", "/"), None
            rows.append((algo, data, kind, workers, got, ref, metric, secs))
            print(f"quality: {algo} {data} {kind} x{workers}: {fmt(got)} (reference {fmt(ref)})", file=sys.stderr)

    if only & {"lr", "svrg"}:
        for name, train, test, dim in classification_sets(args.work, args.flexps):
            if "lr" in only:
                acc, _, _ = liblinear(train, test, 1.0, args.work)
                matrix("lr.sgd", name, lambda: lr_jobs(name, train, test, dim),
                       lambda m, rec: flexps_eval(args.flexps, m, test).get("accuracy"), acc, "test accuracy (liblinear -s 0)")
            if "svrg" in only:
                l2 = float(shipped("svrg.toml")["stage"][0].get("params", {}).get("l2", 1e-4))
                n = sum(1 for l in open(train) if l.strip())
                _, w, b = liblinear(train, test, 1 / (l2 * n), args.work)
                ref = lr_objective(train, dim, w, b, l2)
                matrix("svrg", name, lambda: svrg_job(train, test, dim),
                       lambda m, rec: last_value(rec, "objective"), ref, f"objective, l2 {l2:g} (liblinear -s 0, C = 1/(l2 n))")
    if "kmeans" in only:
        for name, path, X, k in cluster_sets(args.work):
            ref = kmeans_ref(X, k)

            def score(m, rec, path=path, n=len(X)):
                ev = flexps_eval(args.flexps, m, path)
                if "objective" in ev:
                    return ev["objective"]
                if "mse" in ev:
                    return ev["mse"] * n
                return last_value(rec, "objective", "loss_sum")
            matrix("k-means", name, lambda: kmeans_job(path, X, k), score, ref, f"objective, k={k} (scikit-learn n_init=10)")
    if "mf" in only:
        for name, config, train, test, users, items in ratings_sets(args.work, args.flexps):
            bias, (als, lam) = mf_refs(train, test, users, items)
            svd = surprise_svd(train, test) if config == "mf-insteval.toml" else None
            svdpp = surprise_svd(train, test, algo_name="SVDpp") if config == "mf-insteval.toml" else None
            svd_note = f"; scikit-surprise SVD rank 8: {svd:.4f}, SVDpp rank 8: {svdpp:.4f}" if svd is not None else ""
            matrix("mf.sgd", name, lambda: mf_job(config, train, test, users, items),
                   lambda m, rec: flexps_eval(args.flexps, m, test).get("rmse"), bias,
                   f"test RMSE (bias baseline; ALS rank 8: {als:.4f} at l2={lam}{svd_note})")

    if args.long:
        print("| algorithm | data set | worker kind | workers | flexps | reference | metric (reference) | seconds |")
        print("|---|---|---|---:|---:|---:|---|---:|")
        for algo, data, kind, workers, got, ref, metric, secs in rows:
            print(f"| {algo} | {data} | {kind} | {workers} | {fmt(got)} | {fmt(ref)} | {metric} | {fmt(secs, 1)} |")
        return
    print_wide(rows, kinds)


def print_wide(rows, kinds):
    """One line per algorithm and data set, a column per worker layout."""
    cols = [f"{k} {w}" for k, w in kinds]
    print("| algorithm | data set | metric (reference) | reference | " + " | ".join(cols) + " |")
    print("|---|---|---|---:|" + "---:|" * len(cols))
    lines = {}
    for algo, data, kind, workers, got, ref, metric, secs in rows:
        line = lines.setdefault((algo, data), {"metric": metric, "ref": ref})
        line[f"{kind} {workers}"] = got
    for (algo, data), line in lines.items():
        cells = " | ".join(fmt(line.get(c)) for c in cols)
        print(f"| {algo} | {data} | {line['metric']} | {fmt(line['ref'])} | {cells} |")

if __name__ == "__main__":
    main()
