# SPDX-License-Identifier: Apache-2.0
"""Build the cpr package against an installed libcpr (cmake --install),
found by pkg-config (set PKG_CONFIG_PATH=<prefix>/lib/pkgconfig for a
prefix of your own). Offline, with Debian's setuptools:

    /usr/bin/python3 -m pip install --no-build-isolation ./python

In the build tree, CMake builds the same extension (python/CMakeLists.txt):
PYTHONPATH=<build>/python imports it without installing anything.
"""
import shlex
import subprocess

from setuptools import Extension, setup


def pkg_config(*args):
    try:
        out = subprocess.run(["pkg-config", *args, "cpr"], check=True, capture_output=True,
                             text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit("cpr: pkg-config cannot find libcpr (%s); install it with cmake "
                         "--install and set PKG_CONFIG_PATH to <prefix>/lib/pkgconfig" % e)
    return shlex.split(out)


version = pkg_config("--modversion")[0]
cflags = pkg_config("--cflags")
libs = pkg_config("--libs")
lib_dirs = [f[2:] for f in libs if f.startswith("-L")]

setup(
    name="cpr",
    version=version,
    description="CPR: fault-tolerant checkpointing for recommendation-model training",
    license="Apache-2.0",
    packages=["cpr"],
    package_data={"cpr": ["py.typed", "*.pyi"]},
    python_requires=">=3.9",
    ext_modules=[
        Extension(
            "cpr._cpr",
            sources=["src/module.c", "src/client.c", "src/part.c", "src/plan.c",
                     "src/tracker.c", "src/data.c", "src/estimator.c"],
            include_dirs=[f[2:] for f in cflags if f.startswith("-I")],
            define_macros=[("CPR_VERSION", '"%s"' % version)],
            extra_compile_args=["-std=c11", "-D_POSIX_C_SOURCE=200809L"],
            library_dirs=lib_dirs,
            runtime_library_dirs=lib_dirs,
            libraries=[f[2:] for f in libs if f.startswith("-l")],
        )
    ],
)
