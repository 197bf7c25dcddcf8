"""Write a LibSVM file shaped like the LibSVM benchmark's (rows of a 0/1 label and 40
"index:value" pairs, distinct increasing ids below 10,000,000, values "%.7g" in (0, 1)), with
the Python standard library only. Deterministic for a given seed.

Usage: python3 scripts/gen_libsvm.py OUT_FILE [ROWS] [SEED]   (ROWS default 250000)
"""
import os
import random
import sys


def main(path, rows, seed):
    rng = random.Random(seed)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        for _ in range(rows):
            ids = sorted(rng.sample(range(10_000_000), 40))
            f.write(str(rng.randint(0, 1)))
            f.write("".join(" %d:%.7g" % (i, rng.random()) for i in ids))
            f.write("\n")
    os.replace(tmp, path)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 250_000,
         int(sys.argv[3]) if len(sys.argv) > 3 else 1)
