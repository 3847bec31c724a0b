"""Train a distrl recipe from a checkout (``distrl train`` once installed; see distrl/train.py).

python launch/train.py impala --env CartPole-v1                      # one process
python launch/train.py impala --nproc 3 --env CartPole-v1            # 3 processes, loopback only
torchrun --standalone --nproc-per-node=3 launch/train.py impala ...  # one process per rank
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's distrl, installed or not

from distrl.train import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
