"""Run one recipe over several seeds from a checkout: ``distrl sweep`` (distrl/studies/sweep.py), same options.

python launch/sweep.py impala --seeds 0-9 --nproc 3 --max-time-s 90 --env CartPole-v1
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's distrl, installed or not

from distrl.studies.sweep import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
