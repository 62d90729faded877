"""Run the TPE searcher: `python tpe_searcher.py --port 9100 [--host H] [--ready-file F]`.

The code is the `tpe_search` package beside this file; this script only starts it, so the folder can
be copied anywhere and run as is (it needs `cairn` and `optuna`).
"""

from __future__ import annotations

import runpy

if __name__ == "__main__":
    # The script's folder is first on sys.path, so the package beside it is found.
    runpy.run_module("tpe_search", run_name="__main__", alter_sys=True)
