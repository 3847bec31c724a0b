"""Compare recipes on one env from a checkout: ``distrl compare`` (distrl/studies/compare.py), same options.

python launch/compare.py --env CartPole-v1 --budget-s 120 --out runs/compare-cartpole
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's distrl, installed or not

from distrl.studies.compare import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
