"""Build the Cython rules engine (`amazons._engine`) with -O3 and numpy headers."""

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

extensions = [
    Extension(
        "amazons._engine",
        ["amazons/_engine.pyx"],
        include_dirs=[numpy.get_include()],
        extra_compile_args=["-O3", "-march=x86-64-v2", "-fno-strict-aliasing"],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    )
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
