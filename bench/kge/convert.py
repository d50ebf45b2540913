"""Converts the benchmark graphs inside a PyKEEN wheel to flexps triple files.

Ids are assigned in sorted name order over the union of the three splits,
so they are stable across runs.
"""
import os
import sys
import zipfile


def main(wheel, out, graphs):
    z = zipfile.ZipFile(wheel)
    for g in graphs:
        splits = {}
        for s in ("train", "valid", "test"):
            lines = z.read(f"pykeen/datasets/{g}/{s}.txt").decode().splitlines()
            splits[s] = [tuple(l.split("\t")) for l in lines if l.strip()]
            bad = [t for t in splits[s] if len(t) != 3]
            if bad:
                sys.exit(f"{g}/{s}: line {bad[0]!r} is not head<TAB>relation<TAB>tail")
        ents = sorted({x for ts in splits.values() for t in ts for x in (t[0], t[2])})
        rels = sorted({t[1] for ts in splits.values() for t in ts})
        eid = {n: i for i, n in enumerate(ents)}
        rid = {n: i for i, n in enumerate(rels)}
        d = os.path.join(out, g)
        os.makedirs(d, exist_ok=True)
        for s, ts in splits.items():
            with open(os.path.join(d, s + ".tsv"), "w") as f:
                for h, r, t in ts:
                    f.write(f"{eid[h]}\t{rid[r]}\t{eid[t]}\n")
        for name, ids in (("entities", ents), ("relations", rels)):
            with open(os.path.join(d, name + ".tsv"), "w") as f:
                for i, n in enumerate(ids):
                    f.write(f"{i}\t{n}\n")
        print(f"kge-setup: {d}: {len(ents)} entities, {len(rels)} relations, "
              + ", ".join(f"{s} {len(ts)}" for s, ts in splits.items()))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
