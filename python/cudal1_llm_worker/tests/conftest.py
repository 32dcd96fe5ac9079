import os
import sys

# The directory that holds the cudal1_llm_worker package, as PYTHONPATH is for the Rust side.
PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if PYTHON_DIR not in sys.path:
    sys.path.insert(0, PYTHON_DIR)
