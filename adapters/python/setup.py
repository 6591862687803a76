"""pip install ./adapters/python: antdt's Python module, built by CMake from this checkout.

The whole checkout is configured in a build directory of pip's (apps, tests and benchmarks
off, libantdt linked in statically, so the module stands alone), and only the module is built:
for the interpreter that runs pip (ANTDT_PYTHON). More CMake options, e.g. CUDA, through the
CMAKE_ARGS environment variable: CMAKE_ARGS="-DANTDT_ENABLE_CUDA=ON" pip install ...
It needs what the CMake build needs (scripts/install-deps.sh), pybind11 and NumPy.
"""
import glob
import os
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        if not os.path.exists(os.path.join(ROOT, "adapters", "python", "CMakeLists.txt")):
            sys.exit("antdt: build from a checkout of antdt (pip install ./adapters/python): the C++ sources are "
                     f"not around {HERE}")
        build = os.path.abspath(os.path.join(self.build_temp, "cmake"))
        configure = ["cmake", "-S", ROOT, "-B", build, "-DANTDT_PYTHON=" + sys.executable, "-DANTDT_ENABLE_PYTHON=ON",
                     "-DANTDT_BUILD_TESTS=OFF", "-DANTDT_BUILD_APPS=OFF", "-DANTDT_BUILD_PERF=OFF",
                     "-DANTDT_ENABLE_TORCH=OFF", "-DANTDT_ENABLE_CUDA=OFF", "-DBUILD_SHARED_LIBS=OFF",
                     "-DCMAKE_BUILD_TYPE=Release"]
        if shutil.which("ninja") and not os.path.exists(os.path.join(build, "CMakeCache.txt")):
            configure += ["-G", "Ninja"]
        configure += shlex.split(os.environ.get("CMAKE_ARGS", ""))
        subprocess.check_call(configure)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
        subprocess.check_call(["cmake", "--build", build, "--target", "antdt_python", "--parallel", jobs])
        built = glob.glob(os.path.join(build, "python", "antdt", "_antdt*.so"))
        if len(built) != 1:
            sys.exit(f"antdt: the CMake build made {built} in {build}/python/antdt, not one module")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built[0], target)


setup(ext_modules=[Extension("antdt._antdt", sources=[])], cmdclass={"build_ext": CMakeBuild})
