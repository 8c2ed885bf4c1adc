"""Build the Cython rules engine (`amazons._engine`) and native CPU evaluator (`amazons._native`).

`amazons._native` is Cython over the native core's C++ (`amazons/native/`: the rules' feature
planes, the kernels and the network's forward pass, the parts the Botzone export joins into its
source), built with the machine's g++ and the standard library's threads.
"""

import os

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

# The extension is always built on the machine that runs it (make build / pip install -e), so it
# may use that CPU's instructions (popcnt, lzcnt, bmi: a faster perft; the engine figures in
# docs/BENCHMARKS.md are of such a build). Set AMAZONS_MARCH (e.g. x86-64-v2) to build for a
# portable baseline instead.
ARCH_FLAG = f"-march={os.environ.get('AMAZONS_MARCH', 'native')}"

extensions = [
    Extension(
        "amazons._engine",
        ["amazons/_engine.pyx"],
        include_dirs=[numpy.get_include()],
        extra_compile_args=["-O3", ARCH_FLAG, "-fno-strict-aliasing"],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    ),
    Extension(
        "amazons._native",
        ["amazons/_native.pyx"],
        include_dirs=[numpy.get_include(), "amazons"],
        language="c++",
        # -O2 as the Botzone build: the AVX2 kernels are tuned for it (they pick their own
        # instructions with target attributes, and choose at run time).
        extra_compile_args=["-O2", ARCH_FLAG, "-std=c++11", "-pthread", "-Wno-unused-function"],
        extra_link_args=["-pthread"],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        depends=[f"amazons/native/{name}" for name in
                 ("common.h", "rules.h", "kernels.h", "network.h", "evaluator.h")],
    ),
]

setup(
    ext_modules=cythonize(
        extensions,
        language_level=3,
        compiler_directives={
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
            "initializedcheck": False,
        },
    )
)
