"""Regenerate every .stf that a script in this folder writes: `python3 gen_all.py`."""

import importlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

for name in sorted(os.listdir(HERE)):
    if name.endswith(".py") and name not in ("gen_all.py", "stflib.py"):
        importlib.import_module(name[:-3]).main()
