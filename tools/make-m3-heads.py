#!/usr/bin/env python3
# make-m3-heads.py: bge-m3's two token heads at the test models' width, as
# bge-m3 ships them: torch.save of a torch.nn.Linear's state_dict ("weight",
# "bias") in FP16, one file each, sparse_linear.pt (hidden -> 1) and
# colbert_linear.pt (hidden -> hidden). Written with real torch (run it
# with .venv-ref/bin/python) into tests/fixtures/bge-m3-heads/, where they
# are committed: the test machines have no torch. tools/make-xlmr.py puts
# them beside its XLM-R embedder to make a bge-m3-shaped folder.
#
#   .venv-ref/bin/python tools/make-m3-heads.py [OUT] [--hidden 64] [--seed 7]
import argparse
import os

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "bge-m3-heads"))
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    os.makedirs(a.out, exist_ok=True)
    sparse = torch.nn.Linear(a.hidden, 1)
    colbert = torch.nn.Linear(a.hidden, a.hidden)
    with torch.no_grad():
        # on make-xlmr.py's model (seed 11) w . x is about -3 +- 1 over the
        # test texts' tokens (a random 2-layer model's rows share a
        # direction): a bias of 3 gives the ReLU both signs, half each
        sparse.weight.normal_(0.0, 0.3)
        sparse.bias.fill_(3.0)
        colbert.weight.normal_(0.0, 0.2)
        colbert.bias.normal_(0.0, 0.1)
    torch.save(sparse.half().state_dict(), os.path.join(a.out, "sparse_linear.pt"))
    torch.save(colbert.half().state_dict(), os.path.join(a.out, "colbert_linear.pt"))
    print(f"torch {torch.__version__}: {a.out}/sparse_linear.pt, colbert_linear.pt "
          f"(hidden {a.hidden}, seed {a.seed}, FP16)")


if __name__ == "__main__":
    main()
