#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Run the cpr package's pytest suite (tests/python) for ctest.

Usage: /usr/bin/python3 run_pytest.py CKPTD_BINARY PYTHONPATH_DIR CPR_DATA_BINARY
                                      [pytest args...]
Exit: pytest's status; 77 (skipped) when this interpreter lacks pytest or
numpy (deploy/install-deps.sh installs python3-pytest and python3-numpy).
"""
import os
import sys


def main():
    if len(sys.argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    sys.dont_write_bytecode = True  # nothing written into the source tree
    try:
        import numpy  # noqa: F401
        import pytest
    except ImportError as e:
        print("SKIP: %s cannot import %s; run deploy/install-deps.sh" % (sys.executable, e.name))
        return 77
    os.environ["CPR_CKPTD"] = sys.argv[1]
    os.environ["CPR_DATA_TOOL"] = sys.argv[3]
    sys.path.insert(0, sys.argv[2])
    here = os.path.dirname(os.path.abspath(__file__))
    return pytest.main(["-q", "-p", "no:cacheprovider", "--rootdir", here, here] + sys.argv[4:])


if __name__ == "__main__":
    sys.exit(main())
