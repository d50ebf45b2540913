"""Reference for scripts/kge-quality.sh: the relation-frequency baseline.

For (h, r, ?) every entity e scores the number of training triples
(*, r, e); for (?, r, t), the number of (e, r, *). Ranking uses the same
filtered protocol as flexps (all entities, other true triples of
train/valid/test skipped, ties count half). It needs no library, so any
machine can run it; PyKEEN's ComplEx would need torch, which this setup
does not install.

usage: baseline.py train.tsv valid.tsv test.tsv num_entities
"""
import collections
import sys
import time


def read(path):
    with open(path) as f:
        return [tuple(int(x) for x in l.split()) for l in f if l.strip()]


def main(train_p, valid_p, test_p, n):
    t0 = time.time()
    train, valid, test = read(train_p), read(valid_p), read(test_p)
    known = set(train) | set(valid) | set(test)
    tail_freq = collections.Counter((r, t) for _, r, t in train)
    head_freq = collections.Counter((r, h) for h, r, _ in train)
    rr = hits1 = hits3 = hits10 = 0.0
    cnt = 0
    for h, r, t in test:
        for head in (False, True):
            if head:
                truth, freq = head_freq[(r, h)], head_freq
            else:
                truth, freq = tail_freq[(r, t)], tail_freq
            greater = equal = 0
            for e in range(n):
                if e == (h if head else t):
                    continue
                s = freq[(r, e)]
                if s < truth:
                    continue
                if ((e, r, t) if head else (h, r, e)) in known:
                    continue
                if s > truth:
                    greater += 1
                else:
                    equal += 1
            rank = 1 + greater + equal / 2
            cnt += 1
            rr += 1 / rank
            hits1 += rank <= 1
            hits3 += rank <= 3
            hits10 += rank <= 10
    print(f"mrr={rr/cnt:.4f} hits1={hits1/cnt:.4f} hits3={hits3/cnt:.4f} "
          f"hits10={hits10/cnt:.4f} ranked={cnt} seconds={time.time()-t0:.2f}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
