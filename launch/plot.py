"""Plot learning curves of runs side by side from a checkout: ``distrl plot`` (distrl/logging/plots.py), same options.

python launch/plot.py runs/impala-... runs/seed-... --out compare.png [--x time]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's distrl, installed or not

from distrl.logging.plots import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
