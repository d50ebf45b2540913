"""Reference ComplEx for scripts/kge-quality.sh, in NumPy.

An independent implementation of ComplEx (Trouillon et al., ICML 2016)
trained the way the reference "kbc" code of Lacroix et al. (ICML 2018)
trains it, re-written in NumPy because that code (like PyKEEN) needs
torch: reciprocal relations (every triple (h, r, t) also trains
(t, r+R, h), so heads are ranked as tails of the inverse relation), 1-N
scoring (a full softmax over all entities, no negative sampling), N3
regularization of the factors a batch touches, Adagrad. Gradients are
written out by hand. flexps's kge.complex trains differently (sampled
negatives, logistic loss, a parameter server), so agreement is evidence,
not a copy.

Ranking uses the protocol of bench/kge/filtered and baseline.py: each test
triple's tail and head against all entities, other true train/valid/test
triples skipped, ties count half.

usage: complex_ref.py train.tsv valid.tsv test.tsv num_entities num_relations [rank] [epochs] [seed]
"""
import sys
import time

import numpy as np


def read(path):
    return np.loadtxt(path, dtype=np.int64, ndmin=2)


def onehot(idx, n):
    o = np.zeros((len(idx), n))
    o[np.arange(len(idx)), idx] = 1
    return o


def train(triples, n, nrel, rank, epochs, seed, lr=0.1, reg=0.01, batch=500):
    rng = np.random.default_rng(seed)
    inv = triples[:, [2, 1, 0]].copy()
    inv[:, 1] += nrel
    data = np.concatenate([triples, inv])
    scale = 1e-3
    E = rng.standard_normal((n, 2 * rank)) * scale  # [re | im]
    W = rng.standard_normal((2 * nrel, 2 * rank)) * scale
    gE, gW = np.zeros_like(E), np.zeros_like(W)  # Adagrad accumulators
    for _ in range(epochs):
        order = rng.permutation(len(data))
        for lo in range(0, len(data), batch):
            b = data[order[lo:lo + batch]]
            h, r, t = b[:, 0], b[:, 1], b[:, 2]
            hr, hi = E[h, :rank], E[h, rank:]
            rr, ri = W[r, :rank], W[r, rank:]
            qre, qim = hr * rr - hi * ri, hr * ri + hi * rr
            scores = qre @ E[:, :rank].T + qim @ E[:, rank:].T
            scores -= scores.max(axis=1, keepdims=True)
            p = np.exp(scores)
            p /= p.sum(axis=1, keepdims=True)
            p[np.arange(len(b)), t] -= 1  # d(cross-entropy)/d(scores)
            p /= len(b)
            dqre, dqim = p @ E[:, :rank], p @ E[:, rank:]
            dE = np.concatenate([p.T @ qre, p.T @ qim], axis=1)
            dh = np.concatenate([dqre * rr + dqim * ri, -dqre * ri + dqim * rr], axis=1)
            dr = np.concatenate([dqre * hr + dqim * hi, -dqre * hi + dqim * hr], axis=1)
            # Scatter-adds as products with one-hot matrices (the graphs
            # are small; np.add.at is slow).
            oh, ot = onehot(h, n), onehot(t, n)
            orl = onehot(r, 2 * nrel)
            dE += oh.T @ dh
            dW = orl.T @ dr
            # N3: reg * sum |z|^3 over the batch's factors (moduli).
            for M, dM, idx, o in ((E, dE, h, oh), (E, dE, t, ot), (W, dW, r, orl)):
                re, im = M[idx, :rank], M[idx, rank:]
                mod = np.sqrt(re * re + im * im)
                dM += o.T @ (reg * 3 * np.concatenate([mod * re, mod * im], axis=1) / len(b))
            gE += dE * dE
            gW += dW * dW
            E -= lr * dE / (np.sqrt(gE) + 1e-10)
            W -= lr * dW / (np.sqrt(gW) + 1e-10)
    return E, W


def evaluate(E, W, test, known, n, nrel, rank):
    rr = hits1 = hits3 = hits10 = 0.0
    cnt = 0
    for h, r, t in test:
        for head in (False, True):
            s, rel, truth = (t, r + nrel, h) if head else (h, r, t)
            qre = E[s, :rank] * W[rel, :rank] - E[s, rank:] * W[rel, rank:]
            qim = E[s, :rank] * W[rel, rank:] + E[s, rank:] * W[rel, :rank]
            scores = E[:, :rank] @ qre + E[:, rank:] @ qim
            mine = scores[truth]
            greater = equal = 0
            for e in np.nonzero(scores >= mine)[0]:
                if e == truth:
                    continue
                if ((e, r, t) if head else (h, r, e)) in known:
                    continue
                if scores[e] > mine:
                    greater += 1
                else:
                    equal += 1
            rank_ = 1 + greater + equal / 2
            cnt += 1
            rr += 1 / rank_
            hits1 += rank_ <= 1
            hits3 += rank_ <= 3
            hits10 += rank_ <= 10
    return rr / cnt, hits1 / cnt, hits3 / cnt, hits10 / cnt, cnt


def main(argv):
    train_p, valid_p, test_p, n, nrel = argv[1], argv[2], argv[3], int(argv[4]), int(argv[5])
    rank = int(argv[6]) if len(argv) > 6 else 64
    epochs = int(argv[7]) if len(argv) > 7 else 100
    seed = int(argv[8]) if len(argv) > 8 else 1
    t0 = time.time()
    tr, va, te = read(train_p), read(valid_p), read(test_p)
    known = {tuple(x) for x in np.concatenate([tr, va, te]).tolist()}
    E, W = train(tr, n, nrel, rank, epochs, seed)
    mrr, h1, h3, h10, cnt = evaluate(E, W, te.tolist(), known, n, nrel, rank)
    print(f"mrr={mrr:.4f} hits1={h1:.4f} hits3={h3:.4f} hits10={h10:.4f} ranked={cnt} seconds={time.time()-t0:.2f}")


if __name__ == "__main__":
    main(sys.argv)
