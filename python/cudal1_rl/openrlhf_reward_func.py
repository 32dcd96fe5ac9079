"""The file to give OpenRLHF as `--remote_rm_url /path/to/openrlhf_reward_func.py`.

OpenRLHF loads it by path (not as a module of a package), so it finds the `cudal1_rl` package
itself: installed, on PYTHONPATH, or the folder this file lies in.
"""

import os
import sys

try:
    from cudal1_rl.openrlhf import reward_func
except ImportError:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from cudal1_rl.openrlhf import reward_func

__all__ = ["reward_func"]
